"""Keyed operators on the executor shuffle: rows/s, batch times and worker tasks; the driver's heap.

    .venv/bin/python -m benchmarks.keyed_operators [--rows 200000] [--quick]
    .venv/bin/python -m benchmarks.keyed_operators heap [--rows 1500000] [--driver-memory 512m]

``compare`` (the default) runs, each in a process of its own and on the same
seeded input read from offset 0 of the same topics:

- this checkout in local mode (``local[2]``), for a tumbling
  ``window_aggregate`` and a time-bounded ``join`` at 1, 4 and 8 logical
  workers: rows/s, micro-batch p50/p99 (first batch excluded: it starts the
  Python workers) and every worker task's duration per batch;
- the executor path on ``local-cluster[2,1,1024]`` (two executor JVMs) at 8
  workers; its sink output must be identical to local mode's.

Every run reads its sink back: record count and a digest of the sorted
records (floats rounded to 9 significant digits, so summation order does not
count) must agree between worker counts and masters.

The keyed operators once ran on the driver (before commit ``def9f5d``'s
successor); the comparison with that path, run on 2026-11-23, stays in
``benchmarks/results/keyed_operators.json`` (``path: old``). That path is no
longer built, so it is not run again.

``heap`` feeds one ``window_aggregate`` (``max`` over a 1 KiB string column,
so the operator's input really is large) many times the driver's configured
memory on ``local-cluster[2,1,1024]`` and samples the driver JVM's used heap
after a GC and the driver Python process's RSS every few seconds.

Needs Redis at 127.0.0.1:6379; starts its own embedded broker. Results go to
``benchmarks/results/keyed_operators*.json``; ``benchmarks/keyed_plots.py``
draws the plots in docs/img/.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
SCHEMA = {"sensor": "string", "temp": "double", "ts": "timestamp"}
PADDED = {**SCHEMA, "pad": "string"}
BATCH_ROWS = 20_000


def log(message: str) -> None:
    print(f"[keyed {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


# -- input --------------------------------------------------------------------------------

def records(count: int, seed: int, keys: int, step_ms: float, pad: int = 0) -> list[bytes]:
    """Seeded sensor readings in event-time order, ``step_ms`` apart, as JSON."""
    import random

    rng = random.Random(seed)
    padding = "x" * pad
    out = []
    for i in range(count):
        moment = EPOCH + timedelta(milliseconds=i * step_ms)
        row = {"sensor": f"s{rng.randrange(keys)}", "temp": round(rng.uniform(-10, 40), 2),
               "ts": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"}
        if pad:
            row["pad"] = padding
        out.append(json.dumps(row).encode())
    return out


def fill(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20, max_request_size=8 << 20)
    for value in values:
        producer.send(topic, value)
    producer.flush()
    producer.close()


def digest(bootstrap: str, topic: str) -> tuple[int, str]:
    """(records, sha256 of the sorted records with floats rounded) of a sink topic."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    rows = []
    for message in consumer:
        record = json.loads(message.value)
        rows.append(json.dumps({k: float(f"{v:.9g}") if isinstance(v, float) else v for k, v in record.items()},
                               sort_keys=True))
    consumer.close()
    rows.sort()
    return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


# -- one run (in a process of its own) ---------------------------------------------------------

