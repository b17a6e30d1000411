"""Containment sharing on a workload of parameter variants (issue 37): what it saves and what a submit costs.

The workload is built like the RIoT construction of docs/reuse.md, but each app picks its own parameters:
apps read one of three sensor streams (temperature, humidity, light, dust, air quality, each uniform over its
range), keep readings above a threshold of one column (thresholds drawn from a realistic range, rounded to a
step, so some apps agree exactly and most do not), and some also compute a projection (3 of 5 derived columns,
e.g. Fahrenheit, or a comfort flag). Variants:

- ``exact``: Sana with exact sharing only (``SANA_CONTAINMENT=false``);
- ``containment``: with containment on.

For both it reports running tasks, containment shares, and the records the filters and selects read per
million source records, computed from each column's distribution (a task reading the source reads every
record; a residual reads what its wider filter keeps). Then submit p50/p99 at each level of running
dataflows with containment on and off (in process, Manager + DryRunRuntime on the real Redis).

    .venv/bin/python -m benchmarks.containment --apps 200 --levels 100,1000,10000 --probes 200
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.measure import summary
from benchmarks.targets import delete_prefix, redis_client
from manager.results import Limits
from manager.service import Manager
from manager.state import parents_first
from runtime.dryrun import DryRunRuntime

REDIS_URL = os.environ.get("SANA_REDIS_URL", "redis://127.0.0.1:6379/0")
UNLIMITED = Limits(tasks_per_dataflow=200, dataflows_per_owner=10**9, running_tasks=10**9, queries=10**9)
#: column -> (low, high, threshold step): readings are uniform over [low, high).
COLUMNS = {"temp": (-10.0, 45.0, 1.0), "humidity": (0.0, 100.0, 5.0), "light": (0.0, 2000.0, 50.0),
           "dust": (0.0, 500.0, 10.0), "airq": (0.0, 300.0, 10.0)}
SCHEMA = {"sensor": "string", **{column: "double" for column in COLUMNS}, "ts": "timestamp"}
DERIVED = {"sensor": "sensor", "temp_f": "temp * 9 / 5 + 32", "comfort": "humidity BETWEEN 30 AND 60",
           "bright": "light > 500", "dusty": "dust / 10", "ts": "ts"}
STREAMS = ("city-a", "city-b", "city-c")


def app(rng: random.Random, index: int, salt: str) -> dict[str, Any]:
    """One app's dataflow."""
    topic = rng.choice(STREAMS)
    column = rng.choice(list(COLUMNS))
    low, high, step = COLUMNS[column]
    threshold = round(rng.uniform(low + 0.3 * (high - low), low + 0.9 * (high - low)) / step) * step
    expr = f"{column} > {threshold:g}"
    tasks = [{"id": "src", "type": "source", "config": {"topic": topic, "schema": dict(SCHEMA)}},
             {"id": "keep", "type": "filter", "config": {"expr": expr}}]
    streams = [{"from": "src", "to": "keep"}]
    last = "keep"
    if rng.random() < 0.5:
        tasks.append({"id": "wide", "type": "select", "config": {"columns": dict(DERIVED)}})
        streams.append({"from": "keep", "to": "wide"})
        last = "wide"
        chosen = rng.sample([name for name in DERIVED if name not in ("sensor", "ts")], 2)
        tasks.append({"id": "view", "type": "select", "config": {"columns": {"sensor": "sensor", "ts": "ts",
                                                                             **{name: DERIVED[name] for name in chosen}}}})
        streams.append({"from": "keep", "to": "view"})
        tasks.append({"id": "out2", "type": "sink", "config": {"topic": f"{salt}-app{index}-view"}})
        streams.append({"from": "view", "to": "out2"})
    tasks.append({"id": "out", "type": "sink", "config": {"topic": f"{salt}-app{index}"}})
    streams.append({"from": last, "to": "out"})
    return {"name": f"app{index}", "tasks": tasks, "streams": streams}


def records_read(manager: Manager) -> float:
    """Records the running filters and selects read per source record, summed over them.

    A task reads what its parent outputs: a source 1, a filter the share of readings above its threshold (a
    residual's predicate here is its dataflow's own, which implies its wider filter's, so it outputs the same
    share of the source), a select what it reads.
    """
    state = manager.state
    out: dict[str, float] = {}
    total = 0.0
    for task_id in parents_first(state.tasks):
        spec = state.tasks[task_id]
        if spec.type == "source":
            out[task_id] = 1.0
            continue
        read = out[spec.inputs[0][1]]
        if spec.type in ("filter", "select"):
            total += read
        out[task_id] = _kept(spec.config["expr"]) if spec.type == "filter" else read
    return total


def _kept(expr: str) -> float:
    column, _, value = expr.partition(" > ")
    low, high, _ = COLUMNS[column]
    return (high - max(low, min(high, float(value)))) / (high - low)


def fill(manager: Manager, count: int, rng: random.Random, salt: str, start: int = 0) -> None:
    for index in range(start, start + count):
        manager.submit(app(rng, index, salt))
        if (index - start + 1) % 2000 == 0:
            print(f"  {index - start + 1:,}/{count:,} submitted", file=sys.stderr, flush=True)


def saving(apps: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for variant in ("exact", "containment"):
        client = redis_client(REDIS_URL)
        prefix = f"bench-contain-{uuid.uuid4().hex[:8]}"
        manager = Manager(client, prefix, DryRunRuntime(client, prefix), containment=variant == "containment",
                          limits=UNLIMITED)
        manager.start()
        try:
            fill(manager, apps, random.Random(seed), prefix)
            stats = manager.stats()
            rows.append({"variant": variant, "apps": apps, "submitted_tasks": stats["submitted_tasks"],
                         "running_tasks": stats["running_tasks"], "containment_shares": stats["containment_shares"],
                         "records_read_per_source_record": round(records_read(manager), 2)})
        finally:
            delete_prefix(client, prefix)
            client.close()
    return rows


def latency(levels: list[int], probes: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for variant in ("exact", "containment"):
        client = redis_client(REDIS_URL)
        prefix = f"bench-contain-{uuid.uuid4().hex[:8]}"
        manager = Manager(client, prefix, DryRunRuntime(client, prefix), containment=variant == "containment",
                          limits=UNLIMITED)
        manager.start()
        rng = random.Random(seed)
        running = 0
        try:
            for level in levels:
                fill(manager, level - running, rng, prefix, start=running)
                running = level
                submits, removes = [], []
                for probe in range(probes):
                    document = app(rng, 10_000_000 + probe, prefix)
                    began = time.perf_counter()
                    result = manager.submit(document)
                    middle = time.perf_counter()
                    manager.remove(result.id)
                    submits.append((middle - began) * 1000)
                    removes.append((time.perf_counter() - middle) * 1000)
                row = {"variant": variant, "running": level, "submit_ms": summary(submits), "remove_ms": summary(removes)}
                print(f"{variant:>11} at {level:>6,}: submit p50 {row['submit_ms']['p50']:.2f} ms, "
                      f"p99 {row['submit_ms']['p99']:.2f} ms", file=sys.stderr, flush=True)
                rows.append(row)
        finally:
            delete_prefix(client, prefix)
            client.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", type=int, default=200)
    parser.add_argument("--levels", default="100,1000,10000")
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/containment.json"))
    args = parser.parse_args(argv)
    saved = saving(args.apps, args.seed)
    for row in saved:
        print(json.dumps(row), file=sys.stderr)
    timed = latency([int(level) for level in args.levels.split(",")], args.probes, args.seed)
    args.out.write_text(json.dumps({"saving": saved, "latency": timed}, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
