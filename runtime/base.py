"""The interface the manager drives: apply a change, undo it, reconcile after a restart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from runtime.plan import Change, TaskSpec


class Runtime(Protocol):
    """A place where running tasks execute.

    ``apply`` returns once started tasks run and stopped tasks have stopped,
    or raises :class:`runtime.exceptions.RuntimeFailure` having left things as
    they were. ``reconcile`` makes what runs equal ``tasks`` (after a crash of
    the manager between deploy and commit, or a restart).
    """

    kind: str

    def apply(self, change: Change) -> None: ...

    def hand_over(self, change: Change, seeds: Mapping[str, str]) -> dict[str, Any]:
        """Apply ``change`` so that its new tasks continue, from a cut of their inputs, the work (and, per
        ``seeds``: new task -> running task, the state) of the tasks they replace: nothing lost or written
        twice. Used by re-placement; raises :class:`runtime.exceptions.RuntimeFailure` having left things as they were."""
        ...

    def reconcile(self, tasks: Mapping[str, TaskSpec]) -> None: ...

    def runs(self, tasks: Mapping[str, TaskSpec]) -> bool:
        """Whether what this runtime keeps as running (in Redis, so a restarted manager can ask) is exactly
        ``tasks``: after a crash, tells a change the runtime completed from one it did not."""
        ...

    def restore(self, tasks: Mapping[str, TaskSpec]) -> None:
        """Redis lost what this runtime keeps there (restarted empty): write it back from what runs (``tasks``)."""
        ...

    def health(self) -> dict[str, Any]:
        """The runtime as a part of the service (``status`` ok or down); the dataflows' work is :meth:`work`."""
        ...

    def work(self) -> dict[str, Any]:
        """The dataflows' work: ``status`` ok or degraded, ``degraded`` queries, ``quarantined`` task ids."""
        ...

    def failures(self) -> Mapping[str, Any]:
        """Running task id -> why it failed at run time and was quarantined (:class:`runtime.quarantine.TaskFailure`)."""
        ...

    def stalled(self) -> Mapping[str, dict[str, Any]]:
        """Running task id -> the query it waits for, for the tasks of a query that is down or restarting."""
        ...

    def fragment_metrics(self) -> dict[str, Any]:
        """``{"fragments": {fragment: its query's rates, lag, state}, "queries": {query id: metrics}}``; empty
        when nothing runs as queries."""
        ...

    def read_positions(self) -> dict[str, dict[int, int]]:
        """Per topic and partition, the lowest offset a query of this runtime may still ask the broker for (what it
        has not processed yet, or where it started when it does not run); topics no query reads are absent. The
        broker's retention deletes nothing at or above it (:mod:`api.retention`)."""
        ...

    def task_costs(self) -> dict[str, Any]:
        """``{"measured", "window_s", "tasks": {task id: cpu_cores, kafka_bytes_per_s, ...}}``
        (:mod:`runtime.costs`); ``measured`` false when nothing is measured."""
        ...

    def defragment(self) -> dict[str, Any]:
        """Run groups of queries that one query could run as one (``queries_before``, ``queries_after``,
        ``merged``, ``skipped``); a runtime without queries reports nothing to do in a ``note``."""
        ...

    def close(self) -> None: ...
