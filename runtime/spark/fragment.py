"""One Spark Structured Streaming query running one or more fragments.

The query's streaming part is fixed when it starts: the ``sana_kafka`` source
over its input topics (its source tasks' topics and the internal topics it
reads from other queries). Everything else happens in a ``foreachBatch``
stage that, once per micro-batch, takes the query's live :class:`QueryPlan`
(its active tasks and its outputs: sinks and taps) and evaluates it on the
cached micro-batch, writing every output in one Kafka write. So a merge that
needs the output of a task in the middle of a running query adds a tap (or
hosts the new tasks right there), and an unmerge removes tasks and taps,
without restarting the query (DESIGN.md, "Runtime principles").

The plan is swapped atomically; a batch uses the plan it read when it began.
:meth:`FragmentQuery.set_plan` can wait until no batch is still running an
older plan, which is how ``DELETE`` knows nothing more is written for a
removed dataflow.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from runtime.exceptions import QueryFailed
from runtime.broker.offsets import lag
from runtime.broker.producer import BatchProducer
from runtime.operators import get_operator
from runtime.plan import TaskSpec
from runtime.quarantine import Quarantine, TaskFailure, attributable, downstream
from runtime.spark import operators as spark_operators
from runtime.spark.sql_text import encode_sql, literal, parse_sql
from runtime.spark.replays import replays
from runtime.spark.kafka_source import NAME as SOURCE_FORMAT
from runtime.spark.keyed_operator import NOT_SCANNED, max_of_each
from runtime.spark.state import StateStore
from runtime.spark.worker_state import WorkerStateStore

log = logging.getLogger("sana.runtime.query")

RECENT_BATCHES = 20
# A query's Python source runner is a new Python process that must connect back to the JVM within Spark's
# fixed 10 s; on a loaded machine it sometimes does not (seen with 30 queries on 2 cores). Such a start is
# tried again before the change that needed the query is rolled back.
TRANSIENT_START_ERRORS = ("Python worker failed to connect back", "StreamingPythonRunnerInitialization")
START_RETRIES = 2
REPLAYS_KEY = "__replays__"
# A batch that still fails after this many quarantines is left to fail (the supervisor restarts the query).
MAX_QUARANTINE_ROUNDS = 3
PROBE_TOPIC = "__sana_probe__"


@dataclass(frozen=True)
class QueryPlan:
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

    def same_work(self, other: "QueryPlan") -> bool:
        return (
            [t.id for t in self.tasks] == [t.id for t in other.tasks]
            and dict(self.reads) == dict(other.reads)
            and self.outputs == other.outputs
        )


@dataclass
class BatchStats:
    batch_id: int
    written: int
    duration_ms: float
    outputs: int
    at: float


@dataclass(frozen=True)
class StateCopy:
    """Keyed worker state to seed a query with: ``task``'s state in ``query`` at ``version``, as ``as_task``."""

    query: "FragmentQuery"
    task: str
    version: int
    as_task: str


