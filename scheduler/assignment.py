"""The scheduler's stage of a submit: each query vertex gets a running task, each new task a site, an id and a fragment.

The manager's reuse plan (and, with a WAN configuration, the optimizer's
admissions) come in; an :class:`Assignment` goes out, which the manager
turns into the tasks it starts. One entry point per way of sharing:

- :func:`assign_by_wan`: Algorithm 2 places the query from what Algorithm 1
  admitted (:func:`scheduler.placement.place`);
- :func:`assign_by_locality`: without a WAN configuration the reuse plan
  already says which vertices reuse a running task; a new task runs where
  its parents run (:func:`scheduler.fragments.default_site`).

Both name the new tasks and cut them into fragments
(:func:`scheduler.fragments.assign_fragments`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from planning.model import QueryPlan, QueryTask, RunningView
from scheduler.fragments import assign_fragments, default_site
from scheduler.placement import AdmissionSource, place
from wan.monitor import WanMonitor


class Placed(Protocol):
    """A task that holds an id: its signature and its site (a running task, or one planned here)."""

    @property
    def signature(self) -> str: ...

    @property
    def site(self) -> str | None: ...


@dataclass(frozen=True)
class NewTask:
    """A task to start: the query vertex it runs, its id, site and fragment; ``inputs`` are ``(port, task id)``."""

    vertex: str
    id: str
    signature: str
    site: str | None
    inputs: tuple[tuple[str, str], ...]
    fragment: str = ""


@dataclass(frozen=True)
class Assignment:
    """Where every vertex of a query runs: ``running`` maps it onto a task id (a running one or one of ``new``,
    parents first); ``plan`` holds Algorithm 2's decisions when a WAN configuration placed the query."""

    running: dict[str, str]
    new: tuple[NewTask, ...]
    plan: QueryPlan | None = None


def assign_by_wan(admissions: AdmissionSource, running: RunningView, wan: WanMonitor, taken: Mapping[str, Placed]) -> Assignment:
    """Place the query Algorithm 1 admitted shares for; name the new tasks (``taken`` holds the running ids)."""
    plan = place(admissions, running, wan)
    query = {task.id: task for task in admissions.query}
    mapping: dict[str, str] = {}
    created: dict[str, NewTask] = {}
    for vertex, decision in plan.decisions.items():
        if decision.action == "reuse":
            mapping[vertex] = decision.running
            continue
        task = query[vertex]
        task_id = new_task_id(task.type, task.signature, decision.site, taken, created)
        inputs = tuple(sorted((port, mapping[parent]) for port, parent in task.inputs))
        created[task_id] = NewTask(vertex, task_id, task.signature, decision.site, inputs)
        mapping[vertex] = task_id
    # Several instances of a signature may run (refused shares), so the id tells fragments apart.
    keys = {task_id: f"{task.signature}:{task_id}" for task_id, task in created.items()}
    return Assignment(mapping, _with_fragments(created, taken, keys), plan)


def assign_by_locality(query: Sequence[QueryTask], reused: Mapping[str, str], taken: Mapping[str, Placed]) -> Assignment:
    """Without a WAN configuration: vertices in ``reused`` run on those tasks; every other one is new, at its
    declared site, else where its parents run when they agree (a source at its declared site)."""
    mapping: dict[str, str] = {}
    created: dict[str, NewTask] = {}
    for task in query:
        if task.id in reused:
            mapping[task.id] = reused[task.id]
            continue
        inputs = tuple(sorted((port, mapping[parent]) for port, parent in task.inputs))
        parent_sites = [(created.get(parent) or taken[parent]).site for _, parent in inputs]
        site = task.site if task.type == "source" else default_site(task.site, parent_sites)
        task_id = new_task_id(task.type, task.signature, site, taken, created)
        created[task_id] = NewTask(task.id, task_id, task.signature, site, inputs)
        mapping[task.id] = task_id
    keys = {task_id: task.signature for task_id, task in created.items()}
    return Assignment(mapping, _with_fragments(created, taken, keys))


def _with_fragments(created: Mapping[str, NewTask], taken: Mapping[str, Placed], keys: Mapping[str, str]) -> tuple[NewTask, ...]:
    def site_of(task_id: str) -> str | None:
        return (created.get(task_id) or taken[task_id]).site

    fragments = assign_fragments(
        list(created),
        {task_id: [parent for _, parent in task.inputs] for task_id, task in created.items()},
        {task_id: site_of(task_id) for task in created.values() for task_id in [task.id, *(p for _, p in task.inputs)]},
        keys,
    )
    return tuple(NewTask(task.vertex, task.id, task.signature, task.site, task.inputs, fragments[task.id])
                 for task in created.values())


def running_task_id(task_type: str, signature: str, *taken: Mapping[str, Placed]) -> str:
    """A readable, content-derived id: ``<type>-<first 16 hex of the signature>``.

    Longer when another signature already holds that id in one of ``taken``.

    >>> from types import SimpleNamespace as Task
    >>> running_task_id("filter", "ab" * 32), running_task_id("filter", "ab" * 32, {"filter-" + "ab" * 8: Task(signature="x")})
    ('filter-abababababababab', 'filter-abababababababababababab')
    """
    length = 16
    while True:
        candidate = f"{task_type}-{signature[:length]}"
        existing = next((ids[candidate] for ids in taken if candidate in ids), None)
        if existing is None or existing.signature == signature:
            return candidate
        length += 8


def new_task_id(task_type: str, signature: str, site: str | None, *taken: Mapping[str, Placed]) -> str:
    """An id for a new task that no running or planned task holds.

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
