"""What the manager hands the runtime: running tasks and the change to apply."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskSpec:
    """A running task as the runtime needs it.

    ``inputs`` holds ``(port, parent running task id)`` pairs, sorted;
    ``fragment`` names the Spark query the task runs in; ``schema`` is the
    task's output schema (for a sink: what it writes).
    """

    id: str
    signature: str
    type: str
    config: dict[str, Any] = field(hash=False, compare=False)
    site: str | None
    inputs: tuple[tuple[str, str], ...]
    fragment: str
    schema: dict[str, str] = field(hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "signature": self.signature,
            "type": self.type,
            "config": self.config,
            "site": self.site,
            "inputs": [list(pair) for pair in self.inputs],
            "fragment": self.fragment,
            "schema": self.schema,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaskSpec":
        return cls(
            id=data["id"],
            signature=data["signature"],
            type=data["type"],
            config=data["config"],
            site=data["site"],
            inputs=tuple((port, parent) for port, parent in data["inputs"]),
            fragment=data["fragment"],
            schema=data["schema"],
        )


@dataclass(frozen=True)
class Change:
    """One merge or unmerge as the runtime sees it.

    ``start`` lists new tasks parents-first; their inputs may name tasks that
    already run (the runtime must tap those without restarting them).
    ``stop`` lists tasks to stop, children-first. ``reason`` is for logs.
    """

    start: tuple[TaskSpec, ...] = ()
    stop: tuple[TaskSpec, ...] = ()
    reason: str = ""

    @property
    def empty(self) -> bool:
        return not self.start and not self.stop

    def inverse(self) -> "Change":
        """The change that undoes this one (used to roll back)."""
        return Change(
            start=tuple(reversed(self.stop)),
            stop=tuple(reversed(self.start)),
            reason=f"undo {self.reason}",
        )


def seeds_problem(change: Change, seeds: Mapping[str, str], running: Collection[str]) -> str | None:
    """Why ``seeds`` (new task -> the running task whose state it continues) do not fit ``change``, or None.

    >>> task = TaskSpec("b", "s", "filter", {}, None, (), "f", {})
    >>> seeds_problem(Change(start=(task,)), {"b": "a"}, {"a"}) is None, seeds_problem(Change(), {"b": "a"}, {"a"})
    (True, "seeds name tasks the change does not start: ['b']")
    """
    started = {task.id for task in change.start}
    if not set(seeds) <= started:
        return f"seeds name tasks the change does not start: {sorted(set(seeds) - started)}"
    unknown = sorted({source for source in seeds.values() if source not in running})
    if unknown:
        return f"seeds continue tasks that do not run: {unknown}"
    return None
