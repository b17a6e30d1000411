"""SANA_SHARING=false: every dataflow runs alone (the baseline of docs/reuse.md)."""

from __future__ import annotations

import pytest

from manager.service import Manager
from runtime.dryrun import DryRunRuntime
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.invariants import check_state

pytestmark = pytest.mark.redis


def _manager(redis_client, prefix, sharing):
    manager = Manager(redis_client, prefix, DryRunRuntime(redis_client, prefix), sharing=sharing)
    manager.start()
    return manager


def test_equal_dataflows_share_nothing_and_each_removal_stops_only_its_tasks(redis_client, state_prefix):
    runtime = DryRunRuntime(redis_client, state_prefix)
    manager = Manager(redis_client, state_prefix, runtime, sharing=False)
    manager.start()
    first = manager.submit(urban_etl("alerts-a"))
    second = manager.submit(urban_etl("alerts-b"))
    assert first.reused == [] and second.reused == []
    assert set(first.tasks.values()).isdisjoint(second.tasks.values())
    stats = manager.stats()
    assert (stats["running_tasks"], stats["submitted_tasks"], stats["sharing"]) == (8, 8, False)
    assert stats["sharing_histogram"] == {"1": 8}
    assert set(runtime.deployed()) == set(manager.state.tasks)

    removed = manager.remove(first.id)
    assert sorted(removed.terminated) == sorted(first.tasks.values())
    assert set(manager.state.tasks) == set(second.tasks.values())
    assert set(runtime.deployed()) == set(second.tasks.values())


def test_duplicate_tasks_inside_one_dataflow_are_still_merged(redis_client, state_prefix):
    manager = _manager(redis_client, state_prefix, sharing=False)
    document = urban_etl("alerts-a")
    twin = {**document["tasks"][1], "id": "filter-twin"}
    document["tasks"].append(twin)
    document["tasks"].append({"id": "sink-twin", "type": "sink", "config": {"topic": "alerts-twin"}})
    document["streams"] += [{"from": "src", "to": "filter-twin"}, {"from": "filter-twin", "to": "sink-twin"}]
    result = manager.submit(document)
    assert result.tasks["filter-twin"] == result.tasks[document["tasks"][1]["id"]]
    assert manager.stats()["running_tasks"] == 5


def test_dataflows_submitted_with_sharing_on_stay_shared_after_it_is_turned_off(redis_client, state_prefix):
    shared = _manager(redis_client, state_prefix, sharing=True)
    a = shared.submit(urban_etl("alerts-a"))
    b = shared.submit(urban_etl("alerts-b"))
    assert len(b.reused) == 3
    alone = _manager(redis_client, state_prefix, sharing=False)
    c = alone.submit(urban_etl("alerts-c"))
    assert c.reused == []
    check_state_alone = alone.stats()
    assert check_state_alone["running_tasks"] == 5 + 4
    alone.remove(c.id)
    check_state(alone.state, {a.id: urban_etl("alerts-a"), b.id: urban_etl("alerts-b")})

