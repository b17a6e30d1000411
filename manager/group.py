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
A group never holds a change that starts a task an earlier member stops (or
the other way round), nor one that starts a writer of a topic whose writer an
earlier member stops: such a change waits for the next group, where it is
planned again.

If the runtime refuses the group, nothing of it was deployed or committed:
each member is then tried alone, so one change that cannot deploy fails only
its own request. If the commit finds the state changed underneath (another
manager on the prefix), the deployment is undone and the members are tried
alone too, planned on the new state; if Redis does not answer, every member
gets that error, as each would have alone. A process killed in between
leaves the group's pending marker: on restart its submits are undone and its
removals completed (:mod:`manager.recovery`).

Memory follows each member as the next is planned, before the group commits;
a group that does not commit has the state read again from Redis. A reader
holding the state object meanwhile (:meth:`~manager.ledger.Ledger.snapshot`
returns it) may see members that do not commit, as it could see a single
change's memory update before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from manager.exceptions import DeployFailed
from manager.ledger import Ledger
from manager.state import State
from manager.store import Writes
from runtime.plan import Change
from sana.timing import Phases

log = logging.getLogger("sana.manager.group")

#: The most changes deployed and committed together.
MAX_GROUP = 64
#: A group taking longer logs where its time went.
SLOW_GROUP_S = 1.0


@dataclass
class Prepared:
    """A planned change: what the runtime does, what Redis gets, and how memory follows (returning the answer)."""

    kind: Literal["merge", "unmerge"]
    dataflow: str
    change: Change
    writes: Writes
    apply: Callable[[State], Any]


