"""Why Sana is behind NET or Max-Share in a family case (issue 33): where it falls behind, and what it chose before.

For every case a :mod:`benchmarks.wan_families` result file lists behind a baseline, the case is replayed
under Sana (weighed as the file says) and the baseline, scored as the file was; the simulator records each
query's weighing (``Deployment.weighings``), and each epoch's running set says how many queries run. Printed
per case:

- the query after which Sana's total first falls below the baseline's (``k`` of ``n``);
- Sana's weighing decisions up to then that did not take every share (Algorithm 1's refusals kept, or the
  private plan), each with what it delivered at that moment over the plan taking every share; until the
  first of them Sana placed exactly as Max-Share does (the plan taking every share is Max-Share's plan);
- the queries that receive less than under the baseline at the end, most first.

From these each case gets a cause. Behind Max-Share: ``greedy refusal`` (Algorithm 1's copy, kept because
it delivered more, or as much with more headroom, when its query arrived, takes bandwidth a later query
needed; the weighing sees one query at a time) or ``greedy private plan`` (the same with a private plan).
Behind NET: ``private plan under its gain`` (the private plan, NET's way, delivered more than the better
sharing plan but by less than its gain, :attr:`PlanningOptions.private_gain`, so it was not kept) or ``shared stream`` (a stream read once for
several queries crosses a link that a query's own reader would have avoided, and no plan weighed said so).

    .venv/bin/python -m benchmarks.wan_behind benchmarks/results/wan-families-buffered-weighing.json \\
        --json benchmarks/results/wan-behind.json
    .venv/bin/python -m benchmarks.wan_behind benchmarks/results/wan-families-2026-11-28-regions-buffered.json --latency

``--latency`` lists instead the cases of equal throughput where Sana's mean latency is over 1.1x a baseline's,
with both latencies and the tasks each runs (issue 33's latency criterion).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.measure import Progress
from benchmarks.wan_families import BASELINES, latency_ratio_at_equal_throughput, scenario, where
from planning.model import SANA, Weighing
from wan_sim.scenario import parse_scenario
from wan_sim.simulate import simulate

CASE_KEYS = ("family", "seed", "scale", "share", "queries", "sites", "order", "chains")


def replay(case: dict[str, Any], baseline: str, decoupled: bool, weigh_buffered: bool) -> dict[str, Any]:
    """Sana's and ``baseline``'s totals after each query, Sana's weighing per query, and the cause."""
    document = scenario(case)
    options = replace(SANA, buffered_hops=True) if weigh_buffered else "sana"
    sana = simulate(parse_scenario(document), options, decoupled)
    other = simulate(parse_scenario(document), baseline, decoupled)
    # after n queries: the last epoch in which n queries run (queries may arrive together)
    totals: dict[int, tuple[float, float]] = {}
    for mine, theirs in zip(sana.epochs, other.epochs):
        totals[len(mine.result.queries)] = (round(mine.result.throughput_rps, 1), round(theirs.result.throughput_rps, 1))
    first = next((count for count, (mine, theirs) in sorted(totals.items()) if mine < theirs * (1 - 1e-9)), None)
    decisions = [{"query": number, "name": name, **_decision(weighing)}
                 for number, (name, weighing) in enumerate(sana.deployment.weighings, 1)]
    upto = decisions if first is None else decisions[:first]
    differing = [item for item in upto if item["kept"] is not None and not item["same_as_every_share"]]
    theirs = {query.name: query.throughput_rps for query in other.final.queries}
    losing = sorted(((theirs[query.name] - query.throughput_rps, query.name) for query in sana.final.queries
                     if query.throughput_rps < theirs[query.name] * (1 - 1e-9)), reverse=True)
    if baseline == "net":
        short = [item for item in upto if (item.get("private_pct") or 0.0) > 1e-9 and item["kept"] != "private"]
        cause = "private plan under its gain" if short else "shared stream"
    elif differing:
        cause = f"greedy {'private plan' if any(item['kept'] == 'private' for item in differing) else 'refusal'}"
    else:
        cause = "unexplained"
    end_mine, end_theirs = totals[max(totals)]
    return {"case": {key: case[key] for key in CASE_KEYS if key in case}, "where": where(case), "baseline": baseline,
            "behind_pct": round(100.0 * (end_mine / end_theirs - 1.0), 2) if end_theirs else None,
            "queries": len(decisions), "first_behind_after_query": first,
            "totals_rps": [list(totals[count]) for count in sorted(totals)], "differing_decisions": differing,
            "losing_queries": [{"name": name, "rps_less": round(less, 1)} for less, name in losing[:5]], "cause": cause}


