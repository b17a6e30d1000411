"""The control path at scale (issue 34, item 1): does a submit or a remove cost more with more running dataflows?

In process (``Manager`` + ``DryRunRuntime`` on the real Redis, limits raised out of the way), for each level N
of running dataflows (RIoTBench-style, ``benchmarks.riot``, one owner) it fills up to N and then submits a fresh
dataflow and removes it at once, ``--probes`` times, timing both calls (the level stays N). Per level it reports
submit and remove p50/p99, the Redis round trips and the bytes sent to Redis per submit and per remove (counted on
the client's connections), the manager's RSS and Redis's used memory.

``--profile`` prints the top of a cProfile of the probes at the last level.

``--wan FILE`` plans every submit on a WAN: the file's ``wan`` (the 14-site configuration of
``examples/wan/fourteen-sites.json``) with the RIoTBench sources at its data sites, and each dataflow's sinks
pinned to one of its compute sites (seeded), so every submit runs the WAN stages (Algorithm 1, the weighing, the
safety net) against the running set.

    .venv/bin/python -m benchmarks.control_path --levels 1000,10000 --probes 300
    .venv/bin/python -m benchmarks.control_path --levels 1000,10000 --probes 300 --out benchmarks/results/control-path-after.json
    .venv/bin/python -m benchmarks.control_path --wan examples/wan/fourteen-sites.json --levels 10,100,1000 --probes 200
    .venv/bin/python -m benchmarks.control_path --wan examples/wan/fourteen-sites.json --levels 10,1000 --probes 100 --measured 50

``--measured N`` also plans N probes per level with measured rates (:func:`plan_measured`: planning only).
``--gc-freeze`` freezes what survives each full collection, as the server does (``api/collector.py``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import resource
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from api.collector import FreezeSurvivors
from benchmarks.breakdown import bridging_documents, phase_breakdown
from benchmarks.measure import summary
from benchmarks.riot import SOURCE_SCHEMAS, riot_dataflow
from benchmarks.targets import UNLIMITED, delete_prefix, redis_client
from manager import merge
from manager.service import Manager
from manager.validate import parse_dataflow
from runtime.dryrun import DryRunRuntime

PROBE_BASE = 1_000_000
WARMUP_BASE = 2_000_000


class Wire:
    """Counts round trips (packed sends) and bytes sent on every redis-py connection of this process."""

    def __init__(self) -> None:
        self.trips = 0
        self.sent = 0
        self._original = redis.connection.AbstractConnection.send_packed_command
        wire = self

        def counted(connection, command, check_health=True):
            wire.trips += 1
            wire.sent += sum(len(part) for part in command) if isinstance(command, list) else len(command)
            return wire._original(connection, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted

    def read(self) -> tuple[int, int]:
        return self.trips, self.sent


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class GcPauses:
    """Durations of the collector's full (generation 2) collections while it is entered."""

    def __init__(self) -> None:
        self.full_ms: list[float] = []
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.full_ms.append((time.perf_counter() - self._start) * 1000)

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def probe(manager: Manager, wire: Wire, flows: list[Any]) -> dict[str, Any]:
    submit_ms, remove_ms, submit_trips, remove_trips, submit_bytes, remove_bytes = [], [], [], [], [], []
    pauses = GcPauses()
    with pauses:
        for flow in flows:
            trips, sent = wire.read()
            start = time.perf_counter()
            result = manager.submit_validated(flow)
            middle = time.perf_counter()
            trips_mid, sent_mid = wire.read()
            manager.remove(result.id)
            end = time.perf_counter()
            trips_end, sent_end = wire.read()
            submit_ms.append((middle - start) * 1000)
            remove_ms.append((end - middle) * 1000)
            submit_trips.append(trips_mid - trips)
            remove_trips.append(trips_end - trips_mid)
            submit_bytes.append(sent_mid - sent)
            remove_bytes.append(sent_end - sent_mid)
    return {
        "submit_ms": summary(submit_ms),
        "remove_ms": summary(remove_ms),
        "submit_redis_round_trips": max(submit_trips),
        "remove_redis_round_trips": max(remove_trips),
        "submit_bytes_to_redis_p50": sorted(submit_bytes)[len(submit_bytes) // 2],
        "remove_bytes_to_redis_p50": sorted(remove_bytes)[len(remove_bytes) // 2],
        "gc_full_collections": len(pauses.full_ms),
        "gc_full_ms_max": round(max(pauses.full_ms, default=0.0), 1),
    }


def plan_measured(manager: Manager, flows: list[Any]) -> dict[str, Any]:
    """Plan each of ``flows`` (nothing is committed) with measured rates: every running task's estimate x 0.9, as
    a runtime reporting Kafka bytes per task would give. The weighing then reads the model built from them."""
    measured = {task_id: rate * 0.9 for task_id, rate in manager.state.rates.items()}
    plan_ms = []
    for flow in flows:
        start = time.perf_counter()
        merge.plan_merge(manager.state, flow, 0.0, measured=measured)
        plan_ms.append((time.perf_counter() - start) * 1000)
    return {"plan_measured_ms": summary(plan_ms)}


def wan_document(path: Path) -> dict[str, Any]:
    """The ``wan`` of an experiment file, with the RIoTBench sources (and their model topics) at its data sites."""
    wan = dict(json.loads(path.read_text())["wan"])
    data = [site["name"] for site in wan["sites"] if isinstance(site, dict) and site.get("compute") is False]
    sources = {}
    for index, domain in enumerate(SOURCE_SCHEMAS):
        sources[f"riot-{domain}"] = {"site": data[index % len(data)], "rate_mbps": 2.0}
        sources[f"riot-{domain}-models"] = {"site": data[(index + len(SOURCE_SCHEMAS)) % len(data)], "rate_mbps": 0.01}
    return {**wan, "sources": sources}


def compute_sites(wan: dict[str, Any]) -> list[str]:
    return [site if isinstance(site, str) else site["name"] for site in wan["sites"]
            if isinstance(site, str) or site.get("compute", True)]


def pinned(document: dict[str, Any], sites: list[str] | None, seed: int) -> dict[str, Any]:
    """``document`` with its sinks pinned to one seeded compute site (unchanged without sites)."""
    if not sites:
        return document
    site = random.Random(f"{seed}:{document['name']}").choice(sites)
    return {**document, "tasks": [{**task, "site": site} if task["type"] == "sink" else task for task in document["tasks"]]}


def edge_cases(manager: Manager, documents: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Submit+remove of dataflows whose plans touch a whole running DAG (``benchmarks.breakdown.bridging_documents``)."""
    out = {}
    for kind, docs in documents.items():
        submit_ms, remove_ms = [], []
        for document in docs:
            flow = parse_dataflow(document)
            start = time.perf_counter()
            result = manager.submit_validated(flow)
            middle = time.perf_counter()
            manager.remove(result.id)
            submit_ms.append((middle - start) * 1000)
            remove_ms.append((time.perf_counter() - middle) * 1000)
        out[kind] = {"submit_ms": summary(submit_ms), "remove_ms": summary(remove_ms)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1000,10000")
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--edge-cases", type=int, default=0, help="DAG-wide submit+removes per kind per level (0: none)")
    parser.add_argument("--breakdown", type=int, default=0,
                        help="at the last level, time each step of this many more probes (benchmarks.breakdown)")
    parser.add_argument("--profile", action="store_true", help="cProfile the probes at the last level")
    parser.add_argument("--wan", type=Path, default=None,
                        help="plan on this experiment file's WAN (e.g. examples/wan/fourteen-sites.json)")
    parser.add_argument("--hops", choices=("backpressure", "buffered"), default=None,
                        help="with --wan: the flow model plans are weighed with (the configuration's hops)")
    parser.add_argument("--measured", type=int, default=0, metavar="N",
                        help="with --wan: also time planning N probes with measured rates (plan_measured_ms)")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="freeze what survives each full collection, as the server does (SANA_GC_FREEZE)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    levels = [int(level) for level in args.levels.split(",")]
    freeze = FreezeSurvivors().install() if args.gc_freeze else None
    wire = Wire()
    client = redis_client(args.redis_url)
    prefix = f"bench-{uuid.uuid4().hex[:12]}"
    manager = Manager(client, prefix, DryRunRuntime(client, prefix), limits=UNLIMITED)
    manager.start()
    sites = None
    if args.wan:
        wan = wan_document(args.wan)
        if args.hops:
            wan["hops"] = args.hops
        manager.set_wan(wan)
        sites = compute_sites(wan)

    def dataflow(number: int):
        return parse_dataflow(pinned(riot_dataflow(number, args.seed), sites, args.seed))

    probes = [dataflow(PROBE_BASE + number) for number in range(args.probes)]
    out: dict[str, Any] = {"command": "python -m benchmarks.control_path " + " ".join(argv or __import__("sys").argv[1:]),
                           "levels": []}
    try:
        for number in range(30):
            manager.remove(manager.submit_validated(dataflow(WARMUP_BASE + number)).id)
        running = 0
        for index, level in enumerate(levels):
            fill_start = time.monotonic()
            for number in range(running, level):
                manager.submit_validated(dataflow(number))
            fill_s = time.monotonic() - fill_start
            running = level
            gc.collect()
            profiler = cProfile.Profile() if args.profile and index == len(levels) - 1 else None
            if profiler:
                profiler.enable()
            result = probe(manager, wire, probes)
            if profiler:
                profiler.disable()
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
                print(text.getvalue())
            if args.measured and args.wan:
                result.update(plan_measured(manager, probes[:args.measured]))
            edges = edge_cases(manager, bridging_documents(args.edge_cases, args.seed)) if args.edge_cases else None
            stats = manager.stats()
            row = {"running_dataflows": level, "running_tasks": stats["running_tasks"],
                   "fill_s": round(fill_s, 1), **result, "manager_rss_mib": rss_mib(),
                   "redis_used_memory_mib": round(client.info("memory")["used_memory"] / 2**20, 1)}
            if edges:
                row["edge_cases"] = edges
            row["loadavg_1min"] = round(os.getloadavg()[0], 2)
            if args.breakdown and index == len(levels) - 1:
                steps = phase_breakdown(manager, [riot_dataflow(PROBE_BASE + number, args.seed) for number in range(args.breakdown)])
                row["breakdown"] = {op: {phase: {key: stats[key] for key in ("p50", "p99", "max")}
                                         for phase, stats in steps[op].items()} for op in ("submit", "remove")}
            out["levels"].append(row)
            print(json.dumps(row), flush=True)
    finally:
        manager.close()
        delete_prefix(client, prefix)
        if freeze is not None:
            freeze.uninstall()
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
