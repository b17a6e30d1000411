"""The micro-batch cost benchmark's pure parts (benchmarks.batch_cost): its dataflows and how it adds up CPU."""

from __future__ import annotations

import pytest

from benchmarks import batch_cost
from manager.validate import parse_dataflow


@pytest.mark.parametrize("windows", [0, 1, 4])
def test_each_count_is_a_valid_dataflow_with_that_many_distinct_windows(windows):
    document = batch_cost.dataflow("readings", windows)
    parse_dataflow(document)
    sizes = [task["config"]["window"] for task in document["tasks"] if task["type"] == "window_aggregate"]
    assert len(sizes) == len(set(sizes)) == windows  # none is the same task as another, so nothing is shared
    assert sum(task["type"] == "sink" for task in document["tasks"]) == max(1, windows)


def test_cores_leave_out_a_process_that_exited_and_count_a_new_one_from_zero():
    before = {1: ("jvm", 10.0), 2: ("python_workers", 4.0), 3: ("python_workers", 9.0)}
    after = {1: ("jvm", 14.0), 2: ("python_workers", 5.0), 4: ("python_workers", 1.0)}  # 3 exited, 4 started
    assert batch_cost.cores_by_kind(before, after, 2.0) == {"jvm": 2.0, "python_workers": 1.0}
