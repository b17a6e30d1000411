"""What a micro-batch costs a query at a low rate, by the number of windows it hosts, and in which processes.

Run:  .venv/bin/python -m benchmarks.batch_cost [--windows 0,1,2,4] [--warmup 45] [--seconds 45] [--rate 20]   # ~2 min a count

For each count k, in a process of its own: an embedded broker, Redis, Spark
``local[2]`` with a 1 s trigger, and one dataflow submitted through the
manager: a source fed ``--rate`` records a second (10 sensors, event time
the time sent) and k tumbling ``window_aggregate`` tasks over it (5, 10, ... seconds,
so none shares another), each into a sink; with k = 0, a filter into a sink.
After ``--warmup`` seconds it samples, for ``--seconds``, the CPU of each
process of its tree by kind (the Spark JVM, PySpark's Python workers, the
driver's Python, the broker) and the query's batches. ``--src`` runs another
checkout's code (an A/B against a commit: ``git worktree add /tmp/base <commit>``).

Writes ``benchmarks/results/batch_cost.json`` (``--out``); docs/runtime.md
("What a micro-batch costs") reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = {"sensor": "string", "temp": "double", "ts": "timestamp"}


def dataflow(topic: str, windows: int) -> dict:
    tasks: list[dict] = [{"id": "src", "type": "source", "config": {"topic": topic, "schema": SCHEMA}}]
    streams: list[dict] = []
    for index in range(windows):
        tasks += [{"id": f"w{index}", "type": "window_aggregate", "config": {
                      "keys": ["sensor"], "time_column": "ts", "window": f"{5 * (index + 1)} seconds",
                      "watermark": "2 seconds", "aggregates": {"n": "count(*)", "hi": "max(temp)"}}},
                  {"id": f"o{index}", "type": "sink", "config": {"topic": f"{topic}-o{index}"}}]
        streams += [{"from": "src", "to": f"w{index}"}, {"from": f"w{index}", "to": f"o{index}"}]
    if not windows:
        tasks += [{"id": "f", "type": "filter", "config": {"expr": "temp > 0"}},
                  {"id": "o", "type": "sink", "config": {"topic": f"{topic}-o"}}]
        streams += [{"from": "src", "to": "f"}, {"from": "f", "to": "o"}]
    return {"name": f"batch-cost-{windows}", "tasks": tasks, "streams": streams}


def cpu_by_process(root: int | None = None) -> dict[int, tuple[str, float]]:
    """``pid -> (kind, CPU seconds so far)`` of ``root`` (this process by default; the ``driver``) and its
    descendants."""
    import psutil

    me = psutil.Process(root)
    found: dict[int, tuple[str, float]] = {}
    for process in [me, *me.children(recursive=True)]:
        try:
            times, command = process.cpu_times(), " ".join(process.cmdline())
        except psutil.Error:  # exited between the listing and the reading
            continue
        kind = ("driver" if process.pid == me.pid else "jvm" if "java" in command else "broker" if "tansu" in command
                else "python_workers" if "pyspark" in command else "other")
        found[process.pid] = (kind, times.user + times.system)
    return found


def cores_by_kind(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float) -> dict[str, float]:
    """Cores by kind of process between two readings; a process that exited in between is left out (its time is
    not readable any more), one that started counts from zero."""
    totals: dict[str, float] = {}
    for pid, (kind, cpu) in after.items():
        totals[kind] = totals.get(kind, 0.0) + cpu - before.get(pid, (kind, 0.0))[1]
    return {kind: round(cpu / seconds, 3) for kind, cpu in totals.items()}


def reading(index: int, now: float) -> dict:
    """One of 10 sensors' readings, its event time the time it is sent (so windows close as time passes)."""
    return {"sensor": f"s{index % 10}", "temp": float(index % 50) - 10,
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + "Z"}


def run_one(windows: int, warmup_s: float, seconds: float, rate: int) -> dict:
    """One count, in this process: returns what it measured."""
    import redis

    from benchmarks.keyed_operators import broker, new_topic
    from benchmarks.runtime_dataplane import SteadyProducer
    from manager.service import Manager
    from runtime.spark.runtime import SparkRuntime

    launcher, bootstrap = broker()
    topic = new_topic(bootstrap, "batch-cost")
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    prefix = f"batch-cost-{uuid.uuid4().hex[:6]}"
    runtime = SparkRuntime(client, prefix, bootstrap, "local[2]", Path(tempfile.mkdtemp()) / "cp", trigger_s=1.0, warm=False)
    manager = Manager(client, prefix, runtime)
    manager.start()
    with SteadyProducer(bootstrap, topic, rate, make=reading):
        manager.submit(dataflow(topic, windows))
        (query,) = runtime.queries.values()
        time.sleep(warmup_s)
        cpu_before, batches_before, began = cpu_by_process(), query.batches_done, time.monotonic()
        time.sleep(seconds)
        cpu_after, batches, elapsed = cpu_by_process(), query.batches_done - batches_before, time.monotonic() - began
    durations = sorted(stats.duration_ms for stats in query.recent)
    cores = cores_by_kind(cpu_before, cpu_after, elapsed)
    total = sum(cores.values())
    result = {"windows": windows, "rate": rate, "batches": batches, "cores": round(total, 3), "cores_by_process": cores,
              "cpu_s_per_batch": round(total * elapsed / max(1, batches), 3),
              "batch_ms_p50": durations[len(durations) // 2] if durations else None}
    manager.remove(next(iter(manager.state.dataflows)))
    runtime.close()
    launcher.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="0,1,2,4", help="comma-separated numbers of windows")
    parser.add_argument("--warmup", type=float, default=45.0)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--rate", type=int, default=20, help="records a second into the source")
    parser.add_argument("--src", type=Path, default=ROOT, help="the checkout whose code runs")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/batch_cost.json")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: measure this count, print JSON
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.warmup, args.seconds, args.rate)), flush=True)
        os._exit(0)  # Spark's and the broker's threads do not hold the child up
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.src, capture_output=True, text=True).stdout.strip()
    rows = []
    for windows in (int(count) for count in args.windows.split(",")):
        print(f"[batch_cost {time.strftime('%H:%M:%S')}] {windows} window(s): starting, about "
              f"{args.warmup + args.seconds + 30:.0f} s", file=sys.stderr, flush=True)
        env = {**os.environ, "PYTHONPATH": str(args.src)}  # this script, the other checkout's code
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", str(windows), "--warmup",
                               str(args.warmup), "--seconds", str(args.seconds), "--rate", str(args.rate)],
                              cwd=args.src, env=env, capture_output=True, text=True, timeout=args.warmup + args.seconds + 300)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise SystemExit(f"{windows} window(s) failed ({done.returncode}):\n{done.stderr[-3000:]}")
        row = json.loads(lines[-1])
        rows.append(row)
        print(f"  {row['cores']} cores, {row['cpu_s_per_batch']} CPU-s a batch, batch p50 {row['batch_ms_p50']} ms; "
              f"{row['cores_by_process']}", file=sys.stderr, flush=True)
    print("| windows | cores | CPU-s a batch | batch p50 (ms) | JVM | Python workers | driver | broker |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        by = row["cores_by_process"]
        print(f"| {row['windows']} | {row['cores']} | {row['cpu_s_per_batch']} | {row['batch_ms_p50']} | {by.get('jvm', 0)} | "
              f"{by.get('python_workers', 0)} | {by.get('driver', 0)} | {by.get('broker', 0)} |")
    result = {"commit": commit, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": " ".join(["python -m benchmarks.batch_cost", *sys.argv[1:]]), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
