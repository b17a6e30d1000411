"""Plan a new query against the running set: Algorithm 1 then Algorithm 2, vertex by vertex.

:func:`plan_query` is what the manager calls on a submit (with Sana's
options) and what the simulator calls for every policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from optimizer.algorithm1 import Admitted, admit
from optimizer.context import PlanContext
from optimizer.model import SANA, Decision, PlanningOptions, QueryPlan, QueryTask, Refusal, RunningView
from optimizer.opportunities import find_opportunities
from scheduler.exceptions import PlacementImpossible
from scheduler.placement import schedule
from wan_sim.monitor import WanMonitor, fits


def plan_query(
    query: Sequence[QueryTask],
    running: RunningView,
    wan: WanMonitor,
    options: PlanningOptions = SANA,
    forced: Mapping[str, str] | None = None,
) -> QueryPlan:
    """Decide, for every task of ``query`` (parents first, de-duplicated), whether to reuse or create it, and where.

    Sources are pinned at their origin and read through the running source
    task when there is one (``share_sources``). Every other vertex gets its
    IN-OP and IN opportunities (:mod:`optimizer.opportunities`), Algorithm 1
    admits those the WAN can carry (:mod:`optimizer.algorithm1`) and
    Algorithm 2 places it (:mod:`scheduler.placement`). Loads the plan adds
    are seen by the decisions that follow.

    Algorithm 1 checks an IN-OP share against the links to the query's
    pinned destinations. A share can also overflow a link that only the
    placement of its consumers reveals (a consumer joining it with a stream
    from another site); the plan is then made again with that share refused,
    its reason naming the link. Each round refuses one more share, so this
    ends after at most as many rounds as the query has tasks.

    Algorithm 1 refuses a share to avoid contention. Not sharing means a
    copy of the vertex, whose inputs must then reach another site; where
    bandwidth is scarce everywhere those inputs (raw streams, larger than the
    shared output) contend too, and the refusal adds load instead of taking
    it off. So when Algorithm 1 refused something, the plan that takes every
    share is made as well, and the refusals are kept only if they press the
    WAN no harder (:func:`pressure`: the highest utilization of a link the
    plan adds to, then the Mbps it adds beyond spare bandwidth); otherwise the
    sharing plan wins and the refusals are reported as ``overruled``
    (``PlanningOptions.weigh_refusals``; docs/wan.md, "Why Sana lost to
    Max-Share").

    ``forced`` maps query tasks onto running tasks they must reuse whatever
    the bandwidth (the manager forces the ancestors of a sink that already
    runs: its output exists, and a second writer of its topic would
    duplicate it).

    Raises :class:`~scheduler.exceptions.PlacementImpossible` when a task
    cannot be placed (a source without a site, no reachable compute site).

    >>> from wan_sim.topology import parse_wan_config
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
    forced = dict(forced or {})
    plan = _plan_checked(query, running, wan, options, forced)
    if not (options.bandwidth_checks and options.weigh_refusals and plan.refusals):
        return plan
    sharing = _plan_once(query, running, wan, replace(options, bandwidth_checks=False), {}, forced)
    if pressure(sharing, wan) < pressure(plan, wan):
        return replace(sharing, compared=plan.compared, skipped=plan.skipped, overruled=tuple(plan.refusals))
    return plan


def pressure(plan: QueryPlan, wan: WanMonitor) -> tuple[float, float]:
    """How hard ``plan`` presses on the WAN, lower is better: the highest utilization (load / capacity) of a
    link it adds to (backpressure slows a source to its most contended link), then the Mbps it adds beyond
    spare bandwidth in all.

    >>> from wan_sim.topology import parse_wan_config
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


def _plan_checked(
    query: Sequence[QueryTask],
    running: RunningView,
    wan: WanMonitor,
    options: PlanningOptions,
    forced: Mapping[str, str],
) -> QueryPlan:
    """Algorithms 1 and 2, made again with a share refused while a share's stream overflows a link."""
    vetoed: dict[str, dict[str, Refusal]] = {}
    while True:
        plan = _plan_once(query, running, wan, options, vetoed, forced)
        if not options.bandwidth_checks:
            return plan
        overflow = first_shared_overflow(plan, wan, set(forced))
        if overflow is None:
            return plan
        task_id, refusal = overflow
        if refusal.candidate in vetoed.get(task_id, {}):
            return plan
        vetoed.setdefault(task_id, {})[refusal.candidate] = refusal


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


def _plan_once(
    query: Sequence[QueryTask],
    running: RunningView,
    wan: WanMonitor,
    options: PlanningOptions,
    vetoed: dict[str, dict[str, Refusal]],
    forced: Mapping[str, str],
) -> QueryPlan:
    ctx = PlanContext(query, running, wan, options)
    decisions: dict[str, Decision] = {}
    compared = skipped = 0
    for task_id in ctx.order:
        task = ctx.query[task_id]
        if task_id in forced:
            decision = Decision(task_id, "reuse", running.task(forced[task_id]).site, "IN-OP", running=forced[task_id])
        elif not task.inputs:
            decision = _source(task, ctx)
        else:
            found = find_opportunities(task, ctx)
            if options.share_inop:
                compared += found.compared
                skipped += not found.compared
            admitted = admit(task, found, ctx)
            if task_id in vetoed:
                admitted = _veto(admitted, vetoed[task_id])
            admitted_ids = {candidate.id for candidate, _ in admitted.inop}
            refused_inop = tuple(candidate for candidate in found.inop if candidate.id not in admitted_ids)
            decision = schedule(task, admitted, refused_inop, ctx)
        decisions[task_id] = decision
        if decision.action == "reuse":
            ctx.mapping[task_id] = (True, decision.running)
            if decision.rule == "IN-OP":
                ctx.shared.add((True, decision.running))
        else:
            ctx.mapping[task_id] = (False, task_id)
            ctx.new_sites[task_id] = decision.site
            for _, ref in ctx.input_refs(task):
                ctx.connect(ref, task_id, decision.site)
        for check in decision.checks:
            if check.link[0] == decision.site:
                ctx.reserve(ctx.mapping[task_id], check.link, check.needed_mbps)
    return QueryPlan(decisions, tuple(ctx.crossings), dict(ctx.delta), compared, skipped)


def _source(task: QueryTask, ctx: PlanContext) -> Decision:
    if ctx.options.share_sources:
        running = sorted(ctx.running.instances(task.signature), key=lambda candidate: candidate.id)
        if running:
            return Decision(task.id, "reuse", running[0].site, "source", running=running[0].id)
    if task.site is None:
        raise PlacementImpossible(f"source {task.id!r} has no site: declare one or name its topic in the WAN configuration",
                                  culprit={"task": task.id})
    return Decision(task.id, "create", task.site, "source")
