"""Tables and plots from ``benchmarks/results/keyed_operators.json`` (and ``keyed_operators_heap.json``).

    .venv/bin/python -m benchmarks.keyed_report

Prints the Markdown tables of docs/benchmarks.md "Keyed operators" and draws
``docs/img/keyed_operators.png`` (and ``docs/img/keyed_heap.png`` when the
heap run exists). Needs the ``bench`` extra (matplotlib).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"
OPS = {"window": "window_aggregate (tumbling 10 s)", "join": "join (2 s bound)"}


def _task_stats(run: dict[str, Any], key: str) -> str:
    batches = [batch for batch in run.get(key, []) if batch]
    tasks = [ms for batch in batches for ms in batch]
    if not tasks:
        return "n/a"
    per_batch_max = [max(batch) for batch in batches]
    return f"{statistics.median(tasks):.0f} / {max(tasks):.0f} / {statistics.median(per_batch_max):.0f}"


def table(results: dict[str, Any]) -> str:
    lines = ["| operator | workers | path | master | rows/s | batch p50 / p99 ms | new / old batch p50 | shuffle-stage task ms (Spark): median / max / median slowest per batch | worker's Python ms: same | sink records (digest) |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
    runs = results["runs"]
    old = {(run["op"], run["workers"]): run for run in runs if run["path"] == "old"}
    for run in runs:
        base = old.get((run["op"], run["workers"]))
        ratio = f"{run['batch_p50_ms'] / base['batch_p50_ms']:.2f}x" if base and run["path"] == "new" else ""
        lines.append(
            f"| {run['op']} | {run['workers']} | {run['path']} | `{run['master']}` | {run['rows_per_s']:,.0f} | "
            f"{run['batch_p50_ms']:.0f} / {run['batch_p99_ms']:.0f} | {ratio} | {_task_stats(run, 'spark_task_ms')} | "
            f"{_task_stats(run, 'worker_task_ms')} | "
            f"{run['sink_records']:,} ({run['sink_digest']}) |")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    colours = {"old": "tab:grey", "new": "tab:blue", "cluster": "tab:green"}
    for axis, op in zip(axes[:2], ("window", "join")):
        mine = [run for run in runs if run["op"] == op]
        labels, values, colors, errors = [], [], [], []
        for run in mine:
            cluster = run["master"].startswith("local-cluster")
            labels.append(f"{run['path']}{' 2 JVMs' if cluster else ''}\n{run['workers']} w")
            values.append(run["batch_p50_ms"])
            errors.append(run["batch_p99_ms"] - run["batch_p50_ms"])
            colors.append(colours["cluster" if cluster else run["path"]])
        axis.bar(range(len(values)), values, color=colors, yerr=[[0] * len(errors), errors], capsize=3)
        axis.set_xticks(range(len(values)), labels, fontsize=8)
        axis.set_ylabel("micro-batch ms (bar p50, whisker p99)")
        axis.set_title(f"{OPS[op]}: {results['batch_rows']:,} rows per batch")
        axis.grid(True, axis="y", alpha=0.3)
    axis = axes[2]
    shown = [run for run in runs if run["path"] == "new" and run.get("worker_task_ms")]
    key = "spark_task_ms" if all(run.get("spark_task_ms") for run in shown) else "worker_task_ms"
    data = [[ms for batch in run[key] for ms in batch] for run in shown]
    axis.boxplot(data, showfliers=True)
    axis.set_xticks(range(1, len(shown) + 1),
                    [f"{run['op']}\n{run['workers']} w{' 2 JVMs' if run['master'].startswith('local-cluster') else ''}"
                     for run in shown], fontsize=8)
    axis.set_ylabel("ms per task" + (" (Spark executor run time)" if key == "spark_task_ms" else " (Python side)"))
    axis.set_title("tasks of the keyed shuffle stage (new path)")
    axis.grid(True, axis="y", alpha=0.3)
    figure.suptitle("Keyed operators: driver path (old) vs. executor shuffle (new), 2 cores", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def heap_plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["heap_samples"]
    fed_mb = [sample["rows"] * result["input_bytes"] / result["rows"] / 2**20 for sample in samples]
    figure, axis = plt.subplots(figsize=(7.5, 4.2))
    axis.plot(fed_mb, [s["heap_used_mb"] for s in samples], "o-", label="driver JVM heap used after GC")
    axis.plot(fed_mb, [s["rss_mb"] for s in samples], "s-", label="driver Python process RSS")
    axis.axhline(samples[0]["heap_max_mb"], color="grey", linestyle=":", label="driver JVM max heap")
    axis.set_xlabel("input fed to the window_aggregate so far (MB of records)")
    axis.set_ylabel("MB")
    axis.set_title(f"Driver memory while a keyed operator reads {result['input_bytes'] / 2**30:.1f} GiB "
                   f"({result['master']})", fontsize=10)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> int:
    results = json.loads((RESULTS / "keyed_operators.json").read_text())
    print(table(results))
    plot(results, IMG / "keyed_operators.png")
    heap_file = RESULTS / "keyed_operators_heap.json"
    if heap_file.exists():
        heap = json.loads(heap_file.read_text())
        heap_plot(heap, IMG / "keyed_heap.png")
        samples = heap["heap_samples"]
        print(f"\nheap: {heap['rows']:,} rows, {heap['input_bytes'] / 2**30:.2f} GiB fed; driver heap used "
              f"{min(s['heap_used_mb'] for s in samples)}-{max(s['heap_used_mb'] for s in samples)} MB of "
              f"{samples[0]['heap_max_mb']} MB; Python RSS {min(s['rss_mb'] for s in samples)}-"
              f"{max(s['rss_mb'] for s in samples)} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
