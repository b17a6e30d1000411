"""What a fragment query computes now: its live plan, swapped atomically between micro-batches."""

from __future__ import annotations

import zlib
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


#: How many outputs of one query can write one topic, each with its own range of ``sana.seq`` numbers.
SEQ_SLOTS = 256


def seq_slots(outputs: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], int]:
    """A number per output ``(task id, topic)``, different among the outputs writing one topic.

    An output's records are named ``slot << 55 | its row's number within its own branch``, so a record keeps its
    name when a replay of its batch runs under a plan with fewer outputs (a removal fenced while the batch was in
    flight). The slot comes from the task id alone, so removing an output leaves the others' slots as they were;
    only outputs whose ids collide on one topic (1 in 256 for two) are moved on, in task id order.

    >>> seq_slots((("a", "t"), ("b", "u"))) == {("a", "t"): zlib.crc32(b"a") % 256, ("b", "u"): zlib.crc32(b"b") % 256}
    True
    >>> len(set(seq_slots(tuple((f"task{i}", "t") for i in range(40))).values()))
    40
    """
    slots: dict[tuple[str, str], int] = {}
    taken: dict[str, set[int]] = {}
    for task_id, topic in sorted(set(outputs)):
        used = taken.setdefault(topic, set())
        if len(used) == SEQ_SLOTS:
            raise ValueError(f"more than {SEQ_SLOTS} outputs of one query write topic {topic!r}")
        slot = zlib.crc32(task_id.encode()) % SEQ_SLOTS
        while slot in used:
            slot = (slot + 1) % SEQ_SLOTS
        used.add(slot)
        slots[(task_id, topic)] = slot
    return slots
