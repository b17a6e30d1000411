"""Crashes and failures between the steps of a change leave the old state or the new one."""

from __future__ import annotations

import pytest

from manager.exceptions import DeployFailed
from manager.service import Manager
from manager.store import Store
from runtime.dryrun import DryRunRuntime
from runtime.exceptions import RuntimeFailure
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.invariants import check_state

pytestmark = pytest.mark.redis


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs, no handler catches it."""


class FailingRuntime(DryRunRuntime):
    def __init__(self, *args, fail_on: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.fail_on = fail_on

    def apply(self, change):
        if self.fail_on and self.fail_on in change.reason:
            raise RuntimeFailure(f"fragment {change.start[0].fragment if change.start else '?'} did not start")
        super().apply(change)


def _manager(redis_client, prefix, runtime=None):
    manager = Manager(redis_client, prefix, runtime or DryRunRuntime(redis_client, prefix))
    manager.start()
    return manager


def test_runtime_failure_changes_nothing(redis_client, state_prefix):
    runtime = FailingRuntime(redis_client, state_prefix, fail_on="submit")
    manager = _manager(redis_client, state_prefix, runtime)
    runtime.fail_on = ""
    first = manager.submit(urban_etl("a"))
    runtime.fail_on = "submit"
    with pytest.raises(DeployFailed, match=r"submit df-2 .*the runtime failed, nothing changed: fragment frag-\w+ did not start"):
        manager.submit(urban_etl("b", threshold=40))
    check_state(manager.state, {first.id: urban_etl("a")})
    assert set(runtime.deployed()) == set(manager.state.tasks)
    assert Store(redis_client, state_prefix).read_pending() is None
    fresh = _manager(redis_client, state_prefix)
    check_state(fresh.state, {first.id: urban_etl("a")})


def test_crash_between_deploy_and_commit_is_undone_on_restart(redis_client, state_prefix, monkeypatch):
    manager = _manager(redis_client, state_prefix)
    first = manager.submit(urban_etl("a"))

    def crash(*args, **kwargs):
        raise Crash()

    monkeypatch.setattr(manager.store, "commit_merge", crash)
    with pytest.raises(Crash):
        manager.submit(urban_etl("b", threshold=40))
    runtime = DryRunRuntime(redis_client, state_prefix)
    assert len(runtime.deployed()) > len(manager.state.tasks), "the crashed change had deployed its tasks"
    assert Store(redis_client, state_prefix).read_pending()["reason"].startswith("submit df-2")

    redis_client.delete(f"{state_prefix}:lock")  # the crashed process cannot release its lock; it would expire
    restarted = _manager(redis_client, state_prefix, runtime)
    check_state(restarted.state, {first.id: urban_etl("a")})
    assert set(runtime.deployed()) == set(restarted.state.tasks)
    assert Store(redis_client, state_prefix).read_pending() is None
    again = restarted.submit(urban_etl("b", threshold=40))
    check_state(restarted.state, {first.id: urban_etl("a"), again.id: urban_etl("b", threshold=40)})


def test_crash_after_commit_keeps_the_new_state(redis_client, state_prefix, monkeypatch):
    manager = _manager(redis_client, state_prefix)
    first = manager.submit(urban_etl("a"))
    second = manager.submit(urban_etl("b"))
    import manager.merge as merge

    def crash(*args, **kwargs):
        raise Crash()

    monkeypatch.setattr(merge, "apply_unmerge", crash)
    with pytest.raises(Crash):
        manager.remove(first.id)
    redis_client.delete(f"{state_prefix}:lock")
    monkeypatch.undo()
    restarted = _manager(redis_client, state_prefix)
    check_state(restarted.state, {second.id: urban_etl("b")})


def test_a_second_manager_sees_changes_of_the_first(redis_client, state_prefix):
    one = _manager(redis_client, state_prefix)
    two = _manager(redis_client, state_prefix)
    made = one.submit(urban_etl("a"))
    assert made.id in two.snapshot().dataflows
    shared = two.submit(urban_etl("b"))
    assert shared.reused == ["src", "hot", "proj"]
    one.remove(made.id)
    assert set(two.snapshot().dataflows) == {shared.id}
    check_state(two.state, {shared.id: urban_etl("b")})


def test_redis_emptied_under_a_running_manager_gets_the_state_back(redis_client, state_prefix):
    manager = _manager(redis_client, state_prefix)
    made = manager.submit(urban_etl("a"))
    for key in list(redis_client.scan_iter(f"{state_prefix}:*")):
        redis_client.delete(key)
    assert set(manager.snapshot().dataflows) == {made.id}
    fresh = _manager(redis_client, state_prefix)
    check_state(fresh.state, {made.id: urban_etl("a")})