def flow(op: str, topics: list[str], sink: str, aggregates: dict[str, str] | None = None) -> dict[str, Any]:
    schema = PADDED if aggregates and "pad" in " ".join(aggregates.values()) else SCHEMA
    sources = [{"id": f"src{i}", "type": "source", "config": {"topic": topic, "schema": schema}}
               for i, topic in enumerate(topics)]
    if op == "window":
        keyed = {"id": "op", "type": "window_aggregate", "config": {
            "keys": ["sensor"], "time_column": "ts", "window": "10 seconds", "watermark": "2 seconds",
            "aggregates": aggregates or {"n": "count(*)", "mean": "avg(temp)", "hi": "max(temp)"}}}
        streams = [{"from": "src0", "to": "op"}]
    else:
        keyed = {"id": "op", "type": "join", "config": {"on": ["sensor"], "window": "2 seconds"}}
        streams = [{"from": "src0", "to": "op", "port": "left"}, {"from": "src1", "to": "op", "port": "right"}]
    return {"name": f"bench-{op}", "tasks": [*sources, keyed, {"id": "out", "type": "sink", "config": {"topic": sink}}],
            "streams": [*streams, {"from": "op", "to": "out"}]}


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    """Submit one keyed dataflow over pre-filled topics (read from offset 0) and time every batch."""
    import redis

    import runtime.spark.runtime as spark_runtime
    from manager.service import Manager
    import runtime.spark.query_records as query_records
    from runtime.spark import operators as spark_operators

    topics = json.loads(args.topics)
    query_records.topic_end_offsets = lambda consumer, names: {  # start at 0: the input is already there
        name: {p: 0 for p in consumer.partitions_for_topic(name) or {0}} for name in names}
    task_ms: list[list[float]] = []
    for type_name in ("window_aggregate", "join"):
        base = spark_operators.KEYED[type_name]
        spark_operators.KEYED[type_name] = functools.partial(_timed, base, args.workers, task_ms)
    # The Spark UI's REST API gives the tasks of the shuffle stage; spark.driver.memory must reach the
    # driver JVM's launch. Both go through the session factory the runtime calls.
    import runtime.spark.session as session_module

    original = session_module.spark_session
    extra = {"spark.ui.enabled": "true", "spark.ui.port": "0"}
    if args.driver_memory:
        extra["spark.driver.memory"] = args.driver_memory
    session_module.spark_session = lambda master, app_name="sana", conf=None: original(master, app_name,
                                                                                      {**(conf or {}), **extra})
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    prefix = f"bench-keyed-{uuid.uuid4().hex[:8]}"
    runtime = spark_runtime.SparkRuntime(client, prefix, args.bootstrap, args.master, Path(tempfile.mkdtemp()) / "cp",
                                         trigger_s=0.2, max_records_per_batch=args.batch_rows, warm=False)
    manager = Manager(client, prefix, runtime)
    manager.start()
    sink = f"{topics[0]}-out-{uuid.uuid4().hex[:6]}"
    aggregates = json.loads(args.aggregates) if args.aggregates else None
    started = time.time()
    manager.submit(flow(args.op, topics, sink, aggregates))
    (query,) = runtime.queries.values()
    samples = []
    heap = _heap_probe(runtime) if args.heap else None
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        progress = [p for p in query.query.recentProgress if p.get("numInputRows")]
        done = sum(p["numInputRows"] for p in progress)
        if heap:
            samples.append({"t": round(time.time() - started, 1), "rows": done, **heap()})
            log(f"{done:,} rows read; driver heap {samples[-1]['heap_used_mb']} MB used, RSS {samples[-1]['rss_mb']} MB")
        if done >= args.expect:
            break
        if not query.alive():
            raise RuntimeError(f"query died: {query.error()}")
        time.sleep(2.0 if heap else 0.5)
    progress = [p for p in query.query.recentProgress if p.get("numInputRows")]
    first_ms = _ms(progress[0]["timestamp"])
    end_ms = max(_ms(p["timestamp"]) + p["durationMs"]["triggerExecution"] for p in progress)
    steady = progress[1:] or progress
    steady_ms = end_ms - _ms(steady[0]["timestamp"])
    steady_rows = sum(p["numInputRows"] for p in steady)
    durations = [p["durationMs"]["triggerExecution"] for p in steady]
    time.sleep(1.0)
    spark_tasks = _shuffle_stage_tasks(runtime.spark(), args.workers)
    count, sha = digest(args.bootstrap, sink)
    result = {
        "path": args.path, "op": args.op, "workers": args.workers, "master": args.master,
        "rows": sum(p["numInputRows"] for p in progress), "batches": len(progress),
        "rows_per_s": round(steady_rows / (steady_ms / 1000), 1), "rows_per_s_with_first": round(
            sum(p["numInputRows"] for p in progress) / ((end_ms - first_ms) / 1000), 1),
        "batch_p50_ms": pct(durations, 0.5), "batch_p99_ms": pct(durations, 0.99),
        "first_batch_ms": progress[0]["durationMs"]["triggerExecution"],
        "sink_records": count, "sink_digest": sha, "worker_task_ms": task_ms[1:], "spark_task_ms": spark_tasks,
        "runtime_source": str(Path(spark_runtime.__file__).parent.parent.parent),
    }
    if heap:
        result["heap_samples"] = samples
    manager.remove(next(iter(manager.state.dataflows)))
    runtime.close()
    return result


