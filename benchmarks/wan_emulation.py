"""Sana, NET and Max-Share on an emulated WAN with real traffic, beside the simulator on the same scenarios.

Each scenario is a small WAN (a few sites, links of a few Mbps), one raw stream
and a few queries. For each policy (the WAN configuration's ``policy``) the
benchmark runs the real service in this process: the manager, the Spark
runtime (``local[2]``) and the embedded broker, with every cross-site read
going through a shaping proxy per directed link (:mod:`wan_sim.emulation`).
A producer feeds the stream at a fixed rate; each sink topic is read directly
and every record timed: throughput is what reaches the sink per second over
the measured window, in source records per second (sink records over the
query's selectivity, which the generated data fixes exactly), and latency is
the sink record's broker timestamp minus the source record's creation time.
The simulator (:func:`wan_sim.simulate.simulate`, the flow model the
optimizer plans with) runs the same scenario; the table puts Sana/NET and
Sana/Max-Share from both side by side.

    .venv/bin/python -m benchmarks.wan_emulation                  # every scenario, every policy; about 17 minutes
    .venv/bin/python -m benchmarks.wan_emulation --scenario fan-in --policy sana --measure-s 30
                                                                  # (a scenario run alone replaces its row only)

Writes ``benchmarks/results/wan-emulation.json`` and, with ``--write-docs``,
``docs/img/wan-emulation.png``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.measure import Progress, machine
from benchmarks.riot_records import produce_paced
from benchmarks.targets import delete_prefix, free_port, redis_client

RESULTS = Path(__file__).resolve().parent / "results" / "wan-emulation.json"
PLOT = Path(__file__).resolve().parents[1] / "docs" / "img" / "wan-emulation.png"
POLICIES = ("sana", "net", "max-share")
SCHEMA = {"id": "long", "v": "int", "ts": "long", "pad": "string"}
# bytes a record of the raw stream takes on the wire beyond its JSON value: Kafka's record framing and a share of
# its batch header, and the runtime's four headers on the taps. An estimate, a little low: relay's 0.8 Mbps link
# ran full where the model puts it at 99.8 % (docs/wan.md, "Emulated WAN")
WIRE_OVERHEAD = 110

# Each scenario: the WAN (a service configuration), the stream (site, records/s, padding bytes) and the queries
# (filter on v, uniform over 0..99 in the generated data, so `v < k` keeps exactly k %; the sink's site).
SCENARIOS: dict[str, dict[str, Any]] = {
    # Two queries at one site behind a thin link from the source: sharing the reader sends the stream once.
    "fan-in": {
        "wan": {"sites": [{"name": "edge", "compute": False}, "hub"],
                "links": [{"from": "edge", "to": "hub", "bandwidth_mbps": 1.2, "latency_ms": 20}]},
        "stream": {"site": "edge", "rate_rps": 150, "pad": 500},
        "queries": [{"name": "q1", "keep": 50, "site": "hub"}, {"name": "q2", "keep": 80, "site": "hub"}],
    },
    # The same filter needed at two sites; the link between them is thin, the source's links are not: sharing
    # the filter at the first site sends its output over the thin link (Max-Share), a private reader does not.
    "thin-detour": {
        "wan": {"sites": [{"name": "edge", "compute": False}, "east", "west"],
                "links": [{"from": "edge", "to": "east", "bandwidth_mbps": 4, "latency_ms": 10},
                          {"from": "edge", "to": "west", "bandwidth_mbps": 4, "latency_ms": 30},
                          {"from": "east", "to": "west", "bandwidth_mbps": 0.3, "latency_ms": 20}]},
        "stream": {"site": "edge", "rate_rps": 150, "pad": 500},
        "queries": [{"name": "q1", "keep": 60, "site": "east"}, {"name": "q2", "keep": 60, "site": "west"}],
    },
    # Both at once: two queries at the hub behind a thin link from the source, a third far away that could share
    # the hub's filter over a thinner link or read the source over its own.
    "mixed": {
        "wan": {"sites": [{"name": "edge", "compute": False}, "hub", "far"],
                "links": [{"from": "edge", "to": "hub", "bandwidth_mbps": 1.2, "latency_ms": 20},
                          {"from": "edge", "to": "far", "bandwidth_mbps": 1.2, "latency_ms": 40},
                          {"from": "hub", "to": "far", "bandwidth_mbps": 0.3, "latency_ms": 20}]},
        "stream": {"site": "edge", "rate_rps": 150, "pad": 500},
        "queries": [{"name": "q1", "keep": 50, "site": "hub"}, {"name": "q2", "keep": 80, "site": "hub"},
                    {"name": "q3", "keep": 50, "site": "far"}],
    },
    # Held out: written after the runtime fixes and the model change above, run once, nothing tuned on it.
    # A relay site between the source and a far site whose direct link is thin.
    "relay": {
        "held_out": True,
        "wan": {"sites": [{"name": "edge", "compute": False}, "mid", "far"],
                "links": [{"from": "edge", "to": "mid", "bandwidth_mbps": 2, "latency_ms": 15},
                          {"from": "mid", "to": "far", "bandwidth_mbps": 0.8, "latency_ms": 25},
                          {"from": "edge", "to": "far", "bandwidth_mbps": 0.5, "latency_ms": 30}]},
        "stream": {"site": "edge", "rate_rps": 150, "pad": 500},
        "queries": [{"name": "q1", "keep": 30, "site": "mid"}, {"name": "q2", "keep": 30, "site": "far"},
                    {"name": "q3", "keep": 70, "site": "far"}],
    },
}


def record_maker(pad: int):
    filler = "x" * pad

    def make(i: int, now) -> dict[str, Any]:
        return {"id": i, "v": (i * 37) % 100, "ts": int(now.timestamp() * 1000), "pad": filler}

    return make


def value_bytes(pad: int) -> int:
    """The JSON size of a typical record (a seven-digit id, a 2027 timestamp in ms)."""
    return len(json.dumps(record_maker(pad)(10**6, datetime(2027, 1, 1, tzinfo=timezone.utc))).encode())


def dataflow(query: dict[str, Any], topic: str, sink_topic: str, stream_site: str) -> dict[str, Any]:
    return {
        "name": query["name"],
        "tasks": [
            {"id": "src", "type": "source", "config": {"topic": topic, "schema": dict(SCHEMA)}, "site": stream_site},
            {"id": "keep", "type": "filter", "config": {"expr": f"v < {query['keep']}"}},
            {"id": "out", "type": "sink", "config": {"topic": sink_topic}, "site": query["site"]},
        ],
        "streams": [{"from": "src", "to": "keep"}, {"from": "keep", "to": "out"}],
    }


def wan_config(spec: dict[str, Any], topic: str, policy: str) -> dict[str, Any]:
    stream = spec["stream"]
    mbps = stream["rate_rps"] * (value_bytes(stream["pad"]) + WIRE_OVERHEAD) * 8 / 1e6
    return {**spec["wan"], "sources": {topic: {"site": stream["site"], "rate_mbps": round(mbps, 4)}}, "policy": policy}


# -- the simulator's view ---------------------------------------------------------------------------------------

def simulated(spec: dict[str, Any], policy: str, decoupled: bool = False) -> dict[str, Any]:
    from wan_sim.scenario import parse_scenario
    from wan_sim.simulate import simulate

    stream = spec["stream"]
    scenario = {
        "name": "emulated",
        "wan": spec["wan"],
        "sources": {"events": {"site": stream["site"], "rate_rps": stream["rate_rps"],
                               "record_bytes": value_bytes(stream["pad"]) + WIRE_OVERHEAD}},
        "queries": [{"name": query["name"], "at_s": 0,
                     "tasks": [{"id": "s", "type": "source", "stream": "events"},
                               {"id": "f", "type": "filter", "config": {"expr": f"v < {query['keep']}"},
                                "selectivity": query["keep"] / 100},
                               {"id": "k", "type": "sink", "site": query["site"]}],
                     "streams": [["s", "f"], ["f", "k"]]} for query in spec["queries"]],
        "duration_s": 60,
    }
    summary = simulate(parse_scenario(scenario), policy, decoupled).summary()
    return {"throughput_rps": summary["throughput_rps"], "mean_latency_ms": summary["mean_latency_ms"],
            "wan_mbps": summary["wan_mbps"],
            "queries": {query["name"]: {"throughput_rps": query["throughput_rps"], "latency_ms": query["latency_ms"]}
                        for query in summary["queries"]}}


# -- the emulated run ---------------------------------------------------------------------------------------------

@dataclass
class Arrivals:
    """Every sink record's (broker timestamp, creation time) in ms, per sink topic, read directly from the broker."""

    bootstrap: str
    topics: dict[str, str]  # sink topic -> query

    def __post_init__(self) -> None:
        self.seen: dict[str, list[tuple[float, float]]] = {query: [] for query in self.topics.values()}
        self.ids: dict[str, Counter] = {query: Counter() for query in self.topics.values()}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, name="bench-sinks", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        from runtime.broker import rdkafka
        from runtime.broker.rdkafka import TopicPartition

        consumer = rdkafka.consumer(self.bootstrap)
        consumer.assign([TopicPartition(topic, 0, 0) for topic in self.topics])
        try:
            while not self.stop.is_set():
                for message in consumer.consume(1000, 0.2):
                    if message.error() is not None:
                        continue
                    query = self.topics[message.topic()]
                    record = json.loads(message.value())
                    self.seen[query].append((message.timestamp()[1], record["ts"]))
                    self.ids[query][record["id"]] += 1
        finally:
            consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def emulated(spec: dict[str, Any], policy: str, bootstrap: str, redis_url: str, warm_s: float, measure_s: float,
             progress: Progress) -> dict[str, Any]:
    from manager.service import Manager
    from runtime.spark.runtime import SparkRuntime
    from wan.topology import parse_wan_config
    from wan_sim.emulation import Emulator, wan_links

    client = redis_client(redis_url)
    prefix = f"bench-wan-emu-{uuid.uuid4().hex[:8]}"
    topic = f"events-{prefix}"
    config = wan_config(spec, topic, policy)
    links = wan_links(parse_wan_config(config))
    stream = spec["stream"]
    sinks = {f"{prefix}-{query['name']}": query["name"] for query in spec["queries"]}
    with Emulator(bootstrap, links) as wan, tempfile.TemporaryDirectory() as checkpoints:
        runtime = SparkRuntime(client, prefix, bootstrap, "local[2]", Path(checkpoints), trigger_s=0.5,
                               links=wan.addresses)
        manager = Manager(client, prefix, runtime)
        manager.start()
        stop, produced = threading.Event(), Counter()
        feed = None
        arrivals = None
        try:
            runtime.topics.ensure({topic})
            manager.set_wan(config)
            sites = {}
            for query in spec["queries"]:
                sink = next(name for name, owner in sinks.items() if owner == query["name"])
                result = manager.submit(dataflow(query, topic, sink, stream["site"]))
                sites[query["name"]] = {"sites": result.sites, "reused": result.reused}
            reads = {query_id: query.routes for query_id, query in runtime.queries.items() if query.routes}
            arrivals = Arrivals(bootstrap, sinks)
            feed = threading.Thread(target=produce_paced, name="bench-feed", daemon=True,
                                    args=(bootstrap, topic, record_maker(stream["pad"]), stream["rate_rps"], stop,
                                          produced))
            began = time.time() * 1000
            feed.start()
            deadline = time.monotonic() + warm_s + measure_s
            while time.monotonic() < deadline:
                time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
                progress.say(f"{policy}: {produced[topic]:,} produced, "
                             + ", ".join(f"{name} {len(rows):,}" for name, rows in arrivals.seen.items()))
            window = (began + warm_s * 1000, began + (warm_s + measure_s) * 1000)
            before = {stats.link: stats.bytes_forward for stats in wan.stats()}
            batches = {query_id: {"batches": query.batches_done,
                                  "recent_ms": [round(stats.duration_ms) for stats in query.recent],
                                  "recent_written": [stats.written for stats in query.recent]}
                       for query_id, query in runtime.queries.items()}
        finally:
            stop.set()
            if feed is not None:
                feed.join(30)
            if arrivals is not None:
                arrivals.close()
            manager.close()
            runtime.close()
            delete_prefix(client, prefix)
    queries = {}
    for query in spec["queries"]:
        rows = [(at, at - made) for at, made in arrivals.seen[query["name"]] if window[0] <= at < window[1]]
        selectivity = query["keep"] / 100
        queries[query["name"]] = {
            **steady(len(rows) / measure_s / selectivity, stream["rate_rps"]),
            "latency_ms": round(sum(lag for _, lag in rows) / len(rows), 1) if rows else None,
            # the sink's records against the source's: each source record passing the filter exactly once
            "repeated": sum(count - 1 for count in arrivals.ids[query["name"]].values() if count > 1),
            "wrong": sum(1 for record_id in arrivals.ids[query["name"]] if (record_id * 37) % 100 >= query["keep"]),
            **sites[query["name"]],
        }
    return summed(queries) | {
        "queries": queries,
        "cross_site_reads": {query_id: sorted(routes) for query_id, routes in reads.items()},
        "link_bytes": {f"{a}->{b}": count for (a, b), count in before.items() if count},
        "queries_run": batches,
        "produced": produced[topic],
    }


