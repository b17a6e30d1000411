"""Durable state in Redis under ``SANA_STATE_PREFIX``.

Layout (``p`` is the prefix):

- ``p:meta``        hash: ``version``, ``next_dataflow``, ``next_dag``
- ``p:dataflows``   hash: dataflow id -> JSON (document, task map, sinks)
- ``p:tasks``       hash: running task id -> JSON (:class:`TaskSpec`)
- ``p:signatures``  hash: signature -> running task id (the signature index)
- ``p:refcounts``   hash: running task id -> number of dataflows using it
- ``p:task_dag``    hash: running task id -> running DAG id
- ``p:wan``         string: the WAN configuration (JSON), absent without one
- ``p:wan_notes``   hash: running task id -> JSON list of the refused shares that made it start
- ``p:lock``        the writer lock; ``p:pending`` the change being deployed

Every change (or group of changes committed together) is one atomic write: a
script that checks the version the change was planned against (and that its
writer still holds the lock) and then runs the change's writes, so a crash
leaves the old state or the new one, and a writer that lost its lock cannot
overwrite a newer state. One round trip: the writes are recorded off a
pipeline and handed to the script. A change too large for one script call
(a whole state written back) commits as a MULTI/EXEC transaction guarded by
``WATCH p:meta`` instead, with the same checks.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from manager.exceptions import StateBusy, StateCorrupt
from manager.merge import MergePlan, UnmergePlan
from manager.state import State, SubmittedDataflow
from runtime.plan import TaskSpec
from wan.exceptions import WanConfigInvalid
from wan.topology import WanConfig, parse_wan_config

log = logging.getLogger("sana.manager.store")

#: What one change writes into the transaction that commits it.
Writes = Callable[[redis.client.Pipeline], None]

# The writer lock is a lease: held for LOCK_TTL_MS and renewed every third of it while its holder
# lives, so a change may take as long as it needs and a holder killed with -9 blocks the next
# writer (a restarted service) for LOCK_TTL_MS at most.
LOCK_TTL_MS = 10_000
LOCK_WAIT_S = 30.0

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
# Take the lock and read the version at once (the version a writer syncs with before planning).
_ACQUIRE = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('hget', KEYS[2], 'version')}
end
return {0}
"""
# KEYS: meta, pending, lock. ARGV: the expected version ('*': any, none stored counts as 0), the lock token ('' when the
# writer holds none), then each write as its argument count followed by its arguments. Returns the new
# version, or {err} naming why nothing was written.
_COMMIT = """
local current = redis.call('hget', KEYS[1], 'version')
if ARGV[1] ~= '*' and tonumber(current or '0') ~= tonumber(ARGV[1]) then
  return {0, 'state version is ' .. (current or 'None') .. ', planned against ' .. ARGV[1]}
end
if ARGV[2] ~= '' and redis.call('get', KEYS[3]) ~= ARGV[2] then
  return {0, 'the writer lock is no longer ours'}
end
local i = 3
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + count))
  i = i + count + 1
end
local version = redis.call('hincrby', KEYS[1], 'version', 1)
redis.call('del', KEYS[2])
return {1, version}
"""
# A script call passes its writes as arguments: Lua's unpack takes under 8,000 of them per command, and a
# call this size stays well under what a client sends in one write.
SCRIPT_MAX_COMMAND_ARGS = 7_000
SCRIPT_MAX_ARGS = 200_000


_UNREAD = object()


class StaleState(Exception):
    """The version in Redis is not the one this writer planned against."""


