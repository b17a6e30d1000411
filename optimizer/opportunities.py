"""Sharing opportunities of one query vertex (Sana 4.1-4.2), found vertex by vertex in topological order.

- IN-OP: a running task with the same signature that reads exactly the same
  input streams. Because vertices are visited parents first, a vertex whose
  parent was not IN-OP-shared has inputs no running task reads: it is not
  compared at all (early termination: none of its descendants can be
  equivalent to a running vertex through those inputs).
- IN (partial input sharing): a site where at least one of the vertex's
  input streams already arrives for another consumer. Co-locating there
  reads those inputs through that site's router, without a second WAN
  crossing; the inputs that do not arrive there yet must cross.
"""

from __future__ import annotations

from dataclasses import dataclass

from planning.model import InCandidate, QueryTask, RunningTask
from planning.context import PlanContext


@dataclass(frozen=True)
class Opportunities:
    """What vertex ``task`` could share. ``compared`` is False when early termination skipped IN-OP."""

    task: str
    inop: tuple[RunningTask, ...] = ()
    in_sites: tuple[InCandidate, ...] = ()
    compared: bool = True


def inop_candidates(task: QueryTask, ctx: PlanContext) -> tuple[tuple[RunningTask, ...], bool]:
    """Running tasks equivalent to ``task`` that read the same streams; and whether any were compared.

    Worked cases are in ``tests/optimizer/test_planner.py``.
    """
    refs = ctx.input_refs(task)
    if not all(ref[0] for _, ref in refs):
        return (), False
    wanted = tuple(sorted((port, ref[1]) for port, ref in refs))
    found = tuple(
        sorted(
            (candidate for candidate in ctx.running.instances(task.signature)
             if tuple(sorted(candidate.inputs)) == wanted),
            key=lambda candidate: candidate.id,
        )
    )
    return found, True


def in_candidates(task: QueryTask, ctx: PlanContext) -> tuple[InCandidate, ...]:
    """Sites where some of ``task``'s inputs already arrive (through a router), best-shared first."""
    refs = [ref for _, ref in ctx.input_refs(task)]
    partners: dict[str, str] = {}
    for ref in refs:
        for site, consumer in ctx.arrival_sites(ref).items():
            if ctx.wan.can_compute(site):
                partners.setdefault(site, consumer)
    result = []
    for site, partner in partners.items():
        shared = tuple(ref for ref in refs if ctx.available_at(ref, site))
        missing = tuple((ref, ctx.ref_rate(ref), ctx.ref_site(ref)) for ref in refs if ref not in shared)
        result.append(InCandidate(site, partner, shared, sum(ctx.ref_rate(ref) for ref in shared), missing))
    result.sort(key=lambda candidate: (-candidate.shared_rate, candidate.site))
    return tuple(result)


def find_opportunities(task: QueryTask, ctx: PlanContext) -> Opportunities:
    """IN-OP and IN opportunities of ``task`` under the planning options (nothing the options forbid).

    A plan that shares nothing running (:meth:`~planning.model.PlanningOptions.private`) still offers
    the equivalents of a task whose inputs it all reuses: those are running tasks forced on it (the
    chain of a running sink it equals), and a copy reading the very same streams would gain nothing.
    """
    inop: tuple[RunningTask, ...] = ()
    compared = False
    if ctx.options.share_inop:
        inop, compared = inop_candidates(task, ctx)
    else:
        inop, _ = inop_candidates(task, ctx)
    in_sites = in_candidates(task, ctx) if ctx.options.share_in else ()
    return Opportunities(task.id, inop, in_sites, compared)
