"""Re-placement (Sana section 6) as a plan: which dataflows would move or stop sharing, given the traffic now.

When a link's utilization reaches a threshold, the dataflows with a stream
over it are planned again on the running set, in submission order, each as
if it were removed and submitted anew: the reuse plan, the shares Algorithm 1
admits on today's loads (measured where the runtime measured them) and the
placement, the same stages as a submit (:mod:`manager.merge`). The tasks other
dataflows use stay where they are; what changes is the dataflow's own work (a
share the hot link no longer carries becomes a copy at another site, a task
moves to a site the hot link does not feed).

The dataflows keep their ids. :func:`plan_replacement` works on copies of the
state and returns a :class:`Replacement`: the report (what would change and
why), the state after it, and the change that gets there with the state each
new task takes over (``seeds``). The manager carries it out through the
runtime's hand-over at a cut (:mod:`runtime.spark.handover`), so nothing is
lost or written twice, and commits the state after it in one transaction.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from manager.merge import apply_merge, apply_unmerge, plan_merge, plan_unmerge
from manager.state import State, parents_first
from manager.traffic import link_loads_in_use
from manager.validate import parse_dataflow
from runtime.operators.limits import OperatorLimits
from runtime.plan import Change
from sana.exceptions import SanaError
from wan.monitor import WanMonitor


def hot_links(state: State, measured: Mapping[str, float], threshold: float) -> list[dict[str, Any]]:
    """The links carrying traffic whose utilization (load in use / capacity) is at least ``threshold``."""
    rows = WanMonitor(state.wan, link_loads_in_use(state, measured)).report()
    return [row for row in rows if row["load_mbps"] > 0 and row["utilization"] >= threshold - 1e-9]


def crossing_dataflows(state: State, links: set[tuple[str, str]]) -> dict[str, set[tuple[str, str]]]:
    """Dataflow id -> the links in ``links`` one of its streams crosses (a task it uses reads over them)."""
    found: dict[str, set[tuple[str, str]]] = {}
    for producer, sites in state.arrivals.items():
        source_site = state.tasks[producer].site
        for site, consumers in sites.items():
            if (source_site, site) not in links:
                continue
            for consumer in consumers:
                for dataflow_id in state.users.get(consumer, ()):
                    found.setdefault(dataflow_id, set()).add((source_site, site))
    return found


@dataclasses.dataclass(frozen=True)
class Replacement:
    """What re-placement does now: ``report`` (for the API), the state ``after`` it, and the ``change`` from
    the state before to it, with ``seeds`` (new running task -> the running task whose state it takes over)."""

    report: dict[str, Any]
    after: State
    change: Change
    seeds: dict[str, str]


def plan_replacement(state: State, measured: Mapping[str, float], threshold: float,
                     sharing: bool = True, containment: bool = False) -> Replacement:
    """What re-placement would do now: the hot links and, per dataflow crossing one, the tasks that would move.

    ``state`` is not changed. ``measured`` maps running task ids onto the Mbps the runtime measured them
    writing. The dataflows crossing a hot link are taken off together, then planned again in the order they
    were submitted, so none is planned beside the others' old load on the link. One that cannot be planned
    again (no site can take a task) is left as it is, listed with the error, and the others are taken off and
    planned again together without it (the report's ``left_out``; ``planned`` is ``together``). A dataflow
    whose plan comes out the same is listed with no moves.
    """
    hot = hot_links(state, measured, threshold)
    crossing = crossing_dataflows(state, {(row["from"], row["to"]) for row in hot})
    order = sorted(crossing, key=lambda name: int(name.rsplit("-", 1)[-1]))
    links = {dataflow_id: sorted(f"{src} -> {dst}" for src, dst in crossing[dataflow_id]) for dataflow_id in order}
    failed: dict[str, dict[str, Any]] = {}
    while True:
        try:
            work, dataflows, seeds = _replan(state, [d for d in order if d not in failed], links, measured, sharing,
                                               containment)
            break
        except _CannotReplan as cannot:
            failed[cannot.dataflow_id] = {"dataflow": cannot.dataflow_id, "name": state.dataflows[cannot.dataflow_id].name,
                                          "links": links[cannot.dataflow_id], "moves": [], "error": cannot.error.to_dict()}
    dataflows = sorted([*dataflows, *failed.values()], key=lambda row: order.index(row["dataflow"]))
    moved = [row for row in dataflows if row["moves"]] or dataflows
    change = running_change(state, work, reason=f"re-place {len(moved)} dataflow(s) over "
                                                 f"{', '.join(sorted({link for row in moved for link in row['links']}))}")
    started = {spec.id for spec in change.start}
    seeds = {task: source for task, source in seeds.items() if task in started and source in state.tasks}
    for task in started:  # restarted only with its fragment: it continues its own state
        if state.tasks.get(task) == work.tasks[task]:
            seeds.setdefault(task, task)
    report = {"threshold": threshold, "hot_links": hot, "dataflows": dataflows, "planned": "together",
              "left_out": list(failed), "executed": False,
              "start": sorted(started), "stop": sorted(spec.id for spec in change.stop)}
    return Replacement(report, work, change, seeds)


class _CannotReplan(Exception):
    def __init__(self, dataflow_id: str, error: SanaError) -> None:
        super().__init__(dataflow_id)
        self.dataflow_id, self.error = dataflow_id, error


def _replan(state: State, order: list[str], links: Mapping[str, list[str]], measured: Mapping[str, float],
            sharing: bool, containment: bool = False) -> tuple[State, list[dict[str, Any]], dict[str, str]]:
    """Plan the dataflows in ``order`` again on a copy of ``state``, all taken off first; raises
    :class:`_CannotReplan` for the first one that cannot be planned. Returns the state after, a report row per
    dataflow, and the seeds (new task -> the task it continues)."""
    work = copy.deepcopy(state)
    for dataflow_id in reversed(order):
        apply_unmerge(work, plan_unmerge(work, dataflow_id))
    dataflows: list[dict[str, Any]] = []
    seeds: dict[str, str] = {}
    for dataflow_id in order:
        flow = state.dataflows[dataflow_id]
        entry: dict[str, Any] = {"dataflow": dataflow_id, "name": flow.name, "links": links[dataflow_id]}
        before = {task: (running, state.tasks[running].site) for task, running in flow.tasks.items()}
        try:
            # accepted at its submit: the limits then held, whatever they are now
            parsed = dataclasses.replace(parse_dataflow(flow.document, limits=OperatorLimits.loosest()),
                                         owner=flow.owner)
            plan = plan_merge(work, parsed, flow.submitted_at, sharing=sharing, measured=measured,
                              dataflow_id=dataflow_id, containment=containment)
        except SanaError as error:
            raise _CannotReplan(dataflow_id, error) from error
        apply_merge(work, plan)
        moves = []
        for task, (running, site) in sorted(before.items()):
            now = plan.dataflow.tasks.get(task)
            if now is None:  # the running task a containment share read, not read any more
                continue
            now_site = work.tasks[now].site
            if now not in seeds and work.tasks[now] != state.tasks.get(now) \
                    and work.tasks[now].signature == state.tasks[running].signature:
                # a task two dataflows start continues the state of the first one's; one whose computation changed
                # (a containment share taken or given up) starts without state
                seeds[now] = running
            if (now, now_site) != (running, site):
                moves.append({"task": task,
                              "from": {"running_task": running, "site": site, "shared": len(state.users[running]) > 1},
                              "to": {"running_task": now, "site": now_site, "new": now not in state.tasks}})
        dataflows.append({**entry, "moves": moves, "not_shared": list(plan.not_shared)})
    return work, dataflows, seeds


def running_change(before: State, after: State, reason: str) -> Change:
    """The change from ``before``'s running tasks to ``after``'s: a task whose spec differs stops and starts, and so
    does every task of a fragment one of them starts in. A fragment runs as one query, and a task that starts again
    (handed state or not) starts in a new query; a re-planned task can keep its id and its fragment's id while its
    children in that fragment stay as they were, so they go with it (and continue their own state: the seeds)."""
    changed = {task_id for task_id, spec in after.tasks.items() if before.tasks.get(task_id) != spec}
    touched = {after.tasks[task_id].fragment for task_id in changed}
    restarted = changed | {task_id for task_id, spec in after.tasks.items() if spec.fragment in touched}
    gone = [task_id for task_id, spec in before.tasks.items() if after.tasks.get(task_id) != spec or task_id in restarted]
    new = {task_id: after.tasks[task_id] for task_id in restarted}
    stop = [before.tasks[task_id] for task_id in reversed(parents_first({t: before.tasks[t] for t in gone}))]
    start = [new[task_id] for task_id in parents_first(new)]
    return Change(start=tuple(start), stop=tuple(stop), reason=reason)
