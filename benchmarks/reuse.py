"""The reuse benchmark (paper section 5): the workloads x three traces, each run alone and with reuse.

Workloads (docs/reuse.md): ``riot`` is apps 0-20 of :mod:`benchmarks.riot`
with seed 0; ``riot-paper`` the 21 apps of the paper's construction
(:func:`benchmarks.riot.paper_workload`: one config per task kind); ``opmw``
is the 35 workflows of :mod:`benchmarks.opmw` with seed 0, ``opmw-hist`` the
same generator shaped to the paper's reuse histogram too
(:data:`benchmarks.opmw.HISTOGRAM_SHAPE`). Traces (:mod:`benchmarks.traces`): ``seq`` (submit all, then drain), ``rw1``
and ``rw2`` (fill with about two thirds, 100 random steps, drain). Modes:
``reuse`` is the manager with sharing on, ``alone`` the same manager with
``SANA_SHARING=false`` (every dataflow runs alone: the paper's Default).

Every step of a trace goes to a :class:`Target`, which then measures. The
trace logic (:func:`run_trace`, :func:`run_all`) knows nothing else of it, so
another target (the real service on Spark and Kafka, measuring CPU) plugs in
through a :data:`TargetFactory`. The dry-run target is the manager in this
process with :class:`~runtime.dryrun.DryRunRuntime` on the real Redis, under
a fresh prefix that is deleted at the end.

    python -m benchmarks.reuse dryrun               # writes benchmarks/results/reuse-dryrun.json
    python -m benchmarks.reuse report --write-docs  # plots into docs/img/reuse_*.png, tables into docs/reuse.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import redis

from benchmarks import traces
from benchmarks.measure import Progress, machine
from benchmarks.opmw import HISTOGRAM_SEED, HISTOGRAM_SHAPE, opmw_workload
from benchmarks.riot import paper_workload, riot_workload
from benchmarks.targets import delete_prefix, redis_client
from manager.service import Manager
from manager.validate import parse_dataflow
from runtime.dryrun import DryRunRuntime

ROOT = Path(__file__).parents[1]
DRYRUN_JSON = ROOT / "benchmarks" / "results" / "reuse-dryrun.json"
IMAGES = ROOT / "docs" / "img"
DOC = ROOT / "docs" / "reuse.md"
MARKERS = ("<!-- reuse dryrun: begin -->", "<!-- reuse dryrun: end -->")
REDIS_URL = "redis://127.0.0.1:6379/0"
MODES = {"alone": False, "reuse": True}


@dataclass(frozen=True)
class Workload:
    """A named list of dataflow documents and how many a random walk starts with."""

    name: str
    description: str
    documents: list[dict[str, Any]]
    initial: int


@dataclass(frozen=True)
class TraceSpec:
    """A named trace generator: ``seq`` or a random walk with its seed."""

    name: str
    kind: str
    seed: int
    walk_steps: int = 100

    def steps(self, workload: Workload) -> list[traces.Step]:
        n = len(workload.documents)
        if self.kind == "seq":
            return traces.sequential(n, self.seed)
        return traces.random_walk(n, workload.initial, self.walk_steps, self.seed)

    def phases(self, workload: Workload) -> list[str]:
        """``fill``, ``walk`` or ``drain`` for every step of :meth:`steps`."""
        n, total = len(workload.documents), len(self.steps(workload))
        fill, walk = (n, 0) if self.kind == "seq" else (workload.initial, self.walk_steps)
        return ["fill" if k < fill else "walk" if k < fill + walk else "drain" for k in range(total)]


def workloads() -> dict[str, Workload]:
    """The paper's two workloads as this repository generates them (RIoT two ways)."""
    return {
        "riot": Workload("riot", "benchmarks.riot apps 0-20, seed 0", list(riot_workload(21, seed=0)), initial=15),
        "riot-paper": Workload("riot-paper", "benchmarks.riot paper_workload: the paper's construction",
                               paper_workload(), initial=15),
        "opmw": Workload("opmw", "benchmarks.opmw, seed 0", opmw_workload(seed=0), initial=20),
        "opmw-hist": Workload("opmw-hist", f"benchmarks.opmw HISTOGRAM_SHAPE, seed {HISTOGRAM_SEED}: calibrated to "
                              "the paper's reuse histogram too", opmw_workload(HISTOGRAM_SEED, HISTOGRAM_SHAPE), initial=20),
    }


