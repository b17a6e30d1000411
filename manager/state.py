"""The manager's in-memory view of what is submitted and what runs.

Redis is the durable copy (:mod:`manager.store`); this is the working copy the
pure merge/unmerge functions read. Indexes are kept so that a submit costs a
lookup per task, whatever the number of unrelated running dataflows; with a
WAN configuration, so is the load each link carries (updated as tasks come and
go, never recomputed on a submit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planning.model import RunningTask
from optimizer.rates import estimate_rate
from runtime.plan import TaskSpec
from wan.flow_index import FlowIndex
from wan.topology import WanConfig

#: Suffix of the task a dataflow holds for the running task a containment share reads (manager/containment.py);
#: not a valid submitted task id, so it never meets one.
WIDER = "~wider"
#: Suffix of the roll-up window a dataflow runs between the running window it reads and its own task when that
#: task is a select finishing the roll-up (an ``avg`` as sum over count); not a valid submitted task id either.
ROLLUP = "~rollup"


def is_added(task_id: str) -> bool:
    """Whether ``task_id`` is a task a containment share added to a dataflow, not one of its document."""
    return task_id.endswith((WIDER, ROLLUP))


def _count(index: dict, outer: Any, inner: Any, step: int) -> None:
    """Add ``step`` to ``index[outer][inner]`` (a count), keeping no zero counts and no empty inner dicts."""
    counts = index.setdefault(outer, {})
    count = counts.get(inner, 0) + step
    if count > 0:
        counts[inner] = count
    else:
        counts.pop(inner, None)
        if not counts:
            del index[outer]


def document_topics(flow: "SubmittedDataflow") -> set[str]:
    """The topics ``flow``'s sources read and its sinks write, as submitted."""
    return {task["config"]["topic"] for task in flow.document["tasks"] if task["type"] in ("source", "sink")}


def read_only(flow: "SubmittedDataflow") -> set[str]:
    """The running tasks ``flow`` uses only through its containment shares, not as tasks of its document."""
    if not flow.contained:
        return set()
    return flow.running_ids() - set(flow.document_tasks().values())

#: Link loads closer to zero than this are zero (float residue of adding and removing rates).
LOAD_EPSILON = 1e-9


@dataclass
class SubmittedDataflow:
    """A submitted dataflow and how it maps onto running tasks."""

    id: str
    name: str
    owner: str | None
    submitted_at: float
    document: dict[str, Any]
    tasks: dict[str, str]
    sinks: dict[str, dict[str, str]]
    contained: dict[str, dict[str, Any]] = field(default_factory=dict)

    def running_ids(self) -> set[str]:
        return set(self.tasks.values())

    def wider_tasks(self) -> int:
        """How many of :attr:`tasks` are not in the document: the running tasks containment shares read
        (:mod:`manager.containment`; an equivalent one is the submitted task's own), and the roll-up windows of
        shares that finish with a select."""
        return sum((share["residual"] is not None) + bool(share.get("finish")) for share in self.contained.values())

    def document_tasks(self) -> dict[str, str]:
        """:attr:`tasks` of the document's tasks only (what the API answers as ``tasks``)."""
        if not self.contained:
            return self.tasks
        return {task: running for task, running in self.tasks.items() if not is_added(task)}

    def shares(self) -> list[dict[str, Any]]:
        """The containment shares, as the API answers them (``contained``)."""
        return list(self.contained.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "owner": self.owner,
            "submitted_at": self.submitted_at,
            "document": self.document,
            "tasks": self.tasks,
            "sinks": self.sinks,
            **({"contained": self.contained} if self.contained else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SubmittedDataflow":
        return cls(**data)


#: Containment shares by kind, as ``GET /stats`` counts them (``equivalent``: a predicate equal to a running
#: one's, read as is).
CONTAINMENT_KINDS = ("filter", "select", "window_aggregate", "equivalent")


@dataclass
class Tally:
    """Counts over the whole state that :class:`State` keeps as it changes (``GET /stats``)."""

    submitted_tasks: int = 0   # tasks of the submitted documents (not those containment shares add)
    running_streams: int = 0   # inputs of the running tasks
    by_users: dict[int, int] = field(default_factory=dict)   # dataflows using a task -> how many tasks
    contained: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTAINMENT_KINDS, 0))

    def move_task(self, old: int | None, new: int | None) -> None:
        """A running task's user count went from ``old`` to ``new`` (None: it was not running / is gone)."""
        if old is not None:
            left = self.by_users[old] - 1
            if left:
                self.by_users[old] = left
            else:
                del self.by_users[old]
        if new is not None:
            self.by_users[new] = self.by_users.get(new, 0) + 1

    def count_dataflow(self, flow: SubmittedDataflow, sign: int) -> None:
        self.submitted_tasks += sign * (len(flow.tasks) - flow.wider_tasks())
        for share in flow.contained.values():
            self.contained["equivalent" if share["residual"] is None else share["kind"]] += sign


