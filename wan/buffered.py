"""The running set's flow with buffered hops, kept by the flow index and changed where a change reaches.

Sana's queries are linked by Kafka topics: a congested crossing slows only
what reads it (:func:`wan.flow.decoupled_rates`, which the emulated WAN agrees
with). With routers, every stream crossing a link ``L`` is delivered at the
link's fraction ``min(1, capacity / load)``, and a task's *reach* of a source
(the share of that source's data at full rate that arrives in its output) is
its inputs' reach, weighted by what each input carries of that source, times
the fraction of the link each input crossed. A link's load is what its
producers send at their reach; a sink's contribution is each source's rate
times its reach.

A :class:`BufferedState` holds fractions, reaches, loads and the sinks'
total for one scale of the source rates. :func:`settle` changes it where a
change reaches: a new crossing or a changed reach moves a link's load, a
changed fraction moves the reach of that link's readers, and so on downstream
(tasks in depth order), until nothing moves by more than ``EPSILON``; the
rest is not read. An :class:`Overlay` holds a change on top of a state without
changing it (a plan being weighed); :meth:`Overlay.commit` writes it in (a
task added to or dropped from the running set).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from wan.flow import UNDAMPED_ROUNDS, vector_from_inputs

Link = tuple[str, str]
EPSILON = 1e-12
#: A task is recomputed at most this many times per change (as decoupled_rates' rounds).
ROUNDS = 200


class Structure(Protocol):
    """What :mod:`wan.flow_index` keeps of the running set (read only here)."""

    sites: dict[str, str]
    inputs: dict[str, tuple[str, ...]]
    rates: dict[str, float]
    vectors: dict[str, dict[str, float]]
    readers: dict[str, int]
    children: dict[str, dict[str, None]]
    depth: dict[str, int]
    arrivals: dict[tuple[str, str], int]
    crossing_sites: dict[str, dict[str, None]]
    link_producers: dict[Link, dict[str, None]]


@dataclass
class BufferedState:
    """Fractions, reaches, loads and the sinks' total of the running set at ``scale`` times its source rates."""

    scale: float
    capacity: Callable[[str, str], float]
    capacities: dict[Link, float] = field(default_factory=dict)
    frac: dict[Link, float] = field(default_factory=dict)
    reach: dict[str, dict[str, float]] = field(default_factory=dict)
    load: dict[Link, float] = field(default_factory=dict)
    total: float = 0.0

    def link_capacity(self, link: Link) -> float:
        if link not in self.capacities:
            self.capacities[link] = self.capacity(*link)
        return self.capacities[link]


@dataclass(frozen=True)
class NewTask:
    """A task a plan would start: its id (not a running one), site, input ids (running or new) and rate."""

    id: str
    site: str
    inputs: tuple[str, ...]
    rate_mbps: float