class Store:
    """Reads and writes the manager's state; every method may raise ``redis.RedisError``."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix
        self.meta = f"{prefix}:meta"
        self.dataflows = f"{prefix}:dataflows"
        self.tasks = f"{prefix}:tasks"
        self.signatures = f"{prefix}:signatures"
        self.refcounts = f"{prefix}:refcounts"
        self.task_dag = f"{prefix}:task_dag"
        self.wan = f"{prefix}:wan"
        self.wan_notes = f"{prefix}:wan_notes"
        self.lock_key = f"{prefix}:lock"
        self.pending = f"{prefix}:pending"
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        self._acquire = client.register_script(_ACQUIRE)
        self._commit_script = client.register_script(_COMMIT)
        self._token: str | None = None   # the lock token while this store holds the lock
        self._version_at_lock: int | None | object = _UNREAD   # read with the lock, until read or committed past
        self._lease = _LeaseKeeper(self._renew_lock)

    def dataflow_count(self) -> int:
        """How many dataflows are submitted (what a starting service brings back)."""
        return self.redis.hlen(self.dataflows)

    # -- locking -----------------------------------------------------------------

    @contextmanager
    def lock(self, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
        """Hold the writer lock (one writer per prefix across processes)."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + wait_s
        delay = 0.002
        while not (taken := self._acquire(keys=[self.lock_key, self.meta], args=[token, LOCK_TTL_MS]))[0]:
            if time.monotonic() > deadline:
                raise StateBusy(f"another manager has held {self.lock_key!r} for over {wait_s:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        self._lease.hold(token)
        self._token, self._version_at_lock = token, None if taken[1] is None else int(taken[1])
        try:
            yield
        finally:
            self._token, self._version_at_lock = None, _UNREAD
            self._lease.drop(token)
            self._release(keys=[self.lock_key], args=[token])

    def _renew_lock(self, token: str) -> bool:
        """Renew the lease of ``token``; False when it is lost (a lost lease is logged, and the commit's version
        check still guards the state)."""
        try:
            if not self._renew(keys=[self.lock_key], args=[token, LOCK_TTL_MS]):
                log.error("lost the writer lock %r: another writer may change the state meanwhile", self.lock_key)
                return False
        except redis.RedisError as error:  # Redis away: the lease lapses unless it is back in time
            log.warning("could not renew the writer lock %r: %s", self.lock_key, error)
        return True

    # -- reading -----------------------------------------------------------------

    def version(self) -> int | None:
        """The committed version, or None when Redis holds no state under the prefix.

        Right after the lock is taken, the version read with it (no writer but the holder commits meanwhile)."""
        if self._version_at_lock is not _UNREAD:
            version, self._version_at_lock = self._version_at_lock, _UNREAD
            return version  # type: ignore[return-value]
        value = self.redis.hget(self.meta, "version")
        return None if value is None else int(value)

    def load(self) -> State:
        """Read everything and rebuild the in-memory indexes.

        Raises :class:`StateCorrupt` if the stored reference counts or
        signature index disagree with the stored dataflows and tasks.
        """
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.meta)
            pipe.hgetall(self.dataflows)
            pipe.hgetall(self.tasks)
            pipe.hgetall(self.signatures)
            pipe.hgetall(self.refcounts)
            pipe.hgetall(self.task_dag)
            pipe.get(self.wan)
            pipe.hgetall(self.wan_notes)
            meta, flows, tasks, sigs, refs, task_dag, wan, notes = pipe.execute()
        state = State()
        if wan is not None:
            try:
                state.wan = parse_wan_config(wan)
            except WanConfigInvalid as error:
                raise StateCorrupt(f"the WAN configuration in {self.wan!r} does not validate: {error.message}") from None
        state.version = int(meta.get(b"version", 0))
        state.next_dataflow = int(meta.get(b"next_dataflow", 1))
        state.next_dag = int(meta.get(b"next_dag", 1))
        specs = [TaskSpec.from_dict(json.loads(raw)) for raw in tasks.values()]
        for spec in _parents_first(specs):
            dag = task_dag.get(spec.id.encode())
            if dag is None:
                raise StateCorrupt(f"running task {spec.id!r} has no DAG in {self.task_dag!r}")
            state.add_task(spec, dag.decode())
        for raw in flows.values():
            flow = SubmittedDataflow.from_dict(json.loads(raw))
            for task_id in flow.running_ids():
                if task_id not in state.users:
                    raise StateCorrupt(f"dataflow {flow.id!r} maps onto {task_id!r}, which is not running")
            state.add_dataflow(flow)
        for key, value in notes.items():
            task_id = key.decode()
            if task_id not in state.tasks:
                raise StateCorrupt(f"{self.wan_notes!r} explains {task_id!r}, which is not running")
            state.not_shared[task_id] = json.loads(value)
        stored_refs = {key.decode(): int(value) for key, value in refs.items()}
        actual_refs = {task_id: len(users) for task_id, users in state.users.items()}
        if stored_refs != actual_refs:
            raise StateCorrupt(f"reference counts in {self.refcounts!r} disagree with the dataflows")
        stored_sigs = {key.decode(): value.decode() for key, value in sigs.items()}
        if stored_sigs != state.by_signature:
            raise StateCorrupt(f"signature index {self.signatures!r} disagrees with the running tasks")
        return state

    # -- writing -----------------------------------------------------------------

    def mark_pending(self, description: dict[str, Any]) -> None:
        """Record the change about to be deployed (cleared by the commit)."""
        self.redis.set(self.pending, json.dumps(description))

    def clear_pending(self) -> None:
        self.redis.delete(self.pending)

    def read_pending(self) -> dict[str, Any] | None:
        raw = self.redis.get(self.pending)
        return None if raw is None else json.loads(raw)

    def commit_unmerge(self, plan: UnmergePlan, state: State) -> int:
        """Write a remove; ``state`` is the state the plan was made against."""
        return self._commit(state.version, self.unmerge_writes(plan))

    def commit_group(self, writes: list[Writes], version: int) -> int:
        """Write several changes in one transaction, in order (group commit); ``version`` is the state's before the
        first. The version goes up by one for the group."""

        def write(pipe: redis.client.Pipeline) -> None:
            for each in writes:
                each(pipe)

        return self._commit(version, write)

    def merge_writes(self, plan: MergePlan, state: State) -> Writes:
        """What committing a submit writes, read off ``state`` (the state it was planned against) now, so that it
        can be written after later changes of a group changed ``state``."""
        flow = plan.dataflow
        moved = {spec.id: plan.new_task_dag[spec.id] for spec in plan.new_tasks}
        for old, target in plan.relabel.items():
            moved.update({task_id: target for task_id in state.dag_members[old]})
        tasks = {spec.id: json.dumps(spec.to_dict()) for spec in plan.new_tasks}
        notes = {task_id: json.dumps(notes) for task_id, notes in plan.notes.items()}
        record = json.dumps(flow.to_dict())
        used = sorted(flow.running_ids())

        def write(pipe: redis.client.Pipeline) -> None:
            if tasks:
                pipe.hset(self.tasks, mapping=tasks)
                pipe.hset(self.signatures, mapping=plan.signature_index)
            if notes:
                pipe.hset(self.wan_notes, mapping=notes)
            if moved:
                pipe.hset(self.task_dag, mapping=moved)
            for task_id in used:
                pipe.hincrby(self.refcounts, task_id, 1)
            pipe.hset(self.dataflows, flow.id, record)
            pipe.hset(self.meta, mapping={"next_dataflow": plan.next_dataflow, "next_dag": plan.next_dag})

        return write

    def unmerge_writes(self, plan: UnmergePlan) -> Writes:
        """What committing a remove writes."""
        flow = plan.dataflow
        gone = [spec.id for spec in plan.terminated]
        released = sorted(flow.running_ids() - set(gone))

        def write(pipe: redis.client.Pipeline) -> None:
            for task_id in released:
                pipe.hincrby(self.refcounts, task_id, -1)
            if gone:
                pipe.hdel(self.tasks, *gone)
                pipe.hdel(self.refcounts, *gone)
                pipe.hdel(self.task_dag, *gone)
                pipe.hdel(self.wan_notes, *gone)
                emptied = [signature for signature, primary in plan.signature_index.items() if primary is None]
                if emptied:
                    pipe.hdel(self.signatures, *emptied)
                kept = {signature: primary for signature, primary in plan.signature_index.items() if primary is not None}
                if kept:
                    pipe.hset(self.signatures, mapping=kept)
            if plan.splits:
                pipe.hset(self.task_dag, mapping=plan.splits)
            pipe.hdel(self.dataflows, flow.id)
            pipe.hset(self.meta, "next_dag", plan.next_dag)

        return write

    def write_all(self, state: State) -> int:
        """Rewrite the whole state (Redis came back empty while we still hold it)."""
        return self._commit(None, lambda pipe: self._write_everything(pipe, state), expect_missing=True)

    def commit_state(self, after: State, before: State) -> int:
        """Replace the state with ``after`` in one transaction (re-placement); ``before`` is the state it was
        planned against. A staged copy (:meth:`stage`) goes in the same transaction."""
        return self._commit(before.version, lambda pipe: self._replace_with(pipe, after))

    def staged(self) -> "Store":
        """Where a change deployed but not yet committed keeps the state after it (``<prefix>:staged:*``)."""
        return Store(self.redis, f"{self.prefix}:staged")

    def stage(self, after: State, description: dict[str, Any]) -> None:
        """Keep ``after`` beside the state and mark the change pending with ``description``, in one transaction.

        Re-placement stages the state after it before its hand-over: a manager that dies before the commit
        finds it on restart and completes the change (:meth:`complete_staged`) if the runtime runs it.
        """
        with self.redis.pipeline(transaction=True) as pipe:
            self.staged()._write_everything(pipe, after)
            pipe.set(self.pending, json.dumps(description))
            pipe.execute()

    def has_staged(self) -> bool:
        return bool(self.redis.exists(self.staged().meta))

    def complete_staged(self) -> int:
        """Commit the staged state whatever the version (a restart finishing the change); returns the new version."""
        after = self.staged().load()
        return self._commit(None, lambda pipe: self._replace_with(pipe, after), expect_missing=True)

    def drop_staged(self) -> None:
        """Forget a staged state and the pending change (its deployment was undone)."""
        self.redis.delete(*self._staged_keys(), self.pending)

    def _replace_with(self, pipe: redis.client.Pipeline, after: State) -> None:
        self._write_everything(pipe, after)
        pipe.delete(*self._staged_keys())

    def _staged_keys(self) -> tuple[str, ...]:
        staged = self.staged()
        return (staged.meta, *staged._data_keys())

    def _data_keys(self) -> tuple[str, ...]:
        return (self.dataflows, self.tasks, self.signatures, self.refcounts, self.task_dag, self.wan, self.wan_notes)

    def _write_everything(self, pipe: redis.client.Pipeline, state: State) -> None:
        for key in self._data_keys():
            pipe.delete(key)
        if state.wan is not None:
            pipe.set(self.wan, json.dumps(state.wan.to_dict()))
        if state.not_shared:
            pipe.hset(self.wan_notes, mapping={tid: json.dumps(notes) for tid, notes in state.not_shared.items()})
        if state.tasks:
            pipe.hset(self.tasks, mapping={tid: json.dumps(spec.to_dict()) for tid, spec in state.tasks.items()})
            pipe.hset(self.signatures, mapping=dict(state.by_signature))
            pipe.hset(self.refcounts, mapping={tid: len(users) for tid, users in state.users.items()})
            pipe.hset(self.task_dag, mapping=dict(state.dag_of))
        if state.dataflows:
            pipe.hset(self.dataflows, mapping={fid: json.dumps(flow.to_dict()) for fid, flow in state.dataflows.items()})
        pipe.hset(self.meta, mapping={"next_dataflow": state.next_dataflow, "next_dag": state.next_dag})

    def commit_wan(self, wan: WanConfig | None, state: State) -> int:
        """Store a new WAN configuration (None removes it); ``state`` is the state it was checked against."""

        def write(pipe: redis.client.Pipeline) -> None:
            if wan is None:
                pipe.delete(self.wan)
            else:
                pipe.set(self.wan, json.dumps(wan.to_dict()))

        return self._commit(state.version, write)

    def _commit(self, expected: int | None, write, expect_missing: bool = False) -> int:
        """Run ``write`` and bump the version, if the stored version is ``expected`` (any with ``expect_missing``)
        and this store still holds the lock it took; else raise :class:`StaleState`, nothing written."""
        recorder = self.redis.pipeline(transaction=False)
        write(recorder)
        commands = [args for args, _ in recorder.command_stack]
        recorder.reset()
        if max(map(len, commands), default=0) > SCRIPT_MAX_COMMAND_ARGS or \
                sum(map(len, commands)) + len(commands) > SCRIPT_MAX_ARGS:
            return self._commit_watched(expected, commands, expect_missing)
        version = "*" if expect_missing else str(expected or 0)
        arguments: list[Any] = [version, self._token or ""]
        for command in commands:
            arguments.append(len(command))
            arguments.extend(command)
        self._version_at_lock = _UNREAD
        done = self._commit_script(keys=[self.meta, self.pending, self.lock_key], args=arguments)
        if not done[0]:
            raise StaleState(done[1].decode() if isinstance(done[1], bytes) else str(done[1]))
        return int(done[1])

    def _commit_watched(self, expected: int | None, commands: list[tuple[Any, ...]], expect_missing: bool) -> int:
        """:meth:`_commit` as a MULTI/EXEC transaction guarded by WATCH, for writes too large for one script call
        (``commands``: the writes as recorded, replayed into the transaction)."""
        self._version_at_lock = _UNREAD
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(self.meta, self.lock_key)
                current = pipe.hget(self.meta, "version")
                current_version = None if current is None else int(current)
                if not expect_missing and (current_version or 0) != (expected or 0):
                    raise StaleState(f"state version is {current_version}, planned against {expected or 0}")
                if self._token is not None and pipe.get(self.lock_key) not in (self._token, self._token.encode()):
                    raise StaleState("the writer lock is no longer ours")
                pipe.multi()
                for command in commands:
                    pipe.execute_command(*command)
                pipe.hincrby(self.meta, "version", 1)
                pipe.delete(self.pending)
                results = pipe.execute()
            except redis.WatchError:
                raise StaleState("the state changed while committing") from None
        return int(results[-2])


