"""Sana's Algorithm 1: admit a sharing opportunity only where the WAN has the bandwidth for it.

- IN-OP with running vertex v_i at site S: the output of v_i must also reach
  the sites the new query needs it at. For every such destination D that
  v_i's stream does not reach yet, the link S -> D must have spare egress for
  the extra output O_v (the paper's Delta O).
- IN (co-location at site T): the inputs that do not arrive at T yet must
  fit the spare ingress of their links into T (Delta I), and the new
  vertex's output O_v must fit T's egress towards its destinations.

The destinations of a vertex are the pinned sites (configured sink sites,
declared placements) of the first pinned tasks downstream of it in the query,
and what leaves towards them is the output of the last single-input task
downstream (those follow their input's site; :meth:`PlanContext._exits`).
Crossings only the placement of later tasks reveals are guarded by the
scheduler (a stream of a shared task never oversubscribes a link when
another site can take its consumer) and by the planner, which refuses a
share afterwards if one still would (:func:`optimizer.planner.admit_shares`).
"""

from __future__ import annotations

from planning.context import PlanContext
from planning.model import Admitted, Check, InCandidate, QueryTask, Refusal, RunningTask
from optimizer.opportunities import Opportunities
from wan.monitor import fits


def egress_needs(task: QueryTask, site: str, producer_arrivals: set[str], ctx: PlanContext) -> list[tuple[tuple[str, str], float]]:
    """Links from ``site`` that ``task``'s output would newly cross, with the Mbps each needs."""
    needs = []
    for destination, rate in sorted(ctx.exits[task.id].items()):
        if destination == site or destination in producer_arrivals:
            continue
        needs.append(((site, destination), rate))
    return needs


def check_inop(task: QueryTask, candidate: RunningTask, ctx: PlanContext) -> tuple[list[Check], list[Refusal]]:
    """Algorithm 1, lines 5-9, for one IN-OP candidate."""
    arrivals = set(ctx.arrival_sites((True, candidate.id)))
    checks, refusals = [], []
    for link, needed in egress_needs(task, candidate.site, arrivals, ctx):
        available = ctx.spare(*link)
        if fits(needed, available):
            checks.append(Check("IN-OP", candidate.id, link, needed, available))
        else:
            refusals.append(Refusal("IN-OP", candidate.id, candidate.site, link, needed, available, "egress"))
    return checks, refusals


def check_in(task: QueryTask, candidate: InCandidate, ctx: PlanContext) -> tuple[list[Check], list[Refusal]]:
    """Algorithm 1, lines 10-14, for co-location at one site."""
    checks, refusals = [], []
    ingress: dict[tuple[str, str], float] = {}
    for _, rate, producer_site in candidate.missing:
        link = (producer_site, candidate.site)
        ingress[link] = ingress.get(link, 0.0) + rate
    for link, needed in sorted(ingress.items()):
        available = ctx.spare(*link)
        if fits(needed, available):
            checks.append(Check("IN", candidate.partner, link, needed, available))
        else:
            refusals.append(Refusal("IN", candidate.partner, candidate.site, link, needed, available, "ingress"))
    for link, needed in egress_needs(task, candidate.site, set(), ctx):
        available = ctx.spare(*link)
        if fits(needed, available):
            checks.append(Check("IN", candidate.partner, link, needed, available))
        else:
            refusals.append(Refusal("IN", candidate.partner, candidate.site, link, needed, available, "egress"))
    return checks, refusals


def admit(task: QueryTask, found: Opportunities, ctx: PlanContext) -> Admitted:
    """Algorithm 1 over every opportunity of ``task``; without bandwidth checks everything is admitted."""
    inop: list[tuple[RunningTask, tuple[Check, ...]]] = []
    in_sites: list[tuple[InCandidate, tuple[Check, ...]]] = []
    refused: list[Refusal] = []
    for candidate in found.inop:
        if not ctx.options.bandwidth_checks:
            inop.append((candidate, ()))
            continue
        checks, refusals = check_inop(task, candidate, ctx)
        if refusals:
            refused.extend(refusals)
        else:
            inop.append((candidate, tuple(checks)))
    for candidate in found.in_sites:
        if not ctx.options.bandwidth_checks:
            in_sites.append((candidate, ()))
            continue
        checks, refusals = check_in(task, candidate, ctx)
        if refusals:
            refused.extend(refusals)
        else:
            in_sites.append((candidate, tuple(checks)))
    return Admitted(tuple(inop), tuple(in_sites), tuple(refused))
