"""Crashes and failures between the steps of a change leave the old state or the new one."""

from __future__ import annotations

import pytest

from manager.exceptions import DataflowNotFound, DeployFailed
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

    monkeypatch.setattr(manager.store, "commit_group", crash)
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
    assert set(manager.runtime.deployed()) == set(manager.state.tasks), "the runtime's records were not written back"
    fresh = _manager(redis_client, state_prefix)
    check_state(fresh.state, {made.id: urban_etl("a")})


def test_crash_in_a_removal_before_its_commit_completes_it_on_restart(redis_client, state_prefix, monkeypatch):
    manager = _manager(redis_client, state_prefix)
    first = manager.submit(urban_etl("a"))
    second = manager.submit(urban_etl("b", threshold=40))

    def crash(*args, **kwargs):
        raise Crash()

    monkeypatch.setattr(manager.store, "commit_group", crash)
    with pytest.raises(Crash):
        manager.remove(first.id)
    runtime = DryRunRuntime(redis_client, state_prefix)
    assert len(runtime.deployed()) < len(manager.state.tasks), "the crashed removal had stopped its tasks"
    assert Store(redis_client, state_prefix).read_pending()["kind"] == "unmerge"

    redis_client.delete(f"{state_prefix}:lock")
    restarted = _manager(redis_client, state_prefix, runtime)
    check_state(restarted.state, {second.id: urban_etl("b", threshold=40)})
    assert set(runtime.deployed()) == set(restarted.state.tasks)
    assert Store(redis_client, state_prefix).read_pending() is None
    with pytest.raises(DataflowNotFound):  # a retried DELETE finds it gone
        restarted.remove(first.id)


def test_a_submit_cut_short_before_its_deployment_is_undone(redis_client, state_prefix, monkeypatch):
    manager = _manager(redis_client, state_prefix)
    first = manager.submit(urban_etl("a"))

    def crash(change):
        raise Crash()

    monkeypatch.setattr(manager.runtime, "apply", crash)
    with pytest.raises(Crash):
        manager.submit(urban_etl("b", threshold=40))
    redis_client.delete(f"{state_prefix}:lock")
    restarted = _manager(redis_client, state_prefix)
    check_state(restarted.state, {first.id: urban_etl("a")})
    assert Store(redis_client, state_prefix).read_pending() is None


def test_a_fail_point_kills_the_process_at_the_armed_pass():
    import signal
    import subprocess
    import sys

    script = ("from sana import failpoints\n"
              "failpoints.configure('manager.merge.deployed=kill@2')\n"
              "failpoints.fail_point('manager.unmerge.deployed')\n"
              "failpoints.fail_point('manager.merge.deployed'); print('first pass', flush=True)\n"
              "failpoints.fail_point('manager.merge.deployed'); print('second pass', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.split("\n")[:2] == ["first pass", ""]


@pytest.mark.parametrize("spec, culprit", [
    ("manager.merge.deploy=kill", "unknown fail point 'manager.merge.deploy'"),
    ("manager.merge.deployed=exit", "the action is kill or kill@N"),
    ("manager.merge.deployed=kill@0", "the action is kill or kill@N"),
])
def test_a_bad_fail_point_spec_is_refused_naming_it(spec, culprit, monkeypatch):
    from pydantic import ValidationError

    from sana.settings import Settings

    monkeypatch.setenv("SANA_FAILPOINTS", spec)
    with pytest.raises(ValidationError, match=culprit):
        Settings()


def test_the_writer_lock_is_a_lease_renewed_while_held_and_lapsing_when_its_holder_died(redis_client, state_prefix,
                                                                                         monkeypatch):
    import threading
    import time

    import manager.store as store_module
    from manager.exceptions import StateBusy

    monkeypatch.setattr(store_module, "LOCK_TTL_MS", 300)
    store = Store(redis_client, state_prefix)
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.lock():
            holding.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    try:
        with pytest.raises(StateBusy, match=f"'{state_prefix}:lock'"):  # 1 s > 3 TTLs: renewed, not lapsed
            with store.lock(wait_s=1.0):
                pass
    finally:
        done.set()
        holder.join()
    redis_client.set(f"{state_prefix}:lock", "a holder killed with -9", px=300)
    started = time.monotonic()
    with store.lock(wait_s=5.0):
        assert redis_client.get(f"{state_prefix}:lock") != b"a holder killed with -9"
    assert time.monotonic() - started < 2.0


def test_one_thread_keeps_the_lease_across_changes_and_it_ends_when_none_comes(redis_client, state_prefix, monkeypatch):
    import threading
    import time

    import manager.store as store_module

    monkeypatch.setattr(store_module, "LOCK_TTL_MS", 300)
    store = Store(redis_client, state_prefix)

    def keepers() -> list[threading.Thread]:
        return [thread for thread in threading.enumerate() if thread.name == "sana-lock-lease"]

    before = len(keepers())
    for _ in range(50):
        with store.lock():
            pass
    assert len(keepers()) - before <= 1
    with store.lock():
        time.sleep(0.35)  # past one time to live: held only because the keeper renewed it
        assert redis_client.pttl(f"{state_prefix}:lock") > 0
    deadline = time.monotonic() + 5
    while len(keepers()) > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(keepers()) <= before



def test_a_lock_is_released_only_after_a_renewal_in_flight_ends(monkeypatch):
    """Else the renewal finds the lock gone and reports a lost lease that was never lost."""
    import threading
    import time

    import manager.store as store_module

    monkeypatch.setattr(store_module, "LOCK_TTL_MS", 30)
    in_flight, renewed = threading.Event(), []

    def slow_renewal(token: str) -> bool:
        in_flight.set()
        time.sleep(0.2)
        renewed.append(token)
        return True

    keeper = store_module._LeaseKeeper(slow_renewal)
    keeper.hold("a")
    assert in_flight.wait(5)
    keeper.drop("a")
    assert renewed[:1] == ["a"]


@pytest.mark.parametrize("path", ["script", "watched"])
def test_a_writer_that_lost_its_lock_commits_nothing_even_at_the_version_it_planned_on(redis_client, state_prefix,
                                                                                        monkeypatch, path):
    """A commit checks the version and that its writer still holds the lock, in the one script call (or, for writes
    too large for one, under WATCH): a writer whose lease lapsed and was taken over writes nothing."""
    import manager.store as store_module
    from manager.store import StaleState

    if path == "watched":
        monkeypatch.setattr(store_module, "SCRIPT_MAX_COMMAND_ARGS", 0)
    manager = _manager(redis_client, state_prefix)
    first = manager.submit(urban_etl("alerts-a", name="first"))
    store = manager.ledger.store
    version = store.version()

    def write(pipe) -> None:
        pipe.hset(f"{state_prefix}:meta", "next_dag", 999)

    with store.lock():
        assert store.version() == version  # read with the lock
        redis_client.set(f"{state_prefix}:lock", "another writer")  # the lease lapsed; another writer took it
        with pytest.raises(StaleState, match="lock is no longer ours"):
            store._commit(version, write)
        redis_client.delete(f"{state_prefix}:lock")
    assert store.version() == version and redis_client.hget(f"{state_prefix}:meta", "next_dag") != b"999"
    with store.lock():
        with pytest.raises(StaleState, match=f"state version is {version}, planned against {version - 1}"):
            store._commit(version - 1, write)
        assert store._commit(version, write) == version + 1
    assert redis_client.hget(f"{state_prefix}:meta", "next_dag") == b"999"
    manager.remove(first.id)  # the manager reads the state again (its version moved) and goes on
    check_state(manager.state, {})
