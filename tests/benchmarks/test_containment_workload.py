"""The containment benchmark's workloads (benchmarks.containment): valid dataflows, and the shares they are built for."""

from __future__ import annotations

import random

import pytest

from benchmarks import containment
from manager.validate import parse_dataflow

pytestmark = pytest.mark.redis


def test_the_workload_draws_sliding_dashboards_the_operators_accept():
    rng = random.Random(11)
    documents = [containment.workload(rng, index, "t") for index in range(200)]
    for document in documents:
        parse_dataflow(document)
    slides = [task["config"]["slide"] for document in documents for task in document["tasks"]
              if task["type"] == "window_aggregate" and "slide" in task["config"]]
    assert slides and set(slides) <= set(containment.SLIDES)


def test_every_sliding_dashboard_rolls_up_the_ten_second_one():
    with containment.dry_manager("containment") as (manager, salt):
        first, *others = [manager.submit(document) for document in containment.sliding_dashboards(salt)]
        assert first.contained == []
        for result in others:
            (share,) = result.contained
            assert (share["kind"], share["reads"]) == ("window_aggregate", first.tasks["win"])
        assert manager.stats()["containment_shares"]["window_aggregate"] == len(others) == 5


def test_keyed_batches_counts_each_operators_batches_its_idle_ones_and_the_fused():
    queries = [{"batches": 10, "state": {"operators": {"w1": {"idle_batches": 0, "fused_in": None},
                                                       "w2": {"idle_batches": 9, "fused_in": "w1"}}}},
               {"batches": 4, "state": {"operators": {"w3": {"idle_batches": 1}}}}]
    assert containment.keyed_batches(queries) == {"batches": 14, "keyed_batches": 24, "keyed_idle_batches": 10,
                                                  "keyed_fused": 1}


def test_docstring_examples():
    import doctest

    assert doctest.testmod(containment).failed == 0


def test_dashboards_given_a_max_delay_stay_valid_dataflows():
    for document in containment.dashboards("t"):
        delayed = containment.with_max_delay(document, 10)
        parse_dataflow(delayed)
        (sink,) = [task for task in delayed["tasks"] if task["type"] == "sink"]
        assert sink["config"]["max_delay"] == "10 seconds"
        assert [task["id"] for task in delayed["tasks"]] == [task["id"] for task in document["tasks"]]
