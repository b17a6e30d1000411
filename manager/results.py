"""What a submit and a removal answer, and the limits checked before either changes anything."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from manager.exceptions import LimitExceeded, ServiceFull
from manager.model import Dataflow
from manager.state import State
from runtime.plan import TaskSpec


@dataclass(frozen=True)
class SubmitResult:
    """What a submit did. ``sites`` maps submitted task ids to the site of their running task;
    ``not_shared`` lists the tasks that got a running task of their own although an equivalent
    one runs, with the link and the numbers that made Algorithm 1 refuse the share; ``placement``
    says, with a WAN configuration, which rule placed each task; ``weighing`` how Algorithm 1's plan
    and the one taking every share stood, and which was kept (:class:`planning.model.Weighing`).
    ``owner_tasks`` (not in :meth:`to_dict`): of the running tasks the answer names as already
    running (those of ``reused`` and the ``equivalent`` of ``not_shared``), the ones a dataflow of
    the same owner used before this submit; the API tells a user only about those (api/visibility.py).
    ``duplicate_of``: a dataflow of the same owner that was running already and is identical to this one (the
    same sinks writing the same topics, :mod:`manager.duplicates`), or None; ``warnings``: what the submitter
    should know, in words (a duplicate; a dataflow of the same name writing one of its topics). ``contained``: the
    tasks that read a running task containing them (:class:`manager.containment.Contained`), each naming the
    running task it reads (``tasks`` holds the submitted task ids only)."""

    id: str
    name: str
    tasks: dict[str, str]
    reused: list[str]
    created: list[str]
    sinks: dict[str, dict[str, str]]
    started: list[str]
    sites: dict[str, str | None] = field(default_factory=dict)
    not_shared: list[dict[str, Any]] = field(default_factory=list)
    placement: dict[str, dict[str, Any]] = field(default_factory=dict)
    weighing: dict[str, Any] | None = None
    owner_tasks: frozenset[str] = frozenset()
    duplicate_of: str | None = None
    warnings: list[str] = field(default_factory=list)
    contained: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        result = {
            "id": self.id,
            "name": self.name,
            "tasks": self.tasks,
            "reused": self.reused,
            "created": self.created,
            "sinks": self.sinks,
            "sites": self.sites,
            "not_shared": self.not_shared,
            "duplicate_of": self.duplicate_of,
            "warnings": self.warnings,
        }
        if self.placement:
            result["placement"] = self.placement
        if self.weighing:
            result["weighing"] = self.weighing
        result["contained"] = self.contained
        return result


@dataclass(frozen=True)
class RemoveResult:
    """What a removal stopped; ``released``: the running tasks the dataflow used that no other dataflow of its
    owner uses after it (what its owner may be told stopped, when others' dataflows keep some running)."""

    id: str
    terminated: list[str]
    released: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "terminated": self.terminated}


def owned_among(state: State, owner: str | None, task_ids: set[str]) -> frozenset[str]:
    """Those of the running ``task_ids`` that some dataflow of ``owner`` uses in ``state``."""
    return frozenset(task for task in task_ids if state.uses(owner, task))


@dataclass(frozen=True)
class Limits:
    """What one dataflow, one owner and the whole service may hold; checked before anything changes."""

    tasks_per_dataflow: int = 200
    dataflows_per_owner: int = 1000
    running_tasks: int = 20_000
    queries: int = 2_000

    def check_dataflow(self, flow: Dataflow) -> None:
        if len(flow.tasks) > self.tasks_per_dataflow:
            raise LimitExceeded(f"dataflow {flow.name!r} has {len(flow.tasks)} tasks; at most "
                                f"{self.tasks_per_dataflow} per dataflow (SANA_MAX_TASKS_PER_DATAFLOW)",
                                culprit={"limit": "SANA_MAX_TASKS_PER_DATAFLOW"})

    def check_owner(self, state: State, owner: str | None) -> None:
        owned = len(state.owned.get(owner, ()))
        if owned >= self.dataflows_per_owner:
            raise LimitExceeded(f"owner {owner!r} has {owned} dataflows; at most {self.dataflows_per_owner} "
                                "(SANA_MAX_DATAFLOWS_PER_OWNER): remove one first",
                                culprit={"limit": "SANA_MAX_DATAFLOWS_PER_OWNER"})

    def check_service(self, state: State, new_tasks: list[TaskSpec]) -> None:
        if len(state.tasks) + len(new_tasks) > self.running_tasks:
            raise ServiceFull(f"the service runs {len(state.tasks)} tasks and this dataflow needs {len(new_tasks)} more; "
                              f"at most {self.running_tasks} (SANA_MAX_RUNNING_TASKS)",
                              culprit={"limit": "SANA_MAX_RUNNING_TASKS"})
        # A query hosts one fragment or more, so fragments bound the queries whatever the runtime hosts together.
        fragments = {task.fragment for task in new_tasks if task.fragment not in state.fragments}
        if len(state.fragments) + len(fragments) > self.queries:
            raise ServiceFull(f"the service runs {len(state.fragments)} fragments (each up to one Spark query) and this "
                              f"dataflow needs {len(fragments)} more; at most {self.queries} (SANA_MAX_QUERIES)",
                              culprit={"limit": "SANA_MAX_QUERIES"})
