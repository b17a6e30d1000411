"""The manager's stage of a submit: the reuse plan, what the new dataflow asks of the running set.

A submitted dataflow becomes a *query*: one vertex per distinct signature
(tasks equal within the dataflow are de-duplicated), parents first, as the
optimizer and the scheduler take it (:class:`~planning.model.QueryTask`).
The reuse plan adds what only the manager knows:

- without a WAN configuration, which vertices an equivalent running task
  serves (looked up by signature among the running tasks that read the
  same streams: the manager's optimum, every equivalent task shared);
- with one, where each vertex must run (a source at its topic's origin, a
  sink at its configured site, any declared site), the running tasks some
  vertices must reuse whatever the bandwidth (the ancestors of an
  equivalent running sink), and the rates the runtime measured.

The stages after it are the optimizer's (:func:`optimizer.planner.admit_shares`)
and the scheduler's (:mod:`scheduler.assignment`); :mod:`manager.merge`
runs them in that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from manager.model import Dataflow
from manager.state import State
from manager.traffic import measured_by_signature
from planning.model import QueryTask
from wan.exceptions import WanSiteUnknown
from wan.topology import WanConfig


@dataclass(frozen=True)
class ReusePlan:
    """A dataflow as a query over the running set.

    ``query`` holds one vertex per distinct signature, parents first (a
    vertex's id is the first submitted task with its signature, its rate the
    measured one where the runtime measured that signature, else None);
    ``vertex_of`` maps every submitted task onto its vertex; ``reused`` (no
    WAN configuration) maps vertices onto the running tasks serving them;
    ``forced`` (with one) maps vertices onto running tasks they must reuse;
    ``configs`` holds each vertex's configuration (a source's rate is its
    topic's).
    """

    query: tuple[QueryTask, ...]
    vertex_of: dict[str, str]
    reused: dict[str, str] = field(default_factory=dict)
    forced: dict[str, str] = field(default_factory=dict)
    configs: dict[str, Mapping[str, Any]] = field(default_factory=dict)


def plan_reuse(state: State, flow: Dataflow, measured: Mapping[str, float] | None = None) -> ReusePlan:
    """The reuse plan of a validated dataflow against ``state``.

    ``measured`` maps running task ids onto the output Mbps the runtime
    measured (:mod:`manager.traffic`). Raises
    :class:`~wan.exceptions.WanSiteUnknown` when a task's site is unknown
    to the WAN configuration or cannot compute.

    >>> from manager.validate import parse_dataflow
    >>> flow = parse_dataflow({"name": "a", "tasks": [
    ...     {"id": "s", "type": "source", "config": {"topic": "in", "schema": {"x": "int"}}},
    ...     {"id": "t", "type": "source", "config": {"topic": "in", "schema": {"x": "int"}}},
    ...     {"id": "u", "type": "union", "config": {}},
    ...     {"id": "k", "type": "sink", "config": {"topic": "out"}}],
    ...     "streams": [{"from": "s", "to": "u"}, {"from": "t", "to": "u"}, {"from": "u", "to": "k"}]})
    >>> reuse = plan_reuse(State(), flow)   # t equals s: one vertex, read twice by the union
    >>> [(vertex.id, vertex.inputs) for vertex in reuse.query], reuse.vertex_of["t"], reuse.reused
    ([('s', ()), ('u', (('in', 's'), ('in', 's'))), ('k', (('in', 'u'),))], 's', {})
    """
    wan = state.wan
    known = measured_by_signature(state, measured) if wan is not None and measured else {}
    parents_of: dict[str, list[tuple[str, str]]] = {}
    for stream in flow.streams:
        parents_of.setdefault(stream.dst, []).append((stream.port, stream.src))
    first: dict[str, str] = {}
    query: list[QueryTask] = []
    reused: dict[str, str] = {}
    for task_id in flow.order:
        signature = flow.signatures[task_id]
        if signature in first:
            continue
        first[signature] = task_id
        task = flow.tasks[task_id]
        inputs = tuple(sorted((port, first[flow.signatures[parent]]) for port, parent in parents_of.get(task_id, [])))
        if wan is None:
            query.append(QueryTask(task_id, signature, task.type, inputs, site=task.site))
            if all(parent in reused for _, parent in inputs):
                running = find_instance(state, signature, tuple(sorted((port, reused[parent]) for port, parent in inputs)))
                if running is not None:
                    reused[task_id] = running
        else:
            query.append(QueryTask(task_id, signature, task.type, inputs, known.get(signature), pinned_site(flow, task_id, wan)))
    vertex_of = {task_id: first[flow.signatures[task_id]] for task_id in flow.order}
    if wan is None:
        return ReusePlan(tuple(query), vertex_of, reused=reused)
    configs = {vertex.id: flow.tasks[vertex.id].config for vertex in query}
    return ReusePlan(tuple(query), vertex_of, forced=forced_by_running_sinks(state, query), configs=configs)


def find_instance(state: State, signature: str, inputs: tuple[tuple[str, str], ...]) -> str | None:
    """The running task with ``signature`` that reads exactly ``inputs`` (the smallest id if several),
    quarantined tasks left out."""
    found = [task_id for task_id in state.instances.get(signature, ())
             if state.tasks[task_id].inputs == inputs and task_id not in state.quarantined]
    return min(found) if found else None


def pinned_site(flow: Dataflow, task_id: str, wan: WanConfig) -> str | None:
    """Where a task must run: a source at its origin, a sink at its configured site, any declared site."""
    task = flow.tasks[task_id]
    site = task.site
    if task.type == "source" and site is None:
        origin = wan.source_origin(str(task.config.get("topic")))
        site = origin.site if origin else None
        if site is None:
            raise WanSiteUnknown(
                f"source {task_id!r} reads topic {task.config.get('topic')!r}, whose site is unknown: declare its site "
                f"or add the topic to the WAN configuration's sources",
                culprit={"task": task_id, "field": "site"},
            )
    if task.type == "sink" and site is None:
        site = wan.sinks.get(str(task.config.get("topic")))
    if site is not None and not wan.has_site(site):
        raise WanSiteUnknown(
            f"task {task_id!r} names site {site!r}, which the WAN configuration does not have "
            f"(sites: {', '.join(wan.site_names)})",
            culprit={"task": task_id, "field": "site"},
        )
    if site is not None and task.type not in ("source", "sink") and not wan.can_compute(site):
        raise WanSiteUnknown(f"task {task_id!r} ({task.type}) is placed at {site!r}, where nothing can compute",
                             culprit={"task": task_id, "field": "site"})
    return site


def forced_by_running_sinks(state: State, query: list[QueryTask]) -> dict[str, str]:
    """Query vertices that must reuse the ancestors of an equivalent running sink.

    That sink's output exists already; planning the query's copy elsewhere
    would make a second writer of the same topic.
    """
    by_id = {item.id: item for item in query}
    forced: dict[str, str] = {}

    def force(task_id: str, running: str) -> None:
        if task_id in forced:
            return
        forced[task_id] = running
        spec = state.tasks[running]
        for port, parent in by_id[task_id].inputs:
            wanted = by_id[parent].signature
            match = next((rid for rport, rid in spec.inputs if rport == port and state.tasks[rid].signature == wanted), None)
            if match is not None:
                force(parent, match)

    for item in query:
        healthy = state.instances.get(item.signature, set()) - state.quarantined
        if item.type == "sink" and healthy:
            force(item.id, min(healthy))
    return forced