@dataclass
class _Request:
    prepare: Callable[[State], Prepared]
    alone: bool = False         # tried alone: its group could not deploy
    in_memory: bool = False     # memory is past it, before its group committed (a later member planned on it)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None

    def answer(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


@dataclass
class _Round:
    """What became of the requests of one round: the members, the refusals held until the members commit, and
    the requests put back in the queue."""

    members: list[tuple[_Request, Prepared]] = field(default_factory=list)
    refused: list[tuple[_Request, Exception]] = field(default_factory=list)
    requeued: list[_Request] = field(default_factory=list)
    committed: bool = False


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

        ``prepare`` plans against the state it is given without changing what is stored, and raises to refuse."""
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
        outcome = _Round()
        phases = Phases()
        try:
            with ledger.mutex, ledger.store.lock():
                phases.mark("lock")
                ledger.sync()
                self._plan(batch, ledger.state, outcome)
                phases.mark("plan")
                if outcome.members and self._commit(outcome.members, ledger.state):
                    outcome.committed = True
                    phases.mark("deploy and commit")
                elif outcome.members:
                    phases.mark("refused deploy")
                    retry = [request for request, _ in outcome.members] + [request for request, _ in outcome.refused]
                    for request in retry:  # the runtime refused the group: each change alone, in arrival order
                        request.alone, request.in_memory = True, False
                    outcome.requeued = sorted(retry, key=batch.index) + outcome.requeued
                    outcome.members, outcome.refused = [], []
        except BaseException as error:
            if outcome.members and not outcome.committed:
                ledger.loaded = False  # memory may be past changes that did not commit: read the state again
            settled = set(map(id, outcome.requeued))
            if outcome.committed:
                settled |= {id(request) for request, _ in outcome.members} | {id(request) for request, _ in outcome.refused}
            for request in batch:  # Redis went away, the lock was not had, or the process is going down
                if not request.done.is_set() and id(request) not in settled:
                    request.answer(error=error)
            self._requeue(outcome.requeued)
            if not outcome.committed:
                return
        else:
            self._requeue(outcome.requeued)
        if phases.total >= SLOW_GROUP_S:
            log.info("a group of %d changes (%d refused, %d put back) took %.2f s: %s", len(outcome.members),
                     len(outcome.refused), len(outcome.requeued), phases.total, phases)
        for request, error in outcome.refused:
            request.answer(error=error)
        for request, _ in outcome.members:
            request.done.set()

    def _plan(self, batch: list[_Request], state: State, outcome: _Round) -> None:
        """Plan each request in turn, memory following the members before it, up to a conflict."""
        started: set[str] = set()
        stopped: set[str] = set()
        for index, request in enumerate(batch):
            if outcome.members and not outcome.members[-1][0].in_memory:
                previous, planned = outcome.members[-1]
                previous.in_memory = True  # set first: an apply that raises leaves memory to be read again
                previous.result = planned.apply(state)
            try:
                prepared = request.prepare(state)
            except Exception as error:  # a refusal: nothing of it changes
                if outcome.members:  # planned past members that are not committed yet: final once they are
                    outcome.refused.append((request, error))
                else:
                    request.answer(error=error)
                continue
            starts, stops = _touched(prepared.change.start), _touched(prepared.change.stop)
            if outcome.members and (starts & stopped or stops & started):
                outcome.requeued = batch[index:]
                return
            outcome.members.append((request, prepared))
            started |= starts
            stopped |= stops

    def _commit(self, members: list[tuple[_Request, Prepared]], state: State) -> bool:
        """Deploy and commit ``members`` as one change. False when the runtime (or a state changed underneath)
        refused a group its members are to be tried alone from: several changes, or one that memory is past
        (changes after it were planned on it); a lone change's refusal is raised."""
        ledger = self.ledger
        writes = [prepared.writes for _, prepared in members]
        last_request, last = members[-1]
        version = state.version
        if len(members) == 1:
            kind, what, extra = last.kind, last.dataflow, {}
        else:
            kind, what = "group", None
            extra = {"members": [{"kind": prepared.kind, "dataflow": prepared.dataflow} for _, prepared in members]}
        try:
            new_version = ledger.deploy_and_commit(kind, _together([prepared for _, prepared in members]),
                                                   lambda: ledger.store.commit_group(writes, version), what, **extra)
        except DeployFailed:
            if len(members) == 1 and not last_request.in_memory:
                raise
            ledger.loaded = False  # memory is past changes that did not deploy: read the state again
            return False
        if not last_request.in_memory:
            last_request.in_memory = True
            last_request.result = last.apply(state)
        state.version = new_version
        self.groups += 1
        self.changes += len(members)
        self.largest = max(self.largest, len(members))
        return True

    def _requeue(self, requests: list[_Request]) -> None:
        with self._queued:
            self._queue[:0] = requests


def _touched(tasks) -> set[str]:
    """The task ids, and the topics the sinks among them write: a group never starts a writer of a topic whose
    writer an earlier member stops (both would write it for a moment), nor a task it stops."""
    return {task.id for task in tasks} | {f"topic:{task.config['topic']}" for task in tasks if task.type == "sink"}


def _together(members: list[Prepared]) -> Change:
    """One runtime change for a group: the members' starts in order (parents first across members), then
    their stops in order (a later member stops only what an earlier one's stopped tasks read: children first).

    >>> from runtime.plan import TaskSpec
    >>> def spec(name): return TaskSpec(name, name, "filter", {}, None, (), "f", {})
    >>> one = Prepared("unmerge", "df-1", Change(stop=(spec("sink-1"),), reason="remove df-1"), None, None)
    >>> two = Prepared("unmerge", "df-2", Change(stop=(spec("sink-2"), spec("filter")), reason="remove df-2"), None, None)
    >>> change = _together([one, two])
    >>> [task.id for task in change.stop], change.reason
    (['sink-1', 'sink-2', 'filter'], 'remove df-1; remove df-2')
    """
    if len(members) == 1:
        return members[0].change
    start = tuple(task for prepared in members for task in prepared.change.start)
    stop = tuple(task for prepared in members for task in prepared.change.stop)
    return Change(start=start, stop=stop, reason="; ".join(prepared.change.reason for prepared in members))
