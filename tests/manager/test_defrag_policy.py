"""SANA_DEFRAG_AFTER_REMOVALS: the manager asks the runtime to defragment after every N-th removal."""

from __future__ import annotations

import pytest

from manager.service import Manager
from runtime.dryrun import DryRunRuntime
from tests.fixtures.dataflows import urban_etl

pytestmark = pytest.mark.redis


class CountingRuntime(DryRunRuntime):
    """The dry-run runtime, counting the defragmentations the manager asks for."""

    calls = 0

    def defragment(self):
        self.calls += 1
        return {"queries_before": 0, "queries_after": 0, "merged": [], "skipped": []}


def test_defragmentation_runs_in_the_background_after_every_nth_removal(redis_client, state_prefix):
    runtime = CountingRuntime(redis_client, state_prefix)
    manager = Manager(redis_client, state_prefix, runtime, defrag_after_removals=2)
    manager.start()
    ids = [manager.submit(urban_etl(f"alerts-{n}")).id for n in range(4)]
    manager.remove(ids[0])
    assert manager.background_defrag is None
    manager.remove(ids[1])
    first = manager.background_defrag
    first.join(10)
    assert runtime.calls == 1
    manager.remove(ids[2])
    assert manager.background_defrag is first, "the third removal is not due"
    manager.remove(ids[3])
    manager.background_defrag.join(10)
    assert manager.background_defrag is not first and runtime.calls == 2


def test_off_by_default(redis_client, state_prefix):
    runtime = CountingRuntime(redis_client, state_prefix)
    manager = Manager(redis_client, state_prefix, runtime)
    manager.start()
    for n in range(3):
        manager.remove(manager.submit(urban_etl(f"alerts-{n}")).id)
    assert manager.background_defrag is None and runtime.calls == 0
