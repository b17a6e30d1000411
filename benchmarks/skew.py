"""Skew benchmark: Reshape against no mitigation, split by keys only and a one-shot 50% split, on the real shuffle.

One harness, the same inputs for every policy: micro-batches of Zipf-distributed
keys (exponents 0.8, 1.0, 1.2, 1.5) and a distribution that shifts mid-run
(the hot keys move to other workers, as in Reshape's section 7.8), written
once as Parquet files that the executors read. Each run drives one keyed
window aggregate (count, sum, max per key and 10 s window) batch by batch the
way a fragment does, with its state in the worker state store. Policies:

* ``hash``: no mitigation (Reshape disabled);
* ``keys``: Reshape's controller splitting by keys only (whole buckets move; Flux-like);
* ``oneshot``: one detection per worker, one helper, a fixed 50% split by
  records, never revisited (Flow-Join-like);
* ``reshape``: ours (split by records, two phases, iterations, adaptive tau,
  several helpers).

Per run: batch duration p50/p99, throughput, max/mean worker rows per batch,
the balance ratio of every skewed worker and its helpers over time, the
time until the observed per-key result ratio is within 5% of the final one,
and per-worker task time against rows (why the controller's load metric is
rows). Results go to ``benchmarks/results/skew-<master>.json``;
``python -m benchmarks.skew report`` draws docs/img/skew_*.png and prints
the tables of docs/skew.md.

    python -m benchmarks.skew run --master 'local[2]'
    python -m benchmarks.skew run --master 'local-cluster[2,1,1024]'
    python -m benchmarks.skew report --write-docs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results"
IMAGES = Path(__file__).parents[1] / "docs" / "img"
INPUTS = {"zipf0.8": (0.8, None), "zipf1.0": (1.0, None), "zipf1.2": (1.2, None), "zipf1.5": (1.5, None),
          "shift1.2": (1.2, 0.5)}
POLICIES = ("hash", "keys", "oneshot", "reshape")
COLORS = {"hash": "tab:blue", "keys": "tab:orange", "oneshot": "tab:green", "reshape": "tab:red"}
KEYS = 1000
SCHEMA = {"key": "string", "v": "double", "ts": "timestamp"}
WINDOW = {"keys": ["key"], "time_column": "ts", "window": "10 seconds", "watermark": "2 seconds",
          "aggregates": {"n": "count(*)", "total": "sum(v)", "hi": "max(v)"}}


# -- inputs ---------------------------------------------------------------------------

def write_inputs(root: Path, batches: int, rows: int) -> dict[str, list[str]]:
    """Parquet files per input and batch; keys Zipf over ``KEYS``; a shift renames the ranks half-way."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths: dict[str, list[str]] = {}
    for name, (exponent, shift_at) in INPUTS.items():
        weights = 1.0 / np.arange(1, KEYS + 1) ** exponent
        weights /= weights.sum()
        files = []
        for batch in range(batches):
            rng = np.random.default_rng(batch)
            ranks = rng.choice(KEYS, size=rows, p=weights)
            if shift_at is not None and batch >= batches * shift_at:
                ranks = (ranks + 7) % KEYS  # the hot keys cool, others heat (they hash to other workers)
            ts = (batch * 2_000_000 + rng.integers(0, 2_000_000, rows)).astype("datetime64[us]")
            table = pa.table({"key": pa.array([f"k{rank}" for rank in ranks]), "v": rng.integers(0, 1000, rows) / 10,
                              "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))})
            path = root / name / f"{batch:04d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            files.append(str(path))
        paths[name] = files
    return paths


# -- policies ---------------------------------------------------------------------------

def make_controller(policy: str, workers: int):
    from runtime.spark.shuffle import BUCKETS
    from runtime.spark.reshape import Controller, Group, ReshapeSettings

    if policy == "hash":
        return ReshapeSettings(enabled=False), None
    if policy == "keys":
        return ReshapeSettings(split="keys"), None
    if policy == "reshape":
        return ReshapeSettings(), None

    class OneShot(Controller):
        """Flow-Join-like: detect once per worker, give it one helper and half its records, never revisit."""

        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.done: set[int] = set()

        def _manage(self, group, load, table, moves):
            return False

        def _start(self, skewed, free, load, table, moves):
            if skewed in self.done:
                return False
            self.done.add(skewed)
            group = Group(skewed, [free[0]], [0.5], None, self.batch, phase=2)
            detection = self._since(self.batch - self.settings.min_sample + 1)  # anchored as Reshape's groups are
            group.cumulative = {worker: sum(sample.processed[worker] for sample in detection) for worker in group.members}
            self.groups.append(group)
            self.detections += 1
            return True

    settings = ReshapeSettings()
    return settings, OneShot(workers, BUCKETS, settings)


# -- one run ----------------------------------------------------------------------------

class ServiceTime:
    """A worker step that first waits ``us_per_row`` per row: work that takes time without taking a core
    (a lookup in an external service), so that a worker's task time follows its rows even with more
    workers than cores. Used only with ``--service-us``; docs/skew.md says which tables it applies to."""

    def __init__(self, step, us_per_row: float) -> None:
        self.step, self.us_per_row = step, us_per_row

    def __call__(self, state, rows):
        if rows is not None and rows.num_rows:
            time.sleep(rows.num_rows * self.us_per_row / 1e6)
        return self.step(state, rows)


def run_one(spark, files: list[str], policy: str, workers: int, root: Path, service_us: float = 0.0) -> dict[str, Any]:
    from runtime.operators.window.spark import WindowAggregate
    from runtime.spark.worker_state import WorkerStateStore
    from tests.fixtures.keyed import keyed_task

    class Timed(WindowAggregate):
        def _route(self, *args):
            branches, columns, step, output = super()._route(*args)
            return branches, columns, ServiceTime(step, service_us) if service_us else step, output

    settings, controller = make_controller(policy, workers)
    task = keyed_task("window_aggregate", WINDOW, {"in": [SCHEMA]}, f"w_{policy}")
    operator = Timed(task, {"in": [SCHEMA]}, workers, settings)
    if controller is not None:
        operator.controller = controller
    store = WorkerStateStore(str(root / policy))
    state = operator.initial_state()
    durations, loads, task_ms, ratios, counts, emitted_at = [], [], [], [], [], []
    started = time.perf_counter()
    per_key: dict[str, int] = {}
    for batch, path in enumerate(files):
        view = f"skew_in_{policy}"
        spark.read.parquet(path).createOrReplaceTempView(view)
        begin = time.perf_counter()
        output, draft = operator.plan(spark, batch, {"in": [f"SELECT * FROM {view}"]}, state, store)
        rows = output.select("key", "n").toArrow()
        state = operator.finish(batch, draft, store)
        durations.append(time.perf_counter() - begin)
        loads.append(list(operator.load.last))
        task_ms.append(list(operator.load.task_ms))
        ratios.append([group.ratio() for group in operator.controller.groups])
        for key, n in zip(rows.column("key").to_pylist(), rows.column("n").to_pylist()):
            per_key[key] = per_key.get(key, 0) + n
        counts.append(dict(per_key))
        emitted_at.append(time.perf_counter() - started)
        print(f"  {policy:8s} batch {batch + 1:3d}/{len(files)}: {1000 * durations[-1]:7.0f} ms, "
              f"max/mean rows {max(loads[-1]) / max(1e-9, statistics.mean(loads[-1])):.2f}", file=sys.stderr, flush=True)
    snapshot = operator.controller.snapshot()
    return {"policy": policy, "durations_s": durations, "loads": loads, "task_ms": task_ms, "ratios": ratios,
            "representative_s": _representative(counts, emitted_at),
            "groups": snapshot["groups"], "detections": snapshot["detections"], "iterations": snapshot["iterations"],
            "rollbacks": snapshot["rollbacks"], "events": snapshot["events"], "rows": sum(map(sum, loads))}


def _representative(counts: list[dict[str, int]], at: list[float]) -> float | None:
    """Seconds until the hottest key's share of the emitted counts stays within 5% of its final share."""
    final = counts[-1]
    total = sum(final.values())
    if not total:
        return None
    hot = max(final, key=final.get)
    target = final[hot] / total
    since = None
    for seen, moment in zip(counts, at):
        share = seen.get(hot, 0) / max(1, sum(seen.values()))
        close = abs(share - target) <= 0.05 * target
        since = (since if since is not None else moment) if close else None
    return since


def run(args: argparse.Namespace) -> None:
    from runtime.spark.session import spark_session

    root = Path(tempfile.mkdtemp(prefix="sana-skew-"))
    print(f"writing inputs: {len(INPUTS)} x {args.batches} batches x {args.rows} rows", file=sys.stderr)
    files = write_inputs(root / "inputs", args.batches, args.rows)
    spark = spark_session(args.master)
    warm = files["zipf1.2"][:6]
    run_one(spark, warm, "hash", args.workers, root / "warm", args.service_us)  # start the Python workers, JIT
    results = []
    for name in args.inputs:
        for policy in args.policies:
            print(f"{name} / {policy}", file=sys.stderr, flush=True)
            result = run_one(spark, files[name], policy, args.workers, root / name, args.service_us)
            result["input"] = name
            results.append(result)
    RESULTS.mkdir(exist_ok=True)
    suffix = f"-service{args.service_us:g}us" if args.service_us else ""
    out = RESULTS / f"skew-{_slug(args.master)}{suffix}.json"
    out.write_text(json.dumps({"master": args.master, "workers": args.workers, "batches": args.batches,
                               "rows_per_batch": args.rows, "keys": KEYS, "cores": _cores(),
                               "service_us_per_row": args.service_us, "runs": results}, indent=1))
    print(f"wrote {out}", file=sys.stderr)


def _slug(master: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in master).strip("_")


def _cores() -> int:
    import os

    return os.cpu_count() or 0


# -- report ---------------------------------------------------------------------------

def summarize(run: dict[str, Any], skip: int = 2) -> dict[str, Any]:
    durations = run["durations_s"][skip:]
    loads = run["loads"][skip:]
    imbalance = [max(batch) / statistics.mean(batch) for batch in loads if sum(batch)]
    final_ratios = run["ratios"][-1]
    ordered = sorted(durations)
    return {
        "input": run["input"], "policy": run["policy"],
        "p50_ms": 1000 * ordered[len(ordered) // 2], "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "rows_per_s": sum(map(sum, loads)) / sum(durations),
        "max_over_mean": statistics.mean(imbalance) if imbalance else None,
        "ratio": min(final_ratios) if final_ratios else None,
        "representative_s": run["representative_s"],
        "detections": run["detections"], "iterations": run["iterations"],
    }


def metric_fit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Task time against rows per (worker, batch) in the unmitigated runs: r, slope and intercept."""
    rows, times = [], []
    for run in runs:
        if run["policy"] != "hash":
            continue
        for loads, task_ms in list(zip(run["loads"], run["task_ms"]))[2:]:
            rows += loads
            times += task_ms
    x, y = np.array(rows, float), np.array(times, float)
    slope, intercept = np.polyfit(x, y, 1)
    return {"pearson_r": float(np.corrcoef(x, y)[0, 1]), "ms_per_1000_rows": float(slope * 1000),
            "intercept_ms": float(intercept), "points": len(x)}


DOC = Path(__file__).parents[1] / "docs" / "skew.md"
MARKERS = ("<!-- benchmarks.skew report: begin -->", "<!-- benchmarks.skew report: end -->")


def report(args: argparse.Namespace) -> None:
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        _report()
    print(text.getvalue())
    if args.write_docs:
        doc = DOC.read_text()
        begin, end = doc.index(MARKERS[0]) + len(MARKERS[0]), doc.index(MARKERS[1])
        DOC.write_text(doc[:begin] + "\n" + text.getvalue().strip() + "\n" + doc[end:])
        print(f"wrote the tables into {DOC}", file=sys.stderr)


def _report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMAGES.mkdir(parents=True, exist_ok=True)
    for path in sorted(RESULTS.glob("skew-*.json")):
        data = json.loads(path.read_text())
        summaries = [summarize(run) for run in data["runs"]]
        service = data.get("service_us_per_row") or 0
        print(f"\n### {data['master']} ({data['workers']} workers, {data['batches']} batches x {data['rows_per_batch']} rows, "
              f"{data['cores']} cores{f', {service:g} us service time per row' if service else ''})\n")
        print("| input | policy | batch p50 ms | batch p99 ms | rows/s | max/mean rows | balance ratio | representative s | detections | iterations |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for s in summaries:
            print(f"| {s['input']} | {s['policy']} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} | {s['rows_per_s']:,.0f} | "
                  f"{_fmt(s['max_over_mean'])} | {_fmt(s['ratio'])} | {_fmt(s['representative_s'], 1)} | "
                  f"{s['detections']} | {s['iterations']} |")
        fit = metric_fit(data["runs"])
        print(f"\nload metric: task ms = {fit['intercept_ms']:.1f} + {fit['ms_per_1000_rows']:.2f} x (rows/1000), "
              f"r = {fit['pearson_r']:.3f} over {fit['points']} (worker, batch) points")
        slug = path.stem.removeprefix("skew-")
        _plot(plt, data, slug)


def _fmt(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _plot(plt, data: dict[str, Any], slug: str) -> None:
    runs = {(run["input"], run["policy"]): run for run in data["runs"]}
    inputs = [name for name in INPUTS if any(key[0] == name for key in runs)]
    fig, axes = plt.subplots(3, len(inputs), figsize=(4 * len(inputs), 9.5), squeeze=False)
    for column, name in enumerate(inputs):
        for policy in POLICIES:
            run = runs.get((name, policy))
            if run is None:
                continue
            color = COLORS[policy]
            axes[2][column].plot([1000 * value for value in run["durations_s"]], color=color, label=policy)
            imbalance = [max(batch) / statistics.mean(batch) if sum(batch) else 1 for batch in run["loads"]]
            axes[0][column].plot(imbalance, label=policy, color=color)
            if policy == "hash":  # no pairs: the least loaded worker against the most loaded, cumulative
                totals = np.cumsum(np.array(run["loads"], float), axis=0)
                axes[1][column].plot(totals.min(axis=1) / np.maximum(totals.max(axis=1), 1), color=color, linestyle="--",
                                     label="hash (least / most loaded worker)")
                continue
            ratio = [min(values) if values else None for values in run["ratios"]]
            if any(value is not None for value in ratio):
                axes[1][column].plot([value if value is not None else float("nan") for value in ratio], label=policy,
                                     color=color)
        axes[0][column].set_title(name)
        axes[0][column].set_ylabel("max / mean worker rows")
        axes[1][column].set_ylabel("balance ratio (min over groups)")
        axes[1][column].set_ylim(0, 1.05)
        axes[2][column].set_ylabel("batch duration, ms")
        axes[2][column].set_xlabel("micro-batch")
        axes[2][column].set_ylim(bottom=0)
    axes[0][0].legend()
    axes[1][0].legend(fontsize=7)
    service = data.get("service_us_per_row") or 0
    fig.suptitle(f"Skew mitigation on {data['master']}: {data['workers']} workers, {data['rows_per_batch']} rows per batch"
                 + (f", {service:g} us per row service time" if service else ""))
    fig.tight_layout()
    out = IMAGES / f"skew_{slug}.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    print(f"\n![{data['master']}](img/{out.name})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    runner = sub.add_parser("run")
    runner.add_argument("--master", default="local[2]")
    runner.add_argument("--workers", type=int, default=8)
    runner.add_argument("--batches", type=int, default=20)
    runner.add_argument("--rows", type=int, default=40_000)
    runner.add_argument("--inputs", nargs="+", default=list(INPUTS), choices=list(INPUTS))
    runner.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    runner.add_argument("--service-us", type=float, default=0.0,
                        help="emulated per-row service time of each worker (sleep), for more workers than cores")
    reporter = sub.add_parser("report")
    reporter.add_argument("--write-docs", action="store_true", help="also replace the tables in docs/skew.md")
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
