"""The manager's in-memory view of what is submitted and what runs.

Redis is the durable copy (:mod:`manager.store`); this is the working copy the
pure merge/unmerge functions read. Indexes are kept so that a submit costs a
lookup per task, whatever the number of unrelated running dataflows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.plan import TaskSpec


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

    def running_ids(self) -> set[str]:
        return set(self.tasks.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "owner": self.owner,
            "submitted_at": self.submitted_at,
            "document": self.document,
            "tasks": self.tasks,
            "sinks": self.sinks,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SubmittedDataflow":
        return cls(**data)


@dataclass
class State:
    """Submitted dataflows, running tasks and the indexes over them.

    - ``by_signature``: signature -> running task id (the signature index);
    - ``users``: running task id -> dataflows whose sinks' ancestor graphs hold it
      (its reference count is the size);
    - ``children``: running task id -> running tasks reading its output;
    - ``dag_of`` / ``dag_members``: the running DAGs (connected components);
    - ``fragments``: fragment id -> running task ids;
    - ``sink_topics``: topic -> the running sink task writing it.
    """

    dataflows: dict[str, SubmittedDataflow] = field(default_factory=dict)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    by_signature: dict[str, str] = field(default_factory=dict)
    users: dict[str, set[str]] = field(default_factory=dict)
    children: dict[str, set[str]] = field(default_factory=dict)
    dag_of: dict[str, str] = field(default_factory=dict)
    dag_members: dict[str, set[str]] = field(default_factory=dict)
    fragments: dict[str, set[str]] = field(default_factory=dict)
    sink_topics: dict[str, str] = field(default_factory=dict)
    next_dataflow: int = 1
    next_dag: int = 1
    version: int = 0

    # -- building blocks used by merge/unmerge and by loading -----------------

    def add_task(self, task: TaskSpec, dag: str) -> None:
        self.tasks[task.id] = task
        self.by_signature[task.signature] = task.id
        self.users.setdefault(task.id, set())
        self.children.setdefault(task.id, set())
        for _, parent in task.inputs:
            self.children.setdefault(parent, set()).add(task.id)
        self.fragments.setdefault(task.fragment, set()).add(task.id)
        if task.type == "sink":
            self.sink_topics[task.config["topic"]] = task.id
        self.set_dag(task.id, dag)

    def drop_task(self, task_id: str) -> TaskSpec:
        task = self.tasks.pop(task_id)
        del self.by_signature[task.signature]
        del self.users[task_id]
        self.children.pop(task_id, None)
        for _, parent in task.inputs:
            if parent in self.children:
                self.children[parent].discard(task_id)
        members = self.fragments[task.fragment]
        members.discard(task_id)
        if not members:
            del self.fragments[task.fragment]
        if task.type == "sink" and self.sink_topics.get(task.config["topic"]) == task_id:
            del self.sink_topics[task.config["topic"]]
        dag = self.dag_of.pop(task_id)
        self.dag_members[dag].discard(task_id)
        if not self.dag_members[dag]:
            del self.dag_members[dag]
        return task

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

    # -- read views ------------------------------------------------------------

    def dag_dataflows(self, dag: str) -> set[str]:
        """Δ: the dataflows a running DAG supports."""
        result: set[str] = set()
        for task_id in self.dag_members.get(dag, ()):
            result |= self.users[task_id]
        return result

    def dataflow_dags(self, dataflow_id: str) -> set[str]:
        """Φ: the running DAGs holding a dataflow's tasks (one unless the dataflow is disconnected)."""
        return {self.dag_of[task_id] for task_id in self.dataflows[dataflow_id].running_ids()}

    def running_streams(self) -> int:
        return sum(len(task.inputs) for task in self.tasks.values())

    def submitted_tasks(self) -> int:
        return sum(len(flow.tasks) for flow in self.dataflows.values())
