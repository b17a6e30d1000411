"""Group commit: changes queued while one deploys are deployed and committed together, each answered as alone.

The dry-run runtime on the real Redis, held at its first change by a gate while the test queues the next ones
(one at a time, so their order is known): the group that follows is one runtime change and one state version,
its members' answers are what they would be alone, a refusal inside it changes nothing, a change that would
start a task an earlier member stops waits for the next group, a group the runtime refuses is retried change
by change, and a process that dies inside a group's commit comes back with its submits undone and its removals
done.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from manager.exceptions import DataflowDuplicate, DeployFailed
from manager.service import Manager, RemoveResult, SubmitResult
from manager.store import Store
from runtime.dryrun import DryRunRuntime
from runtime.exceptions import RuntimeFailure
from tests.fixtures.dataflows import chain, source, task, urban_etl
from tests.conftest import REDIS_URL
from tests.fixtures.invariants import check_state

pytestmark = pytest.mark.redis


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs, no handler catches it."""


class GatedRuntime(DryRunRuntime):
    """The dry-run runtime; once armed, its next change waits at a gate. Records every change it is given."""

    def __init__(self, *args, refuse=lambda change: False, **kwargs):
        super().__init__(*args, **kwargs)
        self.refuse = refuse
        self.changes = []
        self.armed = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def apply(self, change):
        if self.armed:
            self.armed = False
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
        self.changes.append(change)
        if self.refuse(change):
            raise RuntimeFailure("a sink of alerts-bad did not start")
        super().apply(change)


class Calls:
    """Changes run in threads, queued one after another behind a change held at the gate."""

    def __init__(self, manager: Manager, runtime: GatedRuntime) -> None:
        self.manager, self.runtime = manager, runtime
        self.answers: dict[str, object] = {}
        self.threads: list[threading.Thread] = []

    def hold(self, name: str, call) -> None:
        self.runtime.armed = True
        self._start(name, call)
        assert self.runtime.entered.wait(30), "the first change never reached the runtime"

    def queue(self, name: str, call) -> None:
        before = self.manager.group.waiting
        self._start(name, call)
        deadline = time.monotonic() + 30
        while self.manager.group.waiting <= before:
            assert time.monotonic() < deadline, f"{name} was never queued"
            time.sleep(0.005)

    def release(self) -> dict[str, object]:
        self.runtime.gate.set()
        for thread in self.threads:
            thread.join(60)
        return self.answers

    def _start(self, name: str, call) -> None:
        def run():
            try:
                self.answers[name] = call()
            except BaseException as error:  # noqa: BLE001 - the answer under test
                self.answers[name] = error

        thread = threading.Thread(target=run, name=name)
        self.threads.append(thread)
        thread.start()


@pytest.fixture
def setup(redis_client, state_prefix):
    def make(**runtime_args):
        runtime = GatedRuntime(redis_client, state_prefix, **runtime_args)
        manager = Manager(redis_client, state_prefix, runtime)
        manager.start()
        return manager, runtime, Calls(manager, runtime)
    return make


def _version(redis_client, prefix) -> int:
    return int(redis_client.hget(f"{prefix}:meta", "version"))


def _check_settled(manager: Manager, runtime: GatedRuntime, expected: dict[str, dict]) -> None:
    """The state is what the dataflows run as, the runtime runs it, nothing is pending, and a manager started
    on the same Redis loads the same dataflows onto the same tasks."""
    check_state(manager.state, expected)
    assert set(runtime.deployed()) == set(manager.state.tasks)
    store = manager.store
    assert store.read_pending() is None
    again = Manager(store.redis, store.prefix, DryRunRuntime(store.redis, store.prefix))
    again.start()
    check_state(again.state, expected)
    assert {fid: flow.tasks for fid, flow in again.state.dataflows.items()} == {fid: flow.tasks for fid, flow in manager.state.dataflows.items()}


