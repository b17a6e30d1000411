"""One Spark Structured Streaming query running one or more fragments.

The query's streaming part is fixed when it starts: the ``sana_kafka`` source
over its input topics (its source tasks' topics and the internal topics it
reads from other queries). Everything else happens in a ``foreachBatch``
stage that, once per micro-batch, takes the query's live :class:`LivePlan`
(its active tasks and its outputs: sinks and taps) and evaluates it on the
cached micro-batch, writing every output in one Kafka write. So a merge that
needs the output of a task in the middle of a running query adds a tap (or
hosts the new tasks right there), and an unmerge removes tasks and taps,
without restarting the query (docs/architecture.md).

The plan is swapped atomically; a batch uses the plan it read when it began.
:meth:`FragmentQuery.set_plan` can wait until no batch is still running an
older plan, which is how ``DELETE`` knows nothing more is written for a
removed dataflow.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from runtime.broker.offsets import lag
from runtime.broker.producer import BatchProducer
from runtime.exceptions import QueryFailed
from runtime.operators import get_operator
from runtime.quarantine import Quarantine
from runtime.spark import operators as spark_operators
from runtime.spark.driver_state import StateStore
from runtime.spark.isolation import Isolation, describe_failure
from runtime.spark.kafka_source import NAME as SOURCE_FORMAT, write_gather, write_json
from runtime.spark.live_plan import LivePlan
from runtime.spark.statement import REPLAYS_KEY, Statement
from runtime.spark.worker_state import WorkerStateStore

__all__ = ["REPLAYS_KEY", "BatchStats", "FragmentQuery", "LivePlan", "StateCopy", "describe_failure"]

log = logging.getLogger("sana.runtime.query")

RECENT_BATCHES = 20
#: This process: request numbers (``requested`` in a routing) count the requests made in it.
PROCESS = uuid.uuid4().hex
LONG_BATCH_S = 10.0  # a batch running longer may belong to a query that died (in_flight_version asks)
# A query's Python source runner is a new Python process that must connect back to the JVM within Spark's
# fixed 10 s; on a loaded machine it sometimes does not (seen with 30 queries on 2 cores). Such a start is
# tried again before the defragmentation or hand-over that needed the query undoes itself (a change does not
# wait for its new queries: one that dies starting is the supervisor's to restart, with back-off).
TRANSIENT_START_ERRORS = ("Python worker failed to connect back", "StreamingPythonRunnerInitialization")
START_RETRIES = 2



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


class FragmentQuery(Statement, Isolation):
    """A Spark query hosting fragments; ``inputs`` are its topics and their start offsets."""

    def __init__(self, spark: SparkSession, query_id: str, inputs: Mapping[str, Mapping[str, int]],
                 bootstrap: str, checkpoint: Path, trigger_s: float, fragments: set[str] | None = None,
                 max_records_per_batch: int = 0, producer: BatchProducer | None = None,
                 keyed_defaults: Mapping[str, Any] | None = None, batch_base: int = 0,
                 quarantine: Quarantine | None = None, sql_conf: Mapping[str, str] | None = None,
                 origin_topics: Iterable[str] | None = None, routes: Mapping[str, str] | None = None) -> None:
        """``keyed_defaults``: keyword arguments of every keyed operator (``workers``, ``reshape``).

        ``quarantine`` holds the tasks that failed at run time (shared with the
        runtime, kept in Redis): a batch never evaluates them, and a task that
        fails in a batch is added to it and the batch run again without it
        (:meth:`_batch`). ``sql_conf`` is set on the query's own session before
        every batch (the expression semantics, e.g. ``spark.sql.ansi.enabled``).
        ``origin_topics``: the inputs other queries write, whose replayed records
        are dropped (their origins are read from the headers); None: every input.
        ``routes``: inputs read through another address than ``bootstrap`` (a link from another site).

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
        self.routes = dict(routes or {})
        self._cores = spark.sparkContext.defaultParallelism  # tasks that collect a batch's output (local mode)
        self.bound_file = checkpoint / "bound.json"
        self.gather_file = checkpoint / "gather.json"
        self.routings_file = checkpoint / "routings.json"  # the keyed routings of the last batch, kept before its write
        # how long the reader may hold input for a larger batch (the sinks' max_delay); None: not written yet (a file
        # left in the checkpoint by an earlier run is replaced at the first plan)
        self.gather_s: float | None = None
        self.plan = LivePlan(0)
        self.query = None
        self.run = ""
        self.restarts = 0
        self.last_error: str | None = None
        self.recent: deque[BatchStats] = deque(maxlen=RECENT_BATCHES)
        self.last_timing: dict[str, float] = {}
        self.written_together: dict[tuple[str, str], str] = {}  # output -> the window whose merge writes it (plan)
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
        self._in_flight_since = 0.0
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
            .option("gather_file", str(self.gather_file))
        )
        if self.max_records_per_batch:
            reader = reader.option("max_records_per_batch", str(self.max_records_per_batch))
        if self.origin_topics is not None:
            reader = reader.option("origin_topics", json.dumps(self.origin_topics))
        if self.routes:
            reader = reader.option("routes", json.dumps(self.routes, sort_keys=True))
        writer = (
            reader.load().writeStream.queryName(self.id)
            .foreachBatch(self._batch)
            .option("checkpointLocation", str(self.checkpoint / "spark"))
            .trigger(processingTime=f"{int(self.trigger_s * 1000)} milliseconds")
        )
        self.query = writer.start()

    def wait_running(self, timeout_s: float = 90.0, restarts: int = START_RETRIES) -> None:
        """Return once the query has run its first trigger; raise :class:`QueryFailed` if it died.

        What a defragmentation or a hand-over waits for: it undoes itself unless the new query ran. A change
        does not wait (:meth:`SparkRuntime.converge`). A start that failed for want of resources
        (:data:`TRANSIENT_START_ERRORS`) is tried again from the checkpoint, up to ``restarts`` times.
        """
        ready = ("Waiting for data to arrive", "Waiting for next trigger")
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
            if self.query.recentProgress or status.get("message") in ready:
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

    def reset_counters(self) -> None:
        """Count cost from zero, as a new query does (an idle query taken by a change: the batches it ran idle and
        the tasks it ran before are no cost of its new tasks)."""
        self.busy_ms = 0.0
        self.written_bytes = {}
        self.written_records = {}

    # -- the live plan -----------------------------------------------------------

    def set_plan(self, plan: LivePlan, wait: bool = False, timeout_s: float = 120.0) -> None:
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
        before, after = {topic for _, topic in self.plan.outputs}, {topic for _, topic in plan.outputs}
        if self.producer is not None and after - before:  # before a batch can plan them
            self.producer.resume(after - before)
        with self._cond:
            self._retired |= set(self.keyed) - set(keyed)
            self.plan = plan
            self.keyed = keyed
        if self.producer is not None and before - after:  # with the rows a batch planned before computes for them
            self.producer.retire(before - after)
        if wait:
            self.wait_quiesced(plan.version, timeout_s)

    def set_gather(self, seconds: float) -> None:
        """Let the reader hold input up to ``seconds`` for a larger batch from its next trigger on (0: never);
        :func:`runtime.spark.layout.gathers` says how long, :func:`runtime.spark.kafka_source.holds` when."""
        if seconds != self.gather_s:
            write_gather(self.gather_file, seconds)
            self.gather_s = seconds

    @property
    def fences_outputs(self) -> bool:
        """Whether a dropped output is written no more once :meth:`set_plan` returns, even by a batch in flight
        (the driver writes: its producer drops the rows); else (the executors write) only once that batch ends."""
        return self.producer is not None

    def in_flight_version(self) -> int | None:
        """The plan version of the batch in flight; None if none runs (or the query is dead). Whether the query
        is alive (a question to the JVM, slow while every core is busy) is asked only of a batch running for
        :data:`LONG_BATCH_S` or more: a batch ends by itself whether its query died meanwhile or not, unless it hangs."""
        with self._cond:
            running, since = self._in_flight, self._in_flight_since
        if running is None or (time.monotonic() - since >= LONG_BATCH_S and not self.alive()):
            return None
        return running

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

    def drain(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until no batch runs; whether none does. A batch may start right after: one
        stopped before its commit is replayed with the same record names, so stopping then loses nothing."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._in_flight is not None and self.alive():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.5))
        return True

    # -- one micro-batch ----------------------------------------------------------

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        with self._cond:
            plan, keyed = self.plan, self.keyed
            self._in_flight, self._in_flight_since = plan.version, time.monotonic()
            retired, self._retired = self._retired, set()
        for task_id in retired - set(keyed):  # no batch runs them any more: their worker state goes
            self._worker_store.drop(task_id)
        started = time.perf_counter()
        batch_id += self.batch_base
        try:
            session = df.sparkSession  # the query's own session (a clone): its settings are this query's
            for key, value in self.sql_conf.items():
                session.conf.set(key, value)
            written, outputs = self.evaluate_isolated(plan, keyed, df, batch_id)
        finally:
            with self._cond:
                self._in_flight = None
                self._cond.notify_all()
        self.batches_done += 1
        duration_ms = 1000 * (time.perf_counter() - started)
        self.busy_ms += duration_ms
        self.recent.append(BatchStats(batch_id, written, round(duration_ms, 1), outputs, time.time()))

    def load_states(self, batch_id: int) -> dict[str, Any]:
        if self._states_version is not None and self._states_version == batch_id - 1:
            return self._states
        version, states = self._store.load_before(batch_id)
        self._states_version = version
        self._states = states
        return states

    def save_states(self, batch_id: int, states: dict[str, Any]) -> None:
        self._state_bytes = self._store.save(batch_id, states)
        self._states = states
        self._states_version = batch_id

    def kept_routings(self, batch_id: int) -> dict[str, Any] | None:
        """The routings (by task id) an earlier attempt at ``batch_id`` ran its keyed operators with, or None if no
        attempt got that far. Request numbers are this process's: those an earlier process made are reset to 0,
        as its routers' are."""
        try:
            kept = json.loads(self.routings_file.read_text())
        except FileNotFoundError:
            return None
        if kept.get("batch") != batch_id:
            return None
        ours = kept.get("process") == PROCESS
        return {task_id: routing if ours else {**routing, "requested": 0} for task_id, routing in kept["routings"].items()}

    def keep_routings(self, batch_id: int, routings: Mapping[str, Any]) -> None:
        """Keep the ``routings`` (by task id) ``batch_id`` runs with (:meth:`kept_routings`), replacing the last."""
        write_json(self.routings_file, {"batch": batch_id, "process": PROCESS, "routings": dict(routings)})

    # -- handing work over (defragmentation) ----------------------------------------------------

    def set_bound(self, offsets: Mapping[str, Mapping[str, int]] | None) -> None:
        """Read no input past ``offsets`` (topic -> partition -> offset) from the next trigger on; None lifts it."""
        if offsets is None:
            self.bound_file.unlink(missing_ok=True)
            return
        write_json(self.bound_file, {topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()})

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
            "outputs": [{"task": task_id, "topic": topic, "merged_by": self.written_together.get((task_id, topic))}
                        for task_id, topic in self.plan.outputs],
            "gather_s": self.gather_s or 0.0,
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


def _offsets(value: Any) -> dict[str, dict[int, int]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in value.items() if isinstance(parts, dict)}
