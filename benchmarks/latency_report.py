"""Markdown table and plot from ``benchmarks/results/manager_latency.json``.

    python -m benchmarks.latency_report [--json PATH] [--plot PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_JSON = Path("benchmarks/results/manager_latency.json")
DEFAULT_PLOT = Path("docs/img/manager_latency.png")
GOAL_MS = 20.0


def _cell(row: dict[str, Any] | None, operation: str) -> str:
    if row is None:
        return "–"
    stats = row[f"{operation}_ms"]
    mark = " *" if row.get("disturbed") else ""
    return f"{stats['p50']:.1f} / {stats['p99']:.1f}{mark}"


def markdown_table(results: dict[str, Any]) -> str:
    """One row per level: sharing, then p50 / p99 (ms) of submit and remove per mode."""
    modes = results["modes"]
    levels = sorted({level["running_dataflows"] for mode in modes.values() for level in mode["levels"]})
    by_mode = {name: {level["running_dataflows"]: level for level in mode["levels"]} for name, mode in modes.items()}
    header = ["running dataflows", "running / submitted tasks (saving)"]
    for name in modes:
        header += [f"{name} submit p50 / p99", f"{name} remove p50 / p99"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for level in levels:
        rows = [by_mode[name].get(level) for name in modes]
        stats = next(row["stats"] for row in rows if row is not None)
        sharing = f"{stats['running_tasks']:,} / {stats['submitted_tasks']:,} ({stats['saving_percent']:.0f} %)"
        cells = [f"{level:,}", sharing]
        for row in rows:
            cells += [_cell(row, "submit"), _cell(row, "remove")]
        lines.append("| " + " | ".join(cells) + " |")
    if any(row.get("disturbed") for mode in modes.values() for row in mode["levels"]):
        threshold = results["config"]["disturbed_cores"]
        lines.append("")
        lines.append(f"\\* other load above {threshold} cores during every attempt at this level (least disturbed attempt shown).")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    edge_levels = [level for level in results["modes"].get("in-process", {}).get("levels", []) if level.get("edge_cases")]
    panels = 3 if edge_levels else 2
    figure, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.4), sharey=True)
    colours = {"in-process": "tab:blue", "http": "tab:orange"}
    for axis, operation in zip(axes, ("submit", "remove")):
        for name, mode in results["modes"].items():
            levels = sorted(mode["levels"], key=lambda level: level["running_dataflows"])
            x = [level["running_dataflows"] for level in levels]
            colour = colours.get(name)
            axis.plot(x, [level[f"{operation}_ms"]["p50"] for level in levels], "o-", color=colour, label=f"{name} p50")
            axis.plot(x, [level[f"{operation}_ms"]["p99"] for level in levels], "s--", color=colour, label=f"{name} p99")
            for level in levels:
                if level.get("disturbed"):
                    axis.annotate("*", (level["running_dataflows"], level[f"{operation}_ms"]["p99"]),
                                  textcoords="offset points", xytext=(6, 0), color=colour, fontsize=12)
        if operation == "submit":
            axis.axhline(GOAL_MS, color="grey", linestyle=":", linewidth=1, label="goal: p99 < 20 ms in-process")
        axis.set_title(f"{operation}: fresh RIoTBench app, removed at once")
    if edge_levels:
        axis = axes[2]
        x = [level["running_dataflows"] for level in edge_levels]
        styles = {("bridge", "submit"): ("tab:red", "o-"), ("bridge", "remove"): ("tab:red", "s--"),
                  ("new_join", "submit"): ("tab:green", "o-"), ("new_join", "remove"): ("tab:green", "s--")}
        for (kind, operation), (colour, style) in styles.items():
            axis.plot(x, [level["edge_cases"][kind][f"{operation}_ms"]["p50"] for level in edge_levels], style,
                      color=colour, label=f"{kind} {operation} p50")
        axis.set_title("in-process: plans that touch a whole DAG")
        axis.legend(fontsize=8)
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in axes:
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("running dataflows")
        axis.grid(True, which="both", alpha=0.3)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        axis.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.yaxis.set_major_formatter(plain)
        axis.yaxis.set_minor_formatter(NullFormatter())
    axes[0].set_ylabel("milliseconds (log)")
    axes[0].legend(fontsize=8)
    title = "Sana manager, dry-run runtime, RIoTBench-style dataflows (2 cores)"
    if any(level.get("disturbed") for mode in results["modes"].values() for level in mode["levels"]):
        title += f"; * = other load above {results['config']['disturbed_cores']} cores during the probe"
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    args = parser.parse_args(argv)
    results = json.loads(args.json.read_text())
    print(markdown_table(results))
    plot(results, args.plot)
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
