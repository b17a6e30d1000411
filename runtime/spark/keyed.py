"""Logical workers for keyed operators: a partitioning the runtime controls, and load metrics.

Every keyed operator (``window_aggregate``, ``join``) routes each record to one
of a fixed number of logical workers. The route is a table ``bucket -> worker``
over ``pmod(xxhash64(keys), BUCKETS)``, read afresh every micro-batch, so the
runtime can move buckets between workers while the query runs (Reshape's
split by keys). Operators keep their state per worker and merge it across
workers before anything is emitted or probed, so a key whose records sit on
several workers (Reshape's split by records) still gives exact results: skew
handling changes the table, never the operators.

:class:`WorkerLoad` counts, per worker, the records of the last batch, the
cumulative records and an exponentially weighted average, plus state rows:
the load signal a skew controller reads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

DEFAULT_WORKERS = 8
BUCKETS = 64
WORKER_COLUMN = "__sana_worker"
EWMA_ALPHA = 0.3


def default_table(workers: int, buckets: int = BUCKETS) -> tuple[int, ...]:
    """Buckets dealt round-robin over the workers.

    >>> default_table(3, 7)
    (0, 1, 2, 0, 1, 2, 0)
    """
    return tuple(bucket % workers for bucket in range(buckets))


@dataclass
class Router:
    """The runtime-controlled route ``keys -> bucket -> logical worker`` of one keyed operator."""

    workers: int = DEFAULT_WORKERS
    table: tuple[int, ...] = ()
    version: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.table:
            self.table = default_table(self.workers)

    def column(self, keys: Sequence[str]) -> Column:
        """The worker of each row, as a Spark column (computed on the executors)."""
        with self._lock:
            table = self.table
        if not keys:
            return F.lit(table[0]).alias(WORKER_COLUMN)
        bucket = F.pmod(F.xxhash64(*[F.col(f"`{key}`") for key in keys]), F.lit(len(table)))
        return F.element_at(F.array(*[F.lit(worker) for worker in table]), (bucket + 1).cast("int")).alias(WORKER_COLUMN)

    def move(self, bucket: int, worker: int) -> None:
        """Send ``bucket``'s keys to ``worker`` from the next micro-batch on."""
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker {worker} is not in 0..{self.workers - 1}")
        with self._lock:
            table = list(self.table)
            table[bucket] = worker
            self.table = tuple(table)
            self.version += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"workers": self.workers, "buckets": len(self.table), "version": self.version, "table": list(self.table)}


@dataclass
class WorkerLoad:
    """Per-worker load of one keyed operator."""

    workers: int = DEFAULT_WORKERS
    last: list[int] = field(default_factory=list)
    total: list[int] = field(default_factory=list)
    ewma: list[float] = field(default_factory=list)
    state_rows: list[int] = field(default_factory=list)
    batches: int = 0

    def __post_init__(self) -> None:
        for name in ("last", "total", "state_rows"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.workers)
        if not self.ewma:
            self.ewma = [0.0] * self.workers

    def record(self, rows: Mapping[int, int], state_rows: Mapping[int, int]) -> None:
        self.batches += 1
        for worker in range(self.workers):
            count = int(rows.get(worker, 0))
            self.last[worker] = count
            self.total[worker] += count
            self.ewma[worker] = EWMA_ALPHA * count + (1 - EWMA_ALPHA) * self.ewma[worker]
            self.state_rows[worker] = int(state_rows.get(worker, 0))

    def snapshot(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "last_batch_rows": list(self.last),
            "total_rows": list(self.total),
            "ewma_rows": [round(value, 2) for value in self.ewma],
            "state_rows": list(self.state_rows),
        }


def counts_by_worker(frame, column: str = WORKER_COLUMN, weight: str | None = None) -> dict[int, int]:
    """``{worker: rows}`` of a pandas frame holding a worker column (optionally summing ``weight``)."""
    if frame is None or len(frame) == 0:
        return {}
    grouped = frame.groupby(column)[weight].sum() if weight else frame.groupby(column).size()
    return {int(worker): int(count) for worker, count in grouped.items()}
