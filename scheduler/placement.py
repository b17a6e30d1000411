"""Sana's Algorithm 2: place a query, vertex by vertex, given what Algorithm 1 admitted.

:func:`place` walks the query parents first; :func:`schedule` places one
vertex. For each vertex, in order: an admitted IN-OP share (the running vertex serves the query; the
one adding the least WAN cost wins); a pinned site; an admitted IN
co-location (the site sharing the most input Mbps wins); site locality when
all inputs are produced at one compute site; else the WAN-aware rule, the
compute site minimizing Hourglass's sum over the links it uses of
DR * Lat^2 / BW (BW the spare bandwidth). WAN-unaware planners (Flink's
default, the Default and MQO baselines) instead take the first input's
site, or the query's destination when that input's site cannot compute.

A vertex whose IN-OP share was refused is not copied at the shared
candidate's own site (that copy would send the same output over the same
thin link): locality yields to the WAN-aware rule, which avoids that site.
Only when no other site can take it (or it is pinned there) does the vertex
reuse the candidate after all, rather than duplicate it in place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from planning.model import (Admitted, Decision, PlanningOptions, QueryPlan, QueryTask, Ref, Refusal, RunningTask, RunningView,
                             VertexAdmission, Weighing)
from planning.context import PlanContext
from scheduler.exceptions import PlacementImpossible
from wan.monitor import WanMonitor, fits


class AdmissionSource(Protocol):
    """What the scheduler places a query from: the query, the planning options, the shares forced on it and
    Algorithm 1's answer for each vertex (the optimizer's :class:`optimizer.planner.Admissions`, or its trial
    that runs Algorithm 1 while the scheduler places)."""

    query: Sequence[QueryTask]
    options: PlanningOptions
    forced: Mapping[str, str]
    compared: int
    skipped: int
    overruled: tuple[tuple[str, Refusal], ...]
    weighing: Weighing | None

    def for_vertex(self, task: QueryTask, ctx: PlanContext) -> VertexAdmission: ...


#: Bandwidth used in the cost of a link with no spare bandwidth (Mbps), so the cost stays finite but large.
MIN_BANDWIDTH = 1e-6


@dataclass(frozen=True)
class SiteCost:
    """The Hourglass cost of running a vertex at ``site``.

    ``overloaded`` counts the links it would oversubscribe; ``forbidden``
    those where the oversubscribing stream comes from an IN-OP-shared task
    (Algorithm 1's promise: a share never exceeds a link's spare egress).
    """

    site: str
    overloaded: int
    cost: float
    forbidden: int = 0

    @property
    def key(self) -> tuple[int, int, float]:
        return (self.forbidden, self.overloaded, self.cost)


def hourglass_term(rate_mbps: float, latency_ms: float, bandwidth_mbps: float) -> float:
    """DR * Lat^2 / BW for one link.

    >>> hourglass_term(10, 20, 100)
    40.0
    """
    return rate_mbps * latency_ms ** 2 / max(bandwidth_mbps, MIN_BANDWIDTH)


def site_cost(task: QueryTask, site: str, ctx: PlanContext, avoid: frozenset[str] = frozenset()) -> SiteCost | None:
    """Cost of placing ``task`` at ``site``: its inputs that must cross, and its output to its destinations.

    None when an input or a destination cannot reach the site at all. A site
    in ``avoid`` (where an equivalent task runs whose share Algorithm 1
    refused: a copy there would be that share) counts as forbidden.
    """
    needs: dict[tuple[str, str], float] = {}
    from_shared: set[tuple[str, str]] = set()
    seen: set[Ref] = set()
    for _, ref in ctx.input_refs(task):
        if ref in seen and ctx.options.router:
            continue
        seen.add(ref)
        if ctx.available_at(ref, site):
            continue
        producer_site = ctx.ref_site(ref)
        if not ctx.wan.reachable(producer_site, site):
            return None
        link = (producer_site, site)
        needs[link] = needs.get(link, 0.0) + ctx.ref_rate(ref)
        if ref in ctx.shared:
            from_shared.add(link)
    for destination, rate in ctx.exits[task.id].items():
        if destination == site:
            continue
        if not ctx.wan.reachable(site, destination):
            return None
        link = (site, destination)
        needs[link] = needs.get(link, 0.0) + rate
    overloaded = forbidden = 0
    cost = 0.0
    for link, rate in needs.items():
        spare = ctx.spare(*link)
        if not fits(rate, spare):
            overloaded += 1
            forbidden += link in from_shared
        cost += hourglass_term(rate, ctx.wan.latency(*link), spare)
    return SiteCost(site, overloaded, cost, forbidden + (site in avoid))


def wan_aware_site(task: QueryTask, ctx: PlanContext, avoid: frozenset[str] = frozenset()) -> SiteCost:
    """The compute site of least Hourglass cost, preferring sites that oversubscribe no link
    (and above all none with the stream of an IN-OP-shared task).

    Raises :class:`PlacementImpossible` when no compute site is reachable from every input.
    """
    best: SiteCost | None = None
    for site in ctx.wan.compute_sites:
        cost = site_cost(task, site, ctx, avoid)
        if cost is not None and (best is None or cost.key < best.key):
            best = cost
    if best is None:
        inputs = sorted({ctx.ref_site(ref) for _, ref in ctx.input_refs(task)})
        raise PlacementImpossible(
            f"task {task.id!r} ({task.type}): no compute site is reachable from its input sites {inputs} "
            f"(compute sites: {', '.join(ctx.wan.compute_sites) or 'none'})",
            culprit={"task": task.id},
        )
    return best


def default_site(task: QueryTask, ctx: PlanContext) -> str:
    """WAN-unaware placement (Flink's default): the first input's site, else the destination, else any."""
    refs = [ref for _, ref in ctx.input_refs(task)]
    first = ctx.ref_site(refs[0])
    candidates = [first] + sorted(ctx.dests[task.id]) + list(ctx.wan.compute_sites)
    for site in candidates:
        if ctx.wan.can_compute(site) and site_cost(task, site, ctx) is not None:
            return site
    return wan_aware_site(task, ctx).site


def local_site(task: QueryTask, ctx: PlanContext) -> str | None:
    """The compute site producing every input, if there is one (site locality)."""
    sites = {ctx.ref_site(ref) for _, ref in ctx.input_refs(task)}
    if len(sites) == 1:
        site = sites.pop()
        if ctx.wan.can_compute(site):
            return site
    return None


def _inop_cost(task: QueryTask, candidate: RunningTask, ctx: PlanContext) -> float:
    arrivals = set(ctx.arrival_sites((True, candidate.id)))
    cost = 0.0
    for destination, rate in ctx.exits[task.id].items():
        if destination != candidate.site and destination not in arrivals:
            link = (candidate.site, destination)
            cost += hourglass_term(rate, ctx.wan.latency(*link), ctx.spare(*link))
    return cost


def schedule(task: QueryTask, admitted: Admitted, refused_inop: tuple[RunningTask, ...], ctx: PlanContext) -> Decision:
    """Algorithm 2 for one non-source vertex: a :class:`Decision` (reuse or create, the site, the rule)."""
    refused = admitted.refused
    if admitted.inop:
        candidate, checks = min(admitted.inop, key=lambda item: (_inop_cost(task, item[0], ctx), item[0].id))
        return Decision(task.id, "reuse", candidate.site, "IN-OP", running=candidate.id, refused=refused, checks=checks)
    avoid = frozenset(candidate.site for candidate in refused_inop)
    in_sites = tuple(item for item in admitted.in_sites if item[0].site not in avoid)
    if task.site is not None:
        _check_pinned(task, ctx)
        site, rule, partner, shared, checks = task.site, "pinned", None, (), ()
    elif in_sites:
        def in_key(item):
            candidate = item[0]
            cost = site_cost(task, candidate.site, ctx)
            return (-candidate.shared_rate, math.inf if cost is None else cost.cost, candidate.site)

        candidate, checks = min(in_sites, key=in_key)
        site, rule, partner = candidate.site, "IN", candidate.partner
        shared = tuple(ref[1] for ref in candidate.shared)
    else:
        partner, shared, checks = None, (), ()
        site = local_site(task, ctx)
        rule = "locality"
        if site in avoid and ctx.options.wan_placement:
            site = None
        if site is None:
            if ctx.options.wan_placement:
                site, rule = wan_aware_site(task, ctx, avoid).site, "wan"
            else:
                site, rule = default_site(task, ctx), "default"
    for candidate in refused_inop:
        if candidate.site == site:
            return Decision(task.id, "reuse", site, "IN-OP", running=candidate.id, refused=refused)
    return Decision(task.id, "create", site, rule, partner=partner, shared_inputs=shared, refused=refused, checks=checks)


def _check_pinned(task: QueryTask, ctx: PlanContext) -> None:
    site = task.site
    for _, ref in ctx.input_refs(task):
        producer_site = ctx.ref_site(ref)
        if not ctx.wan.reachable(producer_site, site):
            raise PlacementImpossible(
                f"task {task.id!r} ({task.type}) is pinned at {site!r}, which its input from {producer_site!r} cannot reach",
                culprit={"task": task.id},
            )


def place(admissions: AdmissionSource, running: RunningView, wan: WanMonitor) -> QueryPlan:
    """Algorithm 2 over a whole query, parents first: a :class:`QueryPlan` with one decision per vertex.

    Sources are pinned at their origin and read through the running source
    task when there is one (``share_sources``); a forced vertex reuses its
    running task; every other vertex is placed by :func:`schedule` from what
    Algorithm 1 admitted for it. Loads the plan adds are seen by the decisions
    that follow, and an admitted share holds the bandwidth it was admitted
    on until its consumers are placed (:meth:`PlanContext.reserve`).

    Raises :class:`PlacementImpossible` when a task cannot be placed (a
    source without a site, no reachable compute site).
    """
    ctx = PlanContext(admissions.query, running, wan, admissions.options)
    decisions: dict[str, Decision] = {}
    for task_id in ctx.order:
        task = ctx.query[task_id]
        if task_id in admissions.forced:
            forced = admissions.forced[task_id]
            decision = Decision(task_id, "reuse", running.task(forced).site, "IN-OP", running=forced)
        elif not task.inputs:
            decision = _source(task, ctx)
        else:
            vertex = admissions.for_vertex(task, ctx)
            decision = schedule(task, vertex.admitted, vertex.refused_inop, ctx)
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
    return QueryPlan(decisions, tuple(ctx.crossings), dict(ctx.delta), admissions.compared, admissions.skipped,
                     admissions.overruled, admissions.weighing)


def _source(task: QueryTask, ctx: PlanContext) -> Decision:
    if ctx.options.share_sources:
        running = sorted(ctx.running.instances(task.signature), key=lambda candidate: candidate.id)
        if running:
            return Decision(task.id, "reuse", running[0].site, "source", running=running[0].id)
    if task.site is None:
        raise PlacementImpossible(f"source {task.id!r} has no site: declare one or name its topic in the WAN configuration",
                                  culprit={"task": task.id})
    return Decision(task.id, "create", task.site, "source")