@dataclass
class State:
    """Submitted dataflows, running tasks and the indexes over them.

    - ``by_signature``: signature -> running task id (the signature index; with
      several running instances of a signature, the smallest id);
    - ``instances``: signature -> every running task with it (more than one
      only where a WAN share was refused, at different sites or on other inputs);
    - ``users``: running task id -> dataflows whose sinks' ancestor graphs hold it
      (its reference count is the size);
    - ``children``: running task id -> running tasks reading its output;
    - ``dag_of`` / ``dag_members``: the running DAGs (connected components);
    - ``fragments``: fragment id -> running task ids;
    - ``sink_topics``: topic -> the running sink tasks writing it (several only for
      dataflows of one owner: a topic takes writers of one owner);
    - ``wan``: the WAN configuration, or None (then every equivalent task is shared);
    - ``rates``: estimated output Mbps of every running task (with ``wan``);
    - ``arrivals``: producer -> other site -> its consumers there (the routers);
    - ``link_load``: (site, site) -> Mbps its crossing streams demand;
    - ``flow``: the running set's flow model at the estimated rates, task by task
      (:class:`wan.flow_index.FlowIndex`; with ``wan``), so that weighing a plan
      costs the size of the plan, not of the running set;
    - ``not_shared``: running task -> the refused shares that made it start;
    - ``quarantined``: running tasks that failed at run time, and those reading
      them (runtime.quarantine): offered to no new dataflow, which gets tasks
      of its own instead. Set from the runtime before a plan; not stored;
    - ``owned``: owner -> the ids of the dataflows it has submitted; ``owner_users``:
      running task id -> owner -> how many of its users that owner submitted
      (so limits and answers per owner cost a lookup, not a scan of every
      dataflow); ``owner_reads``: running task id -> owner -> how many of
      those users use it only as what a containment share reads, not as a
      task of their document (:meth:`in_document_of`); ``owner_topics``:
      owner -> topic -> how many of its dataflows read or write the topic
      (:meth:`owner_uses_topic`). All four follow :meth:`add_dataflow` and
      :meth:`drop_dataflow`;
    - ``tally``: the counts ``GET /stats`` answers (submitted tasks, running
      streams, tasks by how many dataflows use them, containment shares by
      kind), kept as tasks and dataflows come and go so that reading them costs
      nothing at any size.
    """

    dataflows: dict[str, SubmittedDataflow] = field(default_factory=dict)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    by_signature: dict[str, str] = field(default_factory=dict)
    users: dict[str, set[str]] = field(default_factory=dict)
    children: dict[str, set[str]] = field(default_factory=dict)
    dag_of: dict[str, str] = field(default_factory=dict)
    dag_members: dict[str, set[str]] = field(default_factory=dict)
    fragments: dict[str, set[str]] = field(default_factory=dict)
    sink_topics: dict[str, set[str]] = field(default_factory=dict)
    instances: dict[str, set[str]] = field(default_factory=dict)
    wan: WanConfig | None = None
    rates: dict[str, float] = field(default_factory=dict)
    arrivals: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    link_load: dict[tuple[str, str], float] = field(default_factory=dict)
    flow: FlowIndex = field(default_factory=FlowIndex)
    not_shared: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    quarantined: set[str] = field(default_factory=set)
    owned: dict[str | None, set[str]] = field(default_factory=dict)
    owner_users: dict[str, dict[str | None, int]] = field(default_factory=dict)
    owner_reads: dict[str, dict[str | None, int]] = field(default_factory=dict)
    owner_topics: dict[str | None, dict[str, int]] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    next_dataflow: int = 1
    next_dag: int = 1
    version: int = 0

    # -- building blocks used by merge/unmerge and by loading -----------------

    def add_task(self, task: TaskSpec, dag: str) -> None:
        self.tasks[task.id] = task
        self.tally.running_streams += len(task.inputs)
        self.tally.move_task(None, 0)
        same = self.instances.setdefault(task.signature, set())
        same.add(task.id)
        self.by_signature[task.signature] = min(same)
        if self.wan is not None:
            self.rates[task.id] = estimate_rate(task.type, task.config, [self.rates.get(p, 0.0) for _, p in task.inputs], self.wan)
            for _, parent in task.inputs:
                self._attach(parent, task)
            self._index(task)
        self.users.setdefault(task.id, set())
        self.children.setdefault(task.id, set())
        for _, parent in task.inputs:
            self.children.setdefault(parent, set()).add(task.id)
        self.fragments.setdefault(task.fragment, set()).add(task.id)
        if task.type == "sink":
            self.sink_topics.setdefault(task.config["topic"], set()).add(task.id)
        self.set_dag(task.id, dag)

    def drop_task(self, task_id: str) -> TaskSpec:
        task = self.tasks[task_id]
        if self.wan is not None:
            for _, parent in task.inputs:
                self._detach(parent, task)
            if task_id in self.flow:
                self.flow.drop(task_id)
        del self.tasks[task_id]
        same = self.instances[task.signature]
        same.discard(task_id)
        if same:
            self.by_signature[task.signature] = min(same)
        else:
            del self.instances[task.signature]
            del self.by_signature[task.signature]
        self.rates.pop(task_id, None)
        self.arrivals.pop(task_id, None)
        self.not_shared.pop(task_id, None)
        self.tally.running_streams -= len(task.inputs)
        self.tally.move_task(len(self.users[task_id]), None)
        del self.users[task_id]
        self.owner_users.pop(task_id, None)
        self.owner_reads.pop(task_id, None)
        self.children.pop(task_id, None)
        for _, parent in task.inputs:
            if parent in self.children:
                self.children[parent].discard(task_id)
        members = self.fragments[task.fragment]
        members.discard(task_id)
        if not members:
            del self.fragments[task.fragment]
        if task.type == "sink":
            writers = self.sink_topics.get(task.config["topic"], set())
            writers.discard(task_id)
            if not writers:
                self.sink_topics.pop(task.config["topic"], None)
        dag = self.dag_of.pop(task_id)
        self.dag_members[dag].discard(task_id)
        if not self.dag_members[dag]:
            del self.dag_members[dag]
        return task

    def add_dataflow(self, flow: SubmittedDataflow) -> None:
        """Record a submitted dataflow as a user of its running tasks (which must be running)."""
        self.dataflows[flow.id] = flow
        self.owned.setdefault(flow.owner, set()).add(flow.id)
        self.tally.count_dataflow(flow, +1)
        for task_id in flow.running_ids():
            users = self.users[task_id]
            if flow.id not in users:
                self.tally.move_task(len(users), len(users) + 1)
            users.add(flow.id)
            _count(self.owner_users, task_id, flow.owner, +1)
        for task_id in read_only(flow):
            _count(self.owner_reads, task_id, flow.owner, +1)
        for topic in document_topics(flow):
            _count(self.owner_topics, flow.owner, topic, +1)

    def drop_dataflow(self, dataflow_id: str) -> SubmittedDataflow:
        """Forget a submitted dataflow and its uses of running tasks (the tasks stay)."""
        flow = self.dataflows.pop(dataflow_id)
        self.tally.count_dataflow(flow, -1)
        mine = self.owned[flow.owner]
        mine.discard(flow.id)
        if not mine:
            del self.owned[flow.owner]
        for task_id in flow.running_ids():
            users = self.users[task_id]
            if flow.id in users:
                self.tally.move_task(len(users), len(users) - 1)
            users.discard(flow.id)
            _count(self.owner_users, task_id, flow.owner, -1)
        for task_id in read_only(flow):
            _count(self.owner_reads, task_id, flow.owner, -1)
        for topic in document_topics(flow):
            _count(self.owner_topics, flow.owner, topic, -1)
        return flow

    def of_owner(self, owner: str | None) -> list[SubmittedDataflow]:
        """The dataflows ``owner`` submitted, in no particular order: a lookup, not a scan of every dataflow.

        Safe on a state another thread changes (a snapshot's readers): a dataflow gone meanwhile is left out."""
        found = (self.dataflows.get(dataflow_id) for dataflow_id in list(self.owned.get(owner, ())))
        return [flow for flow in found if flow is not None]

    def uses(self, owner: str | None, task_id: str) -> bool:
        """Whether a dataflow of ``owner`` uses running task ``task_id``."""
        return self.owner_users.get(task_id, {}).get(owner, 0) > 0

    def owner_uses_topic(self, owner: str | None, topic: str) -> bool:
        """Whether a dataflow of ``owner`` reads or writes ``topic`` (a source or sink of its document): a lookup."""
        return self.owner_topics.get(owner, {}).get(topic, 0) > 0

    def in_document_of(self, owner: str | None, task_id: str) -> bool:
        """Whether a dataflow of ``owner`` runs ``task_id`` as a task of its document (not only as what one of its
        containment shares reads): two lookups, whatever the number of the task's users."""
        return self.owner_users.get(task_id, {}).get(owner, 0) > self.owner_reads.get(task_id, {}).get(owner, 0)

    def set_dag(self, task_id: str, dag: str) -> None:
        old = self.dag_of.get(task_id)
        if old == dag:
            return
        if old is not None:
            self.dag_members[old].discard(task_id)
            if not self.dag_members[old]:
                del self.dag_members[old]
        self.dag_of[task_id] = dag
        self.dag_members.setdefault(dag, set()).add(task_id)

    # -- the WAN ledger ----------------------------------------------------------

    def set_wan(self, wan: WanConfig | None) -> None:
        """Adopt a WAN configuration (or drop it): recompute rates, arrivals and link loads once."""
        self.wan = wan
        self.rates, self.arrivals, self.link_load, self.flow = {}, {}, {}, FlowIndex()
        if wan is None:
            return
        for task_id in parents_first(self.tasks):
            task = self.tasks[task_id]
            self.rates[task_id] = estimate_rate(task.type, task.config, [self.rates[p] for _, p in task.inputs], wan)
            for _, parent in task.inputs:
                self._attach(parent, task)
            self._index(task)

    def _index(self, task: TaskSpec) -> None:
        """Add ``task`` to the flow model at its site, or where its data is when it has none (a task started
        before the WAN configuration existed): a source at its topic's configured origin, another task at its
        first input's site. A task without either stays out, and the optimizer does not see it."""
        site = task.site
        if site is None and task.type == "source":
            origin = self.wan.source_origin(str(task.config.get("topic")))
            site = origin.site if origin else None
        elif site is None and task.inputs:
            site = self.flow.sites.get(task.inputs[0][1])
        if site is not None:
            self.flow.add(task.id, site, [parent for _, parent in task.inputs], self.rates[task.id])

    def _attach(self, parent: str, consumer: TaskSpec) -> None:
        """A stream from ``parent`` to ``consumer``: it crosses when their sites differ, once per site."""
        site, parent_site = consumer.site, self.tasks[parent].site
        if site is None or parent_site is None or site == parent_site:
            return
        consumers = self.arrivals.setdefault(parent, {}).setdefault(site, set())
        if not consumers:
            link = (parent_site, site)
            self.link_load[link] = self.link_load.get(link, 0.0) + self.rates.get(parent, 0.0)
        consumers.add(consumer.id)

    def _detach(self, parent: str, consumer: TaskSpec) -> None:
        site, parent_site = consumer.site, self.tasks[parent].site
        sites = self.arrivals.get(parent)
        if site is None or sites is None or site not in sites:
            return
        sites[site].discard(consumer.id)
        if sites[site]:
            return
        del sites[site]
        if not sites:
            del self.arrivals[parent]
        link = (parent_site, site)
        load = self.link_load.get(link, 0.0) - self.rates.get(parent, 0.0)
        if abs(load) < LOAD_EPSILON:
            self.link_load.pop(link, None)
        else:
            self.link_load[link] = load

    # -- read views ------------------------------------------------------------

    def dag_dataflows(self, dag: str) -> set[str]:
        """Δ: the dataflows a running DAG supports."""
        result: set[str] = set()
        for task_id in self.dag_members.get(dag, ()):
            result |= self.users[task_id]
        return result

    def running_streams(self) -> int:
        return self.tally.running_streams

    def submitted_tasks(self) -> int:
        """Tasks the submitted documents hold (not the running tasks containment shares add to a dataflow)."""
        return self.tally.submitted_tasks


