"""Full garbage collections of the manager while the running set grows: CPython's collector, and with what survives
each full collection frozen (``api/collector.py``, the server's default).

Each mode runs in a process of its own: the manager in process (``DryRunRuntime``, real Redis) filled with
RIoTBench-style dataflows up to ``--dataflows``, then ``--churn`` submit+remove pairs. Reported per mode: the full
collections, their longest and total pause, submit latency over the fill (p99, p99.9, max: the pauses land on
submits), and for the freezing mode the unreachable objects freezing had kept alive (found by unfreezing and
collecting everything once at the end: the leak it costs).

    .venv/bin/python -m benchmarks.gc_pauses --dataflows 30000        # about 4 minutes
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.control_path import GcPauses, rss_mib
from benchmarks.measure import Progress, machine, summary
from benchmarks.riot import riot_dataflow
from benchmarks.targets import InProcessTarget, delete_prefix

RESULTS = Path("benchmarks/results")
MODES = ("cpython", "freeze")


def child(mode: str, dataflows: int, churn: int, redis_url: str) -> dict[str, Any]:
    """One mode, in this process: fill, churn, report (progress on stderr, the result on stdout)."""
    import gc

    from api.collector import FreezeSurvivors

    progress = Progress(out=sys.stderr)
    prefix = f"gc-pauses-{uuid.uuid4().hex[:10]}"
    policy = FreezeSurvivors().install() if mode == "freeze" else None
    target = InProcessTarget(redis_url, prefix)
    fill_ms: list[float] = []
    churn_ms: list[float] = []
    try:
        with GcPauses() as pauses:
            started = time.monotonic()
            for number in range(dataflows):
                document = riot_dataflow(number)
                fill_ms.append(target.submit(document, b"").ms)
                progress.say(f"[{mode}] {number + 1:,}/{dataflows:,} dataflows, full collections so far "
                             f"{len(pauses.full_ms)}, longest {max(pauses.full_ms, default=0):.0f} ms")
            fill_s = time.monotonic() - started
            fill_pauses = list(pauses.full_ms)
            for number in range(churn):
                submitted = target.submit(riot_dataflow(10**7 + number), b"")
                churn_ms.append(submitted.ms + target.remove(submitted.id)[0])
        rss = rss_mib()
        leaked = None
        if policy is not None:
            gc.collect()        # what is garbage and not frozen; the survivors are frozen
            policy.uninstall()  # unfreezes: the collection below finds what freezing kept
            leaked = gc.collect()
        return {
            "mode": mode,
            "dataflows": dataflows,
            "fill_seconds": round(fill_s, 1),
            "full_collections": len(fill_pauses),
            "longest_full_ms": round(max(fill_pauses, default=0.0), 1),
            "total_full_ms": round(sum(fill_pauses), 1),
            "full_ms": [round(value, 2) for value in fill_pauses],
            "fill_submit_ms": {**summary(fill_ms), "p999": round(sorted(fill_ms)[int(len(fill_ms) * 0.999)], 3)},
            "churn_pair_ms": summary(churn_ms),
            "churn_full_collections": len(pauses.full_ms) - len(fill_pauses),
            "rss_mib": rss,
            "frozen_cycles_found": leaked,
        }
    finally:
        target.close()
        delete_prefix(target.client, prefix)


def table(runs: list[dict[str, Any]]) -> str:
    lines = ["| collector | full collections | longest pause | all pauses | submit p99 / p99.9 / max over the fill | "
             "fill | unreachable objects freezing kept |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for run in runs:
        submit = run["fill_submit_ms"]
        kept = "" if run["frozen_cycles_found"] is None else f"{run['frozen_cycles_found']:,}"
        lines.append(f"| {run['mode']} | {run['full_collections']} | {run['longest_full_ms']:,.0f} ms | "
                     f"{run['total_full_ms']:,.0f} ms | {submit['p99']:.2f} / {submit['p999']:.2f} / {submit['max']:,.1f} ms | "
                     f"{run['fill_seconds']:.0f} s | {kept} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataflows", type=int, default=30_000)
    parser.add_argument("--churn", type=int, default=500, help="submit+remove pairs after the fill")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", type=Path, default=RESULTS / "gc-pauses.json")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.dataflows, args.churn, args.redis_url)))
        return 0
    runs = []
    for mode in MODES:
        command = [sys.executable, "-m", "benchmarks.gc_pauses", "--child", mode, "--dataflows", str(args.dataflows),
                   "--churn", str(args.churn), "--redis-url", args.redis_url]
        finished = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        runs.append(json.loads(finished.stdout.strip().splitlines()[-1]))
    result = {"command": "python -m benchmarks.gc_pauses " + " ".join(sys.argv[1:] if argv is None else argv),
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(runs))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