TRACES: dict[str, TraceSpec] = {
    "seq": TraceSpec("seq", "seq", seed=1),
    "rw1": TraceSpec("rw1", "random_walk", seed=1),
    "rw2": TraceSpec("rw2", "random_walk", seed=2),
}


# -- targets ----------------------------------------------------------------------------


class Target(Protocol):
    """What a trace runs against. One target serves one run (a workload, a trace, a mode)."""

    def submit(self, document: dict[str, Any]) -> str:
        """Submit a dataflow; returns its id once its new work runs."""

    def remove(self, dataflow_id: str) -> None:
        """Remove a dataflow; returns once its unshared work has stopped."""

    def measure_step(self) -> dict[str, Any]:
        """The metrics of the step just taken (a real target lets the system settle first)."""

    def close(self) -> None:
        """Stop everything the target started and delete what it stored."""


TargetFactory = Callable[[Workload, bool], Target]
"""Builds the target of one run: ``factory(workload, sharing)``."""


class DryRunTarget:
    """The manager in this process with ``DryRunRuntime``, on a real Redis under ``prefix``.

    Containment sharing is off: this is the reuse paper's evaluation of sharing equivalent tasks, whose optimum
    (:func:`optimum`) counts distinct signatures (docs/containment.md measures containment).
    :meth:`close` deletes every key under ``prefix``; the client stays open (its owner closes it).
    """

    def __init__(self, client: redis.Redis, prefix: str, sharing: bool) -> None:
        self.client = client
        self.prefix = prefix
        self.runtime = DryRunRuntime(client, prefix)
        self.manager = Manager(client, prefix, self.runtime, sharing=sharing, containment=False)
        self.manager.start()

    def submit(self, document: dict[str, Any]) -> str:
        return self.manager.submit(document).id

    def remove(self, dataflow_id: str) -> None:
        self.manager.remove(dataflow_id)

    def measure_step(self) -> dict[str, Any]:
        """The manager's counts, and how many tasks the dry-run runtime records as deployed."""
        stats = self.manager.stats()
        return {
            "running_tasks": stats["running_tasks"],
            "submitted_tasks": stats["submitted_tasks"],
            "fragments": stats["fragments"],
            "sharing_histogram": stats["sharing_histogram"],
            "deployed_tasks": self.runtime.health()["deployed_tasks"],
        }

    def close(self) -> None:
        try:
            self.manager.close()
        finally:
            delete_prefix(self.client, self.prefix)


def dryrun_factory(client: redis.Redis) -> TargetFactory:
    """A :class:`DryRunTarget` per run, each under a fresh ``bench-reuse-<hex>`` prefix."""
    return lambda workload, sharing: DryRunTarget(client, f"bench-reuse-{uuid.uuid4().hex[:12]}", sharing)


# -- running traces ---------------------------------------------------------------------


def optimum(signature_sets: Iterable[frozenset[str]], sharing: bool) -> int:
    """The fewest running tasks that serve these dataflows: distinct signatures with sharing, else their sum.

    >>> optimum([frozenset("ab"), frozenset("bc")], True), optimum([frozenset("ab"), frozenset("bc")], False)
    (3, 4)
    """
    sets = list(signature_sets)
    return len(frozenset().union(*sets)) if sharing else sum(len(signatures) for signatures in sets)