def slower(case: dict[str, Any], baseline: str, decoupled: bool, weigh_buffered: bool) -> dict[str, Any]:
    """A case where Sana delivers as much as ``baseline`` but its mean latency is over 1.1x: both latencies, and
    the tasks each runs. Where the baseline runs more tasks, its lower latency is bought by running work twice
    (NET's private readers and chains); where as many, the two placed them differently."""
    document = scenario(case)
    options = replace(SANA, buffered_hops=True) if weigh_buffered else "sana"
    results = {name: simulate(parse_scenario(document), policy, decoupled).summary()
               for name, policy in (("sana", options), (baseline, baseline))}
    mine, theirs = results["sana"], results[baseline]
    return {"case": {key: case[key] for key in CASE_KEYS if key in case}, "where": where(case), "baseline": baseline,
            "latency_ms": [mine["mean_latency_ms"], theirs["mean_latency_ms"]],
            "latency_ratio": round(mine["mean_latency_ms"] / theirs["mean_latency_ms"], 3),
            "running_tasks": [mine["running_tasks"], theirs["running_tasks"]],
            "more_tasks_pct": round(100.0 * (theirs["running_tasks"] / mine["running_tasks"] - 1.0), 1)}


def _decision(weighing: Weighing | None) -> dict[str, Any]:
    """A query's weighing: the plan kept, on which criterion, whether it is the plan taking every share, what the
    kept plan delivered then over the plan taking every share, and what the private plan delivered over the better
    of the two sharing plans, which it had to beat (in %; None where the other delivered nothing)."""
    if weighing is None:
        return {"kept": None}
    kept = weighing.standings[weighing.kept]
    return {"kept": weighing.kept, "deciding": weighing.deciding, "same_as_every_share": kept == weighing.every_share,
            "over_every_share_pct": _over(kept, weighing.every_share),
            "private_pct": _over(weighing.private, min(weighing.algorithm_1, weighing.every_share))}


def _over(standing: tuple[float, ...] | None, other: tuple[float, ...]) -> float | None:
    """What ``standing`` delivers today over ``other`` (standings are negated), in %."""
    return round(100.0 * (standing[0] / other[0] - 1.0), 2) if standing is not None and other[0] else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a benchmarks.wan_families --json file")
    parser.add_argument("--json", type=Path, help="write every case's trace here")
    parser.add_argument("--latency", action="store_true",
                        help="the cases of equal throughput where Sana's mean latency is over 1.1x a baseline's instead")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    decoupled, weigh_buffered = results.get("hops") == "buffered", results.get("weigh") == "buffered"  # older files: the paper's
    if args.latency:
        return _latency_report(results, decoupled, weigh_buffered, args.json)
    todo = []
    for row in results["rows"]:
        best = {baseline: row[baseline]["throughput_rps"] for baseline in BASELINES}
        for baseline in BASELINES:
            if row["sana"]["throughput_rps"] < best[baseline] * (1 - 1e-9):
                todo.append((row, baseline))
    progress = Progress(out=sys.stderr)
    traces = []
    for number, (row, baseline) in enumerate(todo, 1):
        traces.append(replay(row, baseline, decoupled, weigh_buffered))
        progress.say(f"{number}/{len(todo)} cases traced", force=number == len(todo))
    for trace in traces:
        decisions = ", ".join(f"q{item['query']} {item['kept']} (by {item['deciding']}; "
                              f"{_pct(item['over_every_share_pct'])} delivered over every share then)"
                              for item in trace["differing_decisions"]) or "none"
        losing = ", ".join(f"{item['name']} -{item['rps_less']:.0f}" for item in trace["losing_queries"][:3])
        print(f"{trace['where']} vs {trace['baseline']}: {_pct(trace['behind_pct'])}, behind after query "
              f"{trace['first_behind_after_query']} of {trace['queries']}; kept before it: {decisions}; "
              f"losing: {losing}; cause: {trace['cause']}")
    counts: dict[str, int] = {}
    for trace in traces:
        counts[trace["cause"]] = counts.get(trace["cause"], 0) + 1
    print(json.dumps({"traced": len(traces), "causes": counts}))
    if args.json:
        args.json.write_text(json.dumps({"source": str(args.results), "causes": counts, "traces": traces}, indent=1) + "\n")
    return 0


def _latency_report(results: dict[str, Any], decoupled: bool, weigh_buffered: bool, out: Path | None) -> int:
    """``--latency``: every case of tied throughput (within 0.1 %, as :mod:`benchmarks.wan_families` counts) where
    Sana's mean latency is over 1.1x a baseline's, with the tasks each runs."""
    cases = []
    for row in results["rows"]:
        for baseline in BASELINES:
            if (latency_ratio_at_equal_throughput(row, baseline) or 0.0) > 1.1:
                cases.append(slower(row, baseline, decoupled, weigh_buffered))
    for item in cases:
        print(f"{item['where']} vs {item['baseline']}: latency {item['latency_ms'][0]:.1f} / {item['latency_ms'][1]:.1f} ms "
              f"({item['latency_ratio']:.2f}x), tasks {item['running_tasks'][0]} / {item['running_tasks'][1]} "
              f"({item['more_tasks_pct']:+.0f} %)")
    if out:
        out.write_text(json.dumps({"source": "latency over 1.1x at equal throughput", "cases": cases}, indent=1) + "\n")
    return 0


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f} %"


if __name__ == "__main__":
    raise SystemExit(main())
