"""Group commit: submits and removals that arrive together are deployed and committed together.

A change waits for the one before it (``Ledger.changing``). While it waits,
others may arrive; the thread that gets the lock next takes every change
queued by then (up to :data:`MAX_GROUP`, in arrival order) and, under one
writer lock:

1. plans each against the state the ones before it leave (a change refused by
   validation, a limit or a duplicate check is answered at once and the
   others go on without it, as if they had come one at a time);
2. marks the group pending, applies one runtime change (the members' starts
   in order, then their stops), and commits every member's writes in one
   Redis transaction;
3. answers each member as it would have been answered alone.

So the runtime converges once per group, not once per change, and the change
rate rises with the load instead of queueing behind one deployment at a time.
A group never holds a change that starts a task an earlier member stops, or
the other way round: such a change waits for the next group, where it is
planned again.

If the runtime refuses the group, nothing of it was deployed or committed:
each member is then tried alone, so one change that cannot deploy fails only
its own request. If the commit fails, the deployment is undone and every
member gets the error, which is what each would have got alone. A process
killed in between leaves the group's pending marker: on restart its submits
are undone and its removals completed (:mod:`manager.recovery`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from manager.exceptions import DeployFailed
from manager.ledger import Ledger
from manager.state import State
from manager.store import Writes
from runtime.plan import Change

#: The most changes deployed and committed together.
MAX_GROUP = 64


@dataclass
class Prepared:
    """A planned change: what the runtime does, what Redis gets, and how memory follows (returning the answer)."""

    kind: str           # "merge" or "unmerge"
    dataflow: str
    change: Change
    writes: Writes
    apply: Callable[[State], Any]


@dataclass
class _Request:
    prepare: Callable[[State], Prepared]
    alone: bool = False         # tried alone: its group could not deploy
    applied: bool = False       # memory is past it (it is not its group's last)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None

    def answer(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


class GroupCommit:
    """The queue of changes of one manager, deployed and committed in groups."""

    def __init__(self, ledger: Ledger, max_group: int = MAX_GROUP) -> None:
        self.ledger = ledger
        self.max_group = max_group
        self._queue: list[_Request] = []
        self._queued = threading.Lock()
        self.groups = 0    # groups committed, of any size
        self.changes = 0   # changes committed in them
        self.largest = 0

    def counts(self) -> dict[str, int]:
        """Groups committed since this process started, the changes in them, and the largest group."""
        return {"groups": self.groups, "changes": self.changes, "largest": self.largest}

    @property
    def waiting(self) -> int:
        """Changes queued and not taken into a group yet."""
        with self._queued:
            return len(self._queue)

    def run(self, prepare: Callable[[State], Prepared]) -> Any:
        """Plan, deploy and commit one change, together with whatever else is queued; its answer, or its error.

        ``prepare`` plans against the state it is given, without changing it, and raises to refuse."""
        request = _Request(prepare)
        with self._queued:
            self._queue.append(request)
        ledger = self.ledger
        with ledger.guard():
            with ledger.changing:
                while not request.done.is_set():
                    with self._queued:
                        count = 1 if self._queue[0].alone else self.max_group
                        batch, self._queue[:count] = self._queue[:count], []
                    self._round(batch)
            if request.error is not None:
                raise request.error
            return request.result

    def _round(self, batch: list[_Request]) -> None:
        """Plan, deploy and commit ``batch`` (or its head, up to a conflict) as one group, and answer it."""
        ledger = self.ledger
        members: list[tuple[_Request, Prepared]] = []
        refused: list[tuple[_Request, Exception]] = []   # refused after a member: final once that member commits
        taken: list[_Request] = []
        requeued: list[_Request] = []
        try:
            with ledger.mutex, ledger.store.lock():
                ledger.sync()
                state = ledger.state
                version = state.version
                started: set[str] = set()
                stopped: set[str] = set()
                for index, request in enumerate(batch):
                    if members and not members[-1][0].applied:
                        previous, planned = members[-1]
                        previous.result, previous.applied = planned.apply(state), True
                    try:
                        prepared = request.prepare(state)
                    except Exception as error:  # a refusal: nothing of it changes
                        if not members:  # planned on the committed state: final
                            request.answer(error=error)
                            continue
                        refused.append((request, error))
                        taken.append(request)
                        continue
                    starts = {task.id for task in prepared.change.start}
                    stops = {task.id for task in prepared.change.stop}
                    if members and (starts & stopped or stops & started):
                        requeued = batch[index:]
                        self._requeue(requeued)
                        break
                    members.append((request, prepared))
                    taken.append(request)
                    started |= starts
                    stopped |= stops
                if members:
                    if not self._commit(members, version, state, held=bool(refused)):
                        for request in taken:  # the runtime refused the group: each change alone, in order
                            request.alone, request.applied = True, False
                        self._requeue(taken)
                        return
        except BaseException as error:
            if any(request.applied for request, _ in members):
                ledger.loaded = False  # memory is past changes that did not commit: read the state again
            for request in taken:
                if not request.done.is_set():
                    request.answer(error=error)
            for request in batch:  # not reached: Redis went away under the lock, or the lock was not had
                if not request.done.is_set() and request not in requeued:
                    request.answer(error=error)
            return
        for request, error in refused:
            request.answer(error=error)
        for request, _ in members:
            request.done.set()

    def _commit(self, members: list[tuple[_Request, Prepared]], version: int, state: State, held: bool) -> bool:
        """Deploy and commit ``members`` as one change. False when the runtime refused it and its members are
        to be tried alone: there were several, or changes after the one were planned past it (``held``
        refusals, or memory already past it); a lone change's refusal is raised."""
        ledger = self.ledger
        writes = [prepared.writes for _, prepared in members]
        last_request, last = members[-1]
        if len(members) == 1:
            kind, what, extra = last.kind, last.dataflow, {}
        else:
            kind, what = "group", f"{len(members)} changes"
            extra = {"members": [{"kind": prepared.kind, "dataflow": prepared.dataflow} for _, prepared in members]}
        try:
            new_version = ledger.deploy_and_commit(kind, _together([prepared for _, prepared in members]),
                                                   lambda: ledger.store.commit_group(writes, version), what, **extra)
        except DeployFailed:
            if len(members) == 1 and not last_request.applied and not held:
                raise
            if any(request.applied for request, _ in members):
                ledger.loaded = False  # memory is past changes that did not deploy: read the state again
            return False
        if not last_request.applied:
            last_request.result, last_request.applied = last.apply(state), True
        state.version = new_version
        self.groups += 1
        self.changes += len(members)
        self.largest = max(self.largest, len(members))
        return True

    def _requeue(self, requests: list[_Request]) -> None:
        with self._queued:
            self._queue[:0] = requests


def _together(members: list[Prepared]) -> Change:
    """One runtime change for a group: every member's starts in order (parents first across members), then
    every member's stops, last member first (children first)."""
    if len(members) == 1:
        return members[0].change
    start = tuple(task for prepared in members for task in prepared.change.start)
    stop = tuple(task for prepared in reversed(members) for task in prepared.change.stop)
    return Change(start=start, stop=stop, reason="; ".join(prepared.change.reason for prepared in members))
