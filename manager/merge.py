"""Merge (reuse paper 4.1) and unmerge (4.2) over ancestor signatures.

Planning is pure: :func:`plan_merge` and :func:`plan_unmerge` read a
:class:`~manager.state.State` and return a plan without changing it;
:func:`apply_merge` and :func:`apply_unmerge` then change the state. The
manager runs the plan on the runtime between the two, so a failed deployment
leaves the state untouched.

A submit runs in stages, each taking a value and returning one: the reuse
plan (:func:`manager.reuse.plan_reuse`); with a WAN configuration, the
shares Algorithm 1 admits (:func:`optimizer.planner.admit_shares`); the
placement, names and fragments of the new tasks (:mod:`scheduler.assignment`,
Algorithm 2 with a WAN configuration, locality without). Without a WAN
configuration every task is looked up by signature and shared when an
equivalent task runs (the optimum). With one, a share the WAN cannot carry
is refused, and the submitted task gets a running instance of its own at
another site, recorded with the reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from manager.containment import Contained, contain
from manager.exceptions import SinkTopicTaken
from manager.model import Dataflow
from manager.reuse import plan_reuse
from manager.state import WIDER, RunningSet, State, SubmittedDataflow, is_added
from manager.traffic import link_loads_in_use, rates_in_use
from planning.model import QueryPlan, service_options
from optimizer.planner import admit_shares
from runtime.plan import Change, TaskSpec
from scheduler.assignment import assign_by_locality, assign_by_wan
from wan.monitor import WanMonitor


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
    weighing: dict[str, Any] | None = None
    contained: tuple[Contained, ...] = ()

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
    return dataclasses.replace(flow, signatures={task_id: salted(signature, salt)
                                                 for task_id, signature in flow.signatures.items()})


def salted(signature: str, salt: str) -> str:
    """``signature`` as :func:`isolated` salts it with ``salt`` (a dataflow id under ``SANA_SHARING=false``)."""
    return hashlib.sha256(f"{signature}:{salt}".encode()).hexdigest()


def plan_merge(state: State, flow: Dataflow, submitted_at: float, sharing: bool = True,
               measured: Mapping[str, float] | None = None, dataflow_id: str | None = None,
               containment: bool = False) -> MergePlan:
    """Plan the submission of a validated dataflow.

    Without a WAN configuration each task is looked up by signature (among
    the running tasks that read the same streams): a hit reuses the running
    task; a miss creates one (a second task of the same submission with an
    equal signature maps onto the first: de-duplication). With one, the
    optimizer decides what to share and where new tasks run. The running DAGs
    that the new tasks connect are merged, the largest keeping its id.

    Raises :class:`SinkTopicTaken` if a new sink would write a topic that a
    running sink of another owner writes (or, with a WAN configuration, another
    instance of the same computation); :class:`~wan.exceptions.WanSiteUnknown` when a
    source's site is unknown to the WAN configuration;
    :class:`~scheduler.exceptions.PlacementImpossible` when no site can run a task.
    With ``sharing`` off nothing already running is reused (see :func:`isolated`).
    ``measured`` (running task id -> output Mbps the runtime measured) replaces the
    estimates the optimizer plans with, where it has them (:mod:`manager.traffic`).
    ``dataflow_id`` plans a dataflow that keeps its id (re-placement plans a running
    dataflow again); by default the next id is taken. With ``containment`` (and
    sharing) a filter or select a running one contains reads its output
    (:mod:`manager.containment`); with a WAN configuration such a share is offered
    to Algorithm 1 like any other, and if it is refused the dataflow is planned
    without containment.
    """
    if sharing and containment:
        rewritten, contained = contain(state, flow)
        if contained:
            plan = _plan(state, rewritten, submitted_at, sharing, measured, dataflow_id, contained, as_submitted=flow)
            if all(plan.dataflow.tasks[_reads(share)] == share.reads for share in contained):
                return plan
    return _plan(state, flow, submitted_at, sharing, measured, dataflow_id, ())


def _reads(share: Contained) -> str:
    """The task of the rewritten dataflow that reads the running task a containment share names."""
    return share.task if share.residual is None else f"{share.task}{WIDER}"


def _plan(state: State, flow: Dataflow, submitted_at: float, sharing: bool, measured: Mapping[str, float] | None,
          dataflow_id: str | None, contained: tuple[Contained, ...], as_submitted: Dataflow | None = None) -> MergePlan:
    """Plan ``flow``; ``as_submitted`` is the dataflow as submitted when ``flow`` is its containment rewrite: each
    sink record then keeps the sink's signature as submitted, which duplicate checks compare."""
    next_dataflow = state.next_dataflow + (dataflow_id is None)
    dataflow_id = dataflow_id or f"df-{state.next_dataflow}"
    if not sharing:
        flow = isolated(flow, dataflow_id)
    reuse = plan_reuse(state, flow, measured)
    if state.wan is None:
        assignment = assign_by_locality(reuse.query, reuse.reused, state.tasks)
    else:
        monitor = WanMonitor(state.wan, link_loads_in_use(state, measured) if measured else state.link_load)
        running = RunningSet(state, rates_in_use(state, measured) if measured else None)
        options = service_options(state.wan.policy, state.wan.hops)
        admissions = admit_shares(reuse.query, running, monitor, options, reuse.forced, reuse.configs)
        assignment = assign_by_wan(admissions, running, monitor, state.tasks)
    task_map = {task_id: assignment.running[reuse.vertex_of[task_id]] for task_id in flow.order}
    new_tasks: list[TaskSpec] = []
    for new in assignment.new:
        task = flow.tasks[new.vertex]
        spec = TaskSpec(new.id, new.signature, task.type, task.config, new.site, new.inputs, new.fragment, flow.schemas[new.vertex])
        if task.type == "sink":
            _check_topic_free(state, new.vertex, spec, flow.owner, any_writer=state.wan is not None)
        new_tasks.append(spec)
    new_tasks = tuple(new_tasks)
    placement, not_shared, notes = _wan_report(assignment.plan, assignment.running) if assignment.plan else ({}, [], {})
    submitted = [task_id for task_id in flow.order if not is_added(task_id)]
    reused = tuple(task_id for task_id in submitted if task_map[task_id] in state.tasks)
    created = tuple(task_id for task_id in submitted if task_map[task_id] not in state.tasks)
    boundary = tuple(
        (parent, spec.id, port) for spec in new_tasks for port, parent in spec.inputs if parent in state.tasks
    )
    new_task_dag, relabel, next_dag = _merge_dags(state, new_tasks, set(task_map.values()))

    sinks = {
        sink_id: {"running_task": task_map[sink_id], "topic": flow.tasks[sink_id].config["topic"]}
        for sink_id in flow.sinks
    }
    if as_submitted is not None:
        for sink_id, target in sinks.items():
            if as_submitted.signatures[sink_id] != flow.signatures[sink_id]:
                target["signature"] = as_submitted.signatures[sink_id]
    submitted = SubmittedDataflow(
        id=dataflow_id,
        name=flow.name,
        owner=flow.owner,
        submitted_at=submitted_at,
        document=flow.document,
        tasks=task_map,
        sinks=sinks,
        contained={share.task: share.to_dict() for share in contained},
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
        next_dataflow=next_dataflow,
        next_dag=next_dag,
        signature_index=index,
        placement=placement,
        not_shared=tuple(not_shared),
        notes=notes,
        weighing=assignment.plan.weighing.to_dict() if assignment.plan and assignment.plan.weighing else None,
        contained=contained,
    )