class FragmentQuery:
    """A Spark query hosting fragments; ``inputs`` are its topics and their start offsets."""

    def __init__(self, spark: SparkSession, query_id: str, inputs: Mapping[str, Mapping[str, int]],
                 bootstrap: str, checkpoint: Path, trigger_s: float, fragments: set[str] | None = None,
                 max_records_per_batch: int = 0, producer: BatchProducer | None = None,
                 keyed_defaults: Mapping[str, Any] | None = None, batch_base: int = 0,
                 quarantine: Quarantine | None = None, sql_conf: Mapping[str, str] | None = None,
                 origin_topics: Iterable[str] | None = None) -> None:
        """``keyed_defaults``: keyword arguments of every keyed operator (``workers``, ``reshape``).

        ``quarantine`` holds the tasks that failed at run time (shared with the
        runtime, kept in Redis): a batch never evaluates them, and a task that
        fails in a batch is added to it and the batch run again without it
        (:meth:`_batch`). ``sql_conf`` is set on the query's own session before
        every batch (the expression semantics, e.g. ``spark.sql.ansi.enabled``).
        ``origin_topics``: the inputs other queries write, whose replayed records
        are dropped (their origins are read from the headers); None: every input.

        ``batch_base`` is added to Spark's batch ids wherever the query versions its state
        and names its output: a query that took over other queries' tasks (a defragmentation)
        starts above the state it was seeded with.
        """
        self.spark = spark
        self.keyed_defaults = dict(keyed_defaults or {})
        self.id = query_id
        self.inputs = {topic: dict(parts) for topic, parts in inputs.items()}
        self.bootstrap = bootstrap
        self.checkpoint = checkpoint
        self.trigger_s = trigger_s
        self.fragments = set(fragments or ())
        self.max_records_per_batch = max_records_per_batch
        self.producer = producer
        self.batch_base = batch_base
        self.quarantine = quarantine if quarantine is not None else Quarantine(None, "")
        self.sql_conf = dict(sql_conf or {})
        self.origin_topics = None if origin_topics is None else sorted(origin_topics)
        self._cores = spark.sparkContext.defaultParallelism  # tasks that collect a batch's output (local mode)
        self.bound_file = checkpoint / "bound.json"
        self.plan = QueryPlan(0)
        self.query = None
        self.run = ""
        self.restarts = 0
        self.last_error: str | None = None
        self.started_at: float | None = None
        self.recent: deque[BatchStats] = deque(maxlen=RECENT_BATCHES)
        self.last_timing: dict[str, float] = {}
        self.replays_dropped = 0
        self.batches_done = 0
        # cumulative, for cost attribution (runtime.costs): batch time, and what each task's outputs wrote
        self.busy_ms = 0.0
        self.written_bytes: dict[str, int] = {}
        self.written_records: dict[str, int] = {}
        self.keyed: dict[str, Any] = {}
        self._store = StateStore(checkpoint / "sana-state")
        self._worker_store = WorkerStateStore(str(checkpoint / "keyed-state"))
        self._retired: set[str] = set()
        self._states: dict[str, Any] = {}
        self._states_version: int | None = None
        self._state_bytes = 0
        self._in_flight: int | None = None
        self._cond = threading.Condition()

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Start (or restart from the checkpoint) the Spark query; returns when it runs."""
        self.run = uuid.uuid4().hex[:12]
        self._states_version = None
        self._states = {}
        reader = (
            self.spark.readStream.format(SOURCE_FORMAT)
            .option("bootstrap", self.bootstrap)
            .option("topics", json.dumps(self.inputs, sort_keys=True))
            .option("bound_file", str(self.bound_file))
        )
        if self.max_records_per_batch:
            reader = reader.option("max_records_per_batch", str(self.max_records_per_batch))
        if self.origin_topics is not None:
            reader = reader.option("origin_topics", json.dumps(self.origin_topics))
        writer = (
            reader.load().writeStream.queryName(self.id)
            .foreachBatch(self._batch)
            .option("checkpointLocation", str(self.checkpoint / "spark"))
            .trigger(processingTime=f"{int(self.trigger_s * 1000)} milliseconds")
        )
        self.query = writer.start()
        self.started_at = time.time()

    def wait_running(self, timeout_s: float = 90.0, restarts: int = START_RETRIES) -> None:
        """Return once the query has planned its first trigger; raise :class:`QueryFailed` if it died.

        A start that failed for want of resources (:data:`TRANSIENT_START_ERRORS`)
        is tried again from the checkpoint, up to ``restarts`` times.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.query.isActive:
                error = self.error() or "no error reported"
                if restarts > 0 and any(sign in error for sign in TRANSIENT_START_ERRORS):
                    restarts -= 1
                    log.warning("query %s did not start (%s); starting it again from its checkpoint", self.id, error)
                    self.start()
                    deadline = time.monotonic() + timeout_s
                    continue
                raise QueryFailed(f"query {self.id} stopped while starting: {error}")
            status = self.query.status
            if self.query.recentProgress or status.get("message") in ("Waiting for data to arrive", "Waiting for next trigger"):
                if self.query.isActive:
                    return
            time.sleep(0.05)
        raise QueryFailed(f"query {self.id} did not start within {timeout_s:.0f} s (status {self.query.status})")

    def ran_since_start(self) -> bool:
        """True once the current run has completed a trigger (it runs again after a restart)."""
        try:
            status = self.query.status
            return bool(self.query.recentProgress) or status.get("message") in ("Waiting for data to arrive", "Waiting for next trigger")
        except Exception:  # a query without a JVM side has not run
            return False

    def alive(self) -> bool:
        return self.query is not None and self.query.isActive

    def error(self) -> str | None:
        if self.query is None:
            return self.last_error
        try:
            problem = self.query.exception()
        except Exception as error:  # the JVM side is gone
            return str(error)
        if problem is None:
            return self.last_error
        return describe_failure(str(problem)) or type(problem).__name__

    def stop(self) -> None:
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as error:  # stopping a dead query can complain; it is stopped either way
                log.warning("stopping query %s: %s", self.id, error)

    def close(self) -> None:
        self.stop()
        if self.producer is not None:
            self.producer.close()

    def discard(self) -> None:
        """Stop and delete the checkpoint (the query's work is gone for good)."""
        self.close()
        shutil.rmtree(self.checkpoint, ignore_errors=True)

    # -- the live plan -----------------------------------------------------------

    def set_plan(self, plan: QueryPlan, wait: bool = False, timeout_s: float = 120.0) -> None:
        """Make ``plan`` the one the next batch uses; with ``wait``, until no batch runs an older one."""
        keyed: dict[str, Any] = {}
        for task in plan.tasks:
            spec = get_operator(task.type)
            factory = spark_operators.KEYED.get(task.type)
            if factory is None:
                continue
            operator = self.keyed.get(task.id)
            if operator is None:
                ports = {port.name: [plan.schemas[parent] for p, parent in task.inputs if p == port.name] for port in spec.ports}
                operator = factory(task, ports, **self.keyed_defaults)
            keyed[task.id] = operator
        with self._cond:
            self._retired |= set(self.keyed) - set(keyed)
            dropped = {topic for _, topic in self.plan.outputs} - {topic for _, topic in plan.outputs}
            self.plan = plan
            self.keyed = keyed
        if dropped and self.producer is not None:
            self.producer.retire(dropped)
        if wait:
            self.wait_quiesced(plan.version, timeout_s)

    def wait_quiesced(self, version: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._in_flight is not None and self._in_flight < version:
                if not self.alive():
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueryFailed(f"query {self.id}: a batch with an old plan still runs after {timeout_s:.0f} s")
                self._cond.wait(min(remaining, 0.5))

    # -- one micro-batch ----------------------------------------------------------

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        with self._cond:
            plan, keyed = self.plan, self.keyed
            self._in_flight = plan.version
            retired, self._retired = self._retired, set()
        for task_id in retired - set(keyed):  # no batch runs them any more: their worker state goes
            self._worker_store.drop(task_id)
        started = time.perf_counter()
        batch_id += self.batch_base
        try:
            session = df.sparkSession  # the query's own session (a clone): its settings are this query's
            for key, value in self.sql_conf.items():
                session.conf.set(key, value)
            written, outputs = self._evaluate_isolated(plan, keyed, df, batch_id)
        finally:
            with self._cond:
                self._in_flight = None
                self._cond.notify_all()
        self.batches_done += 1
        duration_ms = 1000 * (time.perf_counter() - started)
        self.busy_ms += duration_ms
        self.recent.append(BatchStats(batch_id, written, round(duration_ms, 1), outputs, time.time()))

    # -- isolation: one task's run-time failure is not its query's --------------------------

    def _evaluate_isolated(self, plan: QueryPlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int) -> tuple[int, int]:
        """Evaluate the plan without its quarantined tasks; if the batch fails, find the tasks that fail,
        quarantine them and evaluate the batch again without them (the same micro-batch, so the query's
        other dataflows lose nothing and wait one evaluation). An error no task explains (the broker down,
        a lost executor: :func:`~runtime.quarantine.attributable`) is raised: the query fails and the supervisor
        restarts it from its checkpoint."""
        for _ in range(MAX_QUARANTINE_ROUNDS):
            plan, keyed = self._without(plan, keyed, set(self.quarantine.failed()))
            try:
                return self._evaluate(plan, keyed, df, batch_id)
            except Exception as error:
                if not attributable(error):
                    raise
                failures = self._find_failures(plan, keyed, df, batch_id)
                if not failures:
                    raise
                log.error("query %s: batch %d failed (%s); task(s) %s fail on their own", self.id, batch_id,
                          describe_failure(str(error))[:300], sorted(f.task for f in failures))
                self.quarantine.add(failures)
        plan, keyed = self._without(plan, keyed, set(self.quarantine.failed()))
        return self._evaluate(plan, keyed, df, batch_id)

    @staticmethod
    def _without(plan: QueryPlan, keyed: Mapping[str, Any], failed: set[str]) -> tuple[QueryPlan, dict[str, Any]]:
        """``plan`` less the failed tasks, whatever reads them, and the outputs of those."""
        if not failed or not failed & {task.id for task in plan.tasks}:
            return plan, dict(keyed)
        gone = downstream(plan.tasks, failed & {task.id for task in plan.tasks})
        tasks = tuple(task for task in plan.tasks if task.id not in gone)
        outputs = tuple((task_id, topic) for task_id, topic in plan.outputs if task_id not in gone)
        return (QueryPlan(plan.version, tasks, dict(plan.reads), outputs, dict(plan.schemas)),
                {task_id: operator for task_id, operator in keyed.items() if task_id not in gone})

    def _find_failures(self, plan: QueryPlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int) -> list[TaskFailure]:
        """The tasks of ``plan`` that fail on this micro-batch although their inputs do not.

        Each output is evaluated alone (nothing written: a ``noop`` write);
        the tasks behind the outputs that fail are then evaluated alone, parents
        first, each with every column it produces (a column no output reads is
        still computed, so the task that computes a failing expression is the
        one named). Costs a Spark job per probe, only in a batch that failed.
        """
        failing_outputs = [output for output in plan.outputs if self._probe(plan, keyed, df, batch_id, [output]) is not None]
        if not failing_outputs:
            return []
        by_id = {task.id: task for task in plan.tasks}
        suspects: set[str] = set()
        pending = [task_id for task_id, _ in failing_outputs]
        while pending:
            task_id = pending.pop()
            if task_id in by_id and task_id not in suspects:
                suspects.add(task_id)
                pending.extend(parent for _, parent in by_id[task_id].inputs)
        failures: list[TaskFailure] = []
        for task in plan.tasks:
            if task.id not in suspects or any(parent in downstream(plan.tasks, {f.task for f in failures})
                                               for _, parent in task.inputs):
                continue
            error = self._probe(plan, keyed, df, batch_id, [(task.id, PROBE_TOPIC)])
            if error is not None:
                failure = TaskFailure.from_error(task.id, self.id, batch_id, error)
                if failure.expression is None:  # Spark names the fragment only when it evaluated it interpreted
                    failure = dataclasses.replace(failure, expression=_expression_of(task))
                failures.append(failure)
        return failures

    def _probe(self, plan: QueryPlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int,
               outputs: list[tuple[str, str]]) -> BaseException | None:
        """Evaluate only ``outputs`` (and what they read) without writing; the error it raised, or None."""
        needed: set[str] = set()
        by_id = {task.id: task for task in plan.tasks}
        pending = [task_id for task_id, _ in outputs]
        while pending:
            task_id = pending.pop()
            if task_id in by_id and task_id not in needed:
                needed.add(task_id)
                pending.extend(parent for _, parent in by_id[task_id].inputs)
        tasks = tuple(task for task in plan.tasks if task.id in needed)
        reads = {parent: topic for parent, topic in plan.reads.items()
                 if any(parent == p for task in tasks for _, p in task.inputs)}
        probe = QueryPlan(plan.version, tasks, reads, tuple(outputs), dict(plan.schemas))
        try:
            self._evaluate(probe, {task_id: op for task_id, op in keyed.items() if task_id in needed}, df, batch_id,
                           probe=True)
        except Exception as error:
            return error if attributable(error) else None
        return None

    def _evaluate(self, plan: QueryPlan, keyed: Mapping[str, Any], df: DataFrame, batch_id: int,
                  probe: bool = False) -> tuple[int, int]:
        """Run the plan on one micro-batch: one SQL statement (CTEs + UNION ALL of the outputs), one write.

        With ``probe`` the outputs are computed in full but nothing is written
        and no state is kept (:meth:`_find_failures`)."""
        if not plan.outputs:
            return 0, 0
        began = time.perf_counter()
        session = df.sparkSession  # the query's own session: its temp views are the ones SQL sees
        token = f"sana_{uuid.uuid4().hex[:12]}"
        consumers = _consumers(plan)
        readers = sum(1 for task in plan.tasks if task.type == "source") + len(plan.reads)
        shared = len(plan.outputs) > 1 or bool(keyed) or readers > 1 or bool(plan.reads)
        raw = df.persist() if shared else df
        raw.createOrReplaceTempView(f"{token}_raw")
        views, cached = [f"{token}_raw"], [raw] if shared else []
        names: dict[str, str] = {}
        ctes = _Ctes()

        def define(key: str, body: str, reads: tuple[str, ...] = (), materialize: bool = False) -> str:
            if materialize:  # a fork: computed once per batch, not once per branch
                frame = session.sql(ctes.statement(f"SELECT * FROM ({body})", reads)).persist()
                view = f"{token}_f{len(views)}"
                frame.createOrReplaceTempView(view)
                views.append(view)
                cached.append(frame)
                body, reads = f"SELECT * FROM {view}", ()
            names[key] = ctes.add(body, reads)
            return names[key]

        stateful = bool(keyed) or bool(plan.reads)
        feeds_keyed = {parent for task in plan.tasks if task.id in keyed for _, parent in task.inputs}
        planned_keyed: dict[str, dict[str, Any]] = {}
        try:
            states = self._load_states(batch_id) if stateful else {}
            new_states: dict[str, Any] = {}
            internal = f"{token}_raw"
            if plan.reads:
                internal = self._drop_replays(session, token, set(plan.reads.values()), states, new_states, views,
                                              count=not probe)
            def inputs_of(task: TaskSpec) -> dict[str, list[str]]:
                """Per port, the CTE names of the task's inputs (an input read from a tap is defined here)."""
                inputs: dict[str, list[str]] = {port.name: [] for port in get_operator(task.type).ports}
                for port, parent in task.inputs:
                    if parent not in names:
                        define(parent, parse_sql(internal, plan.reads[parent], plan.schemas[parent]),
                               materialize=consumers.get(parent, 0) > 1)
                    inputs[port].append(names[parent])
                return inputs

            def build(task: TaskSpec, scanned: Any = NOT_SCANNED) -> None:
                if task.type == "source":
                    define(task.id, parse_sql(f"{token}_raw", task.config["topic"], task.schema),
                           materialize=consumers.get(task.id, 0) > 1)
                    return
                inputs = inputs_of(task)
                operator = keyed.get(task.id)
                if operator is None:
                    builder = spark_operators.SQL[task.type]
                    define(task.id, builder(task, inputs), tuple(name for port in inputs.values() for name in port))
                    return
                relations = {port: [ctes.statement(f"SELECT * FROM {name}", [name]) for name in sources]
                             for port, sources in inputs.items()}
                state = states.get(task.id) or operator.initial_state()
                output, planned_keyed[task.id] = operator.plan(session, batch_id, relations, state, self._worker_store,
                                                               scanned)
                if consumers.get(task.id, 0) > 1 or task.id in feeds_keyed:  # run the shuffle once per batch
                    output = output.persist()
                    cached.append(output)
                view = f"{token}_k{len(views)}"
                output.createOrReplaceTempView(view)
                views.append(view)
                define(task.id, f"SELECT * FROM {view}")

            # First what no keyed output feeds; then one job answers the scans of the keyed operators it feeds
            # (a window's largest event time), instead of a job per operator; then the rest, in plan order.
            after_keyed = _after_keyed(plan.tasks, keyed)
            for task in plan.tasks:
                if task.id not in keyed and task.id not in after_keyed:
                    build(task)
            scans: dict[str, tuple[str, list[str]]] = {}
            for task in plan.tasks:
                if task.id in keyed and task.id not in after_keyed:
                    inputs = inputs_of(task)
                    bare = {port: [f"SELECT * FROM {name}" for name in sources] for port, sources in inputs.items()}
                    query = keyed[task.id].scan_sql(bare, states.get(task.id) or keyed[task.id].initial_state())
                    if query is not None:
                        scans[task.id] = (query, [name for sources in inputs.values() for name in sources])
            scanned: dict[str, Any] = {}
            if scans:
                reads = [name for _, names_read in scans.values() for name in names_read]
                row = session.sql(ctes.statement(max_of_each([query for query, _ in scans.values()]), reads)).first()
                scanned = dict(zip(scans, row))
            for task in plan.tasks:
                if task.id not in names:
                    build(task, scanned.get(task.id, NOT_SCANNED))
            union = " UNION ALL ".join(encode_sql(names[task_id], topic) for task_id, topic in plan.outputs)
            output = session.sql(ctes.statement(union, [names[task_id] for task_id, _ in plan.outputs]))
            headers = [("sana.writer", self.id.encode()), ("sana.run", self.run.encode()), ("sana.batch", str(batch_id).encode())]
            planned = time.perf_counter()
            if probe:
                output.write.format("noop").mode("overwrite").save()
                return 0, len(plan.outputs)
            if self.producer is not None:
                # The driver takes the whole output here anyway (local mode), so one task per core does: the
                # union has a task per output and input partition, and every task deserializes the generated
                # code of every output (docs/reuse.md, "Where a hosted query's CPU goes").
                table = output.coalesce(self._cores).toArrow()
                collected = time.perf_counter()
                written = self.producer.send_table(table, headers)
                self._count_written(plan, table)
            else:
                # Computed in full before a record is written: a task failing half-way through the write would
                # leave part of the batch in Kafka, and the batch evaluated again without that task (its outputs
                # gone from the union) would name the same records differently, so they would not read as replays.
                output = output.persist()
                cached.append(output)
                output.count()
                collected, written = time.perf_counter(), -1
                (
                    output.write.format(SOURCE_FORMAT).option("bootstrap", self.bootstrap).option("writer", self.id)
                    .option("run", self.run).option("batch", str(batch_id)).mode("append").save()
                )
            self.last_timing = {"plan_ms": round(1000 * (planned - began), 1),
                                "compute_ms": round(1000 * (collected - planned), 1),
                                "write_ms": round(1000 * (time.perf_counter() - collected), 1)}
            for task_id, draft in planned_keyed.items():
                new_states[task_id] = keyed[task_id].finish(batch_id, draft, self._worker_store)
            planned_keyed.clear()
            if stateful:
                self._save_states(batch_id, new_states)
            return written, len(plan.outputs)
        finally:
            for task_id in planned_keyed:  # the batch failed: moves it took are requested again
                keyed[task_id].abort()
            for view in views:
                session.catalog.dropTempView(view)
            for frame in cached:
                frame.unpersist()

    def _count_written(self, plan: QueryPlan, table) -> None:
        """Add the records and value bytes this batch wrote to the task behind each output topic."""
        if table.num_rows == 0:
            return
        import pyarrow.compute as pc

        sizes = table.append_column("size", pc.binary_length(table.column("value")))
        totals = sizes.group_by("topic").aggregate([("size", "sum"), ("size", "count")])
        task_of = {topic: task_id for task_id, topic in plan.outputs}
        for topic, size, count in zip(totals.column("topic").to_pylist(), totals.column("size_sum").to_pylist(),
                                      totals.column("size_count").to_pylist()):
            task_id = task_of.get(topic)
            if task_id is not None:
                self.written_bytes[task_id] = self.written_bytes.get(task_id, 0) + int(size)
                self.written_records[task_id] = self.written_records.get(task_id, 0) + int(count)

    def _drop_replays(self, session, token: str, topics: set[str], states: dict[str, Any], new_states: dict[str, Any],
                      views: list[str], count: bool = True) -> str:
        """The raw view without records of upstream batches this query already processed (see replays.py)."""
        listed = ", ".join(literal(topic) for topic in sorted(topics))
        rows = session.sql(f"SELECT topic, origin FROM {token}_raw WHERE origin IS NOT NULL AND topic IN ({listed})").toArrow()
        seen = {key: (batch, set(seqs)) for key, (batch, seqs) in (states.get(REPLAYS_KEY) or {}).items()}
        dropped = replays(seen, zip(rows.column("topic").to_pylist(), rows.column("origin").to_pylist()))
        new_states[REPLAYS_KEY] = seen
        if not dropped:
            return f"{token}_raw"
        if count:
            self.replays_dropped += len(dropped)
            log.warning("query %s: dropped %d replayed upstream record(s)", self.id, len(dropped))
        session.createDataFrame([(origin,) for origin in dropped], "origin string").createOrReplaceTempView(f"{token}_drop")
        session.sql(f"SELECT r.* FROM {token}_raw r LEFT ANTI JOIN {token}_drop d ON r.origin = d.origin") \
            .createOrReplaceTempView(f"{token}_dedup")
        views.extend([f"{token}_drop", f"{token}_dedup"])
        return f"{token}_dedup"

    def _load_states(self, batch_id: int) -> dict[str, Any]:
        if self._states_version is not None and self._states_version == batch_id - 1:
            return self._states
        version, states = self._store.load_before(batch_id)
        self._states_version = version
        self._states = states
        return states

    def _save_states(self, batch_id: int, states: dict[str, Any]) -> None:
        self._state_bytes = self._store.save(batch_id, states)
        self._states = states
        self._states_version = batch_id

    # -- handing work over (defragmentation) ----------------------------------------------------

    def set_bound(self, offsets: Mapping[str, Mapping[str, int]] | None) -> None:
        """Read no input past ``offsets`` (topic -> partition -> offset) from the next trigger on; None lifts it."""
        if offsets is None:
            self.bound_file.unlink(missing_ok=True)
            return
        self.checkpoint.mkdir(parents=True, exist_ok=True)
        temporary = self.bound_file.with_suffix(".tmp")
        temporary.write_text(json.dumps({topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()}))
        temporary.replace(self.bound_file)

    def processed(self) -> dict[str, dict[str, int]]:
        """Offsets up to which the query has processed its inputs (where it started, before its first batch)."""
        done = {topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in self.inputs.items()}
        try:
            progress = self.query.lastProgress if self.query is not None else None
        except Exception:  # a dead JVM query answers nothing
            progress = None
        if progress:
            for topic, parts in _offsets((progress.get("sources") or [{}])[0].get("endOffset")).items():
                done.setdefault(topic, {}).update({str(p): int(o) for p, o in parts.items()})
        return done

    def idle(self) -> bool:
        with self._cond:
            return self._in_flight is None

    def saved_states(self) -> tuple[int | None, dict[str, Any]]:
        """The version and the driver states saved after the last batch (keyed operators, replay memory)."""
        return self._store.load_before(1 << 62)

    def seed(self, states: Mapping[str, Any], copies: list["StateCopy"]) -> None:
        """Start from ``states`` (driver states by task id) and from the keyed worker state ``copies`` name.

        Called before the first batch; the seed is version ``batch_base - 1``.
        """
        version = self.batch_base - 1
        for copy in copies:
            copy.query._worker_store.copy_version(copy.task, copy.version, self._worker_store, version, copy.as_task)
        self._store.save(version, dict(states))

    # -- metrics -------------------------------------------------------------------

    def state_bytes(self) -> dict[str, int]:
        """Bytes of each keyed task's state after the last batch."""
        states = self._states or (self._store.load_before(1 << 62)[1] if self.keyed else {})
        return {task_id: int((states.get(task_id) or {}).get("state_bytes", 0)) for task_id in self.keyed}

    def metrics(self) -> dict[str, Any]:
        progress = None
        if self.query is not None:
            try:
                progress = self.query.lastProgress
            except Exception:  # a dead JVM query answers nothing
                progress = None
        result: dict[str, Any] = {
            "query": self.id,
            "run": self.run,
            "status": "running" if self.alive() else "down",
            "fragments": sorted(self.fragments),
            "tasks": [task.id for task in self.plan.tasks],
            "outputs": [{"task": task_id, "topic": topic} for task_id, topic in self.plan.outputs],
            "inputs": sorted(self.inputs),
            "restarts": self.restarts,
            "batches": self.batches_done,
            "error": self.error() if not self.alive() else None,
            "recent_batches": [vars(stats) for stats in self.recent],
            "last_batch_timing": dict(self.last_timing),
            "replayed_records_dropped": self.replays_dropped,
        }
        if progress:
            source = (progress.get("sources") or [{}])[0]
            durations = progress.get("durationMs") or {}
            end = _offsets(source.get("endOffset"))
            latest = _offsets(source.get("latestOffset")) or end
            result.update({
                "batch_id": progress.get("batchId"),
                "input_rows_per_s": progress.get("inputRowsPerSecond"),
                "processed_rows_per_s": progress.get("processedRowsPerSecond"),
                "batch_duration_ms": durations.get("triggerExecution"),
                "rows_last_batch": progress.get("numInputRows"),
                "source_lag": lag(latest, end) if latest else {},
                "progress_at": progress.get("timestamp"),
            })
        states = self._states or {}
        result["state"] = {
            "bytes": self._state_bytes,
            "rows": sum(operator.state_rows(states.get(task_id) or {}) for task_id, operator in self.keyed.items()),
            "operators": {task_id: operator.metrics(states.get(task_id)) for task_id, operator in self.keyed.items()},
        }
        return result


class _Ctes:
    """A batch's common table expressions; each statement carries only those it reads, directly or not.

    Spark analyzes every definition of a ``WITH`` clause, read or not, and a
    keyed operator's output enters later definitions as an analyzed plan: a
    statement carrying all of a big fragment's definitions took 38-50 s to
    plan a batch of a 28-task query hosting 8 keyed operators (5.5 s now).

    >>> ctes = _Ctes()
    >>> a = ctes.add("SELECT 1 AS x"); b = ctes.add("SELECT 2 AS y"); c = ctes.add(f"SELECT x FROM {a}", [a])
    >>> ctes.statement(f"SELECT * FROM {c}", [c])
    'WITH t0 AS (SELECT 1 AS x), t2 AS (SELECT x FROM t0) SELECT * FROM t2'
    >>> ctes.statement("SELECT 3", [])
    'SELECT 3'
    """

    def __init__(self) -> None:
        self._defined: dict[str, tuple[str, tuple[str, ...]]] = {}  # name -> (body, names it reads)

    def add(self, body: str, reads: Iterable[str] = ()) -> str:
        name = f"t{len(self._defined)}"
        self._defined[name] = (body, tuple(reads))
        return name

    def statement(self, query: str, reads: Iterable[str]) -> str:
        needed: set[str] = set()
        pending = list(reads)
        while pending:
            name = pending.pop()
            if name in self._defined and name not in needed:
                needed.add(name)
                pending.extend(self._defined[name][1])
        clauses = [f"{name} AS ({body})" for name, (body, _) in self._defined.items() if name in needed]
        return f"WITH {', '.join(clauses)} {query}" if clauses else query


def _after_keyed(tasks: Iterable[TaskSpec], keyed: Mapping[str, Any]) -> set[str]:
    """Ids of the tasks (in plan order) that read a keyed task's output, directly or not.

    >>> from types import SimpleNamespace as T
    >>> _after_keyed([T(id="s", inputs=[]), T(id="w", inputs=[("in", "s")]), T(id="f", inputs=[("in", "w")]),
    ...               T(id="g", inputs=[("in", "s")])], {"w": object()})
    {'f'}
    """
    after: set[str] = set()
    for task in tasks:
        if any(parent in keyed or parent in after for _, parent in task.inputs):
            after.add(task.id)
    return after


def _expression_of(task: TaskSpec) -> str | None:
    """The SQL a user wrote in a task's config (a filter's condition, a select's columns), to name a failure.

    >>> from types import SimpleNamespace as T
    >>> _expression_of(T(type="select", config={"columns": {"a": "x + 1", "b": "y"}}))
    'a = x + 1, b = y'
    """
    config = task.config or {}
    if task.type == "filter":
        return config.get("expr")
    if task.type == "select":
        return ", ".join(f"{name} = {text}" for name, text in (config.get("columns") or {}).items()) or None
    if task.type == "join":
        return config.get("on") if isinstance(config.get("on"), str) else None
    return None


def _consumers(plan: QueryPlan) -> dict[str, int]:
    """How many tasks and outputs of the plan read each task's output."""
    counts: dict[str, int] = {}
    for task in plan.tasks:
        for _, parent in task.inputs:
            counts[parent] = counts.get(parent, 0) + 1
    for task_id, _ in plan.outputs:
        counts[task_id] = counts.get(task_id, 0) + 1
    return counts


_PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Failed|Timeout\w*)\b")


def describe_failure(text: str) -> str:
    """The line of a Spark query exception that says what failed: the innermost Python error if any.

    Spark wraps an error raised in ``foreachBatch`` in several Java and py4j
    layers; ``"RuntimeError: injected failure"`` is what an operator needs to see.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    python = [line for line in lines if _PYTHON_ERROR.match(line) and not line.startswith(("org.", "java.", "py4j."))]
    chosen = python[-1] if python else (lines[0] if lines else "")
    return chosen[:2000]


def _offsets(value: Any) -> dict[str, dict[int, int]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in value.items() if isinstance(parts, dict)}
