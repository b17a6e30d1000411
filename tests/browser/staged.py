"""A runtime for the inspector's browser tests: the dry run's bookkeeping, with the metrics a Spark run reports.

Nothing runs, but every fragment answers as a running Spark query would:
rows/s that drift a little from one refresh to the next (so sparklines have
a shape), source lag per topic partition, keyed operators with per-worker
loads and Reshape's splits, and a cost per task. The keyed operators, in
order of their running ids, are a skewed one that Reshape split, a sparse one
(a few rows over eight workers) and an idle one; any further one is balanced.
A test makes work fail or stall with :meth:`StagedRuntime.fail` and
:meth:`StagedRuntime.stall`, and the runtime reports it as Spark's does
(``failures``, ``stalled``, a degraded fragment without progress).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Mapping
from typing import Any

from runtime.dryrun import DryRunRuntime
from runtime.operators.fields import duration_ms
from runtime.plan import Change, TaskSpec
from runtime.quarantine import TaskFailure

WORKERS = 8
HISTORY = 30
CPU = {"source": 0.035, "select": 0.018, "filter": 0.012, "window_aggregate": 0.11, "join": 0.16, "sink": 0.024}
KEYED = ("window_aggregate", "join")


def _spread(name: str, low: float, high: float) -> float:
    """A number in [low, high) fixed by ``name``: the same task reports the same scale at every refresh."""
    return low + (high - low) * (zlib.crc32(name.encode()) % 1000) / 1000


class StagedRuntime(DryRunRuntime):
    """The dry-run runtime (what runs is kept in Redis) answering with staged Spark metrics."""

    kind = "staged"

    def __init__(self, client, prefix: str) -> None:
        super().__init__(client, prefix)
        self.specs: dict[str, TaskSpec] = {}
        self.failed: dict[str, TaskFailure] = {}
        self.down: dict[str, dict[str, Any]] = {}  # fragment -> {"error", "restarts"}

    # -- what the tests change -------------------------------------------------------

    def fail(self, task_id: str, error: str, expression: str | None = None) -> None:
        """Quarantine running task ``task_id``, as Spark's error in one of its expressions does."""
        query = self.query_of(self.specs[task_id].fragment)
        error_class = error.partition("]")[0].lstrip("[")
        self.failed[task_id] = TaskFailure(task_id, query, 42, error, error_class, expression, time.time())

    def stall(self, fragment: str, error: str, restarts: int = 3) -> None:
        """Take the query of ``fragment`` down: the supervisor restarts it, ``restarts`` times so far."""
        self.down[fragment] = {"error": error, "restarts": restarts}

    # -- the runtime -------------------------------------------------------------------

    def apply(self, change: Change) -> None:
        super().apply(change)
        for task in change.stop:
            self.specs.pop(task.id, None)
        self.specs.update({task.id: task for task in change.start})

    def reconcile(self, tasks: Mapping[str, TaskSpec]) -> None:
        super().reconcile(tasks)
        self.specs = dict(tasks)

    def query_of(self, fragment: str) -> str:
        number = sorted({spec.fragment for spec in self.specs.values()}).index(fragment) + 1
        return f"q{number}-{fragment.removeprefix('frag-')[:8]}"

    def fragment_metrics(self) -> dict[str, Any]:
        keyed = sorted(task_id for task_id, spec in self.specs.items() if spec.type in KEYED)
        fragments = {}
        for fragment in sorted({spec.fragment for spec in self.specs.values()}):
            tasks = sorted(task_id for task_id, spec in self.specs.items() if spec.fragment == fragment)
            operators = {task_id: _keyed_metrics(self.specs[task_id], keyed.index(task_id)) for task_id in tasks
                         if task_id in keyed}
            fragments[fragment] = self._fragment(fragment, tasks, operators)
        return {"fragments": fragments, "queries": {}}

    def _fragment(self, fragment: str, tasks: list[str], operators: dict[str, Any]) -> dict[str, Any]:
        down = self.down.get(fragment)
        rate = _spread(fragment, 400, 2400) * (1 + 0.15 * math.sin(time.time() / 3 + _spread(fragment, 0, 6)))
        sources = {self.specs[task].config["topic"] for task in tasks if self.specs[task].type == "source"}
        topics = sorted(sources) or [f"sana-tap-{fragment}"]  # a fragment without a source reads a tap
        lag = {topic: {p: int(_spread(f"{topic}{p}", 0, 900)) for p in range(3)} for topic in topics}
        metrics = {
            "fragment": fragment, "query": self.query_of(fragment), "status": "degraded" if down else "running",
            "tasks": tasks, "restarts": down["restarts"] if down else 0, "error": down["error"] if down else None,
            "state_rows": sum(value["state_rows"] for value in operators.values()), "keyed_operators": operators,
        }
        if down:  # a restarted query has made no progress yet: no rates, no lag
            return {**metrics, "input_rows_per_s": None, "processed_rows_per_s": None, "batch_duration_ms": None,
                    "source_lag": {}}
        return {**metrics, "input_rows_per_s": round(rate, 1), "processed_rows_per_s": round(rate * 1.08, 1),
                "batch_duration_ms": int(_spread(fragment, 180, 1400)), "source_lag": lag,
                "gather_s": self._gather_s(tasks)}

    def _gather_s(self, tasks: list[str]) -> float:
        """As the Spark runtime says of a query: the least delay its sinks allow, if each gives one (else 0)."""
        delays = [self.specs[task].config.get("max_delay") for task in tasks if self.specs[task].type == "sink"]
        return min(duration_ms(delay) for delay in delays) / 1000 if delays and all(delays) else 0.0

    def failures(self) -> dict[str, TaskFailure]:
        return {task: failure for task, failure in self.failed.items() if task in self.specs}

    def stalled(self) -> dict[str, dict[str, Any]]:
        return {task_id: {"query": self.query_of(spec.fragment), **self.down[spec.fragment]}
                for task_id, spec in self.specs.items() if spec.fragment in self.down}

    def work(self) -> dict[str, Any]:
        degraded = [{"query": self.query_of(fragment), "fragments": [fragment], **why,
                     "tasks": sorted(task for task, spec in self.specs.items() if spec.fragment == fragment)}
                    for fragment, why in sorted(self.down.items())]
        return {"status": "degraded" if degraded else "ok", "degraded": degraded, "quarantined": sorted(self.failures())}

    def task_costs(self) -> dict[str, Any]:
        tasks = {}
        for task_id, spec in self.specs.items():
            running = spec.fragment not in self.down and task_id not in self.failed
            tasks[task_id] = {
                "cpu_cores": CPU.get(spec.type, 0.02) * _spread(task_id, 0.6, 1.4) if running else 0.0,
                "kafka_bytes_per_s": _spread(task_id, 8_000, 90_000) if running and spec.type == "sink" else 0.0,
                "state_bytes": _spread(task_id, 200_000, 4_000_000) if spec.type in KEYED else 0.0,
            }
        return {"measured": True, "window_s": 30.0, "cpu_cores": sum(row["cpu_cores"] for row in tasks.values()),
                "tasks": tasks}


