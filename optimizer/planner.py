"""Algorithm 1 over a query: which sharing opportunities to take, given the WAN.

The submit path is staged: the manager's reuse plan gives the query's
vertices; :func:`admit_shares` (this module) says which shares each vertex
may take, an :class:`Admissions` value; the scheduler places the query from
it (:func:`scheduler.placement.place`, Algorithm 2). Re-placement runs the
same two stages on the running set. :func:`plan_query` is the two stages in
one call (the simulator and the tests use it).

Admission reads the spare bandwidth after the placement of the vertices
before it (an admitted share must not count on bandwidth an earlier vertex
of the same query took), and some overflows only show once the consumers of
a share are placed; so the optimizer makes trial placements with the
scheduler while it decides, and hands over what it admitted in the trial it
kept. Placing from those admissions gives that trial's plan again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from optimizer.admission import admit
from optimizer.contention import Contention
from planning.model import (PRIVATE_GAIN, SANA, Admitted, PlanningOptions, QueryPlan, QueryTask, Refusal, RunningTask,
                            RunningView, VertexAdmission, Weighing)
from optimizer.opportunities import find_opportunities
from optimizer.rates import with_rates
from planning.context import PlanContext
from scheduler.placement import place
from wan.monitor import WanMonitor, fits

HEADROOM = 2.0
"""The traffic growth :func:`standing` checks a plan against, as a multiple of today's rates."""


@dataclass(frozen=True)
class Admissions:
    """Algorithm 1's decisions for a query: the value the scheduler places it from.

    ``query`` has every rate filled in; ``vertices`` maps each vertex that is
    neither a source nor forced onto what Algorithm 1 admitted for it;
    ``options`` are those of the admission kept (without bandwidth checks when
    the weighing took the plan with every share: ``overruled`` then lists
    Algorithm 1's refusals, and is empty when only its placement lost);
    ``weighing`` says how the two plans stood, when they were weighed;
    ``compared`` / ``skipped`` count IN-OP comparisons made and skipped by
    early termination.
    """

    query: tuple[QueryTask, ...]
    options: PlanningOptions
    forced: Mapping[str, str] = field(default_factory=dict)
    vertices: Mapping[str, VertexAdmission] = field(default_factory=dict)
    compared: int = 0
    skipped: int = 0
    overruled: tuple[tuple[str, Refusal], ...] = ()
    weighing: Weighing | None = None

    def for_vertex(self, task: QueryTask, ctx: PlanContext) -> VertexAdmission:
        return self.vertices[task.id]


class _Trial:
    """Algorithm 1 run live during a trial placement, recording what it answered."""

    def __init__(self, query: tuple[QueryTask, ...], options: PlanningOptions, forced: Mapping[str, str],
                 vetoed: Mapping[str, Mapping[str, Refusal]]) -> None:
        self.query, self.options, self.forced, self.vetoed = query, options, forced, vetoed
        self.vertices: dict[str, VertexAdmission] = {}
        self.compared = self.skipped = 0
        self.overruled: tuple[tuple[str, Refusal], ...] = ()
        self.weighing: Weighing | None = None

    def for_vertex(self, task: QueryTask, ctx: PlanContext) -> VertexAdmission:
        found = find_opportunities(task, ctx)
        if self.options.share_inop:
            self.compared += found.compared
            self.skipped += not found.compared
        admitted = admit(task, found, ctx)
        if task.id in self.vetoed:
            admitted = _veto(admitted, self.vetoed[task.id])
        admitted_ids = {candidate.id for candidate, _ in admitted.inop}
        refused_inop = tuple(candidate for candidate in found.inop if candidate.id not in admitted_ids)
        vertex = VertexAdmission(admitted, refused_inop, found.compared)
        self.vertices[task.id] = vertex
        return vertex

    def admissions(self, **changes) -> Admissions:
        kept = Admissions(self.query, self.options, dict(self.forced), dict(self.vertices), self.compared, self.skipped)
        return replace(kept, **changes)


