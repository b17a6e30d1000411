"""How much a random walk saves depends on how many dataflows it keeps running: many seeds, not two.

The dry-run benchmark (``benchmarks.reuse dryrun``) shows the manager running
exactly the optimum at every step of every trace: with reuse, the distinct
signatures of the running dataflows; alone, the sum of their tasks. A walk's
saving is therefore fixed by the workload and by which dataflows the walk
keeps running, and RW1 and RW2 (seeds 1 and 2) run fewer than the paper's
walks did (medians 16 and 11 OPMW dataflows, against about 20).

This script computes the walk's mean reduction in running tasks for many
seeds from those two counts. It spends no time on the service, since it
computes what the dry run measures. With ``--check N`` it also runs the first
N seeds through the manager on the dry-run runtime (Redis) and checks that
the counts agree at every step. It groups seeds by the walk's median number of
running dataflows, so ours can be read where the paper's walks were.

    python -m benchmarks.reuse_walks [--seeds 500] [--check 3] [--write-docs]

Writes ``benchmarks/results/reuse-walks.json`` and, with ``--write-docs``, the
table in docs/reuse.md (between its ``reuse walks`` markers) and
``docs/img/reuse_walks.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.measure import Progress
from benchmarks.reuse import DOC, IMAGES, REDIS_URL, TraceSpec, Workload, dryrun_factory, optimum, run_trace, workloads
from benchmarks.targets import redis_client
from manager.validate import parse_dataflow

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "reuse-walks.json"
MARKERS = ("<!-- reuse walks: begin -->", "<!-- reuse walks: end -->")
#: The paper's OPMW walks: about 20 dataflows running (median), -38 % running tasks on average (RW1 and RW2).
PAPER_OPMW = (20, -0.38)


def signature_sets(workload: Workload) -> list[frozenset[str]]:
    return [frozenset(parse_dataflow(document).signatures.values()) for document in workload.documents]


def walk(workload: Workload, seed: int, signatures: list[frozenset[str]]) -> dict[str, Any]:
    """One random walk (the benchmark's RW shape, this seed): per walk step the running dataflows and tasks."""
    spec = TraceSpec("rw", "random_walk", seed=seed)
    steps, phases = spec.steps(workload), spec.phases(workload)
    running: set[int] = set()
    counts = []
    for (action, index), phase in zip(steps, phases, strict=True):
        (running.add if action == "add" else running.discard)(index)
        if phase == "walk":
            chosen = [signatures[i] for i in running]
            counts.append((len(running), optimum(chosen, False), optimum(chosen, True)))
    alone = sum(count[1] for count in counts)
    return {
        "seed": seed,
        "median_dataflows": statistics.median_low(count[0] for count in counts),
        "mean_alone": alone / len(counts),
        "mean_reuse": sum(count[2] for count in counts) / len(counts),
        "reduction": 1 - sum(count[2] for count in counts) / alone if alone else 0.0,
        "steps": [list(count) for count in counts],
    }


def check(workload: Workload, seeds: range, progress: Progress) -> int:
    """Run these seeds through the manager (dry-run runtime, real Redis); returns the steps compared."""
    factory = dryrun_factory(redis_client(REDIS_URL))
    signatures = signature_sets(workload)
    compared = 0
    for seed in seeds:
        expected = walk(workload, seed, signatures)["steps"]
        spec = TraceSpec("rw", "random_walk", seed=seed)
        steps, phases = spec.steps(workload), spec.phases(workload)
        for sharing in (False, True):
            target = factory(workload, sharing)
            try:
                records = run_trace(target, workload.documents, steps, phases, sharing)
            finally:
                target.close()
            measured = [record["running_tasks"] for record in records if record["phase"] == "walk"]
            wanted = [step[2 if sharing else 1] for step in expected]
            if measured != wanted:
                raise SystemExit(f"{workload.name} seed {seed} ({'reuse' if sharing else 'alone'}): the service ran "
                                 f"{measured[:5]}... tasks, the optimum is {wanted[:5]}...")
            compared += len(measured)
        progress.say(f"check: {workload.name} seed {seed}: the service runs the optimum at every walk step", force=True)
    return compared


def grouped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seeds grouped by the walk's median running dataflows: count, and the reduction's median and range."""
    groups: dict[int, list[float]] = {}
    for row in rows:
        groups.setdefault(row["median_dataflows"], []).append(row["reduction"])
    return [{"median_dataflows": key, "seeds": len(values), "reduction_median": statistics.median(values),
             "reduction_min": min(values), "reduction_max": max(values)} for key, values in sorted(groups.items())]


def markdown(results: dict[str, Any]) -> str:
    lines = [f"{results['seeds']} walks per workload (seeds 1-{results['seeds']}), each: fill, 100 random steps, drain; "
             "reduction = 1 - mean running tasks with reuse / alone over the walk's 100 steps. "
             f"The manager's counts were checked against these for {results['checked_steps']} walk steps "
             f"(`--check`).", ""]
    lines += ["| workload | median dataflows running (walk) | seeds | reduction: median | range |", "|---|---:|---:|---:|---|"]
    for name, data in results["workloads"].items():
        for group in data["groups"]:
            if group["seeds"] < 10:
                continue
            lines.append(f"| {name} | {group['median_dataflows']} | {group['seeds']} | {-100 * group['reduction_median']:.1f} % | "
                         f"{-100 * group['reduction_max']:.1f} to {-100 * group['reduction_min']:.1f} % |")
    lines += ["", "Groups of fewer than 10 seeds are left out of the table (they are in the JSON and the plot). "
              f"The paper's OPMW walks ran about {PAPER_OPMW[0]} dataflows and saved {-100 * PAPER_OPMW[1]:.0f} %."]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.2))
    for name, data in results["workloads"].items():
        xs = [row["median_dataflows"] for row in data["walks"]]
        ys = [-100 * row["reduction"] for row in data["walks"]]
        axis.scatter(xs, ys, s=9, alpha=0.45, label=name)
    axis.scatter([PAPER_OPMW[0]], [100 * PAPER_OPMW[1]], marker="*", s=180, color="black", label="paper, OPMW walks")
    axis.set_xlabel("dataflows running during the walk (median)")
    axis.set_ylabel("running tasks, reuse vs alone (%)")
    axis.set_title("Random walks: the saving grows with the dataflows running")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_docs(results: dict[str, Any]) -> None:
    text = DOC.read_text()
    begin, end = MARKERS
    if begin not in text or end not in text:
        raise SystemExit(f"{DOC} has no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    DOC.write_text(f"{head}{begin}\n{markdown(results)}\n{end}{tail}")
    plot(results, IMAGES / "reuse_walks.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--check", type=int, default=3, help="seeds to run through the manager as well (0: none)")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    progress = Progress()
    results: dict[str, Any] = {"seeds": args.seeds, "workloads": {}, "checked_steps": 0}
    for name, workload in workloads().items():
        rows = []
        signatures = signature_sets(workload)
        for seed in range(1, args.seeds + 1):
            rows.append(walk(workload, seed, signatures))
            progress.say(f"{name}: {seed}/{args.seeds} walks")
        for row in rows:
            del row["steps"]
        results["workloads"][name] = {"walks": rows, "groups": grouped(rows)}
        if args.check:
            results["checked_steps"] += check(workload, range(1, args.check + 1), progress)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    if args.write_docs:
        write_docs(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
