"""What a fragment query computes now: its live plan, swapped atomically between micro-batches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from runtime.plan import TaskSpec


@dataclass(frozen=True)
class LivePlan:
    """What a query computes now.

    ``tasks``: active tasks hosted by the query, parents first. ``reads``:
    parent task id -> internal topic, for parents running in other queries.
    ``outputs``: ``(task id, topic)`` written every batch (sinks and taps).
    ``schemas``: output schema of every task the plan names (parents too).
    """

    version: int
    tasks: tuple[TaskSpec, ...] = ()
    reads: Mapping[str, str] = field(default_factory=dict)
    outputs: tuple[tuple[str, str], ...] = ()
    schemas: Mapping[str, dict[str, str]] = field(default_factory=dict)

    def same_work(self, other: "LivePlan") -> bool:
        return (
            [t.id for t in self.tasks] == [t.id for t in other.tasks]
            and dict(self.reads) == dict(other.reads)
            and self.outputs == other.outputs
        )


def consumer_counts(plan: LivePlan) -> dict[str, int]:
    """How many tasks and outputs of the plan read each task's output."""
    counts: dict[str, int] = {}
    for task in plan.tasks:
        for _, parent in task.inputs:
            counts[parent] = counts.get(parent, 0) + 1
    for task_id, _ in plan.outputs:
        counts[task_id] = counts.get(task_id, 0) + 1
    return counts