#: Per vertex its placement; the refused IN-OP shares (for the API); per new task the refusals that made it start.
WanReport = tuple[dict[str, dict[str, Any]], list[dict[str, Any]], dict[str, list[dict[str, Any]]]]


def _wan_report(plan: QueryPlan, running: dict[str, str]) -> WanReport:
    """Per vertex its placement decision; the IN-OP shares refused for bandwidth, for the API and as notes on the
    tasks they made start; the refusals overruled because taking every share stood better (:func:`optimizer.planner.standing`)."""
    placement: dict[str, dict[str, Any]] = {}
    not_shared: list[dict[str, Any]] = []
    notes: dict[str, list[dict[str, Any]]] = {}
    for vertex, decision in plan.decisions.items():
        task_id = running[vertex]
        placement[vertex] = {"running_task": task_id, **decision.to_dict()}
        refused = [refusal for refusal in decision.refused if refusal.kind == "IN-OP"] if decision.action == "create" else []
        if refused:
            notes[task_id] = [refusal.to_dict() for refusal in refused]
        for refusal in notes.get(task_id, ()):
            not_shared.append({"task": vertex, "running_task": task_id, "site": decision.site,
                               "equivalent": refusal["candidate"], "equivalent_site": refusal["site"],
                               **{key: refusal[key] for key in ("link", "needed_mbps", "available_mbps", "reason")}})
    for vertex, refusal in plan.overruled:
        placement[vertex].setdefault("overruled", []).append(refusal.to_dict())
    return placement, not_shared, notes


