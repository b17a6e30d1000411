"""What a plan would deliver: the running set and a query's plan in the max-min fair flow model.

Backpressure slows every source to the pace of its most contended link,
and with it every query that reads that source, its other paths included
(:mod:`wan.flow`). A plan's own peak utilization sees only the links it
adds to; the throughput the whole running set would deliver with the plan
sees what it does to the queries already running as well.

The model is built from what the optimizer knows: each task's site, its
inputs and its estimated (or measured) output rate. A task's output is
linear in its inputs, with the factor its rates give (output over the sum
of its inputs). A query's throughput is the rate of its sources that its
sinks receive; a sink is a task nothing reads. Load the monitor sees on a
link beyond what the running tasks' streams explain (measured traffic of
other kinds) is taken off the link's capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from planning.model import QueryPlan, QueryTask, RunningTask
from wan.flow import FlowTask, decoupled_rates, max_min_throttles, source_vectors, stream_crossings
from wan.flow_index import FlowIndex, NewTask
from wan.monitor import WanMonitor


def delivered_mbps(
    running: Iterable[RunningTask],
    query: Sequence[QueryTask],
    plan: QueryPlan,
    wan: WanMonitor,
    router: bool,
    scale: float = 1.0,
) -> float:
    """The source Mbps that every sink of the running set and of ``plan`` would receive, summed over sinks;
    ``scale`` multiplies every source's rate and the other traffic on the links (:class:`Contention`, for
    several plans or scales over one running set).

    ``plan`` decides every task of ``query``, parents first (as :func:`scheduler.placement.place` makes it).
    ``running`` may leave tasks out (the manager lists only tasks with a site): an input that is not in it is
    ignored, and a task without any other input counts as a source at its own rate (what it receives is not
    counted). Both plans of a query see the same running set, so the comparison stays fair.

    >>> from wan.topology import parse_wan_config
    >>> wan = WanMonitor(parse_wan_config({"sites": ["x", "y"], "links": [
    ...     {"from": "x", "to": "y", "bandwidth_mbps": 10, "latency_ms": 5}]}))
    >>> running = [RunningTask("s", "sig-s", "source", "x", (), 40.0),
    ...            RunningTask("k", "sig-k", "sink", "y", (("in", "s"),), 40.0)]
    >>> delivered_mbps(running, (), QueryPlan({}), wan, router=True)   # 40 Mbps over a 10 Mbps link
    10.0
    >>> delivered_mbps(running, (), QueryPlan({}), wan.with_loads({("x", "y"): 46.0}), router=True)  # 6 of other traffic
    4.0
    >>> delivered_mbps(running[1:], (), QueryPlan({}), wan, router=True)   # the source unknown: no error, nothing counted
    0.0
    """
    return Contention(running, wan, router).delivered(query, plan, scale)


class Contention:
    """The running set on the WAN, read once, for weighing plans of a query against each other.

    The load the monitor sees on a link beyond what the running tasks' streams explain (other traffic) is
    taken off the link's capacity. Where the monitor's loads are computed from the same tasks and rates (the
    simulator, the manager on estimates) there is none; it matters when a link's load is measured as a whole.
    """

    def __init__(self, running: Iterable[RunningTask], wan: WanMonitor, router: bool,
                 index: FlowIndex | None = None, buffered: bool = False) -> None:
        """``index``, the running set's flow model kept up to date by its owner (with routers), replaces
        reading ``running``: a plan is then weighed in the time of its own size. ``buffered``: hops are
        buffered (:func:`wan.flow.decoupled_rates`; with an index, :meth:`FlowIndex.delivered_buffered`)."""
        self.wan, self.router, self.buffered = wan, router, buffered
        self._capacities: dict[float, Callable[[str, str], float]] = {}
        self.index = index if router else None
        self.rates: dict[str, float] = {}
        self.shape: dict[str, tuple[str, tuple[str, ...]]] = {}
        if self.index is not None:
            explained = self.index.explained()
        else:
            for task in running:
                self.rates[task.id] = task.rate_mbps
                self.shape[task.id] = (task.site, tuple(parent for _, parent in task.inputs))
            explained = {}
            for producer, src, dst in stream_crossings(_flow_tasks(self.rates, self.shape, 1.0), router):
                explained[(src, dst)] = explained.get((src, dst), 0.0) + self.rates[producer]
        extra = {link: load - explained.get(link, 0.0) for link, load in wan.loads.items()}
        self.background = {link: value for link, value in extra.items() if value > 1e-9}

    def _capacity(self, scale: float) -> Callable[[str, str], float]:
        """What is left of each link for the running set's streams at ``scale``: one function per scale, so that
        the index checks its capacities once per scale, not once per plan weighed."""
        if scale not in self._capacities:
            background, wan = self.background, self.wan

            def capacity(src: str, dst: str) -> float:
                return max(0.0, wan.capacity(src, dst) - scale * background.get((src, dst), 0.0))

            self._capacities[scale] = capacity
        return self._capacities[scale]

    def delivered(self, query: Sequence[QueryTask], plan: QueryPlan, scale: float = 1.0) -> float:
        """:func:`delivered_mbps` of ``plan`` on this running set."""
        if self.index is not None and self.buffered:
            return self.index.delivered_buffered(_new_tasks(query, plan), self._capacity(scale), scale)
        if self.index is not None:
            return self.index.delivered(_new_tasks(query, plan), self.wan.capacity, self.background, scale)
        rates, shape = dict(self.rates), dict(self.shape)
        for task in _new_tasks(query, plan):
            rates[task.id] = task.rate_mbps
            shape[task.id] = (task.site, task.inputs)
        tasks = _flow_tasks(rates, shape, scale)
        vectors = source_vectors(tasks)
        coefficients: dict[tuple[str, str], dict[str, float]] = {}
        capacities: dict[tuple[str, str], float] = {}
        for producer, src, dst in stream_crossings(tasks, self.router):
            capacities[(src, dst)] = max(0.0, self.wan.capacity(src, dst) - scale * self.background.get((src, dst), 0.0))
            target = coefficients.setdefault((src, dst), {})
            for source, rate in vectors[producer].items():
                target[source] = target.get(source, 0.0) + rate
        read = {parent for task in tasks.values() for parent in task.inputs}
        sinks = [task_id for task_id, task in tasks.items() if task_id not in read and task.inputs]
        if self.buffered:  # what each sink receives of each source, each crossing at its own pace
            reached, _ = decoupled_rates(tasks, capacities, self.router)
            total = sum((tasks[source].demand_mbps * reached[sink].get(source, 0.0) / full
                        for sink in sinks for source, full in vectors[sink].items() if full > 1e-12), 0.0)
            return round(total, 9)
        sources = [task_id for task_id, task in tasks.items() if not task.inputs]
        throttle = max_min_throttles(coefficients, capacities, sources)
        total = sum((tasks[source].demand_mbps * throttle[source] for sink in sinks for source in vectors[sink]), 0.0)
        return round(total, 9)


def _new_tasks(query: Sequence[QueryTask], plan: QueryPlan) -> list[NewTask]:
    """The tasks ``plan`` starts, parents first, reading running tasks where it reuses them."""
    by_id = {task.id: task for task in query}
    mapping: dict[str, str] = {}
    new: list[NewTask] = []
    for task_id, decision in plan.decisions.items():
        if decision.action == "reuse" and decision.running is not None:
            mapping[task_id] = decision.running
            continue
        task = by_id[task_id]
        mapping[task_id] = f"plan:{task_id}"
        new.append(NewTask(mapping[task_id], decision.site, tuple(mapping[parent] for _, parent in task.inputs),
                           task.rate_mbps or 0.0))
    return new


def _flow_tasks(rates: Mapping[str, float], shape: Mapping[str, tuple[str, tuple[str, ...]]],
                scale: float) -> dict[str, FlowTask]:
    """Tasks (id -> site and input ids, with their rates) as flow tasks. An input that is not among them (a
    running task without a site) is left out; a task left with no input is a source at its own rate."""
    result: dict[str, FlowTask] = {}
    for task_id, (site, given) in shape.items():
        inputs = tuple(parent for parent in given if parent in shape)
        if not inputs:
            result[task_id] = FlowTask(task_id, site, demand_mbps=rates[task_id] * scale)
            continue
        arriving = sum(rates[parent] for parent in inputs)
        result[task_id] = FlowTask(task_id, site, inputs, rates[task_id] / arriving if arriving > 0 else 0.0)
    return result