def run_trace(
    target: Target,
    documents: Sequence[dict[str, Any]],
    steps: Sequence[traces.Step],
    phases: Sequence[str],
    sharing: bool,
    progress: Progress | None = None,
    label: str = "",
) -> list[dict[str, Any]]:
    """Take every step on ``target`` and return one record per step.

    A record holds ``step`` (from 1), ``phase``, ``action``, ``dataflow`` (its
    name) and ``index`` (in ``documents``), ``running_dataflows``,
    ``optimal_tasks`` (:func:`optimum` of the running dataflows) and whatever
    ``target.measure_step()`` returned.
    """
    signature_sets = [frozenset(parse_dataflow(document).signatures.values()) for document in documents]
    running: dict[int, str] = {}
    records = []
    for number, ((action, index), phase) in enumerate(zip(steps, phases, strict=True), start=1):
        if action == "add":
            running[index] = target.submit(documents[index])
        else:
            target.remove(running.pop(index))
        record = {
            "step": number,
            "phase": phase,
            "action": action,
            "dataflow": documents[index]["name"],
            "index": index,
            "running_dataflows": len(running),
            "optimal_tasks": optimum((signature_sets[i] for i in running), sharing),
        }
        record.update(target.measure_step())
        records.append(record)
        if progress is not None:
            progress.say(f"{label} step {number}/{len(steps)}: {len(running)} dataflows, "
                         f"{record.get('running_tasks', '?')} running tasks")
    return records