def _check_topic_free(state: State, submitted_id: str, sink: TaskSpec, owner: str | None, any_writer: bool = False) -> None:
    """A topic takes the sinks of one owner's dataflows, each writing its own records; never two instances of one
    computation (their records would repeat), never another owner's."""
    topic = sink.config["topic"]
    writers = sorted(state.sink_topics.get(topic, set()) - {sink.id})
    for writer in writers:
        if any_writer and state.tasks[writer].signature == sink.signature:
            raise SinkTopicTaken(
                f"sink {submitted_id!r} writes topic {topic!r}, which another running instance of the same computation "
                f"already writes; a second writer would duplicate its records",
                culprit={"task": submitted_id, "field": "config.topic"},
            )
    users = sorted({flow for writer in writers for flow in state.users.get(writer, ())})
    others = sorted({str(state.dataflows[flow].owner) for flow in users if state.dataflows[flow].owner != owner})
    if others:
        raise SinkTopicTaken(  # naming neither the other owner nor their dataflows (an admin finds them in /running)
            f"sink {submitted_id!r} writes topic {topic!r}, which a running dataflow of another owner already writes; "
            "a topic takes the writers of one owner",
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
    state.add_dataflow(plan.dataflow)
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
        split_off = _split_off(state, border, doomed, len(state.dag_members[dag]) - len(doomed_here))
        if split_off is None:  # the search could not tell which part is the largest: look at the whole DAG
            remaining = state.dag_members[dag] - doomed
            split_off = sorted(_components(state, remaining), key=lambda members: (-len(members), min(members)))[1:]
        for members in split_off:
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
    state.drop_dataflow(plan.dataflow.id)
    for task_id in reversed(_parents_first(state, {spec.id for spec in plan.terminated})):  # readers before what they read
        state.drop_task(task_id)
    for task_id, dag in plan.splits.items():
        state.set_dag(task_id, dag)
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


def _split_off(state: State, border: set[str], doomed: set[str], size: int) -> list[set[str]] | None:
    """The parts of a DAG that a removal cuts off its largest part, largest first (ties by smallest member).

    What remains of the DAG (``size`` tasks outside ``doomed``) is searched from every ``border`` task at
    once, one task at a time per search: searches that meet join, and a search that runs out of tasks
    has found a whole part. Every remaining part holds a border task (``doomed`` holds the children of
    each of its tasks), so the search stops as soon as all but one search joined or finished: when the
    DAG holds together that costs the distance between the border tasks, when it splits the size of
    the parts cut off, not of the DAG. None when the part left unexplored is not the strictly largest
    (then the caller looks at the whole DAG, as the ids of the parts depend on every member).
    """
    leader: dict[int, int] = {}
    groups: dict[int, tuple[list[str], set[str]]] = {}  # a search's index -> (its frontier, the tasks it reached)
    seen: dict[str, int] = {}
    for index, task_id in enumerate(sorted(border)):
        leader[index] = index
        groups[index] = ([task_id], {task_id})
        seen[task_id] = index

    def find(index: int) -> int:
        while leader[index] != index:
            leader[index] = leader[leader[index]]
            index = leader[index]
        return index

    finished: list[set[str]] = []
    while len(groups) > 1:
        for index in list(groups):
            if index not in groups or len(groups) == 1:
                continue
            frontier, reached = groups[index]
            if not frontier:
                finished.append(reached)
                del groups[index]
                continue
            task_id = frontier.pop()
            neighbours = [parent for _, parent in state.tasks[task_id].inputs]
            neighbours.extend(state.children.get(task_id, ()))
            for other in neighbours:
                if other in doomed:
                    continue
                found = seen.get(other)
                if found is None:
                    seen[other] = index
                    reached.add(other)
                    frontier.append(other)
                    continue
                found = find(found)
                if found == index:
                    continue
                their_frontier, their_reached = groups.pop(found)
                leader[found] = index
                if len(their_reached) > len(reached):  # the larger set takes the smaller one
                    their_reached |= reached
                    their_frontier.extend(frontier)
                    frontier, reached = their_frontier, their_reached
                else:
                    reached |= their_reached
                    frontier.extend(their_frontier)
                groups[index] = (frontier, reached)
    if not finished:
        return []
    left = size - sum(len(part) for part in finished)
    if left <= max(len(part) for part in finished):
        return None
    return sorted(finished, key=lambda members: (-len(members), min(members)))


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
