"""Plot end-to-end latency and CPU by input rate from benchmarks/results/runtime_dataplane.json.

Run:  .venv/bin/python -m benchmarks.dataplane_report     # needs the ``bench`` extra (matplotlib)

Reads the ``latency`` and ``ceiling`` parts (``python -m benchmarks.runtime_dataplane latency ceiling``)
and writes docs/img/dataplane_latency.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path("benchmarks/results/runtime_dataplane.json")
OUT = Path("docs/img/dataplane_latency.png")


def points(results: dict) -> list[dict]:
    """Every measured rate of the latency and ceiling parts, by rate (the later run wins for a rate in both)."""
    runs: dict[float, dict] = {}
    for rate, run in results.get("latency", {}).items():
        if isinstance(run, dict) and "rate_offered" in run:
            runs[run["rate_offered"]] = run
    for run in results.get("ceiling", {}).get("runs", {}).values():
        runs[run["rate_offered"]] = run
    return [runs[rate] for rate in sorted(runs)]


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = json.loads(RESULTS.read_text())
    runs = points(results)
    if not runs:
        raise SystemExit(f"no latency or ceiling runs in {RESULTS}")
    rates = [run["rate_offered"] / 1000 for run in runs]
    figure, (latency, cores) = plt.subplots(1, 2, figsize=(10, 3.6))
    latency.plot(rates, [run["e2e_ms_p50"] for run in runs], "o-", label="p50")
    latency.plot(rates, [run["e2e_ms_p99"] for run in runs], "s--", label="p99")
    for run, rate in zip(runs, rates):
        if not run["sustained"]:
            latency.annotate("falls behind", (rate, run["e2e_ms_p99"]), textcoords="offset points", xytext=(-60, 0))
    latency.set_xlabel("input, thousand records/s")
    latency.set_ylabel("end-to-end latency, ms")
    latency.set_title(f"source -> filter -> select -> sink, trigger {results['latency'].get('trigger_s', 1):g} s")
    latency.legend()
    latency.grid(alpha=0.3)
    cores.plot(rates, [run["cores"] for run in runs], "o-", color="tab:green")
    cores.set_xlabel("input, thousand records/s")
    cores.set_ylabel("cores (whole process tree)")
    cores.set_title("CPU, 2-core machine")
    cores.set_ylim(0, 2)
    cores.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