class Overlay:
    """A change on top of ``state``: tasks added (parents first) or one task dropped, and what follows."""

    def __init__(self, index: Structure, state: BufferedState) -> None:
        self.index, self.state = index, state
        self.sites: dict[str, str] = {}
        self.inputs: dict[str, tuple[str, ...]] = {}
        self.vectors: dict[str, dict[str, float]] = {}
        self.rates: dict[str, float] = {}
        self.depth: dict[str, int] = {}
        self.children: dict[str, list[str]] = {}
        self.extra_readers: dict[str, int] = {}
        self.crossings: dict[str, dict[str, None]] = {}   # producer -> sites it now also crosses to
        self.producers: dict[Link, list[str]] = {}        # link -> producers that now also cross it
        self.dropped: str | None = None
        self.gone_crossings: set[tuple[str, str]] = set()  # (producer, site) no longer crossed
        self.frac: dict[Link, float] = {}
        self.reach: dict[str, dict[str, float] | None] = {}
        self.load: dict[Link, float] = {}
        self.before: dict[str, float] = {}  # task -> its contribution as a sink before the change (0: not a sink)
        self._heap: list[tuple[int, str]] = []
        self._queued: set[str] = set()
        self._dirty: dict[Link, None] = {}

    # -- the view: the change over the index and the state ------------------------------

    def site(self, task: str) -> str:
        return self.sites[task] if task in self.sites else self.index.sites[task]

    def task_inputs(self, task: str) -> tuple[str, ...]:
        return self.inputs[task] if task in self.inputs else self.index.inputs[task]

    def vector(self, task: str) -> dict[str, float]:
        return self.vectors[task] if task in self.vectors else self.index.vectors[task]

    def rate(self, task: str) -> float:
        return self.rates[task] if task in self.rates else self.index.rates[task]

    def task_depth(self, task: str) -> int:
        return self.depth[task] if task in self.depth else self.index.depth[task]

    def task_children(self, task: str) -> Iterable[str]:
        for child in self.index.children.get(task, ()):
            if child != self.dropped:
                yield child
        yield from self.children.get(task, ())

    def readers(self, task: str) -> int:
        count = self.index.readers.get(task, 0) + self.extra_readers.get(task, 0)
        return count - (self.index.inputs[self.dropped].count(task) if self.dropped is not None else 0)

    def crossed_sites(self, producer: str) -> Iterable[str]:
        for site in self.index.crossing_sites.get(producer, ()):
            if (producer, site) not in self.gone_crossings:
                yield site
        yield from self.crossings.get(producer, ())

    def link_producers(self, link: Link) -> Iterable[str]:
        for producer in self.index.link_producers.get(link, ()):
            if (producer, link[1]) not in self.gone_crossings:
                yield producer
        yield from self.producers.get(link, ())

    def fraction(self, link: Link) -> float:
        return self.frac[link] if link in self.frac else self.state.frac.get(link, 1.0)

    def task_reach(self, task: str) -> dict[str, float] | None:
        return self.reach[task] if task in self.reach else self.state.reach.get(task)

    def link_load(self, link: Link) -> float:
        return self.load[link] if link in self.load else self.state.load.get(link, 0.0)

    def out(self, task: str, reach: Mapping[str, float] | None) -> float:
        """What ``task`` sends at ``reach`` (Mbps at the state's scale)."""
        if not reach:
            return 0.0
        return sum(full * reach.get(source, 0.0) for source, full in self.vector(task).items()) * self.state.scale

    def contribution(self, task: str, reach: Mapping[str, float] | None) -> float:
        """What ``task`` delivers as a sink: each source's rate at the scale times the share of it that arrives."""
        if not reach:
            return 0.0
        return sum(self.rate(source) * reach.get(source, 0.0) for source, full in self.vector(task).items()
                   if full > EPSILON) * self.state.scale

    def is_sink(self, task: str) -> bool:
        return task != self.dropped and bool(self.task_inputs(task)) and self.readers(task) == 0

    # -- changes ----------------------------------------------------------------------

    def add(self, tasks: Iterable[NewTask]) -> None:
        """Add ``tasks`` (parents first); ids not in the index or added before are left out of their inputs."""
        for task in tasks:
            kept = tuple(parent for parent in task.inputs if parent in self.index.sites or parent in self.sites)
            self.sites[task.id], self.inputs[task.id], self.rates[task.id] = task.site, kept, task.rate_mbps
            self.vectors[task.id] = vector_from_inputs(task.id, kept, task.rate_mbps, self.rate, self.vector)
            self.depth[task.id] = 1 + max((self.task_depth(parent) for parent in kept), default=-1)
            self.before[task.id] = 0.0
            for parent in kept:
                if parent in self.index.sites and parent not in self.before:
                    self.before[parent] = self.contribution(parent, self.task_reach(parent)) if self.is_sink(parent) else 0.0
                self.children.setdefault(parent, []).append(task.id)
                self.extra_readers[parent] = self.extra_readers.get(parent, 0) + 1
                site = self.site(parent)
                if site != task.site and task.site not in set(self.crossed_sites(parent)):
                    self.crossings.setdefault(parent, {})[task.site] = None
                    link = (site, task.site)
                    self.producers.setdefault(link, []).append(parent)
                    self.load[link] = self.link_load(link) + self.out(parent, self.task_reach(parent))
                    self._dirty[link] = None
            self._queue(task.id)

    def drop(self, task: str) -> None:
        """Drop ``task``, which nothing reads."""
        for parent in self.index.inputs[task]:
            if parent not in self.before:
                self.before[parent] = self.contribution(parent, self.task_reach(parent)) if self.is_sink(parent) else 0.0
        self.before[task] = self.contribution(task, self.task_reach(task)) if self.is_sink(task) else 0.0
        self.dropped = task
        site = self.index.sites[task]
        sent = self.out(task, self.task_reach(task))
        for other in list(self.index.crossing_sites.get(task, ())):
            link = (site, other)
            self.gone_crossings.add((task, other))
            self.load[link] = self.link_load(link) - sent
            self._dirty[link] = None
        inputs = self.index.inputs[task]
        for parent in dict.fromkeys(inputs):
            parent_site = self.index.sites[parent]
            if parent_site != site and self.index.arrivals.get((parent, site), 0) == inputs.count(parent):
                link = (parent_site, site)
                self.gone_crossings.add((parent, site))
                self.load[link] = self.link_load(link) - self.out(parent, self.task_reach(parent))
                self._dirty[link] = None
        self.reach[task] = None

    def _queue(self, task: str) -> None:
        if task not in self._queued:
            self._queued.add(task)
            heapq.heappush(self._heap, (self.task_depth(task), task))

    # -- settling ---------------------------------------------------------------------

    def settle(self) -> float:
        """Propagate the change until nothing moves; returns the sinks' total with it."""
        visits: dict[str, int] = {}
        moves: dict[Link, int] = {}
        while self._heap or self._dirty:
            while self._heap:
                _, task = heapq.heappop(self._heap)
                self._queued.discard(task)
                visits[task] = visits.get(task, 0) + 1
                if visits[task] <= ROUNDS:  # as decoupled_rates' rounds: a cycle through links that has not settled
                    self._recompute(task)
            for link in list(self._dirty):
                del self._dirty[link]
                capacity = self.state.link_capacity(link)
                load = self.link_load(link)
                fraction = 1.0 if load <= capacity else (capacity / load if load > 0 else 1.0)
                if abs(fraction - self.fraction(link)) <= EPSILON:
                    continue
                moves[link] = moves.get(link, 0) + 1
                if moves[link] > UNDAMPED_ROUNDS:  # a loop through links swings: half way (as decoupled_rates)
                    fraction = (fraction + self.fraction(link)) / 2
                self.frac[link] = fraction
                for producer in self.link_producers(link):
                    for child in self.task_children(producer):
                        if self.site(child) == link[1]:
                            self._queue(child)
        total = self.state.total
        for task, before in self.before.items():
            if task == self.dropped:
                total -= before
                continue
            total += (self.contribution(task, self.task_reach(task)) if self.is_sink(task) else 0.0) - before
        return total

    def _recompute(self, task: str) -> None:
        inputs = self.task_inputs(task)
        if not inputs:
            new = {task: 1.0}
        else:
            carried: dict[str, float] = {}
            arrived: dict[str, float] = {}
            site = self.site(task)
            for parent in inputs:
                parent_site = self.site(parent)
                hop = 1.0 if parent_site == site else self.fraction((parent_site, site))
                reach = self.task_reach(parent) or {}
                for source, full in self.vector(parent).items():
                    carried[source] = carried.get(source, 0.0) + full
                    arrived[source] = arrived.get(source, 0.0) + full * reach.get(source, 0.0) * hop
            new = {source: (arrived[source] / full if full > 0 else 0.0) for source, full in carried.items()}
        old = self.task_reach(task)
        if old is not None and all(abs(new.get(s, 0.0) - old.get(s, 0.0)) <= EPSILON for s in new.keys() | old.keys()):
            return
        if task not in self.before:  # a running task's first change: what it delivered before, if a sink
            self.before[task] = self.contribution(task, old) if self.is_sink(task) else 0.0
        self.reach[task] = new
        change = self.out(task, new) - self.out(task, old)
        if abs(change) > EPSILON:
            site = self.site(task)
            for other in self.crossed_sites(task):
                link = (site, other)
                self.load[link] = self.link_load(link) + change
                self._dirty[link] = None
        for child in self.task_children(task):
            self._queue(child)

    def commit(self, total: float) -> None:
        """Write the settled change into the state."""
        state = self.state
        state.frac.update(self.frac)
        for task, reach in self.reach.items():
            if reach is None:
                state.reach.pop(task, None)
            else:
                state.reach[task] = reach
        state.load.update(self.load)
        for link in self.load:
            if not any(True for _ in self.link_producers(link)):
                state.load.pop(link, None)
                state.frac.pop(link, None)
        state.total = total

