"""Sana's section 7 experiments on the 14-site, 12-query WAN workload, with the flow model of wan_sim.

Run:  .venv/bin/python -m benchmarks.wan_experiments [--write-docs]
      .venv/bin/python -m benchmarks.wan_experiments --robustness-with-replacement 1.0   (the sweep only, both
      policies re-placing at that utilization every 10 s; about 3 minutes; docs/wan.md quotes it)

Prints markdown tables; ``--write-docs`` also replaces the results section of
docs/wan.md (between its ``wan-results`` markers) and writes the plots
docs/img/wan_*.png. Everything is deterministic (seeded workload, exact flow
model): the same command gives the same numbers.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from wan_sim.scenario import parse_scenario
from wan_sim.simulate import simulate
from wan_sim.workloads import COMPUTE, QUERIES, degrading_scenario, fourteen_site_scenario, sharing_ratio_scenario

#: Link capacities of the measured 20-280 Mbps WAN multiplied by this: a contended WAN (6-84 Mbps).
CONSTRAINED = 0.3
#: ... and by this: bandwidth ample for every policy (Sana 7.4, CloudLab).
AMPLE = 100.0
ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "wan.md"
IMG = ROOT / "docs" / "img"


#: The bottleneck scenario: Virginia's egress towards the other compute sites at this factor. Virginia runs the
#: first query's parse and filters of the Ohio and Sao Paulo streams, which later queries share (Sana Figure 6).
BOTTLENECK = ("virginia", 0.1)


def run(policy: str, queries: int = 12, rate_scale: float = 1.0, bandwidth_scale: float = CONSTRAINED,
        thin_egress: tuple[str, float] | None = None, replacement: float | None = None, seed: int = 7) -> dict[str, Any]:
    document = fourteen_site_scenario(queries, rate_scale=rate_scale, bandwidth_scale=bandwidth_scale,
                                      thin_egress=thin_egress, seed=seed)
    if replacement is not None:
        document["wan"]["replacement"] = {"utilization": replacement, "check_every_s": 10}
    result = simulate(parse_scenario(document), policy)
    summary = result.summary()
    summary["refused"] = sum(1 for item in result.deployment.refusals if item["kind"] == "IN-OP")
    summary["overruled"] = sum(1 for item in result.deployment.overruled if item["kind"] == "IN-OP")
    summary["replacements"] = len(result.replacements)
    return summary


def pct(new: float, old: float) -> str:
    return f"{100.0 * (new - old) / old:+.0f}%" if old else "n/a"


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def robustness(replacement: float | None = None) -> str:
    """Sana against Max-Share over many WANs: every link scaled alike (0.03-10x), and one compute site's egress
    thinned (each site, x0.05 / 0.1 / 0.3, links x0.2-1), 1-12 queries each; and, held out (never used to
    choose the weighing's settings), other draws of the workload (seeds 1-5 and 11) at other link scales and
    input rates, 4, 8 and 12 queries. Counts where Sana is ahead, equal and behind, and lists where it is
    behind. With ``replacement``, both re-place at that utilization."""
    uniform = [{"bandwidth_scale": round(0.01 * step, 2)} for step in range(3, 40)]
    uniform += [{"bandwidth_scale": scale} for scale in (0.45, 0.6, 0.8, 1.5, 3.0, 10.0)]
    thin = [{"bandwidth_scale": scale, "thin_egress": (site, factor)}
            for site in COMPUTE for factor in (0.05, 0.1, 0.3) for scale in (0.2, 0.3, 0.5, 1.0)]
    held_out = [{"seed": seed, "bandwidth_scale": scale, "rate_scale": rate}
                for seed in (1, 2, 3, 4, 5, 11) for scale in (0.08, 0.1, 0.15, 0.2, 0.3, 0.5) for rate in (0.5, 1.0, 2.0)]
    families = (("links scaled alike (0.03-10x)", uniform, range(1, 13)), ("one site's egress thinned", thin, range(1, 13)),
                ("held out: workload seeds 1-5, 11; links x0.08-0.5; rates x0.5-2", held_out, (4, 8, 12)))
    rows, behind = [], []
    began = time.monotonic()
    for family, settings, counts_of_queries in families:
        counts = {"ahead": 0, "equal": 0, "behind": 0}
        worst = 1.0
        for number, kwargs in enumerate(settings, 1):
            for queries in counts_of_queries:
                sana = run("sana", queries=queries, replacement=replacement, **kwargs)["throughput_rps"]
                max_share = run("max-share", queries=queries, replacement=replacement, **kwargs)["throughput_rps"]
                ratio = sana / max_share
                counts["ahead" if ratio > 1 + 1e-9 else "behind" if ratio < 1 - 1e-9 else "equal"] += 1
                worst = min(worst, ratio)
                if ratio < 1 - 1e-9:
                    behind.append([family, _where(kwargs), queries, f"{sana:.0f}", f"{max_share:.0f}", pct(sana, max_share)])
            if number % 20 == 0 or number == len(settings):
                print(f"robustness: {family}: {number}/{len(settings)} WANs ({time.monotonic() - began:.0f} s)",
                      file=sys.stderr, flush=True)
        rows.append([family, sum(counts.values()), counts["ahead"], counts["equal"], counts["behind"], pct(worst, 1.0)])
    return (table(["WANs", "cases (WAN x queries)", "Sana ahead", "equal", "Sana behind", "worst"], rows) + "\n\n"
            + (table(["family", "WAN", "queries", "Sana", "Max-Share", "Sana vs Max-Share"], behind) if behind
               else "Sana is behind nowhere."))


def _where(kwargs: dict[str, Any]) -> str:
    where = f"links x{kwargs['bandwidth_scale']:g}"
    if "thin_egress" in kwargs:
        where += f", {kwargs['thin_egress'][0]}'s egress x{kwargs['thin_egress'][1]:g}"
    if "seed" in kwargs:
        where += f", seed {kwargs['seed']}, rates x{kwargs['rate_scale']:g}"
    return where


def exp_7_1() -> tuple[str, dict[str, dict[str, Any]]]:
    systems = ["default", "net", "mqo", "sana", "max-share", "strict-share"]
    results = {name: run(name) for name in systems}
    rows = []
    for name in systems:
        item = results[name]
        rows.append([name, f"{item['throughput_rps']:.0f}", f"{100 * item['throughput_rps'] / item['demand_rps']:.1f}%",
                     f"{item['wan_mbps']:.0f}", f"{item['mean_latency_ms']:.0f}", item["running_tasks"], item["refused"]])
    overall = table(["system", "throughput (tweets/s)", "of demand", "WAN (Mbps)", "mean latency (ms)", "running tasks", "shares refused"], rows)
    sana, net, default, mqo, maxs = (results[n] for n in ("sana", "net", "default", "mqo", "max-share"))
    compare = table(
        ["Sana vs", "throughput (ours)", "throughput (paper)", "WAN bandwidth (ours)", "WAN bandwidth (paper)", "latency (ours)", "latency (paper)"],
        [
            ["Default", pct(sana["throughput_rps"], default["throughput_rps"]), "+44%", pct(sana["wan_mbps"], default["wan_mbps"]), "about -33%",
             pct(sana["mean_latency_ms"], default["mean_latency_ms"]), "lower"],
            ["NET", pct(sana["throughput_rps"], net["throughput_rps"]), "+16% (Fig. 7), +21% (abstract)", pct(sana["wan_mbps"], net["wan_mbps"]),
             "-33%", pct(sana["mean_latency_ms"], net["mean_latency_ms"]), "lower"],
            ["MQO", pct(sana["throughput_rps"], mqo["throughput_rps"]), "+26%", pct(sana["wan_mbps"], mqo["wan_mbps"]), "higher (MQO uses less)",
             pct(sana["mean_latency_ms"], mqo["mean_latency_ms"]), "lower"],
            ["Max-Share", pct(sana["throughput_rps"], maxs["throughput_rps"]), "+35% (7.3)", pct(sana["wan_mbps"], maxs["wan_mbps"]), "about +20% (7.3)",
             pct(sana["mean_latency_ms"], maxs["mean_latency_ms"]), "-23% (7.3)"],
        ],
    )
    per_query_rows = []
    for name, *_ in QUERIES:
        base = next(q for q in results["default"]["queries"] if q["name"] == name)
        cells = [name]
        for system in ("net", "mqo", "sana"):
            q = next(q for q in results[system]["queries"] if q["name"] == name)
            cells.append(f"{pct(q['throughput_rps'], base['throughput_rps'])} / {pct(q['latency_ms'], base['latency_ms'])}")
        per_query_rows.append(cells)
    per_query = table(["query (throughput / latency vs Default)", "NET", "MQO", "Sana"], per_query_rows)
    return overall + "\n\n" + compare + "\n\n" + per_query, results


def replacement_over_time() -> tuple[str, dict[str, list[tuple[float, float]]]]:
    """Section 6: Virginia's egress drops to a tenth at 125 s; throughput every 10 s with and without re-placement."""
    runs = {"sana": ("sana", True), "sana, no re-placement": ("sana", False), "max-share": ("max-share", True)}
    series: dict[str, list[tuple[float, float]]] = {}
    moved: dict[str, int] = {}
    for label, (policy, replacing) in runs.items():
        result = simulate(parse_scenario(degrading_scenario(replacement=replacing)), policy)
        last = result.epochs[-1]
        series[label] = [(epoch.start_s, epoch.result.throughput_rps) for epoch in result.epochs]
        series[label].append((last.end_s, last.result.throughput_rps))  # where the step plot ends
        moved[label] = sum(len(tasks) for event in result.replacements for tasks in event["moved"].values())
    times = [time for time, _ in series["sana"][:-1] if time >= 100]
    rows = [[f"{time:g}"] + [f"{_at(points, time):.0f}" for points in series.values()] for time in times]
    text = table(["time (s)", *series], rows)
    text += "\n\n" + table(["run", "tasks moved or un-shared"], [[label, count] for label, count in moved.items()])
    return text, series


def _at(points: list[tuple[float, float]], time: float) -> float:
    """The value of a step series at ``time`` (its last point at or before it)."""
    return [value for start, value in points if start <= time][-1]


def plot_series(path: Path, series: dict[str, list[tuple[float, float]]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.6))
    for label, points in series.items():
        axis.step([time for time, _ in points], [value for _, value in points], where="post", label=label)
    axis.axvline(125, color="grey", linestyle=":", linewidth=1)
    axis.set_xlabel("time (s); dotted: Virginia's egress drops to a tenth")
    axis.set_ylabel("throughput (tweets/s)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def sweep(policies: list[str], values: list[Any], make) -> dict[str, list[dict[str, Any]]]:
    return {policy: [make(policy, value) for value in values] for policy in policies}


def sweep_table(label: str, values: list[Any], results: dict[str, list[dict[str, Any]]]) -> str:
    header = [label] + [f"{policy} thr / WAN / lat" for policy in results]
    rows = []
    for index, value in enumerate(values):
        row = [value]
        for policy, items in results.items():
            item = items[index]
            row.append(f"{item['throughput_rps']:.0f} / {item['wan_mbps']:.0f} / {item['mean_latency_ms']:.0f}")
        rows.append(row)
    return table(header, rows)


def plot_sweep(path: Path, label: str, values: list[Any], results: dict[str, list[dict[str, Any]]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for policy, items in results.items():
        axes[0].plot(values, [item["throughput_rps"] for item in items], marker="o", label=policy)
        axes[1].plot(values, [item["wan_mbps"] for item in items], marker="o", label=policy)
        axes[2].plot(values, [item["mean_latency_ms"] for item in items], marker="o", label=policy)
    for axis, name in zip(axes, ["throughput (tweets/s)", "WAN (Mbps)", "mean latency (ms)"]):
        axis.set_xlabel(label)
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_bars(path: Path, results: dict[str, dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for axis, key, label in zip(axes, ["throughput_rps", "wan_mbps", "mean_latency_ms"],
                                ["throughput (tweets/s)", "WAN (Mbps)", "mean latency (ms)"]):
        axis.bar(names, [results[name][key] for name in names], color=["#888", "#4a7", "#c84", "#37c", "#a5a", "#7aa"][: len(names)])
        axis.set_ylabel(label)
        axis.tick_params(axis="x", rotation=30)
        axis.grid(axis="y", alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write-docs", action="store_true", help="update docs/wan.md and docs/img/wan_*.png")
    parser.add_argument("--robustness-with-replacement", type=float, metavar="U",
                        help="print only the robustness sweep, both policies re-placing at utilization U")
    args = parser.parse_args()
    if args.robustness_with_replacement is not None:
        print(robustness(args.robustness_with_replacement))
        return
    sections = []

    text, results_7_1 = exp_7_1()
    sections.append("### 7.1 Four systems (12 queries, contended WAN)\n\n" + text)

    counts = [1, 2, 4, 6, 8, 10, 12]
    by_count = sweep(["no-share", "strict-share", "sana"], counts, lambda policy, n: run(policy, queries=n))
    sections.append("### 7.2 Degree of sharing vs number of queries\n\nthroughput (tweets/s) / WAN (Mbps) / mean latency (ms)\n\n"
                    + sweep_table("queries", counts, by_count))
    rates = [0.5, 1.0, 1.5, 2.0, 3.0]
    by_rate = sweep(["no-share", "strict-share", "sana"], rates, lambda policy, r: run(policy, queries=4, rate_scale=r))
    sections.append("### 7.2 Degree of sharing vs input rate (4 queries)\n\nrate x (about 7,000 tweets/s)\n\n"
                    + sweep_table("input rate x", rates, by_rate))

    by_count_max = sweep(["no-share", "max-share", "sana"], counts, lambda policy, n: run(policy, queries=n))
    sections.append("### 7.3 Sana vs Max-Share vs number of queries\n\n" + sweep_table("queries", counts, by_count_max))
    scales = [0.1, 0.15, 0.2, 0.3, 0.5, 1.0]
    by_scale = sweep(["net", "max-share", "sana", "sana-printed"], scales, lambda policy, b: run(policy, bandwidth_scale=b))
    sections.append("### 7.3 (extra) Sana vs Max-Share vs NET as bandwidth shrinks (12 queries)\n\n"
                    "link capacity x (of the measured 20-280 Mbps); `sana-printed` is Algorithm 1 as the paper prints it\n\n"
                    + sweep_table("bandwidth x", scales, by_scale))
    site, factor = BOTTLENECK
    bottleneck = sweep(["no-share", "max-share", "sana", "sana-printed"], counts,
                       lambda policy, n: run(policy, queries=n, thin_egress=BOTTLENECK))
    factors = [0.05, 0.1, 0.2, 0.5, 1.0]
    by_factor = sweep(["no-share", "max-share", "sana", "sana-printed"], factors,
                      lambda policy, f: run(policy, thin_egress=(site, f)))
    last = {policy: items[-1] for policy, items in bottleneck.items()}
    versus = table(["Sana vs Max-Share, 12 queries", "ours", "paper (7.3)"], [
        ["throughput", pct(last["sana"]["throughput_rps"], last["max-share"]["throughput_rps"]), "+35%"],
        ["mean latency", pct(last["sana"]["mean_latency_ms"], last["max-share"]["mean_latency_ms"]), "-23%"],
        ["WAN bandwidth", pct(last["sana"]["wan_mbps"], last["max-share"]["wan_mbps"]), "about +20%"],
    ])
    sections.append(f"### 7.3 A shared vertex's site is the bottleneck ({site}'s egress x{factor:g}, links x{CONSTRAINED:g})\n\n"
                    + sweep_table("queries", counts, bottleneck) + "\n\n" + versus + "\n\n"
                    + f"{site}'s egress factor, 12 queries\n\n" + sweep_table(f"{site} egress x", factors, by_factor))

    sections.append("### 7.3 (robustness) Sana vs Max-Share over many WANs (tweets/s)\n\n"
                    + robustness())

    text, series = replacement_over_time()
    sections.append("### 6 Re-placement when a link degrades (12 queries, links x0.3, Virginia's egress x0.1 at 125 s)\n\n"
                    "throughput (tweets/s) from 100 s; re-placement at utilization >= 0.95, checked every 10 s\n\n" + text)

    ample = sweep(["no-share", "sana"], counts, lambda policy, n: run(policy, queries=n, bandwidth_scale=AMPLE))
    ratios = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    by_ratio = {policy: [simulate(parse_scenario(sharing_ratio_scenario(ratio)), policy).summary() for ratio in ratios]
                for policy in ("no-share", "sana")}
    saving_rows = [[ratio, f"{a['wan_mbps']:.0f}", f"{b['wan_mbps']:.0f}", pct(b["wan_mbps"], a["wan_mbps"])]
                   for ratio, a, b in zip(ratios, by_ratio["no-share"], by_ratio["sana"])]
    count_rows = [[n, f"{a['wan_mbps']:.0f}", f"{b['wan_mbps']:.0f}", pct(b["wan_mbps"], a["wan_mbps"])]
                  for n, a, b in zip(counts, ample["no-share"], ample["sana"])]
    sections.append("### 7.4 Bandwidth saving with ample bandwidth (links x100)\n\n"
                    + table(["queries", "No-Share WAN (Mbps)", "Sana WAN (Mbps)", "saving"], count_rows) + "\n\n"
                    + table(["sharing ratio (4 queries)", "No-Share WAN (Mbps)", "Sana WAN (Mbps)", "saving"], saving_rows))
    body = "\n\n".join(sections)
    print(body)
    if args.write_docs:
        IMG.mkdir(parents=True, exist_ok=True)
        plot_bars(IMG / "wan_7_1_systems.png", {k: results_7_1[k] for k in ("default", "net", "mqo", "sana", "max-share")},
                  "7.1: 12 queries on the contended 14-site WAN")
        plot_sweep(IMG / "wan_7_2_queries.png", "concurrent queries", counts, by_count, "7.2: degree of sharing vs number of queries")
        plot_sweep(IMG / "wan_7_2_rate.png", "input rate x", rates, by_rate, "7.2: degree of sharing vs input rate (4 queries)")
        plot_sweep(IMG / "wan_7_3_max_share.png", "concurrent queries", counts, by_count_max, "7.3: Sana vs Max-Share")
        plot_sweep(IMG / "wan_7_3_bandwidth.png", "link capacity x", scales, by_scale, "7.3 (extra): shrinking bandwidth")
        plot_sweep(IMG / "wan_7_3_bottleneck.png", "concurrent queries", counts, bottleneck,
                   f"7.3: a shared vertex's site is the bottleneck ({site}'s egress x{factor:g})")
        plot_series(IMG / "wan_6_replacement.png", series, "Re-placement: a link degrades mid-run (12 queries)")
        plot_sweep(IMG / "wan_7_4_queries.png", "concurrent queries", counts, ample, "7.4: ample bandwidth, WAN use vs queries")
        plot_sweep(IMG / "wan_7_4_ratio.png", "sharing ratio", ratios, by_ratio, "7.4: ample bandwidth, WAN use vs sharing ratio")
        document = DOC.read_text()
        block = f"<!-- wan-results:start -->\n{body}\n<!-- wan-results:end -->"
        document = re.sub(r"<!-- wan-results:start -->.*<!-- wan-results:end -->", lambda _: block, document, flags=re.S)
        DOC.write_text(document)


if __name__ == "__main__":
    main()
