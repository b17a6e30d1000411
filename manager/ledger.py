"""The manager's state in memory, kept equal to Redis, and the one way a change is deployed and committed.

Every part of the manager (submission and removal, recovery, the WAN watch and
re-placement, maintenance) works through one :class:`Ledger`:

- :meth:`Ledger.sync` makes memory match Redis (and writes memory back if Redis
  came back empty); :meth:`Ledger.snapshot` is a synced read;
- :meth:`Ledger.deploy_and_commit` marks the change pending, has the runtime
  apply it, commits the state in one transaction, and undoes the deployment
  if the commit fails: nothing changes unless everything did;
- ``changing`` admits one change (or group of changes, :mod:`manager.group`) at a
  time (submit, remove, defragment, re-place); ``mutex`` guards memory: reads
  wait while a submit or removal deploys, and go on during a re-placement's
  hand-over, which takes ``mutex`` only to plan and to commit;
- :meth:`Ledger.guard` turns Redis being unreachable into
  :class:`~manager.exceptions.StateUnavailable`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import redis

from manager.exceptions import DeployFailed, StateUnavailable
from manager.state import State
from manager.store import StaleState, Store
from manager.traffic import measured_mbps
from runtime.base import Runtime
from runtime.exceptions import RuntimeFailure
from runtime.plan import Change
from sana.failpoints import fail_point

log = logging.getLogger("sana.manager")

#: The Redis errors that mean it does not answer (a change waits for it; nothing else is tried).
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)


class Ledger:
    """The state of one Redis prefix, the runtime that runs it, and the locks every change takes."""

    def __init__(self, client: redis.Redis, prefix: str, runtime: Runtime) -> None:
        self.store = Store(client, prefix)
        self.runtime = runtime
        self.state = State()
        self.loaded = False
        self.mutex = threading.RLock()
        self.changing = threading.RLock()  # submit, remove, defragment, replace: one at a time; reads only take mutex

    def guard(self) -> "RedisGuard":
        return RedisGuard(self.store.redis)

    def sync(self, force: bool = False) -> None:
        """Make memory match Redis; write memory back if Redis lost everything."""
        version = self.store.version()
        if version is None and self.loaded and (self.state.dataflows or self.state.tasks):
            log.warning("Redis holds no state under %r; writing ours back", self.store.prefix)
            self.state.version = self.store.write_all(self.state)
            self.runtime.restore(self.state.tasks)
            return
        if force or not self.loaded or (version or 0) != self.state.version:
            self.state = self.store.load()
            self.loaded = True

    def snapshot(self) -> State:
        """The current state, synced with Redis (read-only: do not mutate)."""
        with self.guard(), self.mutex:
            self.sync()
            return self.state

    def measured(self) -> dict[str, float]:
        """Output Mbps the runtime measured per running task (empty without a WAN or measurements)."""
        if self.state.wan is None:
            return {}
        return measured_mbps(self.runtime.task_costs())

    def deploy_and_commit(self, kind: str, change: Change, commit: Callable[[], int], what: str | None, **described) -> int:
        """Mark ``change`` pending, apply it, then ``commit()`` the state; returns the new state version.

        The pending marker says ``kind``, ``what`` (the dataflow; None for a group), the change and
        ``described`` (a group's members). The runtime failing raises :class:`DeployFailed` with nothing changed; the commit failing
        undoes the deployment first (and a Redis that does not answer is raised as it is, for the guard)."""
        self.store.mark_pending({"kind": kind, "dataflow": what, "reason": change.reason,
                                 "start": [t.id for t in change.start], "stop": [t.id for t in change.stop], **described})
        fail_point(f"manager.{kind}.pending")
        try:
            self.runtime.apply(change)
            fail_point(f"manager.{kind}.deployed")
        except RuntimeFailure as failure:
            self.forget_pending()
            raise DeployFailed(f"{change.reason}: the runtime failed, nothing changed: {failure.message}",
                               culprit={"dataflow": what}) from failure
        try:
            version = commit()
            fail_point(f"manager.{kind}.committed")
            return version
        except (redis.RedisError, StaleState) as error:
            log.error("commit of %s failed (%s); undoing its deployment", change.reason, error)
            try:
                self.runtime.apply(change.inverse())
            except RuntimeFailure:
                log.exception("undoing %s failed; the next start reconciles it", change.reason)
            self.loaded = False
            if isinstance(error, REDIS_DOWN):
                raise
            raise DeployFailed(f"{change.reason}: the state changed underneath, nothing changed: {error}") from error

    def forget_pending(self) -> None:
        try:
            self.store.clear_pending()
        except redis.RedisError:
            log.warning("could not clear the pending marker; the next start clears it")

    def forget_staged(self) -> None:
        try:
            self.store.drop_staged()
        except redis.RedisError:
            log.warning("could not drop the staged state; the next start drops it")


class RedisGuard:
    """Turn Redis being unreachable into :class:`StateUnavailable`."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, trace) -> bool:
        if isinstance(error, REDIS_DOWN):
            location = self.client.connection_pool.connection_kwargs
            where = f"{location.get('host', '?')}:{location.get('port', '?')}"
            raise StateUnavailable(f"Redis at {where} does not answer: {error}") from error
        return False
