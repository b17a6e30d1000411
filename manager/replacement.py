"""Re-placement (Sana section 6) as a plan: which dataflows would move or stop sharing, given the traffic now.

When a link's utilization reaches a threshold, the dataflows with a stream
over it are planned again on the running set, in submission order, each as
if it were removed and submitted anew: the reuse plan, the shares Algorithm 1
admits on today's loads (measured where the runtime measured them) and the
placement, the same stages as a submit (:mod:`manager.merge`). The tasks other
dataflows use stay where they are; what changes is the dataflow's own work (a
share the hot link no longer carries becomes a copy at another site, a task
moves to a site the hot link does not feed).

This module only plans: :func:`plan_replacement` works on a copy of the state
and returns what would change. Carrying it out needs the runtime to move
running tasks at a cut of their inputs, so that no record is lost or written
twice, and that path is not built (docs/wan.md, "Re-placement").
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from manager.merge import apply_merge, apply_unmerge, plan_merge, plan_unmerge
from manager.state import State
from manager.traffic import link_loads_in_use
from manager.validate import parse_dataflow
from sana.errors import SanaError
from wan_sim.monitor import WanMonitor


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


def plan_replacement(state: State, measured: Mapping[str, float], threshold: float,
                     sharing: bool = True) -> dict[str, Any]:
    """What re-placement would do now: the hot links and, per dataflow crossing one, the tasks that would move.

    ``state`` is not changed. ``measured`` maps running task ids onto the Mbps the runtime measured them
    writing. A dataflow whose plan comes out the same is listed with no moves; one that cannot be planned
    again (no site can take a task) is listed with the error and left as it is.
    """
    hot = hot_links(state, measured, threshold)
    crossing = crossing_dataflows(state, {(row["from"], row["to"]) for row in hot})
    work = state  # each dataflow is planned on a copy of it, which becomes ``work`` once it succeeds
    dataflows = []
    for dataflow_id in sorted(crossing, key=lambda name: int(name.rsplit("-", 1)[-1])):
        flow = work.dataflows[dataflow_id]
        entry: dict[str, Any] = {"dataflow": dataflow_id, "name": flow.name,
                                 "links": sorted(f"{src} -> {dst}" for src, dst in crossing[dataflow_id])}
        before = {task: (running, work.tasks[running].site) for task, running in flow.tasks.items()}
        trial = copy.deepcopy(work)
        try:
            apply_unmerge(trial, plan_unmerge(trial, dataflow_id))
            parsed = dataclasses.replace(parse_dataflow(flow.document), owner=flow.owner)
            plan = plan_merge(trial, parsed, flow.submitted_at, sharing=sharing, measured=measured)
        except SanaError as error:
            dataflows.append({**entry, "moves": [], "error": error.to_dict()})
            continue
        apply_merge(trial, plan)
        work = trial
        moves = []
        for task, (running, site) in sorted(before.items()):
            now = plan.dataflow.tasks[task]
            now_site = work.tasks[now].site
            if (now, now_site) != (running, site):
                moves.append({"task": task,
                              "from": {"running_task": running, "site": site, "shared": len(state.users[running]) > 1},
                              "to": {"running_task": now, "site": now_site, "new": now not in state.tasks}})
        dataflows.append({**entry, "moves": moves, "not_shared": list(plan.not_shared)})
    return {"threshold": threshold, "hot_links": hot, "dataflows": dataflows, "executed": False}