def test_changes_queued_together_are_one_runtime_change_and_one_commit(setup, redis_client, state_prefix):
    manager, runtime, calls = setup()
    old = manager.submit(urban_etl("alerts-old", threshold=10))
    version = _version(redis_client, state_prefix)
    calls.hold("a", lambda: manager.submit(urban_etl("alerts-a", threshold=20)))
    calls.queue("b", lambda: manager.submit(urban_etl("alerts-b", threshold=40)))
    calls.queue("gone", lambda: manager.remove(old.id))
    calls.queue("b again", lambda: manager.submit(urban_etl("alerts-b", threshold=40), unique=True))
    calls.queue("c", lambda: manager.submit(urban_etl("alerts-c", threshold=50)))
    answers = calls.release()

    a, b, c, gone = answers["a"], answers["b"], answers["c"], answers["gone"]
    assert all(isinstance(answer, SubmitResult) for answer in (a, b, c)) and isinstance(gone, RemoveResult), answers
    assert isinstance(answers["b again"], DataflowDuplicate), "a duplicate of an earlier member is refused as alone"
    assert [len(change.start) for change in runtime.changes[-2:]] == [len(a.started), len(b.started) + len(c.started)]
    group = runtime.changes[-1]
    assert [task.id for task in group.start] == b.started + c.started
    assert [task.id for task in group.stop] == gone.terminated and gone.terminated
    assert _version(redis_client, state_prefix) == version + 2, "the group is one commit"
    assert manager.stats()["change_groups"] == {"groups": 3, "changes": 5, "largest": 3}
    expected = {a.id: urban_etl("alerts-a", threshold=20), b.id: urban_etl("alerts-b", threshold=40),
                c.id: urban_etl("alerts-c", threshold=50)}
    _check_settled(manager, runtime, expected)


def test_a_change_that_starts_a_task_an_earlier_member_stops_waits_for_the_next_group(setup, redis_client, state_prefix):
    manager, runtime, calls = setup()
    old = manager.submit(urban_etl("alerts-old", threshold=77))
    humid = chain(source(site="us-east"), task("wet", "filter", expr="humidity > 80"), task("out", "sink", topic="alerts-a"))
    calls.hold("a", lambda: manager.submit(humid))  # shares only the source with the others
    calls.queue("gone", lambda: manager.remove(old.id))
    calls.queue("same filter", lambda: manager.submit(urban_etl("alerts-new", threshold=77)))
    answers = calls.release()

    same = answers["same filter"]
    assert same.tasks["hot"] == old.tasks["hot"], "the new filter takes the id of the one removed"
    assert same.tasks["hot"] in answers["gone"].terminated
    for change in runtime.changes:
        assert not {task.id for task in change.start} & {task.id for task in change.stop}, change.reason
    assert len(runtime.changes) == 4, [change.reason for change in runtime.changes]
    check_state(manager.state, {answers["a"].id: humid, same.id: urban_etl("alerts-new", threshold=77)})
    assert set(runtime.deployed()) == set(manager.state.tasks)


def test_a_change_that_starts_a_writer_of_a_topic_whose_writer_an_earlier_member_stops_waits(setup):
    """One at a time the removal's sink stops before the new one starts; in one group both would write it."""
    manager, runtime, calls = setup()
    old = manager.submit(urban_etl("alerts-shared", threshold=77))
    humid = chain(source(site="us-east"), task("wet", "filter", expr="humidity > 80"), task("out", "sink", topic="alerts-a"))
    calls.hold("a", lambda: manager.submit(humid))
    calls.queue("gone", lambda: manager.remove(old.id))
    calls.queue("new writer", lambda: manager.submit(urban_etl("alerts-shared", threshold=66)))
    answers = calls.release()

    assert answers["gone"].terminated and answers["new writer"].started
    assert len(runtime.changes) == 4, [change.reason for change in runtime.changes]
    for change in runtime.changes:
        sinks = [task.config["topic"] for task in (*change.start, *change.stop) if task.type == "sink"]
        assert len(sinks) == len(set(sinks)), change.reason
    _check_settled(manager, runtime, {answers["a"].id: humid, answers["new writer"].id: urban_etl("alerts-shared", threshold=66)})


