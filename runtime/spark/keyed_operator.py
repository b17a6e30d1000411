"""What every keyed operator does on the driver: plan its shuffle, keep O(workers) state, read the reports.

A micro-batch of a keyed operator goes through three calls from the fragment:

1. :meth:`KeyedOperator.plan` builds the (lazy) Spark plan: route the input
   to logical workers, shuffle by worker (:func:`runtime.spark.shuffle.shuffle`)
   and run a :class:`~runtime.spark.worker_task.WorkerTask` per worker. It returns
   the output DataFrame and the driver's part of the state for this batch
   (watermarks, the routing table in force).
2. The fragment runs its output job; the worker tasks run inside it and
   write their state versions and reports.
3. :meth:`KeyedOperator.finish` reads the workers' reports (a few numbers
   each), updates the load and the watermarks and returns the driver state to
   save with the batch; :meth:`abort` undoes step 1 if the batch failed.

An operator that needs one number from its input before it can plan (the
window's largest event time) says so with :meth:`KeyedOperator.scan_sql`;
the fragment answers the scans of all its operators that do not read another
keyed operator's output with one Spark job (:func:`max_of_each`) and passes
each answer to :meth:`KeyedOperator.plan`.

An operator with nothing to do in a batch (:meth:`KeyedOperator.idle`: a
window whose scan found no row, so no row to take and no window to close)
runs no Spark task: its output is an empty relation, its state stays as it
was and its workers write no version (a worker's batch starts from its newest
version before it, so the next batch finds the state it left).

An operator that reads another's output alone can run inside the other's
worker tasks when it says so (:meth:`KeyedOperator.fuses_into`: a window's
roll-up, docs/containment.md): :meth:`KeyedOperator.plan_fused` runs its step
after the other's, worker by worker, on what the other's step emitted there,
with its own state versions and reports under its own id and the other's
routing. The shuffle's output then carries a tag column (:data:`TAG`), and
each operator's output is its tagged rows, merged as it merges its own. No
second scan, shuffle or Python task runs for it.

Bucket moves requested with :meth:`request_moves` are applied by the next
batch; :meth:`wait_moved` waits until a batch that applied them completed.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession

from runtime.exceptions import QueryFailed
from runtime.plan import TaskSpec
from runtime.operators.types import Schema
from runtime.spark.sql_text import ddl, quote
from runtime.spark.frames import arrow_schema
from runtime.operators.keyed_options import ReshapeOptions
from runtime.spark.shuffle import (DEFAULT_WORKERS, ROWS_PER_TASK, Router, Routing, packed_tasks, partition_keys,
                                   shuffle_sql)
from runtime.spark.worker_task import TAG, Fused, WorkerLoad, WorkerTask
from runtime.spark.reshape import BatchLoad, Controller, ReshapeSettings
from runtime.spark.worker_state import WorkerStateStore


NOT_SCANNED: Any = object()  # plan() without a scan answered by the fragment: the operator runs its own
IDLE = "__idle__"  # in a batch's draft state: the operator had nothing to do (removed by finish())
FUSED = "__fused__"  # in a batch's draft state: the operator it ran inside (removed by finish())


@dataclass(frozen=True)
class TaggedOutput:
    """An output written straight from a fused shuffle's output (:meth:`KeyedOperator.combined_output_sql`): the
    operator's rows tagged ``tag`` there (its columns under ``renames``), to ``topic`` as slot ``slot`` names them;
    ``casts`` the sink's columns and types when a sink writes them, None when the operator's output is written."""

    tag: int
    operator: "KeyedOperator"
    renames: Mapping[str, str]
    topic: str
    slot: int
    casts: Schema | None = None


class FusedOutput(NamedTuple):
    """A fused operator's part of a batch (:meth:`KeyedOperator.plan_fused`): its output as a query over the fused
    shuffle's output, its draft state, its tag there and its worker output's columns there (``renames``)."""

    sql: str
    draft: dict[str, Any]
    tag: int
    renames: Mapping[str, str]


def max_of_each(queries: Sequence[str]) -> str:
    """One statement (one Spark job) giving ``max(v)`` of each query's column ``v``, in order.

    >>> print(max_of_each(["SELECT a AS v FROM x", "SELECT b AS v FROM y"]))
    SELECT max(v0), max(v1) FROM (SELECT v AS v0, CAST(NULL AS BIGINT) AS v1 FROM (SELECT a AS v FROM x) AS s0 UNION ALL SELECT CAST(NULL AS BIGINT) AS v0, v AS v1 FROM (SELECT b AS v FROM y) AS s1)
    """
    branches = []
    for index, query in enumerate(queries):
        columns = ", ".join(f"{'v' if other == index else 'CAST(NULL AS BIGINT)'} AS v{other}" for other in range(len(queries)))
        branches.append(f"SELECT {columns} FROM ({query}) AS s{index}")
    return f"SELECT {', '.join(f'max(v{index})' for index in range(len(queries)))} FROM ({' UNION ALL '.join(branches)})"


def follows(saved: Mapping[str, Any], planned: Mapping[str, Any] | None) -> bool:
    """Whether ``planned`` can be the routing of the batch after the one that saved ``saved``: the same buckets and
    workers, and the same version or the next.

    >>> saved = {"table": [0, 1], "version": 3, "workers": 2}
    >>> follows(saved, {**saved, "version": 4}), follows(saved, {**saved, "table": [0, 1, 0]}), follows(saved, None)
    (True, False, False)
    """
    return (planned is not None and len(planned["table"]) == len(saved["table"])
            and planned.get("workers") == saved.get("workers", planned.get("workers"))
            and planned["version"] - saved["version"] in (0, 1))


class KeyedOperator:
    """Base of the keyed operators: subclasses route their inputs and make the per-worker step."""

    kind = ""
    sides = 1

    def __init__(self, task: TaskSpec, workers: int | None = None, reshape: ReshapeSettings | None = None,
                 rows_per_task: int = ROWS_PER_TASK) -> None:
        """``workers``/``reshape``: the service's defaults; the task's config overrides them. ``rows_per_task``:
        a batch with fewer rows per worker than this packs the workers into fewer Spark tasks (:func:`packed_tasks`)."""
        self.task = task
        self.workers = int(task.config.get("workers") or workers or DEFAULT_WORKERS)
        self.rows_per_task = rows_per_task
        options = ReshapeOptions.model_validate(task.config["reshape"]) if task.config.get("reshape") else None
        self.reshape = (reshape or ReshapeSettings()).override(options)
        self.router = Router(self.workers)
        self.load = WorkerLoad(self.workers)
        self.pkeys = partition_keys(self.workers)
        self.controller = Controller(self.workers, self.router.buckets, self.reshape, self.sides)
        self.routing: dict[str, Any] | None = None  # the newest routing a finished batch used
        self.moved_rows = 0
        self.idle_batches = 0
        self.fused_in: str | None = None  # the operator whose worker tasks ran the last batch, if another's
        # The temporary view of its fused shuffle's output (a digest of its id: ids that differ only in characters a
        # view name cannot hold stay apart).
        self.tagged_view = "sana_tagged_" + hashlib.sha1(task.id.encode()).hexdigest()[:16]
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

    def scan_sql(self, inputs: Mapping[str, list[str]], state: Mapping[str, Any]) -> str | None:
        """A query of one BIGINT column ``v`` over ``inputs`` whose max :meth:`plan` needs, or None (the default)."""
        return None

    def idle(self, scanned: Any) -> bool:
        """Whether a batch whose scan answered ``scanned`` gives this operator nothing to do: no row to take, no
        output, no state to change (then, with no routing change waiting, it runs no Spark task). Never, by
        default; it must hold for a replay of the batch as for its first run (it depends on the input alone)."""
        return False

    def plan(self, session: SparkSession, batch_id: int, inputs: Mapping[str, list[str]],
             state: Mapping[str, Any], store: WorkerStateStore, scanned: Any = NOT_SCANNED,
             planned: Mapping[str, Any] | None = None) -> tuple[DataFrame, dict[str, Any]]:
        """The operator's output for this batch (lazy) and its driver state; ``inputs``: per port, SQL relations;
        ``scanned``: the max of :meth:`scan_sql` when the fragment computed it (else the operator does);
        ``planned``: as in :meth:`plan_fused`."""
        output, draft, _, _ = self.plan_fused(session, batch_id, inputs, state, store, scanned, {}, planned)
        return output, draft

    def plan_fused(self, session: SparkSession, batch_id: int, inputs: Mapping[str, list[str]],
                   state: Mapping[str, Any], store: WorkerStateStore, scanned: Any,
                   fused: Mapping[str, tuple[KeyedOperator, Mapping[str, Any]]], planned: Mapping[str, Any] | None = None,
                   ) -> tuple[DataFrame | str, dict[str, Any], dict[str, FusedOutput], DataFrame | None]:
        """:meth:`plan`, with ``fused`` operators (by id, with their saved driver states; each accepted by its
        :meth:`fuses_into` this one) running in this one's worker tasks on what its step emits. Returns this
        operator's output and draft; each fused operator's output, as a query over a temporary view registered
        here (its text: nothing is analyzed for it unless it is read), its draft, tag and columns there; and the
        shuffle's output, registered as that view (:attr:`tagged_view`), not persisted: persist it if it is read more
        than once, and unpersist it after the batch. With fused operators this operator's output is such a query
        text too. In an idle batch: empty relations (tags 0) and no shuffle output (None), as without fused ones.

        ``planned``: the routing an earlier attempt at this batch ran with (the statement keeps it before any
        output is written): the batch routes as that attempt did, whatever is requested now (it stays requested
        for the next batch), so it shuffles, and names its output rows, as that attempt did. A routing that cannot
        follow the saved one (another table size or worker count, or not its version or the next) is not used."""
        saved = state["routing"]
        if int(saved.get("workers", self.workers)) != self.workers:
            raise QueryFailed(f"keyed operator {self.task.id}: its state has {saved['workers']} workers but it is "
                              f"configured with {self.workers}; a running operator keeps its worker count")
        self.controller.adopt(saved)
        routing = dict(planned) if follows(saved, planned) else self.router.next_table(saved)
        unchanged = routing["version"] == saved["version"] and routing["requested"] == saved.get("requested", 0)
        if self.idle(scanned) and unchanged and not routing["splits"]:
            self.idle_batches += 1
            children = {}
            for child_id, (child, child_state) in fused.items():  # nothing emitted: nothing for them either
                child.idle_batches += 1
                children[child_id] = FusedOutput(child.empty_sql(), {**child_state, IDLE: True}, 0, {})
            return self._empty(session), {**state, IDLE: True}, children, None
        draft = {**state, "routing": routing}
        branches, columns, step, output = self._route(session, inputs, draft, routing, scanned)
        tasks = self.tasks_for(state, routing)
        schema, runs, drafts = output, [], {}
        if fused:  # the shuffle's output: every operator's rows, tagged
            schema, step = {TAG: "int", **output}, self._fusing(step)
            for tag, (child_id, (child, child_state)) in enumerate(fused.items(), 1):
                run, drafts[child_id], columns_added = child.fused_run(self, child_state, draft, tag)
                runs.append(run)
                schema.update(columns_added)
        task = WorkerTask(store, self.task.id, batch_id, self.pkeys, Routing.of(saved), Routing.of(routing),
                          step, arrow_schema(schema), self.sides, tasks, tuple(runs))
        frame = session.sql(shuffle_sql(branches, columns, self.pkeys, tasks)).mapInArrow(task, ddl(schema))
        self._in_flight = (dict(saved), routing)
        if not fused:
            return self._finish_plan(session, frame, draft), draft, {}, None
        # One per operator, replaced every batch; the children's queries are analyzed later, in the batch's
        # statement, so the name must be this operator's alone.
        frame.createOrReplaceTempView(self.tagged_view)
        children = {child_id: FusedOutput(child.tagged_output_sql(self.tagged_view, tag, dict(run.renames)),
                                          drafts[child_id], tag, dict(run.renames))
                    for tag, (run, (child_id, (child, _))) in enumerate(zip(runs, fused.items()), 1)}
        return self.tagged_output_sql(self.tagged_view, 0, {}), draft, children, frame

    def finish(self, batch_id: int, draft: dict[str, Any], store: WorkerStateStore) -> dict[str, Any]:
        if draft.get(IDLE):
            return {key: value for key, value in draft.items() if key != IDLE}
        inside = draft.pop(FUSED, None)  # ran in another operator's tasks, on its routing: its Reshape decides
        reports = {worker: store.meta(self.task.id, worker, batch_id) or {} for worker in range(self.workers)}
        missing = [worker for worker in range(self.workers) if not reports[worker]]
        if missing:
            raise QueryFailed(f"keyed operator {self.task.id} ({self.kind}): batch {batch_id} left no state version "
                              f"for worker(s) {missing}")
        self.load.record(reports)
        self.moved_rows += sum(int(report.get("moved_in_rows", 0)) for report in reports.values())
        new_state = self._advance(draft, reports)
        new_state["state_rows"] = sum(int(report.get("state_rows", 0)) for report in reports.values())
        new_state["state_bytes"] = sum(int(report.get("state_bytes", 0)) for report in reports.values())
        new_state["tasks"] = packed_tasks(sum(int(report.get("rows", 0)) for report in reports.values()), self.workers,
                                          self.rows_per_task)
        self.routing = draft["routing"]
        self.fused_in = inside
        if inside is None:
            self._control(reports, draft["routing"]["table"])
        with self._moved:
            if inside is None:  # inside another, the routing and its requests are the other's
                self._applied = max(self._applied, draft["routing"].get("requested", 0))
            self._in_flight = None
            self._moved.notify_all()
        return new_state

    def tasks_for(self, state: Mapping[str, Any], routing: Mapping[str, Any]) -> int:
        """The Spark tasks the next shuffle runs the workers in: as many as the last batch's rows need
        (``state["tasks"]``, kept in the versioned state so that a replayed batch is shuffled, and its output
        ordered, as the first time), one per worker while Reshape splits one (its helpers must run apart)."""
        if routing.get("splits") or "tasks" not in state:
            return self.workers
        return max(1, min(self.workers, int(state["tasks"])))

    def abort(self) -> None:
        """The batch failed: requested moves and splits that it took are asked for again."""
        if self._in_flight is None:
            return
        old, new = self._in_flight
        self._in_flight = None
        again = {bucket: worker for bucket, (before, worker) in enumerate(zip(old["table"], new["table"])) if before != worker}
        if again:
            self.router.request(again)
        if (old.get("splits") or []) != new["splits"]:
            self.router.request_splits(new["splits"])

    # -- Reshape ----------------------------------------------------------------------

    def _control(self, reports: Mapping[int, Mapping[str, Any]], table: list[int]) -> None:
        """Feed the batch's loads to the skew controller and request the routing it asks for."""
        buckets = len(table)
        arrivals = [[0] * buckets for _ in range(self.sides)]
        for report in reports.values():
            for side, counts in enumerate(report.get("arrivals") or []):
                for bucket, count in enumerate(counts):
                    arrivals[side][bucket] += count
        load = BatchLoad(
            rows=tuple(int(reports[worker].get("rows", 0)) for worker in range(self.workers)),
            arrivals=tuple(tuple(side) for side in arrivals),
            state_rows=tuple(tuple(reports[worker].get("side_state_rows") or [0] * self.sides)
                             for worker in range(self.workers)),
        )
        decision = self.controller.observe(load, table)
        if decision is None:
            return
        if decision["moves"]:
            self.router.request(decision["moves"])
        self.router.request_splits(decision["splits"])

    # -- moving buckets -------------------------------------------------------------

    def request_moves(self, moves: Mapping[int, int]) -> int:
        """Manual bucket moves; buckets of a worker Reshape is splitting stay until the split ends. An operator
        running in another's worker tasks follows that one's routing: move its buckets instead."""
        if self.fused_in is not None:
            raise ValueError(f"it runs in the worker tasks of {self.fused_in} (it rolls that window up) and follows "
                             "its routing: move that operator's buckets")
        if self.routing is not None:
            routing = Routing.of(self.routing)
            involved = routing.involved()
            for bucket in moves:
                if 0 <= int(bucket) < len(routing.table) and routing.table[int(bucket)] in involved:
                    raise ValueError(f"bucket {bucket} belongs to worker {routing.table[int(bucket)]}, which Reshape is "
                                     "splitting or using as a helper; move it when the split has ended")
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
            "state_bytes": int(state.get("state_bytes", 0)),
            "watermark_us": state.get("watermark_us"),
            "workers": self.load.snapshot(),
            "routing": {"workers": self.workers, "tasks": self.tasks_for(state, routing),
                        "buckets": len(routing["table"]), "version": routing["version"],
                        "table": list(routing["table"]), "splits": list(routing.get("splits") or [])},
            "moved_state_rows": self.moved_rows,
            "idle_batches": self.idle_batches,
            "fused_in": self.fused_in,
            "reshape": self.controller.snapshot(),
        }

    def _empty(self, session: SparkSession) -> DataFrame:
        """The operator's output in a batch it has nothing to do: no row, its output schema."""
        return session.sql(self.empty_sql())

    def empty_sql(self) -> str:
        columns = ", ".join(f"CAST(NULL AS {kind}) AS {quote(name)}" for name, kind in self.task.schema.items())
        return f"SELECT {columns} WHERE false"

    # -- what subclasses provide ------------------------------------------------------

    def _route(self, session: SparkSession, inputs: Mapping[str, list[str]], draft: dict[str, Any],
               routing: dict[str, Any], scanned: Any) -> tuple[list[str], list[tuple[str, str]], Any, Schema]:
        """The routed ``SELECT`` branches (routed by ``routing``, see :meth:`Router.columns`), the shuffle's
        columns (name, Spark type), the worker step and the schema of the step's output (column -> Spark type)."""
        raise NotImplementedError

    def _finish_plan(self, session: SparkSession, frame: DataFrame, draft: dict[str, Any]) -> DataFrame:
        """The operator's output from the workers' output (by default: as it is)."""
        return frame

    # -- running inside another operator's worker tasks (none by default) ---------------

    def fuses_into(self, parent: KeyedOperator) -> bool:
        """Whether this operator, reading ``parent``'s output alone, can run in ``parent``'s worker tasks on what
        ``parent``'s step emits there, with the same results (a window's roll-up, :mod:`runtime.operators.window`)."""
        return False

    def fused_run(self, parent: KeyedOperator, state: Mapping[str, Any], parent_draft: Mapping[str, Any],
                  tag: int) -> tuple[Fused, dict[str, Any], dict[str, str]]:
        """What ``parent``'s worker tasks run for this operator (its step, how to feed it, its output's columns in
        the tagged output), its draft state for the batch, and the columns it adds to the tagged output."""
        raise NotImplementedError

    def tagged_output_sql(self, view: str, tag: int, renames: Mapping[str, str]) -> str:
        """This operator's output as a query over ``view``, a fused shuffle's output: its rows are those tagged
        ``tag``, its worker output's columns there under ``renames`` (else their own names)."""
        raise NotImplementedError

    def combined_output_sql(self, view: str, outputs: Sequence[TaggedOutput], partitions: int) -> str | None:
        """The encoded rows (``topic, value, seq``) of ``outputs`` (this operator's and those fused into it) from its
        fused shuffle's output ``view`` in one relation, each row named as its output alone names it, its merge's
        shuffle having ``partitions``; None if this operator cannot (the default)."""
        return None

    def _fusing(self, step: Any) -> Any:
        """The step to run when operators are fused into this one (its output then keeps the bucket)."""
        raise NotImplementedError

    def _advance(self, draft: dict[str, Any], reports: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        """The driver state after the batch, given the workers' reports."""
        return dict(draft)
