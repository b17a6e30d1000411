"""Data-plane benchmarks of the Spark runtime (issue 4), on this machine.

    .venv/bin/python -m benchmarks.runtime_dataplane [throughput hop post scale latency ceiling broker] [--quick]

- ``throughput``: rows per second through a filter + select fragment (the
  runtime's own FragmentQuery over the sana_kafka source, a backlog of
  records) beside Spark's built-in ``rate`` source running the same query
  and writing the same way; CPU seconds per million rows (the whole process
  tree: driver, JVM, Python workers).
- ``hop``: end-to-end latency of records through one query, and through two
  queries linked by a Kafka topic (a tap): the difference is what one hop adds.
- ``post``: time from POST (Manager.submit) to the first output record, for a
  dataflow that needs a new query and for one hosted by a running query.
- ``scale``: 1, 10, 30 overlapping dataflows (one shared source, distinct
  filters): running queries, CPU (cores) and end-to-end latency, with the
  runtime's hosting and with one query per fragment (hosting off).
- ``broker``: the embedded broker as ``sana up`` starts it, in memory and
  durable (Tansu on the embedded SeaweedFS store), in one run: start-up and
  restart times, records/s and CPU per record (client and broker side) to
  produce and to consume, the ``throughput`` part's fragment on each, and
  every record still there after a ``kill -9`` (benchmarks/broker_storage.py).

Needs Redis at 127.0.0.1:6379 (not ``broker``); starts its own embedded broker. Prints one JSON
document (also written to benchmarks/results/runtime_dataplane.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from api.launcher import Launcher
from benchmarks.measure import Progress
from manager.service import Manager
from runtime.broker.topics import Topics
from runtime.costs import process_tree_cpu_s
from runtime.plan import TaskSpec
from runtime.spark.fragment import FragmentQuery
from runtime.spark.live_plan import LivePlan
from runtime.spark.runtime import SparkRuntime
from runtime.spark.session import spark_session
from sana.settings import Settings

MASTER = os.environ.get("SANA_SPARK_MASTER", "local[2]")
PROGRESS = Progress(out=sys.stderr)  # stdout carries the JSON result
URBAN = {"sensor": "string", "temp": "double", "sent": "double", "ts": "timestamp"}


# -- measuring -----------------------------------------------------------------------------

# How often the measuring loop reads a query's progress. Reading ``recentProgress`` parses up to 100 progress
# reports through py4j; every 20 ms (as this script did until 2026-11-26) it cost the measured process tree
# 0.05-0.3 CPU-seconds per 20,000-row batch, more the longer a batch took.
POLL_S = 0.5


def _steady_state(query, rows: int, warmup_batches: int = 2, broker_cpu: Callable[[], float] | None = None) -> dict[str, Any]:
    """CPU and time per row over the batches after the first ``warmup_batches`` (the query's start, the Python
    workers' and the generated code's first use are left out), until ``rows`` rows are processed in all.

    With ``broker_cpu`` (CPU seconds of the broker's processes so far), also the broker's share of that CPU."""
    def done() -> tuple[int, int, float]:
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        return (len(progress), sum(p["numInputRows"] for p in progress),
                sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000)

    start = None
    while True:
        if query.exception():
            raise query.exception()
        batches, processed, busy = done()
        if start is None and batches >= warmup_batches:
            start = (process_tree_cpu_s(), processed, busy, batches, broker_cpu() if broker_cpu else 0.0)
        if processed >= rows:
            break
        time.sleep(POLL_S)
    if start is None or processed <= start[1]:
        raise SystemExit(f"too few batches to measure after {warmup_batches} of warm-up: raise the rows")
    cpu = process_tree_cpu_s() - start[0]
    measured = processed - start[1]
    result = {"measured_rows": measured, "measured_batches": batches - start[3],
              "rows_per_s_busy": round(measured / (busy - start[2])), "cpu_s_per_million_rows": round(cpu / measured * 1e6, 1)}
    if broker_cpu is not None:  # the broker is a child of this process: its CPU is part of the tree's
        result["broker_cpu_s_per_million_rows"] = round((broker_cpu() - start[4]) / measured * 1e6, 1)
    return result


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round((len(ordered) - 1) * q / 100)))]


def record(i: int, sent: float | None = None) -> dict[str, Any]:
    return {"sensor": f"s{i % 16}", "temp": float(i % 50), "sent": sent if sent is not None else time.time(),
            "ts": "2024-01-01T00:00:00.000Z"}


class SteadyProducer:
    """Produces ``rate`` records/s until stopped (librdkafka, in 10 ms ticks): ``make(i, send time)`` each, by
    default :func:`record` (carrying its send time)."""

    TICK_S = 0.01

    def __init__(self, bootstrap: str, topic: str, rate: float,
                 make: Callable[[int, float], dict[str, Any]] = record) -> None:
        from runtime.broker import rdkafka

        self.producer = rdkafka.producer(bootstrap, idempotent=False, delivery_timeout_ms=30_000, **{"linger.ms": 2})
        self.failures = rdkafka.Failures()
        self.topic, self.rate, self.make = topic, rate, make
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from runtime.broker import rdkafka

        began = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - began) * self.rate)
            now = time.time()
            for i in range(self.sent, due):
                rdkafka.produce_one(self.producer, self.topic, json.dumps(self.make(i, now)).encode(), None, self.failures)
            self.sent = max(self.sent, due)
            self.producer.poll(0)
            time.sleep(self.TICK_S)
        rdkafka.flush(self.producer, 30)

    def __enter__(self) -> "SteadyProducer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        assert not self.failures.records, f"{len(self.failures.records)} input records were not written"


class Arrivals:
    """Consumes topics from their beginning and records (arrival time - sent) for every ``sample``-th record."""

    def __init__(self, bootstrap: str, topics: list[str], sample: int = 1) -> None:
        from runtime.broker import rdkafka

        self.consumer = rdkafka.consumer(bootstrap, **{"fetch.wait.max.ms": 10})
        self.consumer.assign([rdkafka.TopicPartition(topic, 0, 0) for topic in topics])
        self.sample = sample
        self.latencies: dict[str, list[float]] = {topic: [] for topic in topics}
        self.received: dict[str, int] = {topic: 0 for topic in topics}
        self.first: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            messages = self.consumer.consume(10_000, 0.05)
            now = time.time()
            for message in messages:
                if message.error() is not None:
                    continue
                topic = message.topic()
                self.first.setdefault(topic, now)
                count = self.received[topic]
                self.received[topic] = count + 1
                if count % self.sample == 0:
                    sent = json.loads(message.value()).get("sent")
                    if sent is not None:
                        self.latencies[topic].append(1000 * (now - sent))

    def clear(self) -> None:
        for values in self.latencies.values():
            values.clear()

    def __enter__(self) -> "Arrivals":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.consumer.close()


# -- the setups -------------------------------------------------------------------------------

def flow(topic: str, sink: str, threshold: int, name: str) -> dict[str, Any]:
    return {"name": name, "tasks": [
        {"id": "src", "type": "source", "config": {"topic": topic, "schema": URBAN}},
        {"id": "hot", "type": "filter", "config": {"expr": f"temp > {threshold}"}},
        {"id": "proj", "type": "select", "config": {"columns": {"sensor": "sensor", "f": "temp * 9 / 5 + 32", "sent": "sent"}}},
        {"id": "out", "type": "sink", "config": {"topic": sink}}],
        "streams": [{"from": "src", "to": "hot"}, {"from": "hot", "to": "proj"}, {"from": "proj", "to": "out"}]}


def tapping_flow(topic: str, quiet_topic: str, sink: str, threshold: int) -> dict[str, Any]:
    """Needs ``hot`` of :func:`flow` and has a source of its own: one Kafka hop from the first query."""
    return {"name": "hop", "tasks": [
        {"id": "src", "type": "source", "config": {"topic": topic, "schema": URBAN}},
        {"id": "hot", "type": "filter", "config": {"expr": f"temp > {threshold}"}},
        {"id": "quiet", "type": "source", "config": {"topic": quiet_topic, "schema": URBAN}},
        {"id": "both", "type": "union"},
        {"id": "out", "type": "sink", "config": {"topic": sink}}],
        "streams": [{"from": "src", "to": "hot"}, {"from": "hot", "to": "both"}, {"from": "quiet", "to": "both"},
                    {"from": "both", "to": "out"}]}


def backlog(bootstrap: str, topic: str, rows: int) -> None:
    """``rows`` records of :func:`record` in ``topic``, all acknowledged."""
    from runtime.broker import rdkafka

    producer, failures = rdkafka.producer(bootstrap, **{"linger.ms": 50}), rdkafka.Failures()
    sent = time.time()
    for i in range(rows):
        rdkafka.produce_one(producer, topic, json.dumps(record(i, sent)).encode(), None, failures)
    rdkafka.flush(producer, 60)
    assert not failures.records, "the backlog was not written"


class Bench:
    def __init__(self, broker: bool = True) -> None:
        """With ``broker`` (every part but ``broker``, which starts its own): an in-memory embedded broker."""
        self.settings = Settings(embedded_kafka_port=int(os.environ.get("BENCH_KAFKA_PORT", "29092")))
        self.launcher = Launcher(self.settings, Path(tempfile.mkdtemp(prefix="sana-bench-")))
        self.bootstrap = self.settings.effective_kafka_bootstrap
        self.redis = redis.Redis()
        self.topics = Topics(self.bootstrap)
        self.spark = None
        try:
            if broker:
                self.launcher.start_broker()
            self.spark = spark_session(MASTER)
        except BaseException:
            self.launcher.stop()
            raise

    def close(self) -> None:
        self.topics.close()
        self.launcher.stop()

    def topic(self, stem: str) -> str:
        name = f"{stem}-{uuid.uuid4().hex[:6]}"
        self.topics.ensure([name])
        return name

    def manager(self, **options) -> tuple[Manager, str]:
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        runtime = SparkRuntime(self.redis, prefix, self.bootstrap, MASTER, Path(tempfile.mkdtemp()), warm=False, **options)
        manager = Manager(self.redis, prefix, runtime)
        manager.start()
        return manager, prefix

    def drop(self, manager: Manager, prefix: str) -> None:
        manager.close()
        keys = list(self.redis.scan_iter(f"{prefix}:*"))
        if keys:
            self.redis.delete(*keys)

    # -- throughput ---------------------------------------------------------------------------

    def throughput(self, rows: int, warmup: bool = True) -> dict[str, Any]:
        """The fragment and the ``rate`` anchor at each batch cap, one after the other.

        With ``warmup`` both first run once over the backlog unmeasured, so neither is measured while the JVM
        is still compiling Spark's planning code (a service runs warm; before 2026-11-26 the fragment ran
        first in a cold JVM and the anchor after it)."""
        topic, sink = self.topic("tp-in"), self.topic("tp-out")
        backlog(self.bootstrap, topic, rows)
        if warmup:
            PROGRESS.say("throughput: warm-up, fragment then anchor, 20,000-row batches", force=True)
            self.kafka_fragment(self.bootstrap, topic, sink, rows, 20_000)
            self._rate_anchor(rows, sink, 20_000)
        results = {}
        for batch_rows in (20_000, 100_000):
            PROGRESS.say(f"throughput: fragment, {batch_rows:,}-row batches", force=True)
            results[f"kafka_fragment_max_{batch_rows}_per_batch"] = self.kafka_fragment(self.bootstrap, topic, sink, rows,
                                                                                      batch_rows)
            PROGRESS.say(f"throughput: rate anchor, {batch_rows:,}-row batches", force=True)
            results[f"spark_rate_source_{batch_rows}_per_batch"] = self._rate_anchor(rows, sink, batch_rows)
        results["warmed_up"] = warmup
        return results

    @staticmethod
    def write_backlog(bootstrap: str, topic: str, rows: int) -> None:
        backlog(bootstrap, topic, rows)

    def kafka_fragment(self, bootstrap: str, topic: str, sink: str, rows: int, batch_rows: int,
                       broker_cpu: Callable[[], float] | None = None) -> dict[str, Any]:
        """The runtime's FragmentQuery (source, filter, select, sink) over a backlog of ``rows`` in ``topic`` on the
        broker at ``bootstrap``, at most ``batch_rows`` per micro-batch."""
        from runtime.broker.producer import BatchProducer

        tasks = [
            TaskSpec("src", "s", "source", {"topic": topic, "schema": URBAN}, None, (), "f", URBAN),
            TaskSpec("hot", "h", "filter", {"expr": "temp > 30"}, None, (("in", "src"),), "f", URBAN),
            TaskSpec("proj", "p", "select", {"columns": {"sensor": "sensor", "f": "temp * 9 / 5 + 32", "ts": "ts"}}, None,
                     (("in", "hot"),), "f", {"sensor": "string", "f": "double", "ts": "timestamp"}),
            TaskSpec("out", "o", "sink", {"topic": sink}, None, (("in", "proj"),), "f", {"sensor": "string", "f": "double", "ts": "timestamp"}),
        ]
        query = FragmentQuery(self.spark, f"bench-{batch_rows}-{uuid.uuid4().hex[:6]}", {topic: {"0": 0}}, bootstrap,
                              Path(tempfile.mkdtemp()), 0.5, max_records_per_batch=batch_rows, producer=BatchProducer(bootstrap))
        try:
            query.set_plan(LivePlan(1, tuple(tasks), {}, (("out", sink),), {t.id: t.schema for t in tasks}))
            wall0 = time.monotonic()
            query.start()
            steady = _steady_state(query.query, rows, broker_cpu=broker_cpu)
            wall = time.monotonic() - wall0
            progress = [p for p in query.query.recentProgress if p["numInputRows"]]
        finally:
            query.close()
        return {"rows": rows, "batches": len(progress), "wall_s_incl_start": round(wall, 2), **steady,
                "batch_ms_p50": round(statistics.median(p["durationMs"]["triggerExecution"] for p in progress))}

    def _rate_anchor(self, rows: int, sink: str, batch_rows: int) -> dict[str, Any]:
        """Spark's ``rate`` source offering ``batch_rows`` per 0.5 s trigger, through the same query and writes."""
        from pyspark.sql import functions as F

        from runtime.broker.producer import BatchProducer

        producer = BatchProducer(self.bootstrap)
        rate = 2 * batch_rows

        def write(df, batch_id):
            out = df.where("temp > 30").select("sensor", (F.col("temp") * 9 / 5 + 32).alias("f"), "ts")
            # each row as JSON, as a fragment's sink encodes it
            encoded = out.select(F.lit(sink).alias("topic"), F.to_json(F.struct(*out.columns)).alias("value"))
            producer.send_table(encoded.toArrow(), [("sana.batch", str(batch_id).encode())])

        frame = (self.spark.readStream.format("rate").option("rowsPerSecond", rate).option("numPartitions", 2).load()
                 .select(F.concat(F.lit("s"), (F.col("value") % 16).cast("string")).alias("sensor"),
                         (F.col("value") % 50).cast("double").alias("temp"), F.col("timestamp").alias("ts")))
        query = (frame.writeStream.foreachBatch(write).option("checkpointLocation", tempfile.mkdtemp())
                 .trigger(processingTime="500 milliseconds").start())
        try:
            steady = _steady_state(query, rows)
        finally:
            query.stop()
            producer.close()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        return {"rows": sum(p["numInputRows"] for p in progress), "batches": len(progress), "rows_per_s_offered": rate,
                **steady, "batch_ms_p50": round(statistics.median(p["durationMs"]["triggerExecution"] for p in progress))}

    # -- one Kafka hop ----------------------------------------------------------------------------

    def hop(self, seconds: float, rate: float) -> dict[str, Any]:
        manager, prefix = self.manager(trigger_s=0.5)
        try:
            topic, quiet = self.topic("hop-in"), self.topic("hop-quiet")
            direct, hopped = f"{topic}-direct", f"{topic}-hop"
            manager.submit(flow(topic, direct, -1, "direct"))
            manager.submit(tapping_flow(topic, quiet, hopped, -1))
            assert len(manager.runtime.queries) == 2
            with Arrivals(self.bootstrap, [direct, hopped]) as arrivals, SteadyProducer(self.bootstrap, topic, rate):
                # warm-up: until both sinks receive (the second query's start can take several seconds), then 5 s
                deadline = time.monotonic() + 60
                while len(arrivals.first) < 2 and time.monotonic() < deadline:
                    time.sleep(0.2)
                time.sleep(5)
                for values in arrivals.latencies.values():
                    values.clear()
                time.sleep(seconds)
            one, two = arrivals.latencies[direct], arrivals.latencies[hopped]
            phases = [{**_batch_phases(query.query), "last_callback": query.last_timing}
                      for query in manager.runtime.queries.values()]
            return {"records": [len(one), len(two)], "trigger_s": 0.5, "rate_per_s": rate,
                    "batch_ms_p50_by_phase": phases,
                    "one_query_ms": {"p50": round(pct(one, 50)), "p99": round(pct(one, 99))},
                    "two_queries_via_kafka_ms": {"p50": round(pct(two, 50)), "p99": round(pct(two, 99))},
                    "added_by_the_hop_ms": {"p50": round(pct(two, 50) - pct(one, 50)), "p99": round(pct(two, 99) - pct(one, 99))}}
        finally:
            self.drop(manager, prefix)

    # -- end-to-end latency by rate, and the highest rate one fragment sustains ----------------------

    def latency(self, rates: list[float], seconds: float, trigger_s: float) -> dict[str, Any]:
        """A source -> filter -> select -> sink dataflow (one query) fed at each rate; latency from the record's
        send time to its arrival on the sink, the output rate, and whether the source lag grew."""
        results = {}
        for rate in rates:
            results[str(int(rate))] = self._steady(rate, seconds, trigger_s)
            print(f"latency at {rate:g}/s: {results[str(int(rate))]}", file=sys.stderr, flush=True)
        results["trigger_s"], results["window_s"] = trigger_s, seconds
        return results

    def ceiling(self, start: float, step: float, seconds: float, trigger_s: float) -> dict[str, Any]:
        """Raise the rate by ``step`` until the fragment falls behind (lag grows or output < 95 % of input)."""
        runs, rate, highest = {}, start, None
        while True:
            run = self._steady(rate, seconds, trigger_s)
            runs[str(int(rate))] = run
            print(f"ceiling at {rate:g}/s: {run}", file=sys.stderr, flush=True)
            if not run["sustained"]:
                break
            highest, rate = rate, rate + step
        return {"highest_sustained_rate_per_s": highest, "runs": runs, "trigger_s": trigger_s, "window_s": seconds}

    def _steady(self, rate: float, seconds: float, trigger_s: float) -> dict[str, Any]:
        manager, prefix = self.manager(trigger_s=trigger_s)
        try:
            topic = self.topic("lat-in")
            sink = f"{topic}-out"
            manager.submit(flow(topic, sink, -1, "latency"))
            with Arrivals(self.bootstrap, [sink], sample=max(1, int(rate // 1000))) as arrivals, \
                    SteadyProducer(self.bootstrap, topic, rate) as producer:
                time.sleep(8)  # warm-up: the first batches, the Python workers
                arrivals.clear()
                received0, sent0 = arrivals.received[sink], producer.sent
                cpu0, wall0 = process_tree_cpu_s(), time.monotonic()
                time.sleep(seconds)
                elapsed = time.monotonic() - wall0
                cores = (process_tree_cpu_s() - cpu0) / elapsed
                out_rate = (arrivals.received[sink] - received0) / elapsed
                in_rate = (producer.sent - sent0) / elapsed
            latencies = list(arrivals.latencies[sink])
            half = len(latencies) // 2
            # falling behind shows as latency that keeps growing (each batch takes all there is: no lag to read)
            first, second = pct(latencies[:half] or [0], 50), pct(latencies[half:] or [0], 50)
            growing = second > first + 1000 * trigger_s
            return {"rate_offered": rate, "rate_produced": round(in_rate), "rate_out": round(out_rate),
                    "e2e_ms_p50": round(pct(latencies, 50)) if latencies else None,
                    "e2e_ms_p99": round(pct(latencies, 99)) if latencies else None,
                    "e2e_ms_p50_first_half": round(first), "e2e_ms_p50_second_half": round(second),
                    "cores": round(cores, 2),
                    "sustained": not growing and out_rate >= 0.9 * in_rate and in_rate >= 0.95 * rate}
        finally:
            self.drop(manager, prefix)

    # -- POST to first output -------------------------------------------------------------------

    def post(self, rate: float) -> dict[str, Any]:
        manager, prefix = self.manager(trigger_s=1.0)
        manager.runtime.spark()  # the session is up, as in a running service: a POST does not start it
        results = {}
        try:
            topic = self.topic("post-in")
            with SteadyProducer(self.bootstrap, topic, rate):
                for label, threshold in (("new_query", 10), ("hosted_by_running_query", 20)):
                    sink = self.topic(f"post-{label}")
                    with Arrivals(self.bootstrap, [sink]) as arrivals:
                        started = time.time()
                        manager.submit(flow(topic, sink, threshold, label))
                        answered = time.time()
                        while sink not in arrivals.first and time.time() - started < 120:
                            time.sleep(0.02)
                    results[label] = {"post_returned_s": round(answered - started, 2),
                                      "first_output_s": round(arrivals.first[sink] - started, 2)}
                    time.sleep(3)
            results["trigger_s"] = 1.0
            return results
        finally:
            self.drop(manager, prefix)

    # -- 1, 10, 30 overlapping dataflows ---------------------------------------------------------

    def scale(self, counts: list[int], seconds: float, rate: float, modes: str) -> dict[str, Any]:
        results = {}
        wanted = modes.split(",")
        for hosting in [mode == "hosting" for mode in ("hosting", "one_query_per_fragment") if mode in wanted]:
            for count in counts:
                manager, prefix = self.manager(trigger_s=1.0, hosting=hosting)
                try:
                    topic = self.topic("scale-in")
                    sinks = []
                    for number in range(count):
                        sink = f"{topic}-{number}"
                        manager.submit(flow(topic, sink, number % 45, f"f{number}"))
                        sinks.append(sink)
                    with Arrivals(self.bootstrap, sinks) as arrivals, SteadyProducer(self.bootstrap, topic, rate):
                        time.sleep(8)
                        for values in arrivals.latencies.values():
                            values.clear()
                        cpu0, wall0 = process_tree_cpu_s(), time.monotonic()
                        time.sleep(seconds)
                        cores = (process_tree_cpu_s() - cpu0) / (time.monotonic() - wall0)
                    latencies = [value for values in arrivals.latencies.values() for value in values]
                    key = f"{'hosting' if hosting else 'one_query_per_fragment'}_{count}"
                    results[key] = {"dataflows": count, "queries": len(manager.runtime.queries), "cores": round(cores, 2),
                                    "e2e_ms_p50": round(pct(latencies, 50)) if latencies else None,
                                    "e2e_ms_p99": round(pct(latencies, 99)) if latencies else None,
                                    "records_out": len(latencies),
                                    "restarts": sum(q.restarts for q in manager.runtime.queries.values()),
                                    "health": manager.runtime.health()["status"],
                                    "last_batch_timing": [q.last_timing for q in manager.runtime.queries.values()][:3]}
                    print(key, results[key], file=sys.stderr, flush=True)
                finally:
                    self.drop(manager, prefix)
        results["rate_per_s"], results["window_s"], results["trigger_s"] = rate, seconds, 1.0
        return results


def _batch_phases(query) -> dict[str, float]:
    """Median milliseconds of each phase Spark reports (``durationMs``) over a query's recent batches with input."""
    progress = [p for p in (query.recentProgress if query is not None else []) if p["numInputRows"]]
    names = sorted({name for p in progress for name in p["durationMs"]})
    return {name: statistics.median(p["durationMs"].get(name, 0) for p in progress) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["throughput", "hop", "post", "scale", "latency", "ceiling", "broker"])
    parser.add_argument("--trigger", type=float, default=1.0, help="latency, ceiling: the trigger interval (s)")
    parser.add_argument("--rates", default="1000,10000,50000", help="latency: comma-separated records/s")
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test of the script)")
    parser.add_argument("--counts", help="scale: comma-separated dataflow counts (default 1,10,30)")
    parser.add_argument("--modes", default="hosting,one_query_per_fragment", help="scale: which runtimes to compare")
    parser.add_argument("--records", type=int, help="broker: records produced and consumed (default 200,000)")
    parser.add_argument("--no-warmup", action="store_true", help="throughput: measure from a cold JVM (as before 2026-11-26)")
    args = parser.parse_args()
    bench = Bench(broker=any(part != "broker" for part in args.parts))
    out: dict[str, Any] = {"machine": {"cores": os.cpu_count(), "spark_master": MASTER}, "command": " ".join(sys.argv)}
    try:
        for part in args.parts:
            started = time.monotonic()
            if part == "throughput":
                out[part] = bench.throughput(100_000 if args.quick else 1_200_000, warmup=not args.no_warmup)
            elif part == "hop":
                out[part] = bench.hop(10 if args.quick else 30, 100)
            elif part == "post":
                out[part] = bench.post(100)
            elif part == "latency":
                out[part] = bench.latency([float(rate) for rate in args.rates.split(",")], 10 if args.quick else 30,
                                          args.trigger)
            elif part == "ceiling":
                out[part] = bench.ceiling(20_000, 20_000, 10 if args.quick else 30, args.trigger)
            elif part == "scale":
                counts = [int(n) for n in args.counts.split(",")] if args.counts else ([1, 3] if args.quick else [1, 10, 30])
                out[part] = bench.scale(counts, 10 if args.quick else 20, 200, args.modes)
            elif part == "broker":
                from benchmarks.broker_storage import compare

                records = args.records or (20_000 if args.quick else 200_000)
                out[part] = compare(bench, records, fragment_rows=max(records, 100_000))
            print(f"{part}: {json.dumps(out[part])} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    finally:
        bench.close()
    text = json.dumps(out, indent=2)
    print(text)
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    path = results / "runtime_dataplane.json"
    # parts run now replace their earlier results; the others are kept, each with the command and time it ran
    kept = json.loads(path.read_text()) if path.exists() else {}
    for part in args.parts:
        kept[part] = {**out[part], "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "command": out["command"]}
    kept["machine"] = out["machine"]
    path.write_text(json.dumps(kept, indent=2) + "\n")


if __name__ == "__main__":
    main()