def test_a_group_the_runtime_refuses_is_tried_change_by_change(setup, redis_client, state_prefix):
    bad = lambda change: any(task.config.get("topic") == "alerts-bad" for task in change.start)  # noqa: E731
    manager, runtime, calls = setup(refuse=bad)
    calls.hold("a", lambda: manager.submit(urban_etl("alerts-a", threshold=20)))
    calls.queue("b", lambda: manager.submit(urban_etl("alerts-b", threshold=40)))
    calls.queue("bad", lambda: manager.submit(urban_etl("alerts-bad", threshold=45)))
    calls.queue("c", lambda: manager.submit(urban_etl("alerts-c", threshold=50)))
    answers = calls.release()

    assert isinstance(answers["bad"], DeployFailed) and "a sink of alerts-bad did not start" in answers["bad"].message
    assert [change.reason.count("submit") for change in runtime.changes] == [1, 3, 1, 1, 1]
    expected = {answers["a"].id: urban_etl("alerts-a", threshold=20), answers["b"].id: urban_etl("alerts-b", threshold=40),
                answers["c"].id: urban_etl("alerts-c", threshold=50)}
    _check_settled(manager, runtime, expected)


def test_a_process_that_dies_in_a_groups_commit_undoes_its_submits_and_completes_its_removals(
        setup, redis_client, state_prefix, monkeypatch):
    manager, runtime, calls = setup()
    kept = manager.submit(urban_etl("alerts-kept", threshold=10))
    old = manager.submit(urban_etl("alerts-old", threshold=15))
    commit = manager.store.commit_group

    def dies_in_a_group(writes, version):
        if len(writes) > 1:
            raise Crash()
        return commit(writes, version)

    monkeypatch.setattr(manager.store, "commit_group", dies_in_a_group)
    calls.hold("a", lambda: manager.submit(urban_etl("alerts-a", threshold=20)))
    calls.queue("gone", lambda: manager.remove(old.id))
    calls.queue("b", lambda: manager.submit(urban_etl("alerts-b", threshold=40)))
    answers = calls.release()

    assert isinstance(answers["gone"], Crash) and isinstance(answers["b"], Crash)
    pending = Store(redis_client, state_prefix).read_pending()
    assert pending["kind"] == "group"
    assert pending["members"] == [{"kind": "unmerge", "dataflow": old.id}, {"kind": "merge", "dataflow": "df-4"}]
    redis_client.delete(f"{state_prefix}:lock")  # the dead process cannot release its lock; it would expire
    restarted = Manager(redis_client, state_prefix, DryRunRuntime(redis_client, state_prefix))
    restarted.start()
    check_state(restarted.state, {kept.id: urban_etl("alerts-kept", threshold=10), answers["a"].id: urban_etl("alerts-a", threshold=20)})
    assert set(restarted.runtime.deployed()) == set(restarted.state.tasks)
    assert Store(redis_client, state_prefix).read_pending() is None


class _CountingConnection(redis.Connection):
    """A Redis connection that counts the requests it sends (one per round trip; a pipeline is one)."""

    sent = 0

    def send_packed_command(self, command, check_health=True):
        _CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def test_a_change_costs_four_round_trips_to_redis_besides_the_runtimes(state_prefix):
    """Lock taken with the version read, the pending marker, the commit (version and lock checked, writes, version
    bumped: one script call), the lock released; the dry run's apply adds its log's one. Checked, not timed."""
    client = redis.Redis.from_url(REDIS_URL, connection_class=_CountingConnection)
    try:
        manager = Manager(client, state_prefix, DryRunRuntime(client, state_prefix))
        manager.start()
        manager.submit(urban_etl("alerts-a", name="warm"))
        before = _CountingConnection.sent
        submitted = manager.submit(urban_etl("alerts-b", threshold=31, name="probe"))
        submit_trips = _CountingConnection.sent - before
        before = _CountingConnection.sent
        manager.remove(submitted.id)
        remove_trips = _CountingConnection.sent - before
        assert (submit_trips, remove_trips) == (5, 5)
        check_state(manager.state, {manager.state.dataflows["df-1"].id: urban_etl("alerts-a", name="warm")})
        manager.close()
    finally:
        client.close()
