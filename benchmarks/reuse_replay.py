"""Replay a reuse trace on the real service up to one step, then watch its CPU settle.

Run:  .venv/bin/python -m benchmarks.reuse_replay --mode reuse --upto 51   # ~6 min
      .venv/bin/python -m benchmarks.reuse_replay --mode alone --upto 51
      .venv/bin/python -m benchmarks.reuse_replay --mode reuse --upto 51 --fresh

The steps of ``benchmarks.reuse_real`` (same workload, trace, seed, walk and
defragmentation) run back to back with no measurement, up to ``--upto``;
``--fresh`` instead submits only the dataflows still running at that step, to
a new service. Then the CPU of the service's process tree is sampled in
``--window`` second windows for ``--watch`` seconds after the last change, per
kind of thread (program and thread name), with the Spark JVM's class loading
and JIT compilation over each window (``jstat``: classes loaded and
unloaded, methods compiled, compile seconds). The result goes to
``benchmarks/results/reuse-replay-MODE[-fresh]-UPTO[-LABEL].json`` and a
summary to standard output. docs/reuse.md ("The drain", "Code generated
every batch") reads these runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.reuse import TRACES, workloads
from benchmarks.reuse_real import RealService, records_for, with_defrag
from runtime import costs


def process_tree(root: int) -> dict[int, str]:
    """``root`` and its descendants: pid -> the start of its command line."""
    commands = {}
    for pid in costs.process_tree(root):
        try:
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
        except OSError:
            continue
    return commands


def thread_cpu(pids: dict[int, str]) -> dict[tuple[int, str, str], float]:
    """(pid, tid, thread name) -> CPU seconds, for every thread of ``pids``."""
    result = {}
    for pid in pids:
        for tid, used_s in costs.thread_cpu_s(pid).items():
            try:  # the name is not CPU: psutil does not read it
                name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            except OSError:
                continue
            result[(pid, str(tid), name)] = used_s
    return result


#: Thread names of the JVM's just-in-time compilers (C1, C2) as /proc shows them.
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def jit_cpu_s(root: int) -> float:
    """CPU seconds the Spark JVM under ``root`` has spent compiling so far (its :data:`JIT_THREADS`; 0 without one)."""
    pids = process_tree(root)
    jvm = jvm_pid(pids)
    if jvm is None:
        return 0.0
    return sum(used for (_, _, name), used in thread_cpu({jvm: pids[jvm]}).items() if name.startswith(JIT_THREADS))


def settle_jit(root: int, quiet_cores: float, window_s: float = 20.0, max_s: float = 900.0, label: str = "") -> float:
    """Wait until the JVMs under ``root`` compile with under ``quiet_cores`` over ``window_s`` (at most ``max_s``);
    the seconds waited.

    A fresh Spark JVM's JIT compiles Spark's planner and the queries' generated code for minutes: a core or more in
    the first minute (the JVM of six windows: 62 CPU-s of compiling in its first 100 s), a tenth of a core five
    minutes on. A measurement that starts 30 s after the last submit measures mostly that, not the queries' steady
    cost (docs/containment.md, "Reading the real-runtime numbers")."""
    began = time.monotonic()
    before = jit_cpu_s(root)
    while time.monotonic() - began < max_s:
        time.sleep(window_s)
        now = jit_cpu_s(root)
        cores = (now - before) / window_s
        print(f"{label}: JIT {cores:.3f} cores after {time.monotonic() - began:.0f} s (waiting for < {quiet_cores})",
              file=sys.stderr, flush=True)
        if cores < quiet_cores:
            break
        before = now
    return time.monotonic() - began


def program_name(pids: dict[int, str], pid: int) -> str:
    """The program ``pid`` runs, by the file name of its command (``(exited)`` when gone).

    >>> program_name({7: "/usr/bin/java -cp x"}, 7), program_name({}, 8)
    ('java', '(exited)')
    """
    return (pids.get(pid, "").split() or ["(exited)"])[0].rsplit("/", 1)[-1]


def _per_thread(pids: dict[int, str], before: dict[tuple[int, str, str], float], after: dict[tuple[int, str, str], float],
                seconds: float) -> dict[str, float]:
    """Cores per kind of thread (program: thread name) between two ``thread_cpu`` readings."""
    used: dict[str, float] = {}
    for (pid, tid, name), used_s in after.items():
        kind = f"{program_name(pids, pid)}: {name}"
        used[kind] = round(used.get(kind, 0.0) + (used_s - before.get((pid, tid, name), 0.0)) / seconds, 4)
    return used


def jvm_pid(pids: dict[int, str]) -> int | None:
    """The Spark JVM among ``pids`` (the one running ``java``)."""
    return next((pid for pid, command in sorted(pids.items()) if command.split()[:1] and
                 command.split()[0].endswith("java")), None)


# jstat -gc columns read: young, full and concurrent collections and their pause seconds.
GC_COLUMNS = {"YGC": "gc_young", "YGCT": "gc_young_s", "FGC": "gc_full", "FGCT": "gc_full_s", "CGC": "gc_concurrent",
              "CGCT": "gc_concurrent_s"}


def gc_counters(printed: str) -> dict[str, float]:
    """The collections counted so far in ``jstat -gc``'s output, by its header's names.

    >>> gc_counters("  EC    YGC  YGCT   FGC FGCT  CGC  CGCT   GCT\\n 1.0   60  0.472    0 0.000   40 0.260  0.733\\n")
    {'gc_young': 60.0, 'gc_young_s': 0.472, 'gc_full': 0.0, 'gc_full_s': 0.0, 'gc_concurrent': 40.0, 'gc_concurrent_s': 0.26}
    """
    lines = printed.split("\n")
    if len(lines) < 2:
        return {}
    row = dict(zip(lines[0].split(), lines[1].split()))
    return {name: float(row[column]) for column, name in GC_COLUMNS.items() if column in row}


def jvm_counters(pid: int | None) -> dict[str, float]:
    """Classes loaded and unloaded, methods JIT-compiled and seconds spent compiling, collections, so far (``jstat``)."""
    if pid is None:
        return {}

    def printed(option: str) -> str:
        done = subprocess.run(["jstat", option, str(pid)], capture_output=True, text=True, timeout=30)
        return done.stdout if done.returncode == 0 else ""

    def last_row(option: str) -> list[str]:
        lines = printed(option).split("\n")
        return lines[1].split() if len(lines) > 1 else []

    classes, compiler = last_row("-class"), last_row("-compiler")
    result: dict[str, float] = {}
    if len(classes) >= 4:
        result.update(classes_loaded=float(classes[0]), classes_unloaded=float(classes[2]))
    if len(compiler) >= 4:
        result.update(jit_compiled=float(compiler[0]), jit_seconds=float(compiler[3]))
    result.update(gc_counters(printed("-gc")))
    return result


def _spark_defaults() -> str | None:
    """The spark-defaults.conf the service's Spark reads (``SPARK_CONF_DIR``), if there is one: a run's settings."""
    from runtime.spark.session import defaults_file

    try:
        return defaults_file().read_text()
    except OSError:
        return None


def steps_to(workload_name: str, trace: str, walk_steps: int, defrag_every: int, upto: int,
             fresh: bool) -> list[tuple[str, int]]:
    workload = workloads()[workload_name]
    spec = replace(TRACES[trace], walk_steps=walk_steps)
    steps = with_defrag(spec.steps(workload), defrag_every)[:upto]
    if not fresh:
        return steps
    alive: list[int] = []
    for action, index in steps:
        if action == "add":
            alive.append(index)
        elif action == "remove":
            alive.remove(index)
    return [("add", index) for index in alive]


def replay(service: RealService, documents: list[dict[str, Any]], steps: list[tuple[str, int]],
           name: str, every: int = 10) -> dict[int, str]:
    """Run ``steps`` (add, remove, defrag) against ``service``; returns the running dataflows: index -> id."""
    running: dict[int, str] = {}
    began = time.monotonic()
    for number, (action, index) in enumerate(steps, 1):
        if action == "add":
            running[index] = service.submit(documents[index])
        elif action == "remove":
            service.remove(running.pop(index))
        else:
            service.defragment()
        if number % every == 0 or number == len(steps):
            print(f"{name}: step {number}/{len(steps)} ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    return running


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["reuse", "alone"], required=True)
    parser.add_argument("--upto", type=int, required=True, help="replay steps 1..UPTO")
    parser.add_argument("--fresh", action="store_true", help="submit only what runs at step UPTO, to a new service")
    parser.add_argument("--workload", default="riot-paper")
    parser.add_argument("--trace", default="rw2")
    parser.add_argument("--walk-steps", type=int, default=20)
    parser.add_argument("--defrag-every", type=int, default=5)
    parser.add_argument("--trigger", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--watch", type=float, default=200.0)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/sana-reuse-replay"))
    parser.add_argument("--label", default="", help="appended to the results file's name (e.g. a commit)")
    args = parser.parse_args(argv)
    steps = steps_to(args.workload, args.trace, args.walk_steps, args.defrag_every, args.upto, args.fresh)
    documents = workloads()[args.workload].documents
    run_dir = args.run_dir / args.mode
    shutil.rmtree(run_dir, ignore_errors=True)
    service = RealService(run_dir, sharing=args.mode == "reuse", redis_url=args.redis_url,
                          records=records_for(args.workload), settle_s=0, measure_s=0, trigger_s=args.trigger, keyed_workers=2)
    result: dict[str, Any] = {"args": {key: str(value) for key, value in vars(args).items()}, "steps": steps,
                              "spark_defaults": _spark_defaults()}
    try:
        replay(service, documents, steps, f"replay {args.mode}")
        series: list[float] = []
        by_thread: list[dict[str, float]] = []
        jvm: list[dict[str, float]] = []
        pids = process_tree(service.process.pid)
        tree_cpu = costs.ProcessTreeCpu(service.process.pid)
        threads_before, last = thread_cpu(pids), tree_cpu()
        jvm_before = jvm_counters(jvm_pid(pids))
        for number in range(int(args.watch // args.window)):
            time.sleep(args.window)
            pids = process_tree(service.process.pid)
            threads_after, now = thread_cpu(pids), tree_cpu()
            by_thread.append(_per_thread(pids, threads_before, threads_after, args.window))
            jvm_after = jvm_counters(jvm_pid(pids))
            jvm.append({key: round((value - jvm_before[key]) / args.window, 3) for key, value in jvm_after.items()
                        if key in jvm_before})  # per second
            jvm_before = jvm_after
            series.append(round((now - last) / args.window, 3))  # with exited threads and reaped children
            threads_before, last = threads_after, now
            print(f"replay {args.mode}: {(number + 1) * args.window:.0f} s after the last change: "
                  f"{series[-1]:.3f} cores, per s: {jvm[-1]}", file=sys.stderr, flush=True)
        stats = service.client.get("/stats").raise_for_status().json()
        result.update(cores_by_window=series, window_s=args.window, jvm_per_s_by_window=jvm,
                      by_thread=[dict(sorted(window.items(), key=lambda item: -item[1])[:15]) for window in by_thread],
                      running_tasks=stats["running_tasks"], fragments=stats["fragments"],
                      queries=len(service.client.get("/runtime/queries").raise_for_status().json()["queries"]))
    finally:
        service.close()
    out = Path(f"benchmarks/results/reuse-replay-{args.mode}{'-fresh' if args.fresh else ''}-{args.upto}"
               f"{'-' + args.label if args.label else ''}.json")
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({key: result[key] for key in ("cores_by_window", "jvm_per_s_by_window", "running_tasks",
                                                   "fragments", "queries")}))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
