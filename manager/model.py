"""The manager's own, immutable types for a validated dataflow."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.operators.types import Schema


@dataclass(frozen=True)
class Task:
    """A validated task. ``config`` is canonical: defaults filled, SQL and durations normalized."""

    id: str
    type: str
    config: dict[str, Any] = field(hash=False)
    site: str | None = None


@dataclass(frozen=True)
class Stream:
    """``<from, to, port>``."""

    src: str
    dst: str
    port: str = "in"


@dataclass(frozen=True)
class Dataflow:
    """A validated dataflow.

    ``order`` lists task ids parents-first; ``schemas`` maps each task id to the
    schema of its output (a sink: what it writes); ``signatures`` maps each task
    id to its ancestor signature; ``document`` is the body as submitted.
    """

    name: str
    tasks: dict[str, Task] = field(hash=False)
    streams: tuple[Stream, ...]
    order: tuple[str, ...]
    schemas: dict[str, Schema] = field(hash=False)
    signatures: dict[str, str] = field(hash=False)
    document: dict[str, Any] = field(hash=False)
    owner: str | None = None

    def inputs(self, task_id: str) -> list[Stream]:
        """Streams arriving at ``task_id``."""
        return [stream for stream in self.streams if stream.dst == task_id]

    @property
    def sinks(self) -> list[str]:
        """Ids of the sink tasks, in document order."""
        return [task_id for task_id, task in self.tasks.items() if task.type == "sink"]