def run_all(
    factory: TargetFactory,
    workload_names: Sequence[str],
    trace_names: Sequence[str],
    mode_names: Sequence[str] = tuple(MODES),
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Every (workload, trace, mode) through a fresh target from ``factory``; one result per run."""
    available = workloads()
    runs = []
    for workload_name in workload_names:
        workload = available[workload_name]
        for trace_name in trace_names:
            spec = TRACES[trace_name]
            steps, phases = spec.steps(workload), spec.phases(workload)
            traces.running_after(steps)
            for mode in mode_names:
                sharing = MODES[mode]
                label = f"{workload_name} {trace_name} {mode}:"
                started = time.monotonic()
                target = factory(workload, sharing)
                try:
                    records = run_trace(target, workload.documents, steps, phases, sharing, progress, label)
                finally:
                    target.close()
                if progress is not None:
                    progress.say(f"{label} done, {len(steps)} steps", force=True)
                runs.append({
                    "workload": workload_name,
                    "trace": trace_name,
                    "trace_seed": spec.seed,
                    "mode": mode,
                    "sharing": sharing,
                    "seconds": round(time.monotonic() - started, 3),
                    "steps": records,
                })
    return runs


def describe_workload(workload: Workload) -> dict[str, Any]:
    """Dataflows, tasks, distinct signatures with all running, distinct (type, config) pairs, sizes."""
    flows = [parse_dataflow(document) for document in workload.documents]
    sizes = [len(flow.tasks) for flow in flows]
    abstract = {json.dumps([task.type, task.config], sort_keys=True) for flow in flows for task in flow.tasks.values()}
    return {
        "description": workload.description,
        "dataflows": len(flows),
        "tasks": sum(sizes),
        "distinct_signatures": len({signature for flow in flows for signature in flow.signatures.values()}),
        "distinct_abstract_tasks": len(abstract),
        "tasks_per_dataflow": [min(sizes), max(sizes)],
        "random_walk_initial": workload.initial,
    }


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def dryrun(args: argparse.Namespace) -> None:
    progress = Progress(every=5.0)
    available = workloads()
    results = {
        "benchmark": "reuse-dryrun",
        "command": "python -m benchmarks.reuse " + " ".join(sys.argv[1:]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "machine": machine(),
        "workloads": {name: describe_workload(available[name]) for name in args.workloads},
        "traces": {name: {"kind": TRACES[name].kind, "seed": TRACES[name].seed} for name in args.traces},
    }
    client = redis_client(args.redis_url)
    try:
        results["runs"] = run_all(dryrun_factory(client), args.workloads, args.traces, progress=progress)
    finally:
        client.close()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    progress.say(f"wrote {args.json}", force=True)


# -- report -----------------------------------------------------------------------------

PAPER_TASKS = {
    ("opmw", "seq"): "peak 471 vs 274 (−41.8 %); step 16: 233 vs 201",
    ("opmw", "rw1"): "walk: ≈ 20 dataflows (median); Default 187–364, Reuse 103–242; Reuse −38 % on average (RW1 and RW2)",
    ("opmw", "rw2"): "walk: ≈ 20 dataflows (median); Default 185–309, Reuse 90–216; Reuse −38 % on average (RW1 and RW2)",
    ("riot", "seq"): "peak 138 vs 75 (−45.7 %)",
    ("riot", "rw1"): "mean 125 ± 25 % vs 67 ± 22 % tasks (−46 %)",
    ("riot", "rw2"): "“similar values” to RW1",
}
PAPER_TASKS |= {("riot-paper", trace): text for (name, trace), text in PAPER_TASKS.items() if name == "riot"}
PAPER_TASKS |= {("opmw-hist", trace): text for (name, trace), text in PAPER_TASKS.items() if name == "opmw"}
PAPER_HISTOGRAM = {
    ("opmw", "seq"): "11 % by 2, 4 % by > 2 (15 % by > 1)",
    ("opmw", "rw1"): "14 % by > 1 (RW1 and RW2)",
    ("opmw", "rw2"): "14 % by > 1 (RW1 and RW2)",
    ("riot", "seq"): "24 % by > 1",
    ("riot", "rw1"): "8 % by ≥ 2 (RW1 and RW2)",
    ("riot", "rw2"): "8 % by ≥ 2 (RW1 and RW2)",
}
PAPER_HISTOGRAM |= {("riot-paper", trace): text for (name, trace), text in PAPER_HISTOGRAM.items() if name == "riot"}
PAPER_HISTOGRAM |= {("opmw-hist", trace): text for (name, trace), text in PAPER_HISTOGRAM.items() if name == "opmw"}
HISTOGRAM_BINS: tuple[tuple[str, int, int], ...] = (
    ("2", 2, 2), ("3", 3, 3), ("4", 4, 4), ("5", 5, 5), ("≥ 6", 6, 10**9),
)
ORDER = ("opmw", "opmw-hist", "riot", "riot-paper")


def _series(run: dict[str, Any], key: str, phase: str | None = None) -> list[float]:
    return [step[key] for step in run["steps"] if phase is None or step["phase"] == phase]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def reuse_fractions(run: dict[str, Any]) -> dict[int, float]:
    """Step-weighted fraction of running tasks used by k dataflows, for every k seen.

    Every step lasts as long as any other, so time-weighted is step-weighted:
    the sum over steps of the tasks used by k, over the sum of running tasks.

    >>> reuse_fractions({"steps": [{"running_tasks": 4, "sharing_histogram": {"1": 3, "2": 1}},
    ...                            {"running_tasks": 0, "sharing_histogram": {}}]})
    {1: 0.75, 2: 0.25}
    """
    total = sum(step["running_tasks"] for step in run["steps"])
    counts: dict[int, int] = {}
    for step in run["steps"]:
        for users, tasks in step["sharing_histogram"].items():
            counts[int(users)] = counts.get(int(users), 0) + tasks
    return {users: tasks / total for users, tasks in sorted(counts.items())}


def summarize(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (workload, trace): peak and mean running tasks and fragments per mode, reductions, reuse fractions."""
    by_key: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for run in runs:
        by_key.setdefault((run["workload"], run["trace"]), {})[run["mode"]] = run
    summary = {}
    for key, modes in by_key.items():
        walk_dataflows = sorted(_series(modes["reuse"], "running_dataflows", "walk"))
        row: dict[str, Any] = {
            "steps": len(modes["reuse"]["steps"]),
            "walk_dataflows": (walk_dataflows[len(walk_dataflows) // 2], walk_dataflows[0], walk_dataflows[-1])
            if walk_dataflows else None,
        }
        for mode, run in modes.items():
            tasks = _series(run, "running_tasks")
            walk = _series(run, "running_tasks", "walk")
            row[mode] = {
                "peak": max(tasks),
                "mean": _mean(tasks),
                "walk_mean": _mean(walk) if walk else None,
                "walk_range": (min(walk), max(walk)) if walk else None,
                "fragments_peak": max(_series(run, "fragments")),
                "fragments_mean": _mean(_series(run, "fragments")),
                "optimal_every_step": all(step["running_tasks"] == step["optimal_tasks"] for step in run["steps"]),
                "deployed_matches": all(step.get("deployed_tasks", step["running_tasks"]) == step["running_tasks"]
                                        for step in run["steps"]),
                "ends_empty": run["steps"][-1]["running_tasks"] == 0,
            }
        alone, reuse = row["alone"], row["reuse"]
        row["peak_reduction"] = 1 - reuse["peak"] / alone["peak"]
        row["mean_reduction"] = 1 - reuse["mean"] / alone["mean"]
        if alone["walk_mean"] is not None:
            row["walk_mean_reduction"] = 1 - reuse["walk_mean"] / alone["walk_mean"]
        row["fractions"] = reuse_fractions(modes["reuse"])
        summary[key] = row
    return summary


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _reduction(value: float) -> str:
    return f"−{100 * value:.1f} %" if value >= 0 else f"+{-100 * value:.1f} %"


def markdown(results: dict[str, Any]) -> str:
    """The tables of docs/reuse.md: workloads, running tasks, fragments, reuse histogram, checks."""
    summary = summarize(results["runs"])
    keys = sorted(summary, key=lambda key: (ORDER.index(key[0]), list(TRACES).index(key[1])))
    lines = [f"Dry run of {results['date']} at commit `{results['commit'][:10]}` (`{results['command']}`).", ""]
    lines += ["| workload | dataflows | tasks | tasks per dataflow | distinct when all run | distinct (type, config) |",
              "|---|---:|---:|---:|---:|---:|"]
    for name in ORDER:
        if name in results["workloads"]:
            w = results["workloads"][name]
            low, high = w["tasks_per_dataflow"]
            lines.append(f"| {name} ({w['description']}) | {w['dataflows']} | {w['tasks']} | {low}–{high} | "
                         f"{w['distinct_signatures']} | {w['distinct_abstract_tasks']} |")
    lines += ["", "Running tasks, alone (`SANA_SHARING=false`) vs reuse. Means are over every step; the walk columns "
              "cover the random walk's 100 steps only (not the fill and drain). Reduction = 1 − reuse / alone.", ""]
    lines += ["| workload | trace | steps | peak alone / reuse | peak reduction | mean alone / reuse | mean reduction "
              "| walk: dataflows running, median (range) | walk: running tasks alone; reuse | walk mean reduction | paper |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for key in keys:
        row = summary[key]
        alone, reuse = row["alone"], row["reuse"]
        walk_dataflows = walk_range = walk_reduction = "–"
        if alone["walk_range"] is not None:
            walk_dataflows = "{} ({}–{})".format(*row["walk_dataflows"])
            walk_range = (f"{alone['walk_range'][0]}–{alone['walk_range'][1]}; "
                          f"{reuse['walk_range'][0]}–{reuse['walk_range'][1]}")
            walk_reduction = _reduction(row["walk_mean_reduction"])
        lines.append(f"| {key[0]} | {key[1]} | {row['steps']} | {alone['peak']} / {reuse['peak']} | "
                     f"{_reduction(row['peak_reduction'])} | {alone['mean']:.1f} / {reuse['mean']:.1f} | "
                     f"{_reduction(row['mean_reduction'])} | {walk_dataflows} | {walk_range} | {walk_reduction} | "
                     f"{PAPER_TASKS.get(key, '')} |")
    lines += ["", "Fragments, alone vs reuse (the real runtime runs a new fragment inside a running query when it has no source of its own and reads one query; see the queries measured below).", "",
              "| workload | trace | peak alone / reuse | mean alone / reuse | mean change |", "|---|---|---:|---:|---:|"]
    for key in keys:
        alone, reuse = summary[key]["alone"], summary[key]["reuse"]
        lines.append(f"| {key[0]} | {key[1]} | {alone['fragments_peak']} / {reuse['fragments_peak']} | "
                     f"{alone['fragments_mean']:.1f} / {reuse['fragments_mean']:.1f} | "
                     f"{_reduction(1 - reuse['fragments_mean'] / alone['fragments_mean'])} |")
    lines += ["", "Reuse histogram (reuse mode): step-weighted fraction of running tasks used by k dataflows "
              "(tasks used by one dataflow omitted).", ""]
    lines += ["| workload | trace | used by > 1 | " + " | ".join(f"k = {label}" for label, _, _ in HISTOGRAM_BINS)
              + " | paper |", "|---|---|---:|" + "---:|" * len(HISTOGRAM_BINS) + "---|"]
    for key in keys:
        fractions = summary[key]["fractions"]
        bins = [sum(share for users, share in fractions.items() if low <= users <= high) for _, low, high in HISTOGRAM_BINS]
        shared = sum(share for users, share in fractions.items() if users > 1)
        lines.append(f"| {key[0]} | {key[1]} | {_pct(shared)} | " + " | ".join(_pct(value) for value in bins)
                     + f" | {PAPER_HISTOGRAM.get(key, '')} |")
    checks = [(key, mode, summary[key][mode]) for key in keys for mode in MODES]
    optimal = all(check["optimal_every_step"] for _, _, check in checks)
    deployed = all(check["deployed_matches"] for _, _, check in checks)
    empty = all(check["ends_empty"] for _, _, check in checks)
    lines += ["", f"Checks over all {len(checks)} runs: running tasks equal the optimum at every step "
              f"(distinct signatures of the running dataflows with reuse, the sum of their tasks alone): "
              f"**{'yes' if optimal else 'no'}**; the dry-run runtime's deployed tasks equal the manager's running tasks "
              f"at every step: **{'yes' if deployed else 'no'}**; every run ends with no running task: "
              f"**{'yes' if empty else 'no'}**.", "",
              "![running tasks per step](img/reuse_tasks.png)", "", "![reuse histogram](img/reuse_histogram.png)"]
    return "\n".join(lines)


def plot(results: dict[str, Any], images: Path) -> list[Path]:
    """Fig. 2-like running tasks per step and Fig. 4-like reuse histograms, workloads x traces."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize(results["runs"])
    runs = {(run["workload"], run["trace"], run["mode"]): run for run in results["runs"]}
    names = [name for name in ORDER if any(key[0] == name for key in summary)]
    trace_names = [name for name in TRACES if any(key[1] == name for key in summary)]
    images.mkdir(parents=True, exist_ok=True)
    colours = {"alone": "tab:blue", "reuse": "tab:red"}
    labels = {"alone": "alone (SANA_SHARING=false)", "reuse": "reuse"}

    figure, axes = plt.subplots(len(names), len(trace_names), figsize=(4.6 * len(trace_names), 3.4 * len(names)),
                                squeeze=False)
    for row, name in enumerate(names):
        for column, trace_name in enumerate(trace_names):
            axis = axes[row][column]
            for mode in MODES:
                run = runs.get((name, trace_name, mode))
                if run is None:
                    continue
                axis.plot(_series(run, "step"), _series(run, "running_tasks"), color=colours[mode], label=labels[mode])
                walk = _series(run, "step", "walk")
                if walk and mode == "reuse":
                    axis.axvspan(walk[0] - 0.5, walk[-1] + 0.5, color="grey", alpha=0.12, label="random walk")
            reduction = summary[(name, trace_name)]["mean_reduction"]
            axis.set_title(f"{name.upper()}, {trace_name.upper()}: mean {_reduction(reduction)}", fontsize=10)
            axis.set_xlabel("step")
            axis.set_ylabel("running tasks")
            axis.set_ylim(bottom=0)
            axis.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle("Running tasks per step, Sana manager with the dry-run runtime (paper Fig. 2)", fontsize=11)
    figure.tight_layout()
    tasks_path = images / "reuse_tasks.png"
    figure.savefig(tasks_path, dpi=110)
    plt.close(figure)

    figure, axes = plt.subplots(len(names), len(trace_names), figsize=(4.2 * len(trace_names), 3.2 * len(names)),
                                squeeze=False, sharey=True)
    for row, name in enumerate(names):
        for column, trace_name in enumerate(trace_names):
            axis = axes[row][column]
            fractions = summary[(name, trace_name)]["fractions"]
            bins = [sum(share for users, share in fractions.items() if low <= users <= high) for _, low, high in HISTOGRAM_BINS]
            shared = sum(share for users, share in fractions.items() if users > 1)
            positions = range(len(HISTOGRAM_BINS))
            axis.bar(positions, [100 * value for value in bins], color="tab:red")
            axis.set_xticks(list(positions), [label for label, _, _ in HISTOGRAM_BINS])
            for position, value in zip(positions, bins):
                axis.annotate(f"{100 * value:.1f}", (position, 100 * value), ha="center", va="bottom", fontsize=8)
            axis.set_title(f"{name.upper()}, {trace_name.upper()}: {_pct(shared)} used by > 1", fontsize=10)
            axis.set_xlabel("dataflows using the task (k)")
            axis.grid(True, axis="y", alpha=0.3)
            axis.margins(y=0.15)
        axes[row][0].set_ylabel("% of running tasks (step-weighted)")
    figure.suptitle("Reuse histogram: tasks used by one dataflow omitted (paper Fig. 4)", fontsize=11)
    figure.tight_layout()
    histogram_path = images / "reuse_histogram.png"
    figure.savefig(histogram_path, dpi=110)
    plt.close(figure)
    return [tasks_path, histogram_path]


def report(args: argparse.Namespace) -> None:
    results = json.loads(args.json.read_text())
    text = markdown(results)
    print(text)
    for path in plot(results, args.images):
        print(f"plot: {path}", file=sys.stderr)
    if args.write_docs:
        doc = args.doc.read_text()
        begin, end = doc.index(MARKERS[0]) + len(MARKERS[0]), doc.index(MARKERS[1])
        args.doc.write_text(doc[:begin] + "\n" + text + "\n" + doc[end:])
        print(f"wrote the tables into {args.doc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    runner = sub.add_parser("dryrun", help="run every trace through the manager with the dry-run runtime")
    runner.add_argument("--workloads", nargs="+", default=list(ORDER), choices=list(ORDER))
    runner.add_argument("--traces", nargs="+", default=list(TRACES), choices=list(TRACES))
    runner.add_argument("--redis-url", default=REDIS_URL)
    runner.add_argument("--json", type=Path, default=DRYRUN_JSON)
    reporter = sub.add_parser("report", help="tables and plots from the dry-run results")
    reporter.add_argument("--json", type=Path, default=DRYRUN_JSON)
    reporter.add_argument("--images", type=Path, default=IMAGES)
    reporter.add_argument("--doc", type=Path, default=DOC)
    reporter.add_argument("--write-docs", action="store_true", help="also replace the tables in docs/reuse.md")
    args = parser.parse_args(argv)
    dryrun(args) if args.command == "dryrun" else report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
