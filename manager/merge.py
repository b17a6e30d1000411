"""Merge (reuse paper 4.1) and unmerge (4.2) over ancestor signatures.

Planning is pure: :func:`plan_merge` and :func:`plan_unmerge` read a
:class:`~manager.state.State` and return a plan without changing it;
:func:`apply_merge` and :func:`apply_unmerge` then change the state. The
manager runs the plan on the runtime between the two, so a failed deployment
leaves the state untouched.

Without a WAN configuration every task is looked up by signature and shared
when an equivalent task runs (the optimum). With one, the optimizer decides
(Sana's Algorithms 1 and 2, :func:`optimizer.planner.plan_query`): a share the
WAN cannot carry is refused, and the submitted task gets a running instance
of its own at another site, recorded with the reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from manager.exceptions import SinkTopicTaken
from manager.model import Dataflow
from manager.state import RunningSet, State, SubmittedDataflow
from manager.traffic import link_loads_in_use, measured_by_signature, rates_in_use
from optimizer.model import SANA, QueryTask
from optimizer.planner import plan_query
from optimizer.rates import estimate_rate
from runtime.plan import Change, TaskSpec
from scheduler.fragments import assign_fragments, default_site
from wan_sim.exceptions import WanSiteUnknown
from wan_sim.monitor import WanMonitor


@dataclass(frozen=True)
class MergePlan:
    """Everything a submit changes.

    ``new_tasks`` are the running tasks to create (parents first), each with the
    DAG it joins in ``new_task_dag``; ``relabel`` moves every task of a DAG that
    merged into another (old DAG id -> surviving id); ``boundary`` are the
    streams from already running tasks into new ones (the paper's S_x^+).
    """

    dataflow: SubmittedDataflow
    reused: tuple[str, ...]
    created: tuple[str, ...]
    new_tasks: tuple[TaskSpec, ...]
    new_task_dag: dict[str, str]
    relabel: dict[str, str]
    boundary: tuple[tuple[str, str, str], ...]
    next_dataflow: int
    next_dag: int
    signature_index: dict[str, str] = field(default_factory=dict)
    placement: dict[str, dict[str, Any]] = field(default_factory=dict)
    not_shared: tuple[dict[str, Any], ...] = ()
    notes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def change(self) -> Change:
        return Change(start=self.new_tasks, reason=f"submit {self.dataflow.id} ({self.dataflow.name})")


@dataclass(frozen=True)
class UnmergePlan:
    """Everything a remove changes.

    ``terminated`` are stopped children first; ``splits`` moves tasks of a DAG
    that fell apart into new DAGs (task id -> new DAG id); ``dropped_dags`` are
    DAGs left empty; ``signature_index`` gives the new entry of every
    signature that lost a running task (None: no task has it any more).
    """

    dataflow: SubmittedDataflow
    terminated: tuple[TaskSpec, ...]
    splits: dict[str, str] = field(default_factory=dict)
    dropped_dags: tuple[str, ...] = ()
    next_dag: int = 0
    signature_index: dict[str, str | None] = field(default_factory=dict)

    @property
    def change(self) -> Change:
        return Change(stop=self.terminated, reason=f"remove {self.dataflow.id} ({self.dataflow.name})")


def running_task_id(task_type: str, signature: str, *taken: dict[str, TaskSpec]) -> str:
    """A readable, content-derived id: ``<type>-<first 16 hex of the signature>``.

    Longer when another signature already holds that id in one of ``taken``.
    """
    length = 16
    while True:
        candidate = f"{task_type}-{signature[:length]}"
        existing = next((ids[candidate] for ids in taken if candidate in ids), None)
        if existing is None or existing.signature == signature:
            return candidate
        length += 8


def new_task_id(task_type: str, signature: str, site: str | None, *taken: dict[str, TaskSpec]) -> str:
    """An id for a new running task that no running or planned task holds.

    The content-derived id of :func:`running_task_id`; when another instance
    of the same signature holds it (a share refused for bandwidth), the site
    is appended, then a counter.
    """
    base = running_task_id(task_type, signature, *taken)
    candidate, number = base, 2
    while any(candidate in ids for ids in taken):
        candidate = f"{base}-{site or 'nosite'}" if number == 2 else f"{base}-{site or 'nosite'}-{number - 1}"
        number += 1
    return candidate


def find_instance(state: State, signature: str, inputs: tuple[tuple[str, str], ...]) -> str | None:
    """The running task with ``signature`` that reads exactly ``inputs`` (the smallest id if several)."""
    found = [task_id for task_id in state.instances.get(signature, ()) if state.tasks[task_id].inputs == inputs]
    return min(found) if found else None


def isolated(flow: Dataflow, salt: str) -> Dataflow:
    """``flow`` with every signature salted, so that no running task can serve it.

    Tasks equal within ``flow`` stay equal (de-duplication still happens), but
    none equals a task of another dataflow: this is how the service runs with
    sharing off (``SANA_SHARING=false``), the baseline each dataflow alone.

    >>> from manager.validate import parse_dataflow
    >>> flow = parse_dataflow({"name": "a", "tasks": [
    ...     {"id": "s", "type": "source", "config": {"topic": "in", "schema": {"x": "int"}}},
    ...     {"id": "k", "type": "sink", "config": {"topic": "out"}}], "streams": [{"from": "s", "to": "k"}]})
    >>> alone = isolated(flow, "df-1")
    >>> alone.signatures["s"] != flow.signatures["s"], alone.signatures["s"] == isolated(flow, "df-1").signatures["s"]
    (True, True)
    """
    salted = {
        task_id: hashlib.sha256(f"{signature}:{salt}".encode()).hexdigest()
        for task_id, signature in flow.signatures.items()
    }
    return dataclasses.replace(flow, signatures=salted)


def plan_merge(state: State, flow: Dataflow, submitted_at: float, sharing: bool = True,
               measured: Mapping[str, float] | None = None) -> MergePlan:
    """Plan the submission of a validated dataflow.

    Without a WAN configuration each task is looked up by signature (among
    the running tasks that read the same streams): a hit reuses the running
    task; a miss creates one (a second task of the same submission with an
    equal signature maps onto the first: de-duplication). With one, the
    optimizer decides what to share and where new tasks run. The running DAGs
    that the new tasks connect are merged, the largest keeping its id.

    Raises :class:`SinkTopicTaken` if a new sink would write a topic that a
    running sink of another owner writes (or, with a WAN configuration, another
    instance of the same computation); :class:`~wan_sim.exceptions.WanSiteUnknown` when a
    source's site is unknown to the WAN configuration;
    :class:`~scheduler.exceptions.PlacementImpossible` when no site can run a task.
    With ``sharing`` off nothing already running is reused (see :func:`isolated`).
    ``measured`` (running task id -> output Mbps the runtime measured) replaces the
    estimates the optimizer plans with, where it has them (:mod:`manager.traffic`).
    """
    if not sharing:
        flow = isolated(flow, f"df-{state.next_dataflow}")
    parents_of: dict[str, list[tuple[str, str]]] = {}
    for stream in flow.streams:
        parents_of.setdefault(stream.dst, []).append((stream.port, stream.src))
    if state.wan is None:
        task_map, created_specs = _share_everything(state, flow, parents_of)
        placement: dict[str, dict[str, Any]] = {}
        not_shared: list[dict[str, Any]] = []
        notes: dict[str, list[dict[str, Any]]] = {}
    else:
        task_map, created_specs, placement, not_shared, notes = _share_by_wan(state, flow, parents_of, measured or {})

    def site_of(task_id: str) -> str | None:
        spec = created_specs.get(task_id) or state.tasks[task_id]
        return spec.site

    reused = tuple(task_id for task_id in flow.order if task_map[task_id] in state.tasks)
    created = tuple(task_id for task_id in flow.order if task_map[task_id] not in state.tasks)
    fragment_keys = (
        {task_id: spec.signature for task_id, spec in created_specs.items()} if state.wan is None
        else {task_id: f"{spec.signature}:{task_id}" for task_id, spec in created_specs.items()}
    )
    fragments = assign_fragments(
        list(created_specs),
        {task_id: [parent for _, parent in spec.inputs] for task_id, spec in created_specs.items()},
        {task_id: site_of(task_id) for spec in created_specs.values() for task_id in [spec.id, *(p for _, p in spec.inputs)]},
        fragment_keys,
    )
    new_tasks = tuple(_with_fragment(spec, fragments[task_id]) for task_id, spec in created_specs.items())
    boundary = tuple(
        (parent, spec.id, port) for spec in new_tasks for port, parent in spec.inputs if parent in state.tasks
    )
    new_task_dag, relabel, next_dag = _merge_dags(state, new_tasks, set(task_map.values()))

    dataflow_id = f"df-{state.next_dataflow}"
    sinks = {
        sink_id: {"running_task": task_map[sink_id], "topic": flow.tasks[sink_id].config["topic"]}
        for sink_id in flow.sinks
    }
    submitted = SubmittedDataflow(
        id=dataflow_id,
        name=flow.name,
        owner=flow.owner,
        submitted_at=submitted_at,
        document=flow.document,
        tasks=task_map,
        sinks=sinks,
    )
    index: dict[str, str] = {}
    for spec in new_tasks:
        index[spec.signature] = min(state.instances.get(spec.signature, set()) | {spec.id} | {index.get(spec.signature, spec.id)})
    return MergePlan(
        dataflow=submitted,
        reused=reused,
        created=created,
        new_tasks=new_tasks,
        new_task_dag=new_task_dag,
        relabel=relabel,
        boundary=boundary,
        next_dataflow=state.next_dataflow + 1,
        next_dag=next_dag,
        signature_index=index,
        placement=placement,
        not_shared=tuple(not_shared),
        notes=notes,
    )


def _share_everything(
    state: State, flow: Dataflow, parents_of: dict[str, list[tuple[str, str]]]
) -> tuple[dict[str, str], dict[str, TaskSpec]]:
    """The manager's optimum: every task served by an equivalent running task when there is one."""
    task_map: dict[str, str] = {}
    created_specs: dict[str, TaskSpec] = {}
    created_by_signature: dict[str, str] = {}

    def site_of(task_id: str) -> str | None:
        spec = created_specs.get(task_id) or state.tasks[task_id]
        return spec.site

    for task_id in flow.order:
        signature = flow.signatures[task_id]
        inputs = tuple(sorted((port, task_map[parent]) for port, parent in parents_of.get(task_id, [])))
        running = find_instance(state, signature, inputs) or created_by_signature.get(signature)
        if running is None:
            task = flow.tasks[task_id]
            site = task.site if task.type == "source" else default_site(task.site, [site_of(p) for _, p in inputs])
            running = new_task_id(task.type, signature, site, state.tasks, created_specs)
            spec = TaskSpec(running, signature, task.type, task.config, site, inputs, "", flow.schemas[task_id])
            created_specs[running] = spec
            created_by_signature[signature] = running
            if task.type == "sink":
                _check_topic_free(state, task_id, spec, flow.owner)
        task_map[task_id] = running
    return task_map, created_specs


def _share_by_wan(state: State, flow: Dataflow, parents_of: dict[str, list[tuple[str, str]]],
                  measured: Mapping[str, float]):
    """Sana: the optimizer decides which equivalent tasks to share and where new ones run.

    A task whose signature runs and is measured gets the measured rate (the same computation gives the
    same stream); the others are estimated from their inputs.
    """
    wan = state.wan
    known = measured_by_signature(state, measured)
    first: dict[str, str] = {}
    query: list[QueryTask] = []
    rates: dict[str, float] = {}
    for task_id in flow.order:
        signature = flow.signatures[task_id]
        if signature in first:
            continue
        first[signature] = task_id
        task = flow.tasks[task_id]
        inputs = tuple(sorted((port, first[flow.signatures[parent]]) for port, parent in parents_of.get(task_id, [])))
        rates[task_id] = known.get(signature, estimate_rate(task.type, task.config, [rates[parent] for _, parent in inputs], wan))
        query.append(QueryTask(task_id, signature, task.type, inputs, rates[task_id], _pinned_site(flow, task_id, wan)))
    forced = _forced_by_running_sinks(state, query)
    monitor = WanMonitor(wan, link_loads_in_use(state, measured) if measured else state.link_load)
    plan = plan_query(query, RunningSet(state, rates_in_use(state, measured)), monitor, SANA, forced)
    task_map: dict[str, str] = {}
    created_specs: dict[str, TaskSpec] = {}
    placement: dict[str, dict[str, Any]] = {}
    not_shared: list[dict[str, Any]] = []
    notes: dict[str, list[dict[str, Any]]] = {}
    by_id = {item.id: item for item in query}
    for item in query:
        decision = plan.decisions[item.id]
        task = flow.tasks[item.id]
        if decision.action == "reuse":
            running = decision.running
        else:
            running = new_task_id(task.type, item.signature, decision.site, state.tasks, created_specs)
            inputs = tuple(sorted((port, task_map[parent]) for port, parent in by_id[item.id].inputs))
            spec = TaskSpec(running, item.signature, task.type, task.config, decision.site, inputs, "", flow.schemas[item.id])
            created_specs[running] = spec
            if task.type == "sink":
                _check_topic_free(state, item.id, spec, flow.owner, any_writer=True)
            refused = [refusal for refusal in decision.refused if refusal.kind == "IN-OP"]
            if refused:
                notes[running] = [refusal.to_dict() for refusal in refused]
                for refusal in refused:
                    not_shared.append({
                        "task": item.id,
                        "running_task": running,
                        "site": decision.site,
                        "equivalent": refusal.candidate,
                        "equivalent_site": refusal.site,
                        "link": {"from": refusal.link[0], "to": refusal.link[1]},
                        "needed_mbps": round(refusal.needed_mbps, 6),
                        "available_mbps": round(refusal.available_mbps, 6) if refusal.available_mbps > -1e300 else None,
                        "reason": refusal.reason,
                    })
        task_map[item.id] = running
        placement[item.id] = {"running_task": running, **decision.to_dict()}
    for task_id, refusal in plan.overruled:  # refusals that would have pressed the WAN harder than sharing
        placement[task_id].setdefault("overruled", []).append(refusal.to_dict())
    for task_id in flow.order:
        task_map[task_id] = task_map[first[flow.signatures[task_id]]]
    return task_map, created_specs, placement, not_shared, notes


def _pinned_site(flow: Dataflow, task_id: str, wan) -> str | None:
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


def _forced_by_running_sinks(state: State, query: list[QueryTask]) -> dict[str, str]:
    """Query tasks that must reuse the ancestors of an equivalent running sink.

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
        if item.type == "sink" and state.instances.get(item.signature):
            force(item.id, min(state.instances[item.signature]))
    return forced


def _with_fragment(spec: TaskSpec, fragment: str) -> TaskSpec:
    return TaskSpec(spec.id, spec.signature, spec.type, spec.config, spec.site, spec.inputs, fragment, spec.schema)


def _check_topic_free(state: State, submitted_id: str, sink: TaskSpec, owner: str | None, any_writer: bool = False) -> None:
    """A topic takes the sinks of one owner's dataflows, each writing its own records; never two instances of one
    computation (their records would repeat), never another owner's."""
    topic = sink.config["topic"]
    writers = sorted(state.sink_topics.get(topic, set()) - {sink.id})
    for writer in writers:
        if any_writer and state.tasks[writer].signature == sink.signature:
            raise SinkTopicTaken(
                f"sink {submitted_id!r} writes topic {topic!r}, which running sink {writer!r} already writes from "
                f"another instance of the same computation; a second writer would duplicate its records",
                culprit={"task": submitted_id, "field": "config.topic"},
            )
    users = sorted({flow for writer in writers for flow in state.users.get(writer, ())})
    others = sorted({str(state.dataflows[flow].owner) for flow in users if state.dataflows[flow].owner != owner})
    if others:
        raise SinkTopicTaken(
            f"sink {submitted_id!r} writes topic {topic!r}, which dataflows {', '.join(users)} of owner(s) "
            f"{', '.join(others)} already write; a topic takes the writers of one owner",
            culprit={"task": submitted_id, "field": "config.topic"},
        )


def _merge_dags(
    state: State, new_tasks: tuple[TaskSpec, ...], used: set[str]
) -> tuple[dict[str, str], dict[str, str], int]:
    """Group new tasks and the running DAGs they connect; return their DAG ids.

    Union-find over new task ids and existing DAG ids: a new task joins each
    parent's group. A group holding existing DAGs keeps the id of the largest
    one (fewest tasks relabelled); a group of new tasks only gets a fresh id.
    """
    leader: dict[str, str] = {}

    def find(node: str) -> str:
        leader.setdefault(node, node)
        while leader[node] != node:
            leader[node] = leader[leader[node]]
            node = leader[node]
        return node

    def node_of(task_id: str) -> str:
        return f"dag:{state.dag_of[task_id]}" if task_id in state.tasks else f"new:{task_id}"

    for spec in new_tasks:
        find(node_of(spec.id))
        for _, parent in spec.inputs:
            leader[find(node_of(spec.id))] = find(node_of(parent))
    groups: dict[str, list[str]] = {}
    for node in list(leader):
        groups.setdefault(find(node), []).append(node)
    next_dag = state.next_dag
    new_task_dag: dict[str, str] = {}
    relabel: dict[str, str] = {}
    for nodes in groups.values():
        dags = [node[4:] for node in nodes if node.startswith("dag:")]
        if dags:
            target = max(dags, key=lambda dag: (len(state.dag_members[dag]), dag))
            relabel.update({dag: target for dag in dags if dag != target})
        else:
            target = f"dag-{next_dag}"
            next_dag += 1
        for node in nodes:
            if node.startswith("new:"):
                new_task_dag[node[4:]] = target
    return new_task_dag, relabel, next_dag


def apply_merge(state: State, plan: MergePlan) -> None:
    """Change ``state`` as ``plan`` says (after the runtime deployed it)."""
    for old, target in plan.relabel.items():
        for task_id in list(state.dag_members.get(old, ())):
            state.set_dag(task_id, target)
    for spec in plan.new_tasks:
        state.add_task(spec, plan.new_task_dag[spec.id])
    for task_id, notes in plan.notes.items():
        state.not_shared[task_id] = list(notes)
    flow = plan.dataflow
    for task_id in flow.running_ids():
        state.users[task_id].add(flow.id)
    state.dataflows[flow.id] = flow
    state.next_dataflow = plan.next_dataflow
    state.next_dag = plan.next_dag


def plan_unmerge(state: State, dataflow_id: str) -> UnmergePlan:
    """Plan the removal of a submitted dataflow.

    A running task stops when this dataflow is its last user. If the DAG that
    held it falls apart, each connected component becomes a DAG of its own,
    the largest keeping the old id.
    """
    flow = state.dataflows[dataflow_id]
    doomed = {task_id for task_id in flow.running_ids() if state.users[task_id] == {dataflow_id}}
    terminated = tuple(
        state.tasks[task_id] for task_id in reversed(_parents_first(state, doomed))
    )
    splits: dict[str, str] = {}
    dropped: list[str] = []
    next_dag = state.next_dag
    affected = sorted({state.dag_of[task_id] for task_id in doomed})
    for dag in affected:
        doomed_here = [task_id for task_id in doomed if state.dag_of[task_id] == dag]
        if len(doomed_here) == len(state.dag_members[dag]):
            dropped.append(dag)
            continue
        border = {parent for task_id in doomed_here for _, parent in state.tasks[task_id].inputs} - doomed
        if len(border) <= 1 or len({_root(state, task_id) for task_id in border}) == 1:
            continue
        remaining = state.dag_members[dag] - doomed
        components = sorted(_components(state, remaining), key=lambda members: (-len(members), min(members)))
        for members in components[1:]:
            new_id = f"dag-{next_dag}"
            next_dag += 1
            splits.update({task_id: new_id for task_id in members})
    index: dict[str, str | None] = {}
    for spec in terminated:
        remaining = state.instances[spec.signature] - doomed
        index[spec.signature] = min(remaining) if remaining else None
    return UnmergePlan(flow, terminated, splits, tuple(dropped), next_dag, index)


def apply_unmerge(state: State, plan: UnmergePlan) -> None:
    """Change ``state`` as ``plan`` says (after the runtime stopped the tasks)."""
    flow = plan.dataflow
    for task_id in flow.running_ids():
        state.users[task_id].discard(flow.id)
    for spec in plan.terminated:
        state.drop_task(spec.id)
    for task_id, dag in plan.splits.items():
        state.set_dag(task_id, dag)
    del state.dataflows[flow.id]
    state.next_dag = plan.next_dag


def _parents_first(state: State, task_ids: set[str]) -> list[str]:
    """``task_ids`` ordered so that a task comes after its parents among them."""
    pending = {
        task_id: len({parent for _, parent in state.tasks[task_id].inputs if parent in task_ids}) for task_id in task_ids
    }
    ready = sorted(task_id for task_id, count in pending.items() if count == 0)
    ordered: list[str] = []
    while ready:
        task_id = ready.pop()
        ordered.append(task_id)
        for child in state.children.get(task_id, ()):
            if child in pending:
                pending[child] -= 1
                if pending[child] == 0:
                    ready.append(child)
    return ordered


def _root(state: State, task_id: str) -> str:
    """Follow first inputs up to a source: tasks with the same root are connected."""
    while state.tasks[task_id].inputs:
        task_id = state.tasks[task_id].inputs[0][1]
    return task_id


def _components(state: State, members: set[str]) -> list[set[str]]:
    unseen = set(members)
    components: list[set[str]] = []
    while unseen:
        start = unseen.pop()
        component = {start}
        frontier = [start]
        while frontier:
            task_id = frontier.pop()
            neighbours = [parent for _, parent in state.tasks[task_id].inputs]
            neighbours.extend(state.children.get(task_id, ()))
            for other in neighbours:
                if other in unseen:
                    unseen.discard(other)
                    component.add(other)
                    frontier.append(other)
        components.append(component)
    return components