def _keyed_metrics(spec: TaskSpec, rank: int) -> dict[str, Any]:
    """What a keyed operator reports: the first skewed and split, the second sparse, the third idle."""
    if rank == 0:
        last = [5200, 610, 590, 2150, 640, 600, 1980, 620]
        history = [[int(rows * (1 + 0.1 * math.sin(batch + worker))) for worker, rows in enumerate(
            [9400, 600, 610, 40, 620, 590, 30, 640] if batch < 12 else last)] for batch in range(HISTORY)]
        groups = [{"skewed": 0, "helpers": [{"worker": 3, "fraction": 0.2961}, {"worker": 6, "fraction": 0.2684}],
                   "split_side": None, "phase": 2, "iteration": 1, "since_batch": 11, "balance_ratio": 0.9132,
                   "ratio_history": []}]
        reshape = {"detections": 1, "iterations": 1, "groups": groups}
    elif rank == 1:
        last = [0, 3, 0, 1, 0, 0, 2, 0]
        history = [[int(worker in (1, 3, 6) and (batch + worker) % 10 == 0) for worker in range(WORKERS)]
                   for batch in range(HISTORY)]
        reshape = {"detections": 0, "iterations": 0, "groups": []}
    elif rank == 2:
        last, history = [0] * WORKERS, [[0] * WORKERS for _ in range(HISTORY)]
        reshape = {"detections": 0, "iterations": 0, "groups": []}
    else:
        last = [int(_spread(f"{spec.id}{worker}", 900, 1100)) for worker in range(WORKERS)]
        history = [[int(rows * (1 + 0.08 * math.sin(batch / 2 + worker))) for worker, rows in enumerate(last)]
                   for batch in range(HISTORY)]
        reshape = {"detections": 0, "iterations": 0, "groups": []}
    total = [sum(batch[worker] for batch in history) for worker in range(WORKERS)]
    return {
        "operator": spec.type, "state_rows": sum(total) // 20, "state_bytes": sum(total) * 40, "watermark_us": None,
        "workers": {"batches": HISTORY, "last_batch_rows": last, "total_rows": total, "ewma_rows": last,
                    "state_rows": [rows // 20 for rows in total], "task_ms": [15.0 + rows / 1000 for rows in last]},
        "routing": {"workers": WORKERS, "tasks": WORKERS, "buckets": 64, "version": 1, "table": [], "splits": []},
        "moved_state_rows": 1840 if rank == 0 else 0,
        "reshape": {"enabled": True, "split": "records", "eta": 1.5, "tau": 0.25, "tau_range": [0.1, 0.5],
                    "max_helpers": 3, "rollbacks": 0, "events": [], "load_history": history, **reshape},
    }
