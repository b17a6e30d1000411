"""Sana against NET and Max-Share on WANs and workloads the weighing was not built on (issue 33).

Every case is a scenario (a WAN, its streams, queries arriving 10 s apart) run in the simulator under the
three policies. Families, each named by what it varies:

- ``heterogeneous``: the 14-site workload (:func:`wan_sim.workloads.fourteen_site_scenario`) with a share
  (25 % or 50 %) of its links, drawn per seed, 20x slower, every link scaled by ``x`` (0.05-1);
- ``bursty``: the same WANs, each tweet stream's rate multiplied by a factor drawn log-uniformly in 0.2-5x;
- ``sites``: generated full meshes of 5 to 30 sites (:func:`generated_wan`), a quarter of the links 20x slower;
- ``hub``: generated hub-and-spoke WANs: links to and from the hub as drawn, the others 20x slower;
- ``edge``: generated WANs whose streams all originate at one edge site;
- ``order``: the 14-site workload with its queries arriving in reverse or shuffled order;
- ``records``: the 14-site workload with each stream's record size drawn in 300-5,000 bytes (its bytes per
  second kept, so the WAN sees the same load);
- ``chains``: 12 queries that share long chains (every query of a category projects the same columns) or only
  short prefixes (every query filters and projects its own way, so only the readers and parsers are shared);
- ``small``: 50 or 100 small queries (one or two streams, parse, filter, window) on the 14-site WAN;
- ``ring``: generated WANs whose sites sit on a ring, neighbours joined as drawn, every other link a tenth
  of that (held out until a choice was made after seeing it: ``PRIVATE_GAIN_BUFFERED``).

And, reported apart, a family built after every setting of the weighing was chosen, and never used to
choose one (held out):

- ``regions``: generated WANs whose sites sit in three clusters far apart, every link between two clusters
  a fifth of what its distance gives, with seeds no other family uses.

For every case the output counts, per baseline, where Sana's throughput is ahead, equal (within 1e-9) or
behind, lists the cases behind, the worst ratio, and the same for mean latency where the throughputs tie
(within 0.1 %). ``--json`` writes every case; ``--plot`` the ratios per family.

    .venv/bin/python -m benchmarks.wan_families --json benchmarks/results/wan-families.json --plot docs/img/wan_families.png
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.measure import Progress
from planning.model import SANA
from wan_sim.scenario import parse_scenario
from wan_sim.simulate import simulate
from wan_sim.workloads import CATEGORIES, COMPUTE, ORIGINS, fourteen_site_scenario, tweet_query

POLICIES = ("sana", "net", "max-share")
BASELINES = ("net", "max-share")
HELD_OUT = ("regions",)
REGIONS = 3
SCALES = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)


def _slow_links(document: dict[str, Any], rng: random.Random, share: float) -> None:
    for link in document["wan"]["links"]:
        if rng.random() < share:
            link["bandwidth_mbps"] = round(link["bandwidth_mbps"] / 20.0, 3)


def generated_wan(sites: int, seed: int, kind: str, scale: float) -> tuple[dict[str, Any], list[str], list[str]]:
    """A full mesh of ``sites`` sites (about 60 % compute, the rest where streams originate) placed at random on a
    plane: latency from distance (5-150 ms one way), bandwidth falling with it (20-280 Mbps, as the 14-site
    WAN), times ``scale``. ``kind``: ``mesh``; ``hub`` (the first compute site is the hub, every link not
    touching it 20x slower); ``ring`` (sites on a circle, every link but a neighbour's a tenth); ``regions``
    (sites in :data:`REGIONS` clusters far apart, every link between two clusters a fifth).

    >>> wan, compute, origins = generated_wan(5, 1, "hub", 1.0)
    >>> len(wan["links"]), compute[0], len(origins)
    (10, 'c0', 2)
    """
    rng = random.Random(seed * 7919 + sites)
    computes = max(2, round(0.6 * sites))
    compute = [f"c{number}" for number in range(computes)]
    origins = [f"o{number}" for number in range(sites - computes)]
    names = compute + origins
    if kind == "ring":
        rng.shuffle(names)
        at = {name: (math.cos(2 * math.pi * i / sites), math.sin(2 * math.pi * i / sites)) for i, name in enumerate(names)}
    elif kind == "regions":
        rng.shuffle(names)
        region = {name: i % REGIONS for i, name in enumerate(names)}
        centres = [(0.7 * math.cos(2 * math.pi * r / REGIONS), 0.7 * math.sin(2 * math.pi * r / REGIONS)) for r in range(REGIONS)]
        at = {name: (centres[region[name]][0] + rng.uniform(-0.15, 0.15), centres[region[name]][1] + rng.uniform(-0.15, 0.15))
              for name in names}
    else:
        at = {name: (rng.random() * 2 - 1, rng.random() * 2 - 1) for name in names}
    links = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            one_way = 5.0 + 145.0 * math.dist(at[a], at[b]) / (2 * math.sqrt(2))
            bandwidth = min(280.0, max(20.0, 280.0 * math.exp(-2 * one_way / 150.0) * rng.uniform(0.8, 1.2)))
            if kind == "hub" and compute[0] not in (a, b):
                bandwidth /= 20.0
            if kind == "ring" and abs(names.index(a) - names.index(b)) not in (1, sites - 1):
                bandwidth /= 10.0
            if kind == "regions" and region[a] != region[b]:
                bandwidth /= 5.0
            links.append({"from": a, "to": b, "bandwidth_mbps": round(bandwidth * scale, 3), "latency_ms": round(one_way, 1)})
    wan = {"sites": [*compute, *({"name": origin, "compute": False} for origin in origins)], "links": links}
    return wan, compute, origins


def generated_scenario(sites: int, seed: int, kind: str, scale: float, queries: int = 8,
                       edge: bool = False) -> dict[str, Any]:
    """Queries of Sana's Table 1 (:func:`wan_sim.workloads.tweet_query`) over a :func:`generated_wan`: each at a
    drawn compute site, over one to four drawn origins' streams (all of them at one origin when ``edge``)."""
    wan, compute, origins = generated_wan(sites, seed, kind, scale)
    rng = random.Random(seed * 104729 + sites)
    if edge:
        streams = {f"e{number}": origins[0] for number in range(min(4, len(origins) + 2))}
    else:
        streams = {origin: origin for origin in origins}
    sources = {f"tweets-{name}": {"site": site, "rate_rps": rng.choice((600, 900, 1200, 1800)), "record_bytes": 5000}
               for name, site in streams.items()}
    sources.update({f"static-{home}": {"site": home, "rate_rps": 10, "record_bytes": 200} for home in compute})
    chosen = []
    categories = list(CATEGORIES)
    for number in range(queries):
        category = categories[number % len(categories)]
        read = sorted(rng.sample(list(streams), rng.randint(1, min(4, len(streams)))))
        chosen.append(tweet_query(f"q{number}-{category}", category, rng.choice(compute), rng.randint(0, 1), read,
                                  10.0 * number, window_s=10))
    return {"name": f"{kind}-{sites}-sites", "wan": wan, "sources": sources, "queries": chosen,
            "duration_s": 10.0 * queries + 60.0}


def _small_queries(count: int, seed: int, scale: float) -> dict[str, Any]:
    document = fourteen_site_scenario(12, bandwidth_scale=scale, seed=seed)
    rng = random.Random(seed + 5)
    chosen = []
    for number in range(count):
        streams = sorted(rng.sample(ORIGINS, rng.randint(1, 2)), key=ORIGINS.index)
        keep = rng.choice(("has-hashtag", "has-user-profile", "language-supported"))
        tasks: list[dict[str, Any]] = []
        edges: list[list[str]] = []
        for stream in streams:
            tasks += [{"id": f"src-{stream}", "type": "source", "stream": f"tweets-{stream}"},
                      {"id": f"parse-{stream}", "type": "parse", "config": {"format": "tweet-json"}, "size": 0.5},
                      {"id": f"filter-{stream}", "type": "filter", "config": {"keep": keep}, "selectivity": 0.5}]
            edges += [[f"src-{stream}", f"parse-{stream}"], [f"parse-{stream}", f"filter-{stream}"]]
        window = {"id": "window", "type": "window_aggregate", "config": {"count": keep, "window_s": 10},
                  "selectivity": 0.02}
        tasks += [window, {"id": "out", "type": "sink", "site": rng.choice(COMPUTE)}]
        edges += [[f"filter-{stream}", "window"] for stream in streams] + [["window", "out"]]
        chosen.append({"name": f"small-{number}", "at_s": 2.0 * number, "tasks": tasks, "streams": edges})
    document.update(name=f"small-{count}", queries=chosen, duration_s=2.0 * count + 60.0)
    return document


def scenario(case: dict[str, Any]) -> dict[str, Any]:
    """The scenario document of a case (a row of :func:`cases`)."""
    family, seed, scale = case["family"], case["seed"], case["scale"]
    rng = random.Random(1000 * seed + 33)
    if family in ("heterogeneous", "bursty"):
        document = fourteen_site_scenario(case["queries"], bandwidth_scale=scale)
        _slow_links(document, rng, case["share"])
        if family == "bursty":
            for name, source in document["sources"].items():
                if name.startswith("tweets-"):
                    source["rate_rps"] = round(source["rate_rps"] * math.exp(rng.uniform(math.log(0.2), math.log(5.0))), 3)
        return document
    if family in ("sites", "hub", "edge", "ring", "regions"):
        kind = {"sites": "mesh", "edge": "mesh"}.get(family, family)
        document = generated_scenario(case["sites"], seed, kind, scale, edge=family == "edge")
        if family == "sites":
            _slow_links(document, rng, 0.25)
        return document
    if family == "small":
        return _small_queries(case["queries"], seed, scale)
    document = fourteen_site_scenario(12, bandwidth_scale=scale, seed=seed)
    if family == "order":
        _slow_links(document, rng, 0.25)
        order = list(range(len(document["queries"])))
        if case["order"] == "reversed":
            order.reverse()
        else:
            rng.shuffle(order)
        document["queries"] = [{**document["queries"][old], "at_s": 10.0 * new} for new, old in enumerate(order)]
    elif family == "records":
        for name, source in document["sources"].items():
            if name.startswith("tweets-"):
                size = rng.randint(300, 5000)
                source["rate_rps"] = round(source["rate_rps"] * source["record_bytes"] / size, 3)
                source["record_bytes"] = size
    elif family == "chains":
        if case["chains"] == "short":
            for number, query in enumerate(document["queries"]):
                for task in query["tasks"]:
                    if task["type"] in ("filter", "select"):
                        task["config"] = {**task["config"], "own": number}
        else:
            for query in document["queries"]:
                for task in query["tasks"]:
                    if task["type"] == "select":
                        task["config"] = {**task["config"], "columns": task["config"]["columns"].rsplit("-", 1)[0]}
    return document


def cases(quick: bool = False) -> list[dict[str, Any]]:
    """Every case of every family; ``quick``: the first seed of each."""
    seeds = (1,) if quick else (1, 2, 3, 4)
    some = seeds[:3]
    rows: list[dict[str, Any]] = []
    for family in ("heterogeneous", "bursty"):
        rows += [{"family": family, "seed": seed, "scale": scale, "share": share, "queries": queries}
                 for seed in seeds for scale in SCALES for share in (0.25, 0.5) for queries in (4, 8, 12)]
    rows += [{"family": "sites", "seed": seed, "scale": scale, "sites": sites}
             for seed in some for scale in (0.1, 0.3, 1.0) for sites in (5, 10, 20, 30)]
    rows += [{"family": family, "seed": seed, "scale": scale, "sites": sites}
             for family in ("hub", "edge") for seed in some for scale in (0.1, 0.3, 1.0) for sites in (5, 10, 20)]
    rows += [{"family": "order", "seed": seed, "scale": scale, "order": order}
             for seed in seeds[:2] for scale in SCALES for order in ("reversed", "shuffled", "shuffled-again")]
    rows += [{"family": "records", "seed": seed, "scale": scale} for seed in seeds for scale in SCALES]
    rows += [{"family": "chains", "seed": seed, "scale": scale, "chains": chains}
             for seed in seeds[:2] for scale in SCALES for chains in ("long", "short")]
    rows += [{"family": "small", "seed": seed, "scale": scale, "queries": count}
             for seed in seeds[:2] for scale in (0.05, 0.1, 0.3, 1.0) for count in (50, 100)]
    rows += [{"family": "ring", "seed": 100 + seed, "scale": scale, "sites": sites}
             for seed in some for scale in (0.1, 0.3, 1.0) for sites in (6, 12, 18)]
    rows += [{"family": "regions", "seed": 200 + seed, "scale": scale, "sites": sites}
             for seed in some for scale in (0.1, 0.3, 1.0) for sites in (9, 15, 21)]
    return rows


def run_case(case: dict[str, Any], decoupled: bool = False, weigh_buffered: bool = False) -> dict[str, Any]:
    """Every policy on ``case``; ``decoupled`` scores their placements with buffered hops (as Sana's runtime
    links tasks: a congested crossing slows only what reads it) instead of the paper's backpressure;
    ``weigh_buffered``: Sana weighs its plans with buffered hops too (``PlanningOptions.buffered_hops``)."""
    document = scenario(case)
    measured = {}
    for policy in POLICIES:
        options = replace(SANA, buffered_hops=True) if policy == "sana" and weigh_buffered else policy
        summary = simulate(parse_scenario(document), options, decoupled).summary()
        measured[policy] = {"throughput_rps": summary["throughput_rps"], "mean_latency_ms": summary["mean_latency_ms"]}
    return {**case, **measured}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per baseline: cases ahead, equal and behind on throughput, each case behind, the worst ratio; the mean
    latency ratio where throughputs tie (within 0.1 %): how many over 1.1x, and the worst."""
    result: dict[str, Any] = {}
    for baseline in BASELINES:
        counts = {"ahead": 0, "equal": 0, "behind": 0}
        worst, worst_case = 1.0, None
        latency_worse, worst_latency, worst_latency_case, behind = 0, 0.0, None, []
        for row in rows:
            sana, other = row["sana"]["throughput_rps"], row[baseline]["throughput_rps"]
            ratio = sana / other if other else 1.0
            counts["ahead" if ratio > 1 + 1e-9 else "behind" if ratio < 1 - 1e-9 else "equal"] += 1
            if ratio < 1 - 1e-9:
                behind.append(f"{where(row)}: {100.0 * (ratio - 1.0):+.1f} %")
            if ratio < worst:
                worst, worst_case = ratio, row
            latency = latency_ratio_at_equal_throughput(row, baseline)
            if latency is not None:
                latency_worse += latency > 1.1
                if latency > worst_latency:
                    worst_latency, worst_latency_case = latency, row
        result[baseline] = {**counts, "worst_throughput_pct": round(100.0 * (worst - 1.0), 1),
                            "worst_throughput_case": where(worst_case),
                            "latency_over_1.1x_where_throughput_ties": latency_worse,
                            "worst_latency_ratio_where_throughput_ties": round(worst_latency, 2),
                            "worst_latency_case": where(worst_latency_case), "behind_cases": behind}
    return result


def latency_ratio_at_equal_throughput(row: dict[str, Any], baseline: str) -> float | None:
    """Sana's mean latency over ``baseline``'s in a case where their throughputs tie (within 0.1 %), else None.

    >>> row = {"sana": {"throughput_rps": 100.0, "mean_latency_ms": 120.0}, "net": {"throughput_rps": 100.05, "mean_latency_ms": 100.0}}
    >>> latency_ratio_at_equal_throughput(row, "net")
    1.2
    """
    sana, other = row["sana"]["throughput_rps"], row[baseline]["throughput_rps"]
    if abs((sana / other if other else 1.0) - 1.0) > 1e-3:
        return None
    return row["sana"]["mean_latency_ms"] / max(row[baseline]["mean_latency_ms"], 1e-9)


def where(row: dict[str, Any] | None) -> str | None:
    """A case in words."""
    if row is None:
        return None
    detail = {key: value for key, value in row.items() if key not in ("family", "seed", "scale", *POLICIES)}
    said = ", ".join(f"{key} {value:.0%}" if key == "share" else f"{key} {value}" for key, value in detail.items())
    return f"{row['family']}, seed {row['seed']}, links x{row['scale']:g}" + (f", {said}" if said else "")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(row["family"] for row in rows))
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for axis, baseline in zip(axes, BASELINES):
        for number, family in enumerate(families):
            ratios = [row["sana"]["throughput_rps"] / row[baseline]["throughput_rps"]
                      for row in rows if row["family"] == family and row[baseline]["throughput_rps"]]
            jitter = random.Random(number)
            axis.scatter([number + jitter.uniform(-0.25, 0.25) for _ in ratios], ratios, s=8, alpha=0.6)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(families)), [f + (" (held out)" if f in HELD_OUT else "") for f in families],
                        rotation=35, ha="right")
        axis.set_yscale("log")
        axis.set_title(f"Sana's throughput / {baseline}'s, per case")
    axes[0].set_ylabel("ratio (log); above 1: Sana ahead")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the first seed of each family only")
    parser.add_argument("--family", action="append", help="only these families (repeatable)")
    parser.add_argument("--json", type=Path, help="write the summary and every case here")
    parser.add_argument("--plot", type=Path, help="write a plot of the ratios per family here (PNG)")
    parser.add_argument("--workers", type=int, default=2, help="processes to run cases in (default 2)")
    parser.add_argument("--hops", choices=("backpressure", "buffered"), default="backpressure",
                        help="the flow model that scores the placements: the paper's (default), or buffered hops, "
                        "which the emulated WAN agrees with")
    parser.add_argument("--weigh", choices=("backpressure", "buffered"), default="backpressure",
                        help="the flow model Sana weighs its plans with (the paper's, the default here; the service's: buffered)")
    args = parser.parse_args()
    began = time.monotonic()
    todo = [case for case in cases(args.quick) if not args.family or case["family"] in args.family]
    progress = Progress(out=sys.stderr)
    rows = []
    with multiprocessing.Pool(args.workers) as pool:
        score = functools.partial(run_case, decoupled=args.hops == "buffered", weigh_buffered=args.weigh == "buffered")
        for row in pool.imap(score, todo):
            rows.append(row)
            progress.say(f"{len(rows)}/{len(todo)} cases ({row['family']})", force=len(rows) == len(todo))
    tuned = [row for row in rows if row["family"] not in HELD_OUT]
    held_out = [row for row in rows if row["family"] in HELD_OUT]
    families = {family: len([row for row in rows if row["family"] == family])
                for family in dict.fromkeys(row["family"] for row in rows)}
    summary = {"cases": len(rows), "hops": args.hops, "weigh": args.weigh, "families": families, "seconds": round(time.monotonic() - began, 1),
               "against": summarize(tuned), "held_out": summarize(held_out) if held_out else None}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**summary, "rows": rows}, indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
