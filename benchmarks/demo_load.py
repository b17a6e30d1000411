"""What the demo costs a new user's machine: `sana up --demo` watched for a few minutes.

Run:  .venv/bin/python -m benchmarks.demo_load [--warmup 60] [--seconds 120] [--source-linger-ms MS] [--ephemeral]   # ~4 min

Starts ``sana up --demo`` as a user does (its own ports, state prefix and run
directory), waits until every example dataflow is submitted and ``--warmup``
seconds more, then for ``--seconds`` samples the CPU of the whole process tree
(the API and driver, the JVM, Python workers, the broker, the generators),
every query's micro-batch durations (``/runtime/queries``) and what Reshape
did in each keyed operator. Prints a table and writes
``benchmarks/results/demo_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from benchmarks.runtime_dataplane import pct
from runtime.costs import process_tree_cpu_s
from benchmarks.targets import free_port

ROOT = Path(__file__).resolve().parents[1]


def _get(url: str, path: str):
    return httpx.get(url + path, timeout=30).json()


def _wait(predicate, timeout_s: float, what: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"sana up exited with {process.returncode} while waiting for {what}")
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")


def measure(warmup_s: float, seconds: float, source_linger_ms: int | None = None, ephemeral: bool = False) -> dict:
    run = Path(tempfile.mkdtemp(prefix="demo-load-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SANA_API_PORT": str(port), "SANA_EMBEDDED_KAFKA_PORT": str(free_port()),
           "SANA_STATE_PREFIX": f"demo-load-{uuid.uuid4().hex[:6]}", "SANA_RUN_DIR": str(run / "run"), "SANA_DATA_DIR": str(run / "data"),
           "SANA_CHECKPOINT_DIR": str(run / "checkpoints")}
    env.pop("SANA_KAFKA_BOOTSTRAP", None)
    if source_linger_ms is not None:
        env["SANA_DEMO_LINGER_MS"] = str(source_linger_ms)
    if ephemeral:
        env["SANA_EPHEMERAL"] = "1"
    examples = len(list((ROOT / "examples").glob("*.json")))
    with open(run / "up.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "api.cli", "up", "--demo"], cwd=ROOT, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: len(_get(url, "/dataflows")["dataflows"]) >= examples, 300, f"the {examples} example dataflows", process)
        trigger_s = float(env.get("SANA_TRIGGER_S", "1"))
        print(f"demo: {examples} dataflows submitted; warming up {warmup_s:.0f} s", file=sys.stderr, flush=True)
        time.sleep(warmup_s)
        batches: dict[tuple[str, int], float] = {}
        cpu0, began, load0 = process_tree_cpu_s(process.pid), time.monotonic(), os.getloadavg()[0]
        while time.monotonic() - began < seconds:
            time.sleep(5)
            since = time.time() - (time.monotonic() - began)
            for query in _get(url, "/runtime/queries")["queries"]:
                for batch in query.get("recent_batches", []):
                    if batch["at"] >= since:
                        batches[(query["query"], batch["batch_id"])] = batch["duration_ms"]
            elapsed = time.monotonic() - began
            cores = (process_tree_cpu_s(process.pid) - cpu0) / elapsed
            print(f"demo: {elapsed:4.0f}/{seconds:.0f} s, {cores:.2f} cores, {len(batches)} batches", file=sys.stderr,
                  flush=True)
        elapsed = time.monotonic() - began
        cores = (process_tree_cpu_s(process.pid) - cpu0) / elapsed
        queries = _get(url, "/runtime/queries")["queries"]
        reshape = {}
        for query in queries:
            for task, metrics in query.get("state", {}).get("operators", {}).items():
                controller = (metrics or {}).get("reshape") or {}
                reshape[task] = {"operator": (metrics or {}).get("operator"),
                                 "workers": (metrics or {}).get("routing", {}).get("workers"),
                                 "detections": controller.get("detections"), "rollbacks": controller.get("rollbacks")}
        durations = list(batches.values())
        retention = httpx.get(url + "/healthz", timeout=30).json().get("components", {}).get("kafka", {}).get("retention")
        return {"broker_retention": retention,"dataflows": examples, "queries": len(queries), "trigger_s": trigger_s, "seconds": round(elapsed),
                "keyed_workers": int(env.get("SANA_KEYED_WORKERS", "8")),
                "cores": round(cores, 3), "load_average_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
                "batches": len(durations),
                # the machine saturates: what a change saves shows as more batches, not fewer cores
                "cpu_s_per_batch": round(cores * elapsed / len(durations), 3) if durations else None,
                "batch_ms": {"p50": round(statistics.median(durations)) if durations else None,
                             "p95": round(pct(durations, 95)) if durations else None,
                             "max": round(max(durations)) if durations else None},
                "keyed_operators": reshape,
                # how long each query could hold its input for a larger batch (its sinks' max_delay; 0: none)
                "gather_s": {query["query"]: query.get("gather_s", 0.0) for query in queries}}
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/demo_load.json"))
    parser.add_argument("--source-linger-ms", type=int, help="the demo sources' linger (SANA_DEMO_LINGER_MS; 20 makes a "
                        "record batch per record, the load that stalled the durable broker before its retention)")
    parser.add_argument("--ephemeral", action="store_true", help="the in-memory broker (sana up --ephemeral)")
    args = parser.parse_args(argv)
    result = measure(args.warmup, args.seconds, args.source_linger_ms, args.ephemeral)
    result.update(source_linger_ms=args.source_linger_ms, broker="memory" if args.ephemeral else "durable")
    result["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.out.write_text(json.dumps(result, indent=1))
    print("| dataflows | queries | trigger | batch p50 | batch p95 | cores (whole tree) | CPU s per batch |\n"
          "|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {result['dataflows']} | {result['queries']} | {result['trigger_s']:g} s | {result['batch_ms']['p50']} ms | "
          f"{result['batch_ms']['p95']} ms | {result['cores']:.2f} | {result['cpu_s_per_batch']} |")
    print(json.dumps(result["keyed_operators"], indent=1))
    print("queries' hold (s, their sinks' max_delay):", json.dumps(result["gather_s"], sort_keys=True))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