def _timed(base, workers: int, sink: list[list[float]], task, ports, **defaults):
    """The operator with ``workers`` logical workers; on the executor path, each batch's task times are kept."""
    extra = {"reshape": defaults["reshape"]} if defaults.get("reshape") else {}  # the old path takes none
    operator = base(task, ports, workers, **extra)
    finish = getattr(operator, "finish", None)
    if finish is not None:
        def timed_finish(*args, **kwargs):
            state = finish(*args, **kwargs)
            sink.append(list(operator.load.task_ms))
            return state
        operator.finish = timed_finish
    return operator


def _shuffle_stage_tasks(spark, workers: int) -> list[list[float]]:
    """Per keyed shuffle stage (one per batch, first left out): Spark's run time of each of its tasks, in ms.

    The keyed stage is the one with ``workers`` tasks that reads a shuffle and is not the watermark job
    (``first``); the old path has none. From the Spark UI's REST API.
    """
    import urllib.request

    base = spark.sparkContext.uiWebUrl
    if not base:
        return []
    app = spark.sparkContext.applicationId

    def get(path: str):
        with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/{path}", timeout=30) as answer:
            return json.loads(answer.read())

    stages = [stage for stage in get("stages?status=complete")
              if stage["numTasks"] == workers and stage.get("shuffleReadRecords", 0) > 0
              and not stage["name"].startswith("first")]
    result = []
    for stage in sorted(stages, key=lambda stage: stage["stageId"])[1:]:
        tasks = get(f"stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=1000")
        result.append(sorted(task["taskMetrics"]["executorRunTime"] for task in tasks if task.get("taskMetrics")))
    return result


def _heap_probe(runtime):
    """Driver JVM heap used after a GC, and this process's RSS, in MB."""
    jvm = runtime.spark().sparkContext._jvm

    def sample() -> dict[str, float]:
        jvm.java.lang.System.gc()
        java = jvm.java.lang.Runtime.getRuntime()
        with open("/proc/self/status") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
        return {"heap_used_mb": round((java.totalMemory() - java.freeMemory()) / 2**20, 1),
                "heap_max_mb": round(java.maxMemory() / 2**20, 1), "rss_mb": round(rss / 1024, 1)}

    return sample


def _ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


# -- the orchestration ------------------------------------------------------------------------

def spawn(path: str, op: str, workers: int, master: str, bootstrap: str, topics: list[str], expect: int,
          **extra: Any) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(Path(__file__).resolve()), "run", "--path", path, "--op", op,
               "--workers", str(workers), "--master", master, "--bootstrap", bootstrap,
               "--topics", json.dumps(topics), "--expect", str(expect)]
    for key, value in extra.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    log(f"{path} {op} workers={workers} master={master} ...")
    child = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tail: list[str] = []

    def relay() -> None:  # the child's status lines go on showing progress; Spark's log is kept for errors
        for line in child.stderr:
            if line.startswith("[keyed"):
                print(f"  {line}", end="", file=sys.stderr, flush=True)
            tail.append(line)
            del tail[:-200]

    relaying = threading.Thread(target=relay, daemon=True)
    relaying.start()
    stdout = child.stdout.read()
    child.wait()
    relaying.join()
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if child.returncode or not lines:
        raise RuntimeError(f"run failed ({child.returncode}):\n{''.join(tail)[-4000:]}")
    result = json.loads(lines[-1])
    log(f"  {result['rows_per_s']:,} rows/s, batch p50 {result['batch_p50_ms']} ms, p99 {result['batch_p99_ms']} ms, "
        f"sink {result['sink_records']} records ({result['sink_digest']})")
    return result