def admit_shares(
    query: Sequence[QueryTask],
    running: RunningView,
    wan: WanMonitor,
    options: PlanningOptions = SANA,
    forced: Mapping[str, str] | None = None,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> Admissions:
    """Decide which sharing opportunities each vertex of ``query`` (parents first, de-duplicated) may take.

    A vertex without a rate gets its estimate (:func:`optimizer.rates.with_rates`;
    ``configs`` holds the task configurations, a source's rate is its topic's).
    Every vertex but the sources gets its IN-OP and IN opportunities
    (:mod:`optimizer.opportunities`), and Algorithm 1 admits those the WAN can
    carry (:mod:`optimizer.admission`).

    Algorithm 1 checks an IN-OP share against the links to the query's
    pinned destinations. A share can also overflow a link that only the
    placement of its consumers reveals (a consumer joining it with a stream
    from another site); the share is then refused, its reason naming the
    link, and the query placed again. Each round refuses one more share, so
    this ends after at most as many rounds as the query has tasks.

    Algorithm 1 refuses a share to avoid contention. Not sharing means a
    copy of the vertex, whose inputs must then reach another site; where
    bandwidth is scarce everywhere those inputs (raw streams, larger than the
    shared output) contend too, and the refusal adds load instead of taking
    it off. Algorithm 2's placement, which sees the bandwidth admitted shares
    reserve, can likewise crowd a link that taking every share would leave
    alone. So the query is also placed taking every share, bandwidth
    unchecked, and the two plans are weighed (:func:`standing`): the one
    under which the running set and the query would deliver more, by the
    flow model (:mod:`optimizer.contention`), wins; on a tie, the one adding
    less WAN traffic, then the one pressing the WAN less (:func:`pressure`).
    Algorithm 1's plan is kept unless taking every share is strictly better;
    otherwise its refusals are reported as ``overruled``
    (``PlanningOptions.weigh_refusals``; docs/wan.md, "Why Sana lost to
    Max-Share").

    Sharing can also lose as a whole: a running reader whose stream crosses
    a slow link is held back by that link's backpressure, and so is every
    query sharing it, wherever its own sinks are. So the query is placed a
    third way, privately (its own source readers and tasks, sharing nothing
    running: :meth:`PlanningOptions.private`, as NET plans it). That plan
    runs again what already runs, so it is kept only when the running set
    and the query would deliver at least :data:`planning.model.PRIVATE_GAIN`
    (:data:`~planning.model.PRIVATE_GAIN_BUFFERED` with buffered hops) times
    what the better sharing plan delivers today (docs/wan.md, "Not sharing is
    weighed too").

    ``forced`` maps query tasks onto running tasks they must reuse whatever
    the bandwidth (the manager forces the ancestors of a sink that already
    runs: its output exists, and a second writer of its topic would
    duplicate it).

    Raises :class:`~scheduler.exceptions.PlacementImpossible` when a trial
    placement cannot place a task.
    """
    query = with_rates(query, wan.config, configs)
    forced = dict(forced or {})
    trial, plan = _admit_checked(query, running, wan, options, forced)
    if not (options.bandwidth_checks and options.weigh_refusals):
        return trial.admissions()
    sharing_trial, sharing = _try(query, running, wan, replace(options, bandwidth_checks=False), {}, forced)
    index = running.flow_index() if options.router else None
    contention = Contention(() if index is not None else running.running_tasks(), wan, options.router, index,
                            buffered=options.buffered_hops)
    every_share, algorithm_1 = _standing(sharing, query, contention, wan), _standing(plan, query, contention, wan)
    private_trial, private = _try(query, running, wan, options.private(), {}, forced)
    alone = _standing(private, query, contention, wan)
    if _private_pays(alone, min(algorithm_1, every_share), options.private_gain):
        return private_trial.admissions(compared=trial.compared, skipped=trial.skipped,
                                        weighing=Weighing("private", algorithm_1, every_share, alone))
    if every_share < algorithm_1:
        return sharing_trial.admissions(compared=trial.compared, skipped=trial.skipped, overruled=tuple(plan.refusals),
                                        weighing=Weighing("every share", algorithm_1, every_share, alone))
    return trial.admissions(weighing=Weighing("algorithm 1", algorithm_1, every_share, alone))


def _private_pays(private: tuple[float, ...], shared: tuple[float, ...], gain: float = PRIVATE_GAIN) -> bool:
    """Whether the private plan's standing beats the better sharing plan's by what running again costs: it
    delivers at least ``gain`` (:attr:`PlanningOptions.private_gain`) times as much today (standings are negated).

    >>> _private_pays((-25.0, -30.0, 20.0), (-10.0, -20.0, 0.0)), _private_pays((-10.4, -40.0, 0.0), (-10.0, -20.0, 0.0))
    (True, False)
    >>> _private_pays((-10.4, -40.0, 0.0), (-10.0, -20.0, 0.0), gain=1.02)
    True
    """
    return -private[0] > gain * -shared[0] + 1e-9


def plan_query(
    query: Sequence[QueryTask],
    running: RunningView,
    wan: WanMonitor,
    options: PlanningOptions = SANA,
    forced: Mapping[str, str] | None = None,
) -> QueryPlan:
    """Decide, for every task of ``query`` (parents first, de-duplicated), whether to reuse or create it, and where:
    :func:`admit_shares`, then :func:`scheduler.placement.place`.

    Raises :class:`~scheduler.exceptions.PlacementImpossible` when a task
    cannot be placed (a source without a site, no reachable compute site).

    >>> from wan.topology import parse_wan_config
    >>> from optimizer.views import EmptyRunning
    >>> wan = WanMonitor(parse_wan_config({"sites": [{"name": "x", "compute": False}, "a", "b"],
    ...     "links": [{"from": "x", "to": "a", "bandwidth_mbps": 100, "latency_ms": 10},
    ...               {"from": "x", "to": "b", "bandwidth_mbps": 100, "latency_ms": 50},
    ...               {"from": "a", "to": "b", "bandwidth_mbps": 100, "latency_ms": 40}]}))
    >>> query = [QueryTask("s", "sig-s", "source", rate_mbps=10, site="x"),
    ...          QueryTask("f", "sig-f", "filter", (("in", "s"),), rate_mbps=5),
    ...          QueryTask("k", "sig-k", "sink", (("in", "f"),), rate_mbps=5, site="b")]
    >>> plan = plan_query(query, EmptyRunning(), wan)
    >>> [(d.task, d.action, d.site, d.rule) for d in plan.decisions.values()]
    [('s', 'create', 'x', 'source'), ('f', 'create', 'a', 'wan'), ('k', 'create', 'b', 'pinned')]
    >>> plan.link_delta
    {('x', 'a'): 10.0, ('a', 'b'): 5.0}
    """
    return place(admit_shares(query, running, wan, options, forced), running, wan)


def standing(plan: QueryPlan, query: Sequence[QueryTask], running: Sequence[RunningTask], wan: WanMonitor,
             router: bool) -> tuple[float, ...]:
    """How good ``plan`` is on the WAN, lower is better. First what the sinks of the running set and of the
    query would receive with it (:func:`optimizer.contention.delivered_mbps`, negated), at today's rates and
    then at :data:`HEADROOM` times them (a plan that still delivers when traffic grows leaves room for the
    queries to come); then the Mbps it adds to the WAN (what later queries will lack); then the query's
    latency (:func:`path_latency_ms`: of plans delivering as much for the same bandwidth, the faster wins);
    then :func:`pressure`. Rounded, so that plans that do the same compare equal.

    >>> from planning.model import Decision
    >>> from wan.topology import parse_wan_config
    >>> monitor = WanMonitor(parse_wan_config({"sites": ["a", "b"], "links": [
    ...     {"from": "a", "to": "b", "bandwidth_mbps": 30, "latency_ms": 5}]}))
    >>> query = (QueryTask("s", "sig-s", "source", rate_mbps=20.0, site="a"),
    ...          QueryTask("k", "sig-k", "sink", (("in", "s"),), rate_mbps=20.0, site="b"))
    >>> plan = QueryPlan({"s": Decision("s", "create", "a", "source"), "k": Decision("k", "create", "b", "pinned")},
    ...                  link_delta={("a", "b"): 20.0})
    >>> standing(plan, query, (), monitor, router=True)   # all 20 Mbps arrive; of 40, 30; over a 5 ms link
    (-20.0, -30.0, 20.0, 5.0, 0.666666667, 0.0)
    """
    return _standing(plan, query, Contention(running, wan, router), wan)


def _standing(plan: QueryPlan, query: Sequence[QueryTask], contention: Contention, wan: WanMonitor) -> tuple[float, ...]:
    delivered = (-round(contention.delivered(query, plan, scale), 6) for scale in (1.0, HEADROOM))
    return (*delivered, round(sum(plan.link_delta.values()), 6), path_latency_ms(plan, query, wan), *pressure(plan, wan))


def path_latency_ms(plan: QueryPlan, query: Sequence[QueryTask], wan: WanMonitor) -> float:
    """The query's longest source-to-sink path under ``plan``: the one-way latency of every link it crosses
    (queueing is the flow model's; here the links alone). ``query`` is parents first.

    >>> from planning.model import Decision
    >>> from wan.topology import parse_wan_config
    >>> monitor = WanMonitor(parse_wan_config({"sites": ["a", "b", "c"], "links": [
    ...     {"from": "a", "to": "b", "bandwidth_mbps": 30, "latency_ms": 5},
    ...     {"from": "b", "to": "c", "bandwidth_mbps": 30, "latency_ms": 7},
    ...     {"from": "a", "to": "c", "bandwidth_mbps": 30, "latency_ms": 20}]}))
    >>> query = (QueryTask("s", "sig-s", "source", site="a"), QueryTask("f", "sig-f", "filter", (("in", "s"),)),
    ...          QueryTask("k", "sig-k", "sink", (("in", "f"),), site="c"))
    >>> def at(site):
    ...     return QueryPlan({"s": Decision("s", "create", "a", "source"), "f": Decision("f", "create", site, "wan"),
    ...                       "k": Decision("k", "create", "c", "pinned")})
    >>> path_latency_ms(at("b"), query, monitor), path_latency_ms(at("a"), query, monitor)
    (12.0, 20.0)
    """
    reached: dict[str, float] = {}
    sites: dict[str, str | None] = {}
    read: set[str] = set()
    for task in query:
        decision = plan.decisions.get(task.id)
        sites[task.id] = decision.site if decision is not None else task.site
        longest = 0.0
        for _, parent in task.inputs:
            read.add(parent)
            src, dst = sites.get(parent), sites[task.id]
            link = wan.config.link(src, dst) if src is not None and dst is not None else None
            longest = max(longest, reached.get(parent, 0.0) + (link.latency_ms if link is not None else 0.0))
        reached[task.id] = longest
    return round(max((value for task_id, value in reached.items() if task_id not in read), default=0.0), 6)


def pressure(plan: QueryPlan, wan: WanMonitor) -> tuple[float, float]:
    """How hard ``plan`` presses on the WAN, lower is better: the highest utilization (load / capacity) of a
    link it adds to (backpressure slows a source to its most contended link), then the Mbps it adds beyond
    spare bandwidth in all.

    >>> from wan.topology import parse_wan_config
    >>> monitor = WanMonitor(parse_wan_config({"sites": ["a", "b"], "links": [
    ...     {"from": "a", "to": "b", "bandwidth_mbps": 10, "latency_ms": 5}]}), {("a", "b"): 6.0})
    >>> pressure(QueryPlan({}, link_delta={("a", "b"): 8.0}), monitor)
    (1.4, 4.0)
    """
    peak = excess = 0.0
    for link, added in plan.link_delta.items():
        capacity, spare = wan.capacity(*link), wan.spare(*link)
        peak = max(peak, (capacity - spare + added) / capacity if capacity > 0 else math.inf)
        excess += max(0.0, added - max(spare, 0.0))
    return round(peak, 9), round(excess, 9)


def _admit_checked(
    query: tuple[QueryTask, ...],
    running: RunningView,
    wan: WanMonitor,
    options: PlanningOptions,
    forced: Mapping[str, str],
) -> tuple[_Trial, QueryPlan]:
    """Algorithm 1, with a share refused and the query placed again while a share's stream overflows a link."""
    vetoed: dict[str, dict[str, Refusal]] = {}
    while True:
        trial, plan = _try(query, running, wan, options, vetoed, forced)
        if not options.bandwidth_checks:
            return trial, plan
        overflow = first_shared_overflow(plan, wan, set(forced))
        if overflow is None:
            return trial, plan
        task_id, refusal = overflow
        if refusal.candidate in vetoed.get(task_id, {}):
            return trial, plan
        vetoed.setdefault(task_id, {})[refusal.candidate] = refusal


def _try(
    query: tuple[QueryTask, ...],
    running: RunningView,
    wan: WanMonitor,
    options: PlanningOptions,
    vetoed: Mapping[str, Mapping[str, Refusal]],
    forced: Mapping[str, str],
) -> tuple[_Trial, QueryPlan]:
    trial = _Trial(query, options, forced, vetoed)
    return trial, place(trial, running, wan)


def first_shared_overflow(plan: QueryPlan, wan: WanMonitor, exempt: set[str] = frozenset()) -> tuple[str, Refusal] | None:
    """The first crossing of ``plan`` from an IN-OP-shared task that a link cannot carry, with its query task.

    Crossings are replayed in the order the plan made them, on top of the
    monitor's loads. Query tasks in ``exempt`` (forced shares) are not blamed.
    """
    shared = {decision.running: task_id for task_id, decision in plan.decisions.items()
              if decision.rule == "IN-OP" and task_id not in exempt}
    added: dict[tuple[str, str], float] = {}
    for crossing in plan.crossings:
        link = (crossing.src_site, crossing.dst_site)
        before = added.get(link, 0.0)
        added[link] = before + crossing.rate_mbps
        if crossing.running and crossing.producer in shared:
            available = wan.spare(*link) - before
            if not fits(crossing.rate_mbps, available):
                refusal = Refusal("IN-OP", crossing.producer, crossing.src_site, link, crossing.rate_mbps, available, "egress")
                return shared[crossing.producer], refusal
    return None


def _veto(admitted: Admitted, vetoes: dict[str, Refusal]) -> Admitted:
    keep = tuple(item for item in admitted.inop if item[0].id not in vetoes)
    refused = admitted.refused + tuple(vetoes[item[0].id] for item in admitted.inop if item[0].id in vetoes)
    return Admitted(keep, admitted.in_sites, refused)
