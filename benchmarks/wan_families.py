"""Sana against NET and Max-Share on the sweep families where issue 33 found Sana behind.

Two families on the 14-site workload (:func:`wan_sim.workloads.fourteen_site_scenario`):

- ``heterogeneous``: a share (25 % or 50 %) of the links, drawn per seed, 20x slower than the rest, every
  link scaled by ``x`` (0.05-1);
- ``bursty``: the same WANs, each tweet stream's rate multiplied by a factor drawn log-uniformly in
  0.2-5x (per draw).

For every case (WAN x queries) the three policies run in the simulator; the output counts, per baseline,
where Sana's throughput is ahead, equal (within 1e-9) or behind, the worst ratio, and the same for mean
latency where the throughputs tie (within 0.1 %). ``--json`` writes every case.

    .venv/bin/python -m benchmarks.wan_families --json benchmarks/results/wan-families-after.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

from wan_sim.scenario import parse_scenario
from wan_sim.simulate import simulate
from wan_sim.workloads import fourteen_site_scenario

POLICIES = ("sana", "net", "max-share")
BASELINES = ("net", "max-share")


def scenario(family: str, seed: int, scale: float, share: float, queries: int) -> dict[str, Any]:
    document = fourteen_site_scenario(queries, bandwidth_scale=scale)
    rng = random.Random(1000 * seed + 33)
    for link in document["wan"]["links"]:
        if rng.random() < share:
            link["bandwidth_mbps"] = round(link["bandwidth_mbps"] / 20.0, 3)
    if family == "bursty":
        for name, source in document["sources"].items():
            if name.startswith("tweets-"):
                source["rate_rps"] = round(source["rate_rps"] * math.exp(rng.uniform(math.log(0.2), math.log(5.0))), 3)
    return document


def cases(quick: bool) -> list[dict[str, Any]]:
    seeds = (1, 2) if quick else (1, 2, 3, 4)
    result = []
    for family in ("heterogeneous", "bursty"):
        for seed in seeds:
            for scale in (0.05, 0.1, 0.2, 0.3, 0.5, 1.0):
                for share in (0.25, 0.5):
                    for queries in (4, 8, 12):
                        result.append({"family": family, "seed": seed, "scale": scale, "share": share, "queries": queries})
    return result


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    document = scenario(case["family"], case["seed"], case["scale"], case["share"], case["queries"])
    measured = {}
    for policy in POLICIES:
        summary = simulate(parse_scenario(document), policy).summary()
        measured[policy] = {"throughput_rps": summary["throughput_rps"], "mean_latency_ms": summary["mean_latency_ms"]}
    return {**case, **measured}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for baseline in BASELINES:
        counts = {"ahead": 0, "equal": 0, "behind": 0}
        worst, worst_case = 1.0, None
        latency_worse, worst_latency, worst_latency_case = 0, 1.0, None
        worst_any_latency, worst_any_latency_case, behind = 1.0, None, []
        for row in rows:
            sana, other = row["sana"]["throughput_rps"], row[baseline]["throughput_rps"]
            ratio = sana / other if other else 1.0
            counts["ahead" if ratio > 1 + 1e-9 else "behind" if ratio < 1 - 1e-9 else "equal"] += 1
            if ratio < 1 - 1e-9:
                behind.append(f"{_where(row)}: {100.0 * (ratio - 1.0):+.1f} %")
            any_latency = row["sana"]["mean_latency_ms"] / max(row[baseline]["mean_latency_ms"], 1e-9)
            if any_latency > worst_any_latency:
                worst_any_latency, worst_any_latency_case = any_latency, row
            if ratio < worst:
                worst, worst_case = ratio, row
            if abs(ratio - 1.0) <= 1e-3:
                lat = row["sana"]["mean_latency_ms"] / max(row[baseline]["mean_latency_ms"], 1e-9)
                latency_worse += lat > 1.1
                if lat > worst_latency:
                    worst_latency, worst_latency_case = lat, row
        result[baseline] = {**counts, "worst_throughput_pct": round(100.0 * (worst - 1.0), 1),
                            "worst_throughput_case": _where(worst_case),
                            "latency_over_1.1x_where_throughput_ties": latency_worse,
                            "worst_latency_ratio": round(worst_latency, 2), "worst_latency_case": _where(worst_latency_case),
                            "worst_latency_ratio_any_throughput": round(worst_any_latency, 2),
                            "worst_latency_case_any_throughput": _where(worst_any_latency_case), "behind_cases": behind}
    return result


def _where(row: dict[str, Any] | None) -> str | None:
    if row is None:
        return None
    return f"{row['family']}, seed {row['seed']}, links x{row['scale']:g}, {row['share']:.0%} 20x slower, {row['queries']} queries"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="seeds 1-2 only")
    parser.add_argument("--json", type=Path, help="write the summary and every case here")
    args = parser.parse_args()
    began = time.monotonic()
    rows = []
    todo = cases(args.quick)
    for number, case in enumerate(todo, 1):
        rows.append(run_case(case))
        if number % 6 == 0:
            print(f"{number}/{len(todo)} cases ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    summary = {"cases": len(rows), "seconds": round(time.monotonic() - began, 1), "against": summarize(rows)}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
