"""The flow model: what a placed set of streaming tasks achieves on a WAN.

Every task's output rate is linear in the rates its sources send: a source
sends ``x_s * demand_s`` Mbps (``x_s`` in [0, 1] is its throttle) and a task
emits ``factor`` times the sum of its inputs (its per-operator selectivity).
A stream whose consumer is at another site crosses the link between the two
sites; with routers it crosses once per (producer, destination site),
without them once per consumer. Intra-site transfers are free.

Congestion is resolved by max-min fair progressive filling over the source
throttles: all unthrottled sources speed up together (as a fraction of their
demand) until some link is full; every source whose data crosses a full link
is frozen there (backpressure throttles the sources of every query whose path
is congested, including the other queries that share those sources), and
the others keep filling the spare bandwidth. The result is the unique
max-min fair allocation of source fractions; on a congested link each stream
gets a share of the capacity proportional to its demand.

Latency of a query is the longest source-to-sink path: operator delays plus,
for every WAN hop, the link latency and a queueing delay growing with the
link's utilization (M/M/1-like, ``service * u / (1 - u)``, capped at draining
a full buffer; a saturated link has a full buffer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wan.topology import WanConfig

EPSILON = 1e-9


@dataclass(frozen=True)
class FlowTask:
    """A placed task. Sources have ``demand_mbps`` and ``rate_rps``; others a ``factor``."""

    id: str
    site: str
    inputs: tuple[str, ...] = ()
    factor: float = 1.0
    demand_mbps: float = 0.0
    rate_rps: float = 0.0
    delay_ms: float = 0.0


@dataclass(frozen=True)
class FlowQuery:
    """A query: the placed tasks it uses (its sources among them) and its sinks."""

    name: str
    tasks: tuple[str, ...]
    sinks: tuple[str, ...]


@dataclass(frozen=True)
class LatencyModel:
    """Queueing parameters: the network buffer sent at once, and the buffer a saturated link keeps full."""

    batch_kb: float = 32.0
    buffer_mb: float = 1.0

    def queue_ms(self, utilization: float, capacity_mbps: float) -> float:
        """Queueing delay on a link.

        >>> LatencyModel(batch_kb=125, buffer_mb=1).queue_ms(0.5, 100)   # 1 Mbit at 100 Mbps = 10 ms
        10.0
        >>> LatencyModel(batch_kb=125, buffer_mb=1).queue_ms(1.0, 100)   # 8 Mbit buffer = 80 ms
        80.0
        """
        drain = self.buffer_mb * 8.0 * 1000.0 / capacity_mbps
        if utilization >= 1.0 - 1e-6:
            return drain
        service = self.batch_kb * 8.0 / capacity_mbps
        return min(drain, service * utilization / (1.0 - utilization))


@dataclass(frozen=True)
class LinkFlow:
    src: str
    dst: str
    capacity_mbps: float
    demand_mbps: float
    load_mbps: float
    streams: int

    @property
    def utilization(self) -> float:
        return self.load_mbps / self.capacity_mbps if self.capacity_mbps else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": self.src, "to": self.dst, "capacity_mbps": _r(self.capacity_mbps), "demand_mbps": _r(self.demand_mbps),
            "load_mbps": _r(self.load_mbps), "utilization": _r(self.utilization), "streams": self.streams,
        }


@dataclass(frozen=True)
class QueryFlow:
    name: str
    throughput_rps: float
    demand_rps: float
    latency_ms: float

    @property
    def fraction(self) -> float:
        return self.throughput_rps / self.demand_rps if self.demand_rps else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "throughput_rps": _r(self.throughput_rps), "demand_rps": _r(self.demand_rps),
                "fraction": _r(self.fraction), "latency_ms": _r(self.latency_ms)}


@dataclass(frozen=True)
class FlowResult:
    """Throttle per source, flow per link, throughput and latency per query."""

    throttle: dict[str, float]
    links: tuple[LinkFlow, ...]
    queries: tuple[QueryFlow, ...]
    task_rates: dict[str, float] = field(default_factory=dict)

    @property
    def wan_mbps(self) -> float:
        return sum(link.load_mbps for link in self.links)

    @property
    def throughput_rps(self) -> float:
        return sum(query.throughput_rps for query in self.queries)

    @property
    def mean_latency_ms(self) -> float:
        return sum(query.latency_ms for query in self.queries) / len(self.queries) if self.queries else 0.0

    def link(self, src: str, dst: str) -> LinkFlow | None:
        return next((link for link in self.links if link.src == src and link.dst == dst), None)

    def query(self, name: str) -> QueryFlow:
        return next(query for query in self.queries if query.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "throughput_rps": _r(self.throughput_rps),
            "wan_mbps": _r(self.wan_mbps),
            "mean_latency_ms": _r(self.mean_latency_ms),
            "queries": [query.to_dict() for query in self.queries],
            "links": [link.to_dict() for link in self.links],
            "throttle": {source: _r(value) for source, value in sorted(self.throttle.items())},
        }


def stream_crossings(tasks: Mapping[str, FlowTask], router: bool = True) -> list[tuple[str, str, str]]:
    """The WAN crossings of placed tasks as ``(producer, source site, destination site)``, one per stream sent.

    >>> tasks = {"s": FlowTask("s", "x"), "a": FlowTask("a", "y", ("s",)), "b": FlowTask("b", "y", ("s",))}
    >>> stream_crossings(tasks), stream_crossings(tasks, router=False)
    ([('s', 'x', 'y')], [('s', 'x', 'y'), ('s', 'x', 'y')])
    """
    result: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for task in tasks.values():
        for parent in task.inputs:
            producer = tasks[parent]
            if producer.site == task.site:
                continue
            if router:
                if (parent, task.site) in seen:
                    continue
                seen.add((parent, task.site))
            result.append((parent, producer.site, task.site))
    return result


def vector_from_inputs(task_id: str, inputs: Sequence[str], rate: float, rates: Callable[[str], float],
                       vectors: Callable[[str], Mapping[str, float]]) -> dict[str, float]:
    """A task's source vector at full source rates from its inputs' (``rates`` and ``vectors`` look them up): its
    factor is its rate over the sum of its inputs' rates, as :func:`source_vectors` takes it; without inputs it
    is a source at ``rate``.

    >>> vector_from_inputs("f", ("s",), 5.0, {"s": 10.0}.__getitem__, {"s": {"s": 10.0}}.__getitem__)
    {'s': 5.0}
    """
    if not inputs:
        return {task_id: rate}
    arriving = sum(rates(parent) for parent in inputs)
    factor = rate / arriving if arriving > 0 else 0.0
    total: dict[str, float] = {}
    for parent in inputs:
        for source, value in vectors(parent).items():
            total[source] = total.get(source, 0.0) + factor * value
    return total


def source_vectors(tasks: Mapping[str, FlowTask]) -> dict[str, dict[str, float]]:
    """Each task's output at full source rates, split by source: ``task -> {source: Mbps}``.

    >>> vectors = source_vectors({"s": FlowTask("s", "x", demand_mbps=10), "f": FlowTask("f", "x", ("s",), factor=0.5)})
    >>> vectors["f"]
    {'s': 5.0}
    """
    memo: dict[str, dict[str, float]] = {}

    def vector(task_id: str) -> dict[str, float]:
        if task_id in memo:
            return memo[task_id]
        stack = [task_id]
        while stack:
            current = stack[-1]
            task = tasks[current]
            waiting = [parent for parent in task.inputs if parent not in memo]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            if current in memo:
                continue
            if not task.inputs:
                memo[current] = {current: task.demand_mbps}
            else:
                total: dict[str, float] = {}
                for parent in task.inputs:
                    for source, rate in memo[parent].items():
                        total[source] = total.get(source, 0.0) + task.factor * rate
                memo[current] = total
        return memo[task_id]

    for task_id in tasks:
        vector(task_id)
    return memo


def max_min_throttles(
    link_coefficients: Mapping[tuple[str, str], Mapping[str, float]],
    capacities: Mapping[tuple[str, str], float],
    sources: Iterable[str],
) -> dict[str, float]:
    """Progressive filling: the max-min fair source fractions under link capacities.

    ``link_coefficients[link][s]`` is the Mbps source ``s`` puts on ``link`` at full rate.

    >>> max_min_throttles({("x", "y"): {"a": 10, "b": 30}}, {("x", "y"): 20}, ["a", "b"])
    {'a': 0.5, 'b': 0.5}
    >>> max_min_throttles({("x", "y"): {"a": 10, "b": 30}, ("x", "z"): {"a": 10}}, {("x", "y"): 100, ("x", "z"): 5}, ["a", "b"])
    {'a': 0.5, 'b': 1.0}
    """
    throttle = {source: 0.0 for source in sources}
    active = set(throttle)
    level = 0.0
    while active:
        step = 1.0
        for link, coefficients in link_coefficients.items():
            moving = sum(rate for source, rate in coefficients.items() if source in active)
            if moving <= EPSILON:
                continue
            fixed = sum(rate * throttle[source] for source, rate in coefficients.items() if source not in active)
            step = min(step, max(level, (capacities[link] - fixed) / moving))
        level = step
        for source in active:
            throttle[source] = level
        if level >= 1.0 - EPSILON:
            break
        frozen = set()
        for link, coefficients in link_coefficients.items():
            load = sum(rate * throttle[source] for source, rate in coefficients.items())
            if load >= capacities[link] - 1e-7 * max(1.0, capacities[link]):
                frozen |= {source for source, rate in coefficients.items() if source in active and rate > EPSILON}
        if not frozen:
            break
        active -= frozen
    return {source: min(1.0, value) for source, value in throttle.items()}


def solve(
    tasks: Sequence[FlowTask] | Mapping[str, FlowTask],
    queries: Sequence[FlowQuery],
    wan: WanConfig,
    router: bool = True,
    latency_model: LatencyModel = LatencyModel(),
    decoupled: bool = False,
) -> FlowResult:
    """Steady state of placed tasks on ``wan``: throttles, link loads, per-query throughput and latency.

    Raises ``ValueError`` when a stream crosses between two sites without a link.
    ``decoupled``: hops are buffered (Kafka topics, as Sana's runtime links them) instead of pushing back on the
    sources: a congested crossing slows only what reads it (:func:`decoupled_rates`).

    >>> from wan.topology import parse_wan_config
    >>> wan = parse_wan_config({"sites": ["x", "y"], "links": [{"from": "x", "to": "y", "bandwidth_mbps": 10, "latency_ms": 20}]})
    >>> tasks = [FlowTask("s", "x", demand_mbps=40, rate_rps=1000), FlowTask("f", "x", ("s",), factor=0.5),
    ...          FlowTask("k", "y", ("f",))]
    >>> result = solve(tasks, [FlowQuery("q", ("s", "f", "k"), ("k",))], wan)
    >>> result.throttle["s"], result.query("q").throughput_rps, result.wan_mbps
    (0.5, 500.0, 10.0)
    """
    by_id = dict(tasks) if isinstance(tasks, Mapping) else {task.id: task for task in tasks}
    vectors = source_vectors(by_id)
    coefficients: dict[tuple[str, str], dict[str, float]] = {}
    streams: dict[tuple[str, str], int] = {}
    capacities: dict[tuple[str, str], float] = {}
    for producer, src, dst in stream_crossings(by_id, router):
        link = wan.link(src, dst)
        if link is None:
            raise ValueError(f"{producer!r} sends from {src!r} to {dst!r}, which no link joins")
        capacities[(src, dst)] = link.bandwidth_mbps
        streams[(src, dst)] = streams.get((src, dst), 0) + 1
        target = coefficients.setdefault((src, dst), {})
        for source, rate in vectors[producer].items():
            target[source] = target.get(source, 0.0) + rate
    sources = [task_id for task_id, task in by_id.items() if not task.inputs]
    if decoupled:
        return _solve_decoupled(by_id, queries, wan, router, latency_model, vectors, capacities, streams)
    throttle = max_min_throttles(coefficients, capacities, sources)
    links = tuple(
        LinkFlow(src, dst, capacities[(src, dst)], sum(coefficients[(src, dst)].values()),
                 sum(rate * throttle[source] for source, rate in coefficients[(src, dst)].items()), streams[(src, dst)])
        for src, dst in sorted(coefficients)
    )
    utilization = {(link.src, link.dst): (link.utilization, link.capacity_mbps) for link in links}
    task_rates = {task_id: sum(rate * throttle[source] for source, rate in vector.items()) for task_id, vector in vectors.items()}
    results = []
    for query in queries:
        own = [by_id[task_id] for task_id in query.tasks]
        query_sources = [task for task in own if not task.inputs]
        demand = sum(task.rate_rps for task in query_sources)
        achieved = sum(task.rate_rps * throttle[task.id] for task in query_sources)
        results.append(QueryFlow(query.name, achieved, demand, _latency(query, by_id, wan, utilization, latency_model)))
    return FlowResult(throttle, links, tuple(results), task_rates)


#: Rounds of :func:`decoupled_rates` that move each fraction all the way to its next value; later rounds move
#: half way (a feedback loop through links otherwise swings between two states).
UNDAMPED_ROUNDS = 10


def decoupled_rates(tasks: Mapping[str, FlowTask], capacities: Mapping[tuple[str, str], float],
                    router: bool = True, rounds: int = 200) -> tuple[dict[str, dict[str, float]], dict[tuple[str, str], float]]:
    """Rates when every hop is buffered: sources send at full rate, and each crossing (a stream read at another
    site) delivers the max-min fair fraction of what reaches it that its link allows.

    Returns each task's output split by source (Mbps, as :func:`source_vectors` at full rate) and each crossing's
    fraction, keyed ``(producer, destination site)``. A crossing's offered load depends on the crossings before
    it, so progressive filling over the crossings is repeated until the fractions settle. Where a stream's
    products cross a link it crossed before (b -> c, back, and over b -> c again), a fraction's next value falls
    as its last one rises, and repeating alone swings between two states: after :data:`UNDAMPED_ROUNDS` each
    round moves the fractions half way, which settles them.

    >>> tasks = {"s": FlowTask("s", "x", demand_mbps=10), "a": FlowTask("a", "y", ("s",)), "b": FlowTask("b", "x", ("s",)),
    ...          "c": FlowTask("c", "z", ("b",))}
    >>> rates, fractions = decoupled_rates(tasks, {("x", "y"): 5.0, ("x", "z"): 100.0})
    >>> fractions[("s", "y")], rates["a"]["s"], rates["c"]["s"]   # the slow reader lags; the other one does not
    (0.5, 5.0, 10.0)
    """
    order = _parents_first(tasks)
    readers = _crossing_readers(tasks, router)
    fraction = {crossing: 1.0 for crossing in readers}
    rates: dict[str, dict[str, float]] = {}
    for round_number in range(rounds):
        rates = {}
        for task in order:
            if not task.inputs:
                rates[task.id] = {task.id: task.demand_mbps}
                continue
            total: dict[str, float] = {}
            for parent in task.inputs:
                share = fraction.get((parent, task.site), 1.0) if tasks[parent].site != task.site else 1.0
                for source, rate in rates[parent].items():
                    total[source] = total.get(source, 0.0) + task.factor * rate * share
            rates[task.id] = total
        coefficients: dict[tuple[str, str], dict[tuple[str, str], float]] = {}
        for crossing, count in readers.items():
            link = (tasks[crossing[0]].site, crossing[1])
            coefficients.setdefault(link, {})[crossing] = sum(rates[crossing[0]].values()) * count
        settled = max_min_throttles(coefficients, capacities, list(fraction))
        if all(abs(settled[crossing] - fraction[crossing]) < 1e-9 for crossing in fraction):
            break
        if round_number >= UNDAMPED_ROUNDS:
            settled = {crossing: (fraction[crossing] + settled[crossing]) / 2 for crossing in fraction}
        fraction = settled
    return rates, fraction


def _crossing_readers(tasks: Mapping[str, FlowTask], router: bool) -> Counter[tuple[str, str]]:
    """Each crossing ``(producer, destination site)`` with the times its stream is sent over the link: once with
    routers, once per consumer there without (:func:`stream_crossings`)."""
    return Counter((producer, dst) for producer, _, dst in stream_crossings(tasks, router))


def _parents_first(tasks: Mapping[str, FlowTask]) -> list[FlowTask]:
    done: set[str] = set()
    order: list[FlowTask] = []

    def visit(task_id: str) -> None:
        stack = [(task_id, False)]
        while stack:
            current, expanded = stack.pop()
            if current in done:
                continue
            if expanded:
                done.add(current)
                order.append(tasks[current])
                continue
            stack.append((current, True))
            stack.extend((parent, False) for parent in tasks[current].inputs if parent not in done)

    for task_id in tasks:
        visit(task_id)
    return order


def _solve_decoupled(tasks: Mapping[str, FlowTask], queries: Sequence[FlowQuery], wan: WanConfig, router: bool,
                     latency_model: LatencyModel, full: Mapping[str, Mapping[str, float]],
                     capacities: Mapping[tuple[str, str], float], streams: Mapping[tuple[str, str], int]) -> FlowResult:
    rates, fraction = decoupled_rates(tasks, capacities, router)
    demand: dict[tuple[str, str], float] = {}
    load: dict[tuple[str, str], float] = {}
    for (producer, site), readers in _crossing_readers(tasks, router).items():
        link = (tasks[producer].site, site)
        demand[link] = demand.get(link, 0.0) + sum(full[producer].values()) * readers
        load[link] = load.get(link, 0.0) + sum(rates[producer].values()) * fraction[(producer, site)] * readers
    links = tuple(LinkFlow(src, dst, capacities[(src, dst)], demand[(src, dst)], load[(src, dst)], streams[(src, dst)])
                  for src, dst in sorted(demand))
    utilization = {(link.src, link.dst): (link.utilization, link.capacity_mbps) for link in links}
    results = []
    for query in queries:
        own = [tasks[task_id] for task_id in query.tasks]
        query_sources = [task for task in own if not task.inputs]
        demand_rps = sum(task.rate_rps for task in query_sources)
        achieved = 0.0
        for source in query_sources:
            reached = [rates[sink].get(source.id, 0.0) / full[sink][source.id] for sink in query.sinks
                       if full[sink].get(source.id, 0.0) > EPSILON]
            achieved += source.rate_rps * (min(reached) if reached else 1.0)
        results.append(QueryFlow(query.name, achieved, demand_rps, _latency(query, tasks, wan, utilization, latency_model)))
    throttle = {task_id: 1.0 for task_id, task in tasks.items() if not task.inputs}
    return FlowResult(throttle, links, tuple(results), {task_id: sum(rate.values()) for task_id, rate in rates.items()})


def _latency(query: FlowQuery, tasks: Mapping[str, FlowTask], wan: WanConfig,
             utilization: Mapping[tuple[str, str], tuple[float, float]], model: LatencyModel) -> float:
    memo: dict[str, float] = {}

    def reach(task_id: str) -> float:
        if task_id in memo:
            return memo[task_id]
        task = tasks[task_id]
        best = 0.0
        for parent in task.inputs:
            hop = 0.0
            producer = tasks[parent]
            if producer.site != task.site:
                link = wan.link(producer.site, task.site)
                used, capacity = utilization.get((producer.site, task.site), (0.0, link.bandwidth_mbps))
                hop = link.latency_ms + model.queue_ms(used, capacity)
            best = max(best, reach(parent) + hop)
        memo[task_id] = best + task.delay_ms
        return memo[task_id]

    return max((reach(sink) for sink in query.sinks), default=0.0)


def _r(value: float) -> float:
    return round(value, 6)
