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

from manager.exceptions import SinkTopicTaken
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
    parents_of: dict[str, list[tuple[str, str]]] = {}
    for stream in flow.streams:
        parents_of.setdefault(stream.dst, []).append((stream.port, stream.src))
    if state.wan is not None:
        return _wan_reuse(state, flow, parents_of, measured)
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
        query.append(QueryTask(task_id, signature, task.type, inputs, site=task.site))
        if all(parent in reused for _, parent in inputs):
            running = find_instance(state, signature, tuple(sorted((port, reused[parent]) for port, parent in inputs)))
            if running is not None:
                reused[task_id] = running
    vertex_of = {task_id: first[flow.signatures[task_id]] for task_id in flow.order}
    return ReusePlan(tuple(query), vertex_of, reused=reused)


def _wan_reuse(state: State, flow: Dataflow, parents_of: Mapping[str, list[tuple[str, str]]],
               measured: Mapping[str, float] | None) -> ReusePlan:
    """The reuse plan under a WAN configuration, where equivalent tasks may run more than once (refused shares).

    Tasks equal within the dataflow (same signature, reading the same
    vertices) become one vertex, unless running sinks force them onto
    different running instances: then each keeps a vertex of its own, so
    that every sink reuses the chain that writes its topic.
    """
    wan = state.wan
    assert wan is not None
    known = measured_by_signature(state, measured) if measured else {}
    forced = forced_by_running_sinks(state, flow, parents_of)
    vertex_of: dict[str, str] = {}
    vertex_forced: dict[str, str] = {}
    alike: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    query: list[QueryTask] = []
    for task_id in flow.order:
        signature = flow.signatures[task_id]
        inputs = tuple(sorted((port, vertex_of[parent]) for port, parent in parents_of.get(task_id, [])))
        target = forced.get(task_id)
        vertex = _same_vertex(alike.setdefault((signature, inputs), []), vertex_forced, target)
        if vertex is None:
            vertex = task_id
            alike[(signature, inputs)].append(vertex)
            task = flow.tasks[task_id]
            query.append(QueryTask(task_id, signature, task.type, inputs, known.get(signature), pinned_site(flow, task_id, wan)))
        if target is not None:
            vertex_forced[vertex] = target
        vertex_of[task_id] = vertex
    configs = {vertex.id: flow.tasks[vertex.id].config for vertex in query}
    return ReusePlan(tuple(query), vertex_of, forced=vertex_forced, configs=configs)


def _same_vertex(candidates: list[str], forced: Mapping[str, str], target: str | None) -> str | None:
    """The vertex among ``candidates`` (equal tasks reading the same vertices) a task forced onto ``target`` joins.

    One forced onto the same running task, else an unforced one (a task forced
    nowhere joins any)."""
    for vertex in candidates:
        if forced.get(vertex) == target:
            return vertex
    if target is None:
        return candidates[0] if candidates else None
    return next((vertex for vertex in candidates if vertex not in forced), None)


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


def forced_by_running_sinks(state: State, flow: Dataflow, parents_of: Mapping[str, list[tuple[str, str]]]) -> dict[str, str]:
    """Submitted tasks that must reuse the ancestors of an equivalent running sink.

    That sink's output exists already; planning the dataflow's copy elsewhere
    would make a second writer of the same topic. Raises
    :class:`~manager.exceptions.SinkTopicTaken` when two such sinks reach one
    submitted task through different running instances of it (one planned
    privately for bandwidth): a task of a dataflow runs as one instance, so
    both sinks cannot be reused, and neither can be planned again.
    """
    forced: dict[str, str] = {}
    via: dict[str, str] = {}

    def force(task_id: str, running: str, sink: str) -> None:
        if task_id in forced:
            if forced[task_id] != running:
                raise SinkTopicTaken(
                    f"sinks {via[task_id]!r} and {sink!r} write topics that running sinks already write, which read "
                    f"task {task_id!r} through different running instances of it ({forced[task_id]!r} and {running!r}, "
                    f"one planned apart for bandwidth); a task of a dataflow runs as one instance, so both cannot be "
                    f"reused: submit the two sinks in separate dataflows, or give one of them a topic of its own",
                    culprit={"task": sink, "field": "config.topic"},
                )
            return
        forced[task_id], via[task_id] = running, sink
        unclaimed = list(state.tasks[running].inputs)
        for port, parent in parents_of.get(task_id, ()):
            matches = [item for item in unclaimed
                       if item[0] == port and state.tasks[item[1]].signature == flow.signatures[parent]]
            if matches:  # a parent already forced keeps its instance where the running task reads it
                match = next((item for item in matches if item[1] == forced.get(parent)), matches[0])
                unclaimed.remove(match)
                force(parent, match[1], sink)

    for task_id in flow.order:
        healthy = state.instances.get(flow.signatures[task_id], set()) - state.quarantined
        if flow.tasks[task_id].type == "sink" and healthy:
            force(task_id, min(healthy), task_id)
    return forced
