"""What one request costs the service over HTTP: wall time and CPU per submit+remove pair and per trivial GET.

Starts ``sana up --dry-run`` with 200 users (tokens, default rate limits, as
``benchmarks.manager_latency``'s http mode), fills it with ``--running``
RIoTBench dataflows, then times ``--pairs`` submit+remove pairs of probe
dataflows and as many ``GET`` of a missing dataflow (404: the HTTP stack, the
caller's token and one Redis round trip), reading the CPU time of the server,
of Redis and of this client (psutil) around each. The server's CPU per request
is what a change in the request path saves, measured apart from the latency
percentiles, which the machine's other load moves more.

    .venv/bin/python -m benchmarks.request_cost                 # about 40 s
    .venv/bin/python -m benchmarks.request_cost --running 1000 --pairs 2000 --out benchmarks/results/request-cost.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from benchmarks.manager_latency import SERVICE_LIMITS
from benchmarks.measure import Progress, machine, summary
from benchmarks.riot import riot_dataflow
from benchmarks.targets import HttpTarget, Tenants, delete_prefix, encode, redis_client

PROBE_BASE = 1_000_000


def _cpu_ms(before, after) -> float:
    return (after.user + after.system - before.user - before.system) * 1000


def measure(target: HttpTarget, redis_pid: int, pairs: int, progress: Progress) -> dict[str, Any]:
    """Submit+remove pairs, then as many trivial GETs: wall and CPU per request, latencies."""
    processes = {"server": psutil.Process(target.process.pid), "redis": psutil.Process(redis_pid),
                 "client": psutil.Process()}
    documents = [riot_dataflow(PROBE_BASE + number, 0) for number in range(min(pairs, 300))]
    bodies = [encode(document) for document in documents]
    for document, body in zip(documents[:30], bodies[:30]):  # warm: parses, caches, connections
        target.remove(target.submit(document, body).id)
    submit_ms, remove_ms = [], []
    before = {name: process.cpu_times() for name, process in processes.items()}
    started = time.perf_counter()
    for number in range(pairs):
        index = number % len(documents)
        submitted = target.submit(documents[index], bodies[index])
        submit_ms.append(submitted.ms)
        remove_ms.append(target.remove(submitted.id)[0])
        progress.say(f"pair {number + 1:,}/{pairs:,}, last submit {submitted.ms:.1f} ms")
    wall = time.perf_counter() - started
    pair = {"wall_ms": round(wall * 1000 / pairs, 3),
            **{f"{name}_cpu_ms": round(_cpu_ms(before[name], process.cpu_times()) / pairs, 3)
               for name, process in processes.items()}}
    before = {name: process.cpu_times() for name, process in processes.items()}
    started = time.perf_counter()
    get_ms = target.baseline(pairs)
    wall = time.perf_counter() - started
    get = {"wall_ms": round(wall * 1000 / pairs, 3),
           **{f"{name}_cpu_ms": round(_cpu_ms(before[name], process.cpu_times()) / pairs, 3)
              for name, process in processes.items()}}
    return {"pair": pair, "get": get, "submit_ms": summary(submit_ms), "remove_ms": summary(remove_ms),
            "get_ms": summary(get_ms)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU and wall time per request of sana up --dry-run over HTTP.")
    parser.add_argument("--running", type=int, default=300, help="dataflows running while measuring")
    parser.add_argument("--pairs", type=int, default=1000, help="submit+remove pairs (and trivial GETs)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)
    progress = Progress()
    client = redis_client(args.redis_url)
    redis_pid = int(client.info("server")["process_id"])
    prefix = f"bench-{uuid.uuid4().hex[:12]}-cost"
    target = HttpTarget(args.redis_url, prefix, Path(tempfile.mkdtemp(prefix="sana-cost-")), tenants=Tenants(200),
                        limits=SERVICE_LIMITS)
    try:
        for number in range(args.running):
            document = riot_dataflow(number, 0)
            target.submit(document, encode(document))
            progress.say(f"filling {number + 1:,}/{args.running:,} running dataflows")
        result = {"command": "python -m benchmarks.request_cost " + " ".join(sys.argv[1:] if argv is None else argv),
                  "machine": machine(), "running": args.running, "pairs": args.pairs,
                  **measure(target, redis_pid, args.pairs, progress)}
    finally:
        target.close()
        delete_prefix(client, prefix)
        client.close()
    pair, get = result["pair"], result["get"]
    print(f"per submit+remove pair: wall {pair['wall_ms']:.2f} ms; CPU server {pair['server_cpu_ms']:.2f}, "
          f"redis {pair['redis_cpu_ms']:.2f}, client {pair['client_cpu_ms']:.2f} ms")
    print(f"per trivial GET: wall {get['wall_ms']:.2f} ms; CPU server {get['server_cpu_ms']:.2f}, "
          f"client {get['client_cpu_ms']:.2f} ms")
    print(f"submit p50 / p99 {result['submit_ms']['p50']:.2f} / {result['submit_ms']['p99']:.2f} ms, "
          f"remove {result['remove_ms']['p50']:.2f} / {result['remove_ms']['p99']:.2f} ms")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