def broker():
    from api.launcher import Launcher
    from sana.settings import Settings
    from tests.fixtures.services import free_port

    settings = Settings(embedded_kafka_port=free_port())
    launcher = Launcher(settings, Path(tempfile.mkdtemp(prefix="sana-keyed-")))
    launcher.start_broker()
    return launcher, settings.effective_kafka_bootstrap


def new_topic(bootstrap: str, stem: str, partitions: int = 2) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"{stem}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(name, partitions, 1)])
    admin.close()
    return name


def compare(args: argparse.Namespace) -> dict[str, Any]:
    launcher, bootstrap = broker()
    try:
        rows = args.rows
        inputs = {"window": [records(rows, 1, 1000, 5)],
                  "join": [records(rows // 2, 2, 2000, 10), records(rows // 2, 3, 2000, 10)]}
        topics = {}
        for op, values in inputs.items():
            topics[op] = []
            for side, side_values in enumerate(values):
                topic = new_topic(bootstrap, f"{op}{side}")
                fill(bootstrap, topic, side_values)
                topics[op].append(topic)
            log(f"{op}: {sum(len(v) for v in values):,} records in {topics[op]}")
        runs = []
        worker_counts = [8] if args.quick else [1, 4, 8]
        for op in ("window", "join"):
            for workers in worker_counts:
                runs.append(spawn("new", op, workers, "local[2]", bootstrap, topics[op], rows))
            if not args.no_cluster:
                runs.append(spawn("new", op, 8, "local-cluster[2,1,1024]", bootstrap, topics[op], rows))
        return {"rows": rows, "batch_rows": BATCH_ROWS, "runs": runs,
                "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    finally:
        launcher.stop()


def heap(args: argparse.Namespace) -> dict[str, Any]:
    launcher, bootstrap = broker()
    try:
        topic = new_topic(bootstrap, "heap")
        chunk = 100_000
        for start in range(0, args.rows, chunk):
            fill(bootstrap, topic, records(min(chunk, args.rows - start), 7 + start, 1000, 5, pad=1024))
            log(f"heap: {start + chunk:,} of {args.rows:,} padded records produced")
        aggregates = {"n": "count(*)", "hi": "max(temp)", "last_pad": "max(pad)"}
        result = spawn("new", "window", 8, args.master, bootstrap, [topic], args.rows, heap=1,
                       driver_memory=args.driver_memory, aggregates=json.dumps(aggregates), timeout=3600)
        result["input_bytes"] = args.rows * (1024 + 80)
        return result
    finally:
        launcher.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.keyed_operators")
    parser.add_argument("mode", nargs="?", default="compare", choices=["compare", "heap", "run"])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="8 workers only")
    parser.add_argument("--no-cluster", action="store_true", help="skip local-cluster[2,1,1024]")
    parser.add_argument("--driver-memory", default="")
    parser.add_argument("--master", default="local[2]")
    # for "run" (one configuration, in a child process)
    parser.add_argument("--path", default="new")
    parser.add_argument("--op", default="window")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--bootstrap", default="")
    parser.add_argument("--topics", default="[]")
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--batch-rows", type=int, default=BATCH_ROWS)
    parser.add_argument("--aggregates", default="")
    parser.add_argument("--heap", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    if args.mode == "run":
        print(json.dumps(run_once(args)))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.mode == "heap":
        if args.master == "local[2]":
            args.master = "local-cluster[2,1,1024]"
        args.driver_memory = args.driver_memory or "512m"
        args.rows = args.rows if args.rows != 200_000 else 1_500_000
        result = heap(args)
        name = "keyed_operators_heap.json"
    else:
        result = compare(args)
        name = "keyed_operators.json"
    (RESULTS / name).write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {RESULTS / name}")


if __name__ == "__main__":
    main()
