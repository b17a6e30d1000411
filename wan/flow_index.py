"""The running set's flow model, kept up to date task by task, for weighing a plan in O(size of the plan).

:func:`wan.flow.source_vectors` and :func:`wan.flow.stream_crossings` build the
model of a placed set of tasks from scratch; weighing a query's plans that
way re-reads every running task on every submit. A :class:`FlowIndex` holds
the same model for the running set and changes it with each task added or
dropped:

- each task's *source vector*: the Mbps of its output per source at full
  source rates. A task's factor is its rate over the sum of its inputs'
  rates, as in the from-scratch model; a task's inputs cannot change while
  it runs, so its vector is computed once, when it is added;
- the crossings, with routers: a producer's stream crosses to another site
  once, whatever the number of its consumers there;
- per link, the producers whose streams cross it; a link's coefficients
  (source -> Mbps on the link) are summed again from those producers when
  they change, never by subtracting, so no rounding residue builds up over
  millions of changes;
- per source, how many sinks (tasks with inputs that nothing reads) its data
  reaches: what the sinks receive is the sum, over sources, of the source's
  delivered Mbps times that count.

:meth:`FlowIndex.delivered` adds a plan's new tasks on top without changing
the index and solves the max-min fair model (:func:`wan.flow.max_min_throttles`)
over the links, which is what the from-scratch computation gives, up to the
order floating-point sums are taken in.

:meth:`FlowIndex.delivered_buffered` weighs with buffered hops instead
(:mod:`wan.buffered`): the first call gathers the running set's paths, and
from then on every :meth:`FlowIndex.add` and :meth:`FlowIndex.drop` also
changes them and settles the link fractions of each scale asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from wan.buffered import BufferedState, Change, Laid, NewTask, PathModel, adding, dropping, settle
from wan.flow import max_min_throttles, vector_from_inputs

Link = tuple[str, str]


class FlowIndex:
    """The flow model of a running set with routers (the manager's), changed one task at a time.

    >>> index = FlowIndex()
    >>> index.add("s", "x", (), 40.0)
    >>> index.add("k", "y", ("s",), 40.0)           # a sink at y: s's 40 Mbps cross x -> y
    >>> index.delivered((), capacity=lambda src, dst: 10.0)
    10.0
    >>> index.delivered((NewTask("k2", "x", ("s",), 40.0),), capacity=lambda src, dst: 10.0)   # a second sink, at x
    20.0
    >>> index.drop("k"); index.delivered((), capacity=lambda src, dst: 10.0)   # nothing reads s: no sink
    0.0
    """

    def __init__(self) -> None:
        self.sites: dict[str, str] = {}
        self.inputs: dict[str, tuple[str, ...]] = {}
        self.rates: dict[str, float] = {}
        self.vectors: dict[str, dict[str, float]] = {}
        self.readers: dict[str, int] = {}
        self.sources: set[str] = set()
        self.sink_count: dict[str, int] = {}          # source -> sinks its data reaches
        self.arrivals: dict[tuple[str, str], int] = {}  # (producer, other site) -> its consumers there
        self.link_producers: dict[Link, dict[str, None]] = {}
        self._paths: PathModel | None = None  # the running set's paths (buffered hops), kept once asked for
        self._buffered: dict[float, BufferedState] = {}  # scale -> its fractions with buffered hops
        self._coefficients: dict[Link, dict[str, float]] = {}
        self._explained: dict[Link, float] = {}
        self._dirty: set[Link] = set()

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.sites

    def __len__(self) -> int:
        return len(self.sites)

    # -- changes -------------------------------------------------------------------

    def add(self, task_id: str, site: str, inputs: Sequence[str], rate_mbps: float) -> None:
        """A running task at ``site`` reading ``inputs`` (ids not in the index are left out; a task left
        without any is a source at its own rate). A task already in the index raises ``ValueError``."""
        if task_id in self.sites:
            raise ValueError(f"task {task_id!r} is already in the flow index")
        kept = tuple(parent for parent in inputs if parent in self.sites)
        if self._paths is not None:
            change, mixes = adding(self, self._paths, (NewTask(task_id, site, kept, rate_mbps),))
            self._change_buffered(change)
            self._paths.mix[task_id] = mixes[task_id]
        self.sites[task_id], self.inputs[task_id], self.rates[task_id] = site, kept, rate_mbps
        self.vectors[task_id] = vector_from_inputs(task_id, kept, rate_mbps, self.rates.__getitem__, self.vectors.__getitem__)
        self.readers[task_id] = 0
        if not kept:
            self.sources.add(task_id)
        else:
            _count(self.sink_count, self.vectors[task_id], +1)
        for parent in kept:
            if self.readers[parent] == 0 and self.inputs[parent]:
                _count(self.sink_count, self.vectors[parent], -1)
            self.readers[parent] += 1
            if self.sites[parent] != site:
                key = (parent, site)
                self.arrivals[key] = self.arrivals.get(key, 0) + 1
                if self.arrivals[key] == 1:
                    self._cross(parent, site, +1)

    def drop(self, task_id: str) -> None:
        """Forget a task nothing in the index reads any more (a task still read raises ``ValueError``)."""
        if self.readers.get(task_id, 0):
            raise ValueError(f"task {task_id!r} is still read by {self.readers[task_id]} task(s) of the flow index")
        if self._paths is not None:
            self._change_buffered(dropping(self, self._paths, task_id))
            del self._paths.mix[task_id]
        site, kept = self.sites.pop(task_id), self.inputs.pop(task_id)
        vector = self.vectors.pop(task_id)
        del self.rates[task_id], self.readers[task_id]
        if not kept:
            self.sources.discard(task_id)
        else:
            _count(self.sink_count, vector, -1)
        for parent in kept:
            self.readers[parent] -= 1
            if self.readers[parent] == 0 and self.inputs[parent]:
                _count(self.sink_count, self.vectors[parent], +1)
            if self.sites[parent] != site:
                key = (parent, site)
                self.arrivals[key] -= 1
                if not self.arrivals[key]:
                    del self.arrivals[key]
                    self._cross(parent, site, -1)

    def _cross(self, producer: str, site: str, change: int) -> None:
        link = (self.sites[producer], site)
        producers = self.link_producers.setdefault(link, {})
        if change > 0:
            producers[producer] = None
        else:
            del producers[producer]
            if not producers:
                del self.link_producers[link]
        self._dirty.add(link)

    # -- reading ---------------------------------------------------------------------

    def coefficients(self) -> dict[Link, dict[str, float]]:
        """Link -> source -> Mbps the running set puts on it at full source rates."""
        for link in self._dirty:
            producers = self.link_producers.get(link)
            if not producers:
                self._coefficients.pop(link, None)
                self._explained.pop(link, None)
                continue
            target: dict[str, float] = {}
            for producer in producers:
                for source, rate in self.vectors[producer].items():
                    target[source] = target.get(source, 0.0) + rate
            self._coefficients[link] = target
            self._explained[link] = sum(self.rates[producer] for producer in producers)
        self._dirty.clear()
        return self._coefficients

    def explained(self) -> dict[Link, float]:
        """Link -> the Mbps the running set's crossing streams put on it (their producers' rates)."""
        self.coefficients()
        return self._explained

    def delivered(self, new: Iterable[NewTask], capacity: Callable[[str, str], float],
                  background: Mapping[Link, float] | None = None, scale: float = 1.0) -> float:
        """The source Mbps every sink receives, summed over sinks, with the ``new`` tasks (parents first) added.

        ``scale`` multiplies every source's rate and ``background`` (other traffic per link, taken off its
        ``capacity``). The index itself is not changed.
        """
        background = background or {}
        laid = Laid(self, new)
        counts = dict(self.sink_count)
        for parent in laid.former_sinks():
            _count(counts, self.vectors[parent], -1)
        for task_id in laid.new_sinks():
            _count(counts, laid.vectors[task_id], +1)
        demand = {source: self.rates[source] for source in self.sources}
        demand.update((task_id, laid.rates[task_id]) for task_id, kept in laid.inputs.items() if not kept)
        coefficients: dict[Link, dict[str, float]] = {}
        for link, base in self.coefficients().items():
            coefficients[link] = {source: rate * scale for source, rate in base.items()}
        for producer, link in laid.crossings:
            target = coefficients.setdefault(link, {})
            for source, rate in laid.vector(producer).items():
                target[source] = target.get(source, 0.0) + rate * scale
        capacities = {link: max(0.0, capacity(*link) - scale * background.get(link, 0.0)) for link in coefficients}
        throttle = max_min_throttles(coefficients, capacities, demand)
        total = sum((demand[source] * scale * throttle[source] * count for source, count in counts.items()), 0.0)
        return round(total, 9)

    def delivered_buffered(self, new: Iterable[NewTask], capacity: Callable[[str, str], float], scale: float = 1.0) -> float:
        """:meth:`delivered` with buffered hops (:mod:`wan.buffered`): a congested crossing slows only what reads
        it. The running set's paths are gathered the first time they are asked for and kept up to date by
        :meth:`add` and :meth:`drop`, and so are its link fractions at each ``scale`` asked for; a plan is weighed
        on the links its change reaches. A link whose ``capacity`` (what is left of it for these streams, other
        traffic already taken off: unlike :meth:`delivered`, no ``background``) changed since is solved again
        first. The index itself is not changed."""
        paths = self.paths()
        state = self._buffered.get(scale)
        if state is None:
            state = self._buffered[scale] = BufferedState.build(paths, scale, capacity)
        else:
            state.recheck(capacity, paths)
        change, _ = adding(self, paths, new)
        _, total = settle(paths, state, change, change.links)
        return round(total, 9)

    def paths(self) -> PathModel:
        """The running set's paths (:class:`wan.buffered.PathModel`), gathered the first time they are asked for
        and kept up to date from then on; read only."""
        if self._paths is None:
            self._paths = PathModel.of(self)
        return self._paths

    def _change_buffered(self, change: Change) -> None:
        """Settle every kept scale's fractions with ``change``, then write it into the paths."""
        assert self._paths is not None
        settled = [(state, *settle(self._paths, state, change, change.links)) for state in self._buffered.values()]
        self._paths.apply(change)
        for state, frac, total in settled:
            state.commit(frac, total, self._paths, change.links)


def _count(counts: dict[str, int], vector: Mapping[str, float], change: int) -> None:
    for source in vector:
        left = counts.get(source, 0) + change
        if left:
            counts[source] = left
        else:
            counts.pop(source, None)