def steady(arrival_rps: float, demand_rps: float) -> dict[str, float]:
    """A query's throughput: what arrived per second in the window, at most what its source produced (a query that
    keeps up also drains, in the window, the backlog of its start)."""
    return {"throughput_rps": round(min(arrival_rps, demand_rps), 1), "arrival_rps": round(arrival_rps, 1),
            "demand_rps": demand_rps}


def summed(queries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    latencies = [row["latency_ms"] for row in queries.values() if row["latency_ms"] is not None]
    return {"throughput_rps": round(sum(row["throughput_rps"] for row in queries.values()), 1),
            "mean_latency_ms": round(sum(latencies) / len(latencies), 1) if latencies else None}


def ratios(results: dict[str, dict[str, Any]], key: str) -> dict[str, float | None]:
    sana = results["sana"][key]
    return {f"sana/{other}": (round(sana / results[other][key], 3) if results[other][key] else None)
            for other in ("net", "max-share")}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["scenarios"])
    figure, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4.0), squeeze=False)
    for axis, name in zip(axes[0], names):
        scenario = report["scenarios"][name]
        xs = range(len(POLICIES))
        kinds = (("simulated", "simulated, backpressure (the paper's model)"),
                 ("simulated_decoupled", "simulated, buffered hops"), ("emulated", "emulated, real traffic"))
        for offset, (kind, label) in zip((-0.27, 0.0, 0.27), kinds):
            axis.bar([x + offset for x in xs], [scenario[kind][policy]["throughput_rps"] for policy in POLICIES],
                     0.27, label=label)
        demand = scenario["spec"]["stream"]["rate_rps"] * len(scenario["spec"]["queries"])
        axis.axhline(demand, color="grey", linewidth=0.8, linestyle=":")  # every query at full rate
        axis.set_xticks(list(xs), POLICIES)
        axis.set_title(f"{name} (held out)" if scenario["spec"].get("held_out") else name)
        axis.set_ylabel("source records/s delivered, all queries")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=9)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="default: all")
    parser.add_argument("--policy", action="append", choices=POLICIES, help="default: all")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--warm-s", type=float, default=25.0, help="from the first record to the window's start")
    parser.add_argument("--measure-s", type=float, default=45.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--write-docs", action="store_true", help=f"also draw {PLOT.relative_to(PLOT.parents[2])}")
    parser.add_argument("--reuse-emulated", action="store_true",
                        help="take the emulated runs from --out as they are; simulate again (after a model change)")
    args = parser.parse_args(argv)
    from api.launcher import Launcher
    from sana.settings import Settings

    progress = Progress(every=10.0)
    # scenarios not run now keep their rows from the results file (a run of one scenario adds to the others)
    kept = json.loads(args.out.read_text()) if args.out.exists() else None
    earlier = kept if args.reuse_emulated else None
    if args.reuse_emulated and earlier is None:
        parser.error(f"--reuse-emulated: no results at {args.out}")
    if earlier is not None and set(args.scenario or ()) - set(earlier["scenarios"]):
        parser.error(f"--reuse-emulated: {args.out} has no run of {sorted(set(args.scenario) - set(earlier['scenarios']))}")
    launcher = None
    bootstrap = ""
    if earlier is None:
        settings = Settings(embedded_kafka_port=free_port())
        launcher = Launcher(settings, Path(tempfile.mkdtemp(prefix="sana-wan-emu-")))
        launcher.start_broker()
        bootstrap = settings.effective_kafka_bootstrap
    report: dict[str, Any] = {"command": "python -m benchmarks.wan_emulation", "machine": machine(),
                              "warm_s": args.warm_s, "measure_s": args.measure_s,
                              "scenarios": dict(kept["scenarios"]) if kept is not None else {}}
    if earlier is not None:
        report.update({key: earlier[key] for key in ("machine", "warm_s", "measure_s") if key in earlier})
    try:
        for name in args.scenario or [name for name in SCENARIOS if earlier is None or name in earlier["scenarios"]]:
            spec = SCENARIOS[name]
            row: dict[str, Any] = {"spec": spec, "simulated": {}, "simulated_decoupled": {}, "emulated": {}}
            for policy in args.policy or POLICIES:
                row["simulated"][policy] = simulated(spec, policy)
                row["simulated_decoupled"][policy] = simulated(spec, policy, decoupled=True)
                if earlier is not None:
                    run = earlier["scenarios"][name]["emulated"][policy]
                    for query in run["queries"].values():
                        query.update(steady(query.get("arrival_rps", query["throughput_rps"]), query["demand_rps"]))
                    row["emulated"][policy] = run | summed(run["queries"])
                    continue
                progress.say(f"{name}: {policy}: starting", force=True)
                row["emulated"][policy] = emulated(spec, policy, bootstrap, args.redis_url, args.warm_s, args.measure_s,
                                                   progress)
                progress.say(f"{name}: {policy}: emulated {row['emulated'][policy]['throughput_rps']} rps, "
                             f"simulated {row['simulated'][policy]['throughput_rps']} rps", force=True)
            if set(POLICIES) <= set(row["emulated"]):
                row["ratios"] = {kind: ratios(row[kind], "throughput_rps")
                                 for kind in ("emulated", "simulated", "simulated_decoupled")}
            report["scenarios"][name] = row
    finally:
        if launcher is not None:
            launcher.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({name: {"ratios": row.get("ratios"),
                             "emulated": {p: r["throughput_rps"] for p, r in row["emulated"].items()},
                             "simulated": {p: r["throughput_rps"] for p, r in row["simulated"].items()}}
                      for name, row in report["scenarios"].items()}, indent=2))
    if args.write_docs and all("ratios" in row for row in report["scenarios"].values()):
        plot(report, PLOT)


if __name__ == "__main__":
    main()