def _parents_first(specs: list[TaskSpec]) -> list[TaskSpec]:
    by_id = {spec.id: spec for spec in specs}
    ordered: list[TaskSpec] = []
    placed: set[str] = set()
    stack = list(reversed(specs))
    while stack:
        spec = stack[-1]
        waiting = [by_id[parent] for _, parent in spec.inputs if parent not in placed and parent in by_id]
        if spec.id in placed:
            stack.pop()
        elif waiting:
            stack.extend(waiting)
        else:
            stack.pop()
            placed.add(spec.id)
            ordered.append(spec)
    missing = {parent for spec in specs for _, parent in spec.inputs if parent not in by_id}
    if missing:
        raise StateCorrupt(f"running tasks read from tasks that are not running: {sorted(missing)[:5]}")
    return ordered


class _LeaseKeeper:
    """Renews the writer lock's lease every third of its time to live while a token is held.

    One thread does it for as long as changes keep coming (a change holds the lock for milliseconds, so
    starting a thread per change cost more than the change's own planning); it ends after a renewal
    period with nothing held, and the next :meth:`hold` starts another. :meth:`drop` returns only once no
    renewal of its token is in flight, so the lock is never released under a renewal (which would then
    find it gone and report a lost lease).
    """

    def __init__(self, renew: Callable[[str], bool]) -> None:
        self._renew = renew
        self._token: str | None = None
        self._renewing: str | None = None
        self._changed = threading.Condition()
        self._running = False

    def hold(self, token: str) -> None:
        with self._changed:
            self._token = token
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="sana-lock-lease", daemon=True).start()
            self._changed.notify_all()

    def drop(self, token: str) -> None:
        with self._changed:
            if self._token == token:
                self._token = None
                self._changed.notify_all()
            self._changed.wait_for(lambda: self._renewing != token)

    def _run(self) -> None:
        period_s = LOCK_TTL_MS / 3000
        with self._changed:
            while True:
                token = self._token
                if token is None:
                    if not self._changed.wait_for(lambda: self._token is not None, period_s):
                        self._running = False
                        return
                    continue
                if self._changed.wait_for(lambda: self._token != token, period_s):
                    continue  # dropped, or another change holds the lock now: its period starts afresh
                self._renewing = token
                self._changed.release()
                try:
                    kept = self._renew(token)
                finally:
                    self._changed.acquire()
                    self._renewing = None
                    self._changed.notify_all()
                if not kept and self._token == token:
                    self._token = None
