"""The Spark runtime: runs the manager's running tasks as few Spark queries linked by Kafka.

``apply(change)`` converges what runs onto the running set after the change:
new fragments are hosted by a running query or get a query of their own
(:mod:`runtime.spark.layout`); running queries get their new live plan (new
taps, hosted tasks; removed tasks) without a restart; emptied queries stop and
lose their checkpoint; internal topics are created before anything reads them
and deleted when nothing uses them (and no batch of an older plan still runs).
``apply`` returns once new queries have started (Spark runs them; their
first trigger follows) and, when something was removed, once nothing writes
the removed outputs any more: at once where the driver writes (its producer
drops their rows, also those of a batch planned before), else once no batch
still runs the old plan. So ``POST`` and ``DELETE`` answer when the work runs
or has stopped writing.

Which query hosts which fragment, and the offsets each query started from,
are kept in Redis under ``<prefix>:runtime:`` so that a manager restarted
after a crash (``reconcile``) restarts every query from its checkpoint with
the same inputs: nothing is lost, a batch in flight at the crash is replayed.

A task that fails at run time (a cast, a division, an overflow on some
record) is found and quarantined by its query, which goes on with the rest
within the same micro-batch (:mod:`runtime.quarantine`); ``failures()`` names
the quarantined tasks. A supervisor thread restarts a query that died for
any other reason (with backoff) from its checkpoint; ``stalled()`` names the
tasks of such a query until it runs again. Neither is the service's health:
``health()`` is about the service (the SparkSession), ``work()`` about the
dataflows' work.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis

from runtime.exceptions import BucketMoveInvalid, KeyedOperatorUnknown, QueryFailed, RuntimeFailure
from runtime.broker.producer import BatchProducer
from runtime.costs import CostMeter, QueryCounters
from runtime.broker.topics import Topics, stream_topic_prefix
from runtime.plan import Change, TaskSpec
from runtime.quarantine import Quarantine, TaskFailure
from runtime.spark.defrag import merge_queries
from runtime.spark.handover import HandOver, hand_over
from runtime.spark.fragment import FragmentQuery
from runtime.spark.idle import IdleQueries, IdleQuery
from runtime.spark.live_plan import LivePlan
from runtime.spark.query_records import QueryRecords
from runtime.spark.layout import QueryLayout, assign_hosts, gathers, internal_topics, layouts, mergeable
from runtime.spark.reshape import ReshapeSettings
from runtime.spark.retiring import Retiring
from runtime.spark.settling import SettlingTopics
from runtime.spark.supervisor import Supervisor
from sana.failpoints import fail_point
from sana.timing import Phases

log = logging.getLogger("sana.runtime.spark")

DRAIN_TIMEOUT_S = 120.0
HOUSEKEEPING_EVERY_S = 0.5
IDLE_DRAIN_S = 5.0  # how long a leaving idle query may finish its batch (computing nothing, but behind every other)
SLOW_CONVERGE_S = 1.0  # a convergence taking longer logs where its time went


class SparkRuntime:
    """The data plane for one manager (one Redis prefix, one SparkSession)."""

    kind = "spark"

    def __init__(self, client: redis.Redis, prefix: str, bootstrap: str, spark_master: str, checkpoint_dir: Path,
                 *, trigger_s: float = 1.0, internal_partitions: int = 1, max_records_per_batch: int = 0,
                 executor_writes: bool | None = None, hosting: bool = True, warm: bool = True, keep_idle_s: float = 0.0,
                 keyed_workers: int | None = None, reshape: ReshapeSettings | None = None,
                 ansi_sql: bool = False, links: Mapping[tuple[str, str], str] | None = None) -> None:
        """``ansi_sql``: evaluate expressions in Spark's ANSI mode, where a bad cast, a division by zero or an
        index out of range fails the task (which is then quarantined) instead of giving null (the default).

        ``links`` maps a directed link ``(from site, to site)`` to the Kafka address a query at ``to`` reads the
        streams of tasks at ``from`` through (a site's gateway; in the emulated WAN, the link's shaping proxy,
        :mod:`wan_sim.emulation`). Reads within a site, reads over a link not listed, and every write use
        ``bootstrap``.

        ``keep_idle_s``: how long a query whose last task left keeps running for a later change that needs a query
        reading the same topics (:mod:`runtime.spark.idle`); 0 stops it at once."""
        self.redis = client
        self.prefix = prefix
        self.bootstrap = bootstrap
        self.spark_master = spark_master
        self.checkpoint_root = Path(checkpoint_dir).resolve() / prefix
        self.trigger_s = trigger_s
        self.max_records_per_batch = max_records_per_batch
        self.topics = Topics(bootstrap, internal_partitions)
        # Local mode: the driver writes outputs (one producer; a Spark write job per batch costs 2-3x
        # more on 2 cores). Any cluster master: the executors write, so no output row crosses the driver.
        self.executor_writes = (not _local_master(spark_master)) if executor_writes is None else executor_writes
        self.hosting = hosting
        self.links = dict(links or {})
        self._topic_sites: dict[str, str | None] = {}  # an internal topic -> the site of the task writing it
        # defaults of every keyed operator; a task's own config (workers, reshape) overrides them
        self.keyed_defaults = {"workers": keyed_workers, "reshape": reshape or ReshapeSettings()}
        self.sql_conf = {
            "spark.sql.ansi.enabled": "true" if ansi_sql else "false",
            # a datetime the new parser rejects is null, not an error asking which parser to use
            "spark.sql.legacy.timeParserPolicy": "CORRECTED",
        }
        self.quarantine = Quarantine(client, f"{prefix}:runtime:failed")
        self.query_records = QueryRecords(client, prefix)
        self._lock = threading.RLock()
        self.tasks: dict[str, TaskSpec] = {}
        self.host: dict[str, str] = {}
        self.queries: dict[str, FragmentQuery] = {}
        self.plans: dict[str, QueryLayout] = {}
        self.idle = IdleQueries(keep_idle_s)
        self.retiring = Retiring()  # idle queries let go of, stopped by the housekeeping thread
        self._plan_version = 0
        self._spark = None
        self._spark_error: BaseException | None = None
        self._spark_ready = threading.Event()
        self._closing = threading.Event()
        self._records: dict[str, dict[str, Any]] | None = None
        self._session_lock = threading.Lock()
        self._session_started = False
        if warm:
            self._session_started = True
            threading.Thread(target=self._start_session, name="sana-spark-session", daemon=True).start()
        self.meter = CostMeter(self._counters)
        self.supervisor = Supervisor(lambda: self.queries, self._lock, self.meter, self._closing)
        self.supervisor.start()
        self.settling = SettlingTopics()
        threading.Thread(target=self._housekeeping, name="sana-runtime-housekeeping", daemon=True).start()

    # -- the SparkSession ------------------------------------------------------------

    def _start_session(self) -> None:
        from runtime.spark.session import spark_session

        try:
            self._spark = spark_session(self.spark_master)
        except BaseException as error:  # reported by every later call and by health()
            self._spark_error = error
            log.exception("the SparkSession did not start")
        finally:
            self._spark_ready.set()

    def spark(self, timeout_s: float = 180.0):
        with self._session_lock:
            start_here = not self._session_started
            self._session_started = True
        if start_here:
            self._start_session()
        if not self._spark_ready.wait(timeout_s):
            raise RuntimeFailure(f"the SparkSession ({self.spark_master}) did not start within {timeout_s:.0f} s")
        if self._spark_error is not None:
            raise RuntimeFailure(f"the SparkSession ({self.spark_master}) failed to start: {self._spark_error}")
        return self._spark

    # -- the protocol ------------------------------------------------------------------

    def apply(self, change: Change) -> None:
        if change.empty:
            return
        with self._lock:
            desired = dict(self.tasks)
            for task in change.stop:
                desired.pop(task.id, None)
            for task in change.start:
                desired[task.id] = task
            self.converge(desired, reason=change.reason, rollback=True)

    def reconcile(self, tasks: Mapping[str, TaskSpec]) -> None:
        with self._lock:
            self.quarantine.load()
            self.quarantine.forget(set(self.quarantine.failed()) - set(tasks))
            records = self.query_records.load()
            for query_id, record in records.items():
                for fragment in record["fragments"]:
                    self.host.setdefault(fragment, query_id)
            self._records = records
            self.converge(dict(tasks), reason="reconcile", rollback=False)
            for query in self.queries.values():  # a defragmentation cut short by a crash left its bounds
                query.set_bound(None)
            if self.checkpoint_root.is_dir():  # ... and the checkpoint of a query it never switched to
                for path in self.checkpoint_root.iterdir():
                    if path.is_dir() and path.name not in records:
                        shutil.rmtree(path, ignore_errors=True)

    def runs(self, tasks: Mapping[str, TaskSpec]) -> bool:
        """Whether the queries recorded in Redis host exactly the fragments of ``tasks``. A converge records
        the new queries before it starts them and drops the old ones' records once they stopped, so in the
        middle of one both are recorded and neither state is run."""
        hosted = {fragment for record in self.query_records.load().values() for fragment in record["fragments"]}
        return hosted == {task.fragment for task in tasks.values()}

    def restore(self, tasks: Mapping[str, TaskSpec]) -> None:
        """Write every query's record (its start offsets, fragments) and the query counter back to Redis.

        Without this, a Redis restarted empty under a running service would be
        noticed by the manager (which writes its state back) but the next start
        of the service would find no record and start new queries from the
        topics' ends, skipping what was not yet processed.
        """
        with self._lock:
            records = self._records if self._records is not None else {}
            self.query_records.write_back(records)
            log.warning("wrote back the records of %d queries to Redis", len(records))

    def health(self) -> dict[str, Any]:
        """The runtime as a part of the service: ``down`` only when Spark itself is (the session failed).

        A query that failed or restarts, or a quarantined task, is the dataflows' trouble, not the
        service's: :meth:`work` counts them, without turning the service's readiness red.
        """
        session = "ready" if self._spark is not None else ("failed" if self._spark_error else "starting")
        result: dict[str, Any] = {"status": "ok", "kind": self.kind, "session": session, "queries": len(self.queries),
                                  "idle_queries": len(self.idle), "running_tasks": len(self.tasks)}
        if self._spark_error is not None:
            result.update(status="down", error=str(self._spark_error))
        return result

    def work(self) -> dict[str, Any]:
        """The dataflows' work: queries down or restarting (with Spark's error) and quarantined tasks."""
        queries = dict(self.queries)  # no lock: /healthz must answer while a change is being applied
        degraded = []
        for query_id, query in queries.items():
            if query_id in self.supervisor.degraded or not query.alive():
                degraded.append({"query": query_id, "fragments": sorted(query.fragments), "restarts": query.restarts,
                                 "tasks": [task.id for task in query.plan.tasks],
                                 "error": self.supervisor.degraded.get(query_id) or query.error()})
        return {"status": "degraded" if degraded else "ok", "degraded": degraded,
                "quarantined": sorted(self.quarantine.failed())}

    def failures(self) -> dict[str, TaskFailure]:
        """Running task id -> why it is quarantined (:mod:`runtime.quarantine`)."""
        return self.quarantine.failed()

    def stalled(self) -> dict[str, dict[str, Any]]:
        """Running task id -> the query it waits for, for every task of a query that is down or restarting."""
        return {task: {"query": row["query"], "error": row["error"], "restarts": row["restarts"]}
                for row in self.work()["degraded"] for task in row["tasks"]}

    def move_buckets(self, task_id: str, moves: Mapping[int, int], wait_s: float | None = 60.0) -> dict[str, Any]:
        """Route ``{bucket: worker}`` of keyed operator ``task_id`` from the next micro-batch on.

        The batch that applies the moves first moves each bucket's state to
        its new worker (nothing lost, nothing emitted twice: see
        :class:`~runtime.spark.worker_task.WorkerTask`). With ``wait_s`` the call
        returns once such a batch has completed (it raises
        :class:`QueryFailed` if none did in time); without, at once. Returns
        the operator's routing as it is now. This is the call the skew
        controller makes.
        """
        operator = self._keyed_operator(task_id)
        try:
            request = operator.request_moves(moves)
        except ValueError as error:
            raise BucketMoveInvalid(f"keyed operator {task_id}: {error}") from None
        if wait_s:
            operator.wait_moved(request, wait_s)
        return {"task": task_id, "request": request, "moved_state_rows": operator.moved_rows}

    def _keyed_operator(self, task_id: str):
        for query in list(self.queries.values()):
            operator = query.keyed.get(task_id)
            if operator is not None:
                return operator
        raise KeyedOperatorUnknown(f"task {task_id!r} is not a running keyed operator (window_aggregate or join)")

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            # Let the batch in flight finish first, so that fewer batches are replayed after the restart. The plan
            # stays as it is: a batch that ran with less (an empty plan) would commit its input with nothing written.
            for query in self.queries.values():
                if query.alive():
                    query.drain(timeout_s=15)
            for query in [*self.queries.values(), *self.idle.drain()]:
                query.close()
            self.retiring.stop_all(drain_s=0)
            self.queries.clear()
        self.topics.close()

    # -- reads for the API -----------------------------------------------------------------

    def read_positions(self) -> dict[str, dict[int, int]]:
        """:meth:`runtime.base.Runtime.read_positions`: over every recorded query (running, failed or waiting to be
        restored) and every running one, what a running query has processed (the end of its last completed
        micro-batch: a restart resumes there) and where a query not running started (it may resume anywhere from
        there), the lowest per partition."""
        records = self.query_records.load()
        running = {**self.idle.queries(), **self.queries}  # an idle query resumes where it is if a change takes it
        lowest: dict[str, dict[int, int]] = {}
        for query_id in sorted(set(records) | set(running)):
            started = (records.get(query_id) or {}).get("inputs") or {}
            query = running.get(query_id)
            reached = query.processed() if query is not None else started
            for topic in set(started) | set(reached):
                for partition, offset in {**started.get(topic, {}), **reached.get(topic, {})}.items():
                    parts = lowest.setdefault(topic, {})
                    parts[int(partition)] = min(int(offset), parts.get(int(partition), int(offset)))
        return lowest

    def fragment_metrics(self) -> dict[str, Any]:
        """Per fragment: its query's metrics (rows/s, batch duration, lag per partition, state)."""
        queries, host = dict(self.queries), dict(self.host)
        per_query = {query_id: query.metrics() for query_id, query in queries.items()}
        fragments = {}
        for fragment, query_id in sorted(host.items()):
            metrics = per_query.get(query_id)
            if metrics is None:
                continue
            tasks = sorted(task.id for task in self.tasks.values() if task.fragment == fragment)
            status = "degraded" if query_id in self.supervisor.degraded or metrics["status"] != "running" else "running"
            keyed = {task_id: value for task_id, value in metrics["state"]["operators"].items() if task_id in tasks}
            fragments[fragment] = {
                "fragment": fragment, "query": query_id, "status": status, "tasks": tasks,
                "restarts": metrics["restarts"], "error": self.supervisor.degraded.get(query_id) or metrics["error"],
                "input_rows_per_s": metrics.get("input_rows_per_s"),
                "processed_rows_per_s": metrics.get("processed_rows_per_s"),
                "batch_duration_ms": metrics.get("batch_duration_ms"),
                "source_lag": metrics.get("source_lag", {}),
                "gather_s": metrics.get("gather_s", 0.0),
                "state_rows": sum(value["state_rows"] for value in keyed.values()),
                "keyed_operators": keyed,
            }
        return {"fragments": fragments, "queries": per_query}

    def task_costs(self) -> dict[str, Any]:
        """Measured cost of every running task over the last window (see :mod:`runtime.costs`)."""
        return self.meter.costs()

    def _counters(self) -> dict[str, QueryCounters]:
        counters = {}
        for query_id, query in list(self.queries.items()):
            counters[query_id] = QueryCounters(
                busy_ms=query.busy_ms,
                tasks=tuple(task.id for task in query.plan.tasks),
                written_bytes=dict(query.written_bytes),
                written_records=dict(query.written_records),
                state_bytes=query.state_bytes(),
                counts_writes=query.producer is not None,
            )
        return counters

    # -- re-placement ---------------------------------------------------------------------------

    def hand_over(self, change: Change, seeds: Mapping[str, str], timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        """Apply ``change`` at a cut of its inputs: its new tasks continue exactly where the stopped ones stopped.

        ``seeds`` maps a new task onto the running task whose state it starts
        with (the one it replaces, or the shared one it copies). See
        :mod:`runtime.spark.handover`; raises :class:`HandOverFailed` having left things as they were.
        """
        if change.empty:
            return {"paused": [], "cut": {}, "seeded": [], "seeded_from": {}, "drain_s": 0.0, "paused_s": 0.0}
        with self._lock:
            if self._records is None:
                self._records = self.query_records.load()
            return hand_over(self, change, seeds, timeout_s)

    # -- defragmentation ---------------------------------------------------------------------

    def defragment(self, timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        """Run every group of queries linked by taps at one site as one query (:func:`mergeable`).

        Merges and unmerges leave queries that one query could run (a fragment
        started beside a running one because it had a source of its own, then
        the rest of its neighbour removed). For each group: bound the group's
        inputs at their current ends, let every query process exactly up to
        the bound and drain the taps between them, stop them (cleanly: nothing
        in flight), then start one query from the bound with their keyed state
        and replay memory. Nothing is read twice or skipped; the group's output
        pauses for about a query start. A group that does not drain within
        ``timeout_s`` is left as it was (:mod:`runtime.spark.defrag`).
        """
        with self._lock:
            if self._records is None:
                self._records = self.query_records.load()
            sites = {query_id: record.get("site") for query_id, record in self._records.items()}
            before = len(self.queries)
            merged, skipped = [], []
            for group in mergeable(self.plans, sites):
                try:
                    merged.append(merge_queries(self, group, timeout_s))
                except RuntimeFailure as error:
                    log.error("defragmentation of %s: %s", group, error)
                    skipped.append({"queries": group, "error": str(error)})
            return {"queries_before": before, "queries_after": len(self.queries), "merged": merged, "skipped": skipped}

    def switch_records(self, add: dict[str, Any] | None, remove: list[str],
                       restore: list[list[dict[str, Any]]] | None = None) -> None:
        """One Redis transaction: the merged query's record in, the merged ones' out (or back)."""
        self.query_records.switch(add, remove, restore)

    # -- converging ------------------------------------------------------------------------

    def converge(self, desired: dict[str, TaskSpec], reason: str, rollback: bool,
                 handing_over: HandOver | None = None) -> None:
        """Make what runs equal ``desired``; with ``handing_over``, new queries start at its cut, seeded by it."""
        phases = Phases()
        if self._records is None:
            self._records = self.query_records.load()
        records = self._records
        old = (dict(self.tasks), dict(self.host), {q: query.plan for q, query in self.queries.items()})
        query_sites = {query_id: record.get("site") for query_id, record in records.items()}
        # a running fragment stays in its query; in a hand-over only one with a task that runs on (not restarted)
        staying = {task.fragment for task in desired.values()} if handing_over is None else handing_over.kept
        kept = {fragment: query for fragment, query in self.host.items() if fragment in staying}
        host = assign_hosts(desired, kept, query_sites, self.new_query_id, self.hosting and handing_over is None)
        plans = layouts(desired, host, self.prefix)
        if self.links:  # what routes() reads: the running and the desired set's taps (not every task ever run)
            self._topic_sites = {topic: tasks[task_id].site for layout, tasks in ((self.plans, self.tasks), (plans, desired))
                                 for plan in layout.values() for task_id, topic in plan.outputs if task_id in tasks}
        reused = self._take_idle(host, plans, records) if handing_over is None else []
        created_topics: list[str] = []
        started: list[FragmentQuery] = []
        new_records = [idle.query.id for idle in reused]  # their records were deleted when they went idle
        phases.mark("layout")
        try:
            if plans:
                self.spark()
            needed = set().union(*(plan.source_topics | plan.sink_topics for plan in plans.values()))
            internal = internal_topics(plans.values())
            created_topics = self.topics.ensure(needed | internal)
            phases.mark("topics")
            changed = []  # only the records this change touches are written: one round trip, not one per query
            for query_id, plan in plans.items():
                record = records.get(query_id)
                if record is None:
                    record = self._new_record(query_id, plan, set(created_topics), handing_over)
                    records[query_id] = record
                    new_records.append(query_id)
                missing = plan.input_topics - set(record["inputs"])
                if missing:
                    raise RuntimeFailure(f"query {query_id} cannot read {sorted(missing)} without a restart (internal error)")
                fragments = sorted({task.fragment for task in plan.tasks})
                if query_id in new_records or record.get("fragments") != fragments:
                    record["fragments"] = fragments
                    changed.append(record)
            self.query_records.save(*changed)
            phases.mark("records")
            fail_point("runtime.converge.recorded")
            removing = bool(set(self.tasks) - set(desired))
            # A query whose driver writes drops a removed output's rows at once, also those of a batch in flight
            # (FragmentQuery.fences_outputs): the change need not wait for that batch, only the topics it may
            # still read wait to be deleted. Where the executors write, the change waits for it.
            unsettled: list[tuple[FragmentQuery, int]] = []
            for query_id, plan in plans.items():
                query = self.queries.get(query_id)
                live = self.live_plan(plan)
                if query is None:
                    query = self.make_query(records[query_id])
                    if handing_over is not None:
                        handing_over.seed(query, plan)
                    query.set_plan(live)
                    query.start()
                    self.queries[query_id] = query
                    started.append(query)
                    log.info("%s: started query %s for fragments %s", reason, query_id, sorted(query.fragments or records[query_id]["fragments"]))
                    phases.mark("start")
                elif not live.same_work(query.plan):
                    fenced = removing and handing_over is None and query.fences_outputs
                    query.set_plan(live, wait=removing and not fenced)
                    if fenced:
                        unsettled.append((query, live.version))
                    phases.mark("replan")
                query.fragments = set(records[query_id]["fragments"])
            # A hand-over undoes itself unless its new queries ran. A change does not wait for them: each starts from
            # the offsets in its record (or its checkpoint), and one that dies starting is the supervisor's to restart.
            if handing_over is not None:
                for query in started:
                    query.wait_running()
                phases.mark("hand-over")
            fail_point("runtime.converge.started")
        except Exception as error:  # any failure undoes the whole change
            if not rollback:
                if isinstance(error, RuntimeFailure):
                    raise
                raise QueryFailed(f"{reason}: {error}") from error
            log.error("%s failed (%s); rolling back", reason, error)
            self._roll_back([*started, *(idle.query for idle in reused)], old[1], old[2], new_records, records,
                            created_topics)
            self.tasks, self.host = old[0], old[1]
            if isinstance(error, RuntimeFailure):
                raise
            raise QueryFailed(f"{reason}: {error}") from error
        for query_id in [q for q in list(self.queries) if q not in plans]:
            query = self.queries.pop(query_id)
            self.supervisor.forget(query_id)
            empty = LivePlan(self._next_version())
            if query.alive():
                query.set_plan(empty, wait=handing_over is not None or not query.fences_outputs)
            stopping = self.idle.keep(query, records.get(query_id)) if handing_over is None else [query]
            if query not in stopping:
                log.info("query %s is idle: kept for %.0f s for a change that reads %s", query_id, self.idle.keep_s,
                         sorted(records[query_id]["inputs"]))
                unsettled.append((query, empty.version))
            phases.mark("empty")
            for stopped in stopping:
                if stopped is not query:  # an idle one over the limit
                    self.retiring.add(stopped)
                    continue
                if query.alive():  # stopped between batches, as a query stops cleanly
                    query.wait_quiesced(empty.version)
                phases.mark("quiesce")
                query.discard()
                log.info("stopped query %s", query.id)
                phases.mark("stop")
        for query_id in [q for q in list(records) if q not in plans]:
            records.pop(query_id)
            self.query_records.delete(query_id)
            if query_id not in self.idle:
                shutil.rmtree(self.checkpoint_root / query_id, ignore_errors=True)
        self.quarantine.forget(set(old[0]) - set(desired))
        # the topics the old plans used stay until the batches that ran them have ended
        self.settling.hold(internal_topics(self.plans.values()) - internal, unsettled)
        self.tasks, self.host, self.plans = desired, host, plans
        for query_id, seconds in gathers(plans).items():
            if query_id in self.queries:
                self.queries[query_id].set_gather(seconds)
        phases.mark("records")
        self._delete_unused_internal(internal)
        phases.mark("topics")
        if phases.total >= SLOW_CONVERGE_S:
            log.info("%s: converged in %.2f s (%d started, %d stopped): %s", _shortened(reason), phases.total,
                     len(started), len(set(old[2]) - set(plans)), phases)

    def _delete_unused_internal(self, planned: set[str]) -> None:
        """Delete the internal topics that neither ``planned`` (the plans'), an idle query nor a batch of an older
        plan still running uses."""
        self.delete_unused_topics(planned | self.idle.topics() | self.retiring.topics() | self.settling.topics())

    def _take_idle(self, host: dict[str, str], plans: dict[str, QueryLayout],
                   records: dict[str, dict[str, Any]]) -> list[IdleQuery]:
        """Give each new query of ``plans`` an idle query that reads the same topics at its site instead, if one is
        kept: renamed in ``host`` and ``plans``, running (with its record in ``records``) in :attr:`queries`."""
        taken = []
        for query_id in [q for q in plans if q not in self.queries and q not in records]:
            plan = plans[query_id]
            # over an emulated WAN, an input whose writer moved to another site is read over another link
            idle = self.idle.take(plan.input_topics, plan.tasks[0].site if plan.tasks else None,
                                  lambda candidate: self.routes(candidate.record) == candidate.query.routes)
            if idle is None:
                continue
            reused = idle.query.id
            plans[reused] = plans.pop(query_id)
            for fragment in [f for f, q in host.items() if q == query_id]:
                host[fragment] = reused
            records[reused] = idle.record
            idle.query.reset_counters()
            self.queries[reused] = idle.query
            taken.append(idle)
            log.info("query %s, idle, takes the work of new query %s", reused, query_id)
        return taken

    def _housekeeping(self) -> None:
        """A few times a second: stop the queries idle for their keep time (and those let go of by a change) outside
        the runtime's lock, then delete the internal topics that neither a plan, an idle query nor a batch still
        running an older plan uses."""
        while not self._closing.wait(HOUSEKEEPING_EVERY_S):
            with self._lock:
                for query in self.idle.expired():
                    log.info("query %s was idle for %.0f s: stopping it", query.id, self.idle.keep_s)
                    self.retiring.add(query)
            stopped = self.retiring.stop_all(IDLE_DRAIN_S)
            with self._lock:
                settling = len(self.settling)
                self.settling.topics()  # lets go of what has settled
                if stopped or len(self.settling) < settling:
                    self._delete_unused_internal(internal_topics(self.plans.values()))

    def _roll_back(self, started: list[FragmentQuery], old_host: dict[str, str], old_plans: dict[str, LivePlan],
                   new_records: list[str], records: dict[str, dict[str, Any]], created_topics: list[str]) -> None:
        """Undo a failed change step by step; a step that fails is logged and the next one still runs."""
        steps = []
        for query in started:
            steps.append((f"stop query {query.id}", query.discard))
            steps.append((f"forget query {query.id}", lambda q=query: self.queries.pop(q.id, None)))
        for query_id, plan in old_plans.items():
            if query_id in self.queries:
                steps.append((f"restore the plan of {query_id}", lambda q=self.queries[query_id], p=plan: q.set_plan(p)))
        for query_id in new_records:
            records.pop(query_id, None)
            steps.append((f"delete the record of {query_id}", lambda q=query_id: self.query_records.delete(q)))
        for query_id, record in records.items():
            record["fragments"] = sorted({f for f, q in old_host.items() if q == query_id})
            steps.append((f"restore the record of {query_id}", lambda r=record: self.query_records.save(r)))
        internal = [topic for topic in created_topics if topic.startswith(f"{self.prefix}.")]
        steps.append(("delete the topics it created", lambda: self.topics.delete(internal)))
        for what, step in steps:
            try:
                step()
            except Exception as error:  # keep undoing; reconcile at the next start repairs the rest
                log.error("rollback: could not %s: %s", what, error)

    def delete_unused_topics(self, in_use: set[str]) -> None:
        marker = stream_topic_prefix(self.prefix)
        try:
            existing = self.topics.existing(fresh=False)
        except RuntimeFailure:
            return
        self.topics.delete(topic for topic in existing if topic.startswith(marker) and topic not in in_use)

    def _next_version(self) -> int:
        self._plan_version += 1
        return self._plan_version

    def live_plan(self, plan: QueryLayout) -> LivePlan:
        return LivePlan(self._next_version(), tuple(plan.tasks), dict(plan.reads), tuple(plan.outputs), dict(plan.schemas))

    def make_query(self, record: dict[str, Any]) -> FragmentQuery:
        return FragmentQuery(
            self.spark(), record["id"], record["inputs"], self.bootstrap, self.checkpoint_root / record["id"],
            self.trigger_s, set(record["fragments"]), self.max_records_per_batch,
            None if self.executor_writes else BatchProducer(self.bootstrap), self.keyed_defaults,
            batch_base=int(record.get("batch_base", 0)), quarantine=self.quarantine, sql_conf=self.sql_conf,
            origin_topics=[topic for topic in record["inputs"] if topic.startswith(stream_topic_prefix(self.prefix))],
            routes=self.routes(record),
        )

    def routes(self, record: Mapping[str, Any]) -> dict[str, str]:
        """The inputs of a query (its ``record``) written at another site, each with the address of the link it
        is read over (``links``); an input not listed is read from ``bootstrap``."""
        if not self.links:
            return {}
        here = record.get("site")
        routes = {}
        for topic in record["inputs"]:
            there = self._topic_sites.get(topic)
            address = self.links.get((there, here)) if there is not None and here is not None else None
            if address is not None:
                routes[topic] = address
        return routes

    def _new_record(self, query_id: str, plan: QueryLayout, fresh_topics: set[str],
                    handing_over: HandOver | None = None) -> dict[str, Any]:
        """A query's record (:meth:`QueryRecords.new`); a query started by a hand-over starts at the hand-over's
        cut instead, one batch id up (it is seeded with the state at the cut: :mod:`runtime.spark.handover`)."""
        record = QueryRecords.new(query_id, plan, fresh_topics, self.bootstrap)
        if handing_over is not None:
            record.update(inputs=handing_over.starts(query_id, record["inputs"], fresh_topics), batch_base=1)
        return record

    def record(self, query_id: str) -> dict[str, Any]:
        """The stored record of a running query (its inputs' start offsets, fragments, batch base)."""
        return self._records[query_id]

    def retire(self, query_id: str) -> FragmentQuery | None:
        """Forget a query another has taken over (its supervision, record and back-off); returns it."""
        self._records.pop(query_id, None)
        self.supervisor.forget(query_id)
        return self.queries.pop(query_id, None)

    def adopt(self, query: FragmentQuery, record: dict[str, Any]) -> None:
        """Supervise ``query``, started outside :meth:`converge` (a defragmentation), from now on."""
        self.queries[query.id] = query
        self._records[query.id] = record

    def new_query_id(self, fragment: str) -> str:
        return self.query_records.next_id(fragment)


def _local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]`` (one JVM); ``local-cluster[...]`` and real masters are not.

    >>> _local_master("local[2]"), _local_master("local-cluster[2,1,1024]"), _local_master("spark://h:7077")
    (True, False, False)
    """
    return master == "local" or master.startswith("local[")


def _shortened(reason: str, limit: int = 160) -> str:
    """A change's reason for a log line (a group's joins all its members')."""
    return reason if len(reason) <= limit else f"{reason[:limit]}... ({reason.count('; ') + 1} changes)"