def parents_first(tasks: Mapping[str, TaskSpec]) -> list[str]:
    """Ids of ``tasks`` ordered so that every task comes after its inputs (inputs outside are ignored)."""
    pending = {task_id: sum(1 for _, parent in task.inputs if parent in tasks) for task_id, task in tasks.items()}
    children: dict[str, list[str]] = {}
    for task_id, task in tasks.items():
        for _, parent in task.inputs:
            children.setdefault(parent, []).append(task_id)
    ready = sorted(task_id for task_id, count in pending.items() if count == 0)
    order: list[str] = []
    while ready:
        task_id = ready.pop()
        order.append(task_id)
        for child in children.get(task_id, ()):
            pending[child] -= 1
            if pending[child] == 0:
                ready.append(child)
    return order


class RunningSet:
    """The running set as the optimizer reads it (:class:`planning.model.RunningView`).

    Read with a WAN configuration. Tasks started before it existed have no
    site; they are located where their data is (:meth:`State._index`).
    ``rates`` (task id -> Mbps) replaces the estimates, e.g. with measured
    rates (:mod:`manager.traffic`).
    """

    def __init__(self, state: State, rates: Mapping[str, float] | None = None) -> None:
        self._state = state
        self._rates = state.rates if rates is None else rates
        self._index: FlowIndex | None = None

    def site(self, task_id: str) -> str | None:
        """Where the state's flow model locates the task (:meth:`State._index`); None for a task it leaves out."""
        return self._state.flow.sites.get(task_id)

    def instances(self, signature: str) -> Iterable[RunningTask]:
        result = []
        for task_id in sorted(self._state.instances.get(signature, ())):
            if self.site(task_id) is not None and task_id not in self._state.quarantined:
                result.append(self.task(task_id))
        return result

    def task(self, task_id: str) -> RunningTask:
        spec = self._state.tasks[task_id]
        return RunningTask(spec.id, spec.signature, spec.type, self.site(task_id) or "", spec.inputs,
                           self._rates.get(task_id, 0.0))

    def arrivals(self, task_id: str) -> Mapping[str, Iterable[str]]:
        return self._state.arrivals.get(task_id, {})

    def running_tasks(self) -> Iterable[RunningTask]:
        return [self.task(task_id) for task_id in sorted(self._state.tasks) if self.site(task_id) is not None]

    def flow_index(self) -> FlowIndex | None:
        """The state's flow model, kept up to date with the estimates; with other rates (measured), the same
        model built from them the first time this view is asked (once per plan, not once per plan weighed)."""
        if self._state.wan is None:
            return None
        if self._rates is self._state.rates:
            return self._state.flow
        if self._index is None:
            flow, index = self._state.flow, FlowIndex()
            for task_id, site in flow.sites.items():  # parents first, as they were added
                index.add(task_id, site, flow.inputs[task_id], self._rates.get(task_id, 0.0))
            self._index = index
        return self._index
