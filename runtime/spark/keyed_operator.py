"""What every keyed operator does on the driver: plan its shuffle, keep O(workers) state, read the reports.

A micro-batch of a keyed operator goes through three calls from the fragment:

1. :meth:`KeyedOperator.plan` builds the (lazy) Spark plan: route the input
   to logical workers, shuffle by worker (:func:`runtime.spark.keyed.shuffle`)
   and run a :class:`~runtime.spark.keyed.WorkerTask` per worker. It returns
   the output DataFrame and the driver's part of the state for this batch
   (watermarks, the routing table in force).
2. The fragment runs its output job; the worker tasks run inside it and
   write their state versions and reports.
3. :meth:`KeyedOperator.finish` reads the workers' reports (a few numbers
   each), updates the load and the watermarks and returns the driver state to
   save with the batch; :meth:`abort` undoes step 1 if the batch failed.

Bucket moves requested with :meth:`request_moves` are applied by the next
batch; :meth:`wait_moved` waits until a batch that applied them completed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from runtime.exceptions import QueryFailed
from runtime.plan import TaskSpec
from runtime.operators.types import Schema
from runtime.spark.builders import ddl
from runtime.spark.frames import arrow_schema
from runtime.spark.keyed import DEFAULT_WORKERS, Router, WorkerLoad, WorkerTask, partition_keys, shuffle_sql
from runtime.spark.worker_state import WorkerStateStore


class KeyedOperator:
    """Base of the keyed operators: subclasses route their inputs and make the per-worker step."""

    kind = ""

    def __init__(self, task: TaskSpec, workers: int = DEFAULT_WORKERS) -> None:
        self.task = task
        self.workers = workers
        self.router = Router(workers)
        self.load = WorkerLoad(workers)
        self.pkeys = partition_keys(workers)
        self.moved_rows = 0
        self._applied = 0
        self._in_flight: tuple[dict[str, Any], dict[str, Any]] | None = None
        self._moved = threading.Condition()

    # -- state the driver keeps ---------------------------------------------------

    def initial_state(self) -> dict[str, Any]:
        return {"routing": self.router.initial(), "watermark_us": None, "state_rows": 0}

    @staticmethod
    def state_rows(state: Mapping[str, Any]) -> int:
        return int(state.get("state_rows", 0))

    # -- one micro-batch ------------------------------------------------------------

    def plan(self, session: SparkSession, batch_id: int, inputs: Mapping[str, list[str]],
             state: Mapping[str, Any], store: WorkerStateStore) -> tuple[DataFrame, dict[str, Any]]:
        """The operator's output for this batch (lazy) and its driver state; ``inputs``: per port, SQL relations."""
        routing = self.router.next_table(state["routing"])
        draft = {**state, "routing": routing}
        branches, columns, step, output = self._route(session, inputs, draft, routing["table"])
        task = WorkerTask(store, self.task.id, batch_id, self.pkeys, tuple(state["routing"]["table"]),
                          tuple(routing["table"]), step, arrow_schema(output))
        frame = session.sql(shuffle_sql(branches, columns, self.pkeys)).mapInArrow(task, ddl(output))
        self._in_flight = (dict(state["routing"]), routing)
        return self._finish_plan(session, frame, draft), draft

    def finish(self, batch_id: int, draft: dict[str, Any], store: WorkerStateStore) -> dict[str, Any]:
        reports = {worker: store.meta(self.task.id, worker, batch_id) or {} for worker in range(self.workers)}
        missing = [worker for worker in range(self.workers) if not reports[worker]]
        if missing:
            raise QueryFailed(f"keyed operator {self.task.id} ({self.kind}): batch {batch_id} left no state version "
                              f"for worker(s) {missing}")
        self.load.record(reports)
        self.moved_rows += sum(int(report.get("moved_in_rows", 0)) for report in reports.values())
        new_state = self._advance(draft, reports)
        new_state["state_rows"] = sum(int(report.get("state_rows", 0)) for report in reports.values())
        with self._moved:
            self._applied = max(self._applied, draft["routing"].get("requested", 0))
            self._in_flight = None
            self._moved.notify_all()
        return new_state

    def abort(self) -> None:
        """The batch failed: requested moves that it took are asked for again."""
        if self._in_flight is None:
            return
        old, new = self._in_flight
        self._in_flight = None
        again = {bucket: worker for bucket, (before, worker) in enumerate(zip(old["table"], new["table"])) if before != worker}
        if again:
            self.router.request(again)

    # -- moving buckets -------------------------------------------------------------

    def request_moves(self, moves: Mapping[int, int]) -> int:
        return self.router.request(moves)

    def wait_moved(self, request: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._moved:
            while self._applied < request:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueryFailed(f"keyed operator {self.task.id}: bucket moves not applied within {timeout_s:.0f} s "
                                      "(no micro-batch ran: is input flowing?)")
                self._moved.wait(remaining)

    # -- metrics --------------------------------------------------------------------

    def metrics(self, state: Mapping[str, Any] | None) -> dict[str, Any]:
        state = state or self.initial_state()
        routing = state["routing"]
        return {
            "operator": self.kind,
            "state_rows": self.state_rows(state),
            "watermark_us": state.get("watermark_us"),
            "workers": self.load.snapshot(),
            "routing": {"workers": self.workers, "buckets": len(routing["table"]), "version": routing["version"],
                        "table": list(routing["table"])},
            "moved_state_rows": self.moved_rows,
        }

    # -- what subclasses provide ------------------------------------------------------

    def _route(self, session: SparkSession, inputs: Mapping[str, list[str]], draft: dict[str, Any],
               table: list[int]) -> tuple[list[str], list[tuple[str, str]], Any, Schema]:
        """The routed ``SELECT`` branches, the shuffle's columns (name, Spark type), the worker step and
        the schema of the step's output (column -> Spark type)."""
        raise NotImplementedError

    def _finish_plan(self, session: SparkSession, frame: DataFrame, draft: dict[str, Any]) -> DataFrame:
        """The operator's output from the workers' output (by default: as it is)."""
        return frame

    def _advance(self, draft: dict[str, Any], reports: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        """The driver state after the batch, given the workers' reports."""
        return dict(draft)
