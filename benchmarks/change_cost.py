"""What one change costs the running work it does not touch, on the OPMW peak.

Run:  .venv/bin/python -m benchmarks.change_cost --settle 300 --window 180 --label opmw-35-after   # ~20 min
      .venv/bin/python -m benchmarks.change_cost --settle 300 --window 180 --label opmw-35-before \\
          --spark-conf spark.sql.codegen.useIdInClassName=true                  # Spark's default

The steps of a reuse trace (``benchmarks.reuse``'s workloads and traces,
defragmentation as in ``benchmarks.reuse_real``; by default the 35 OPMW
workflows in SEQ order, the peak) are replayed with sharing on against
``sana up`` on Spark (``local[2]``, trigger ``--trigger`` s, 10 records/s per
source); the service then runs ``--settle`` seconds so that the JVM's
compilers quiet down. Three windows of ``--window`` seconds follow: a control
window with no change, the window after one running dataflow is removed (the
one whose own tasks share a query with the most other tasks), and the window
after it is submitted again. Per window: the cores of the service's process tree, the
Spark JVM's classes loaded (every class Spark's code generator compiles is
one) and methods JIT-compiled (``jstat``), the CPU of the JIT compiler
threads, and, per running query, its micro-batch durations. A change's cost
is the window's core-seconds above the control window's; which queries the
change modified is read from ``GET /runtime/queries`` before and after.

``--spark-conf KEY=VALUE`` (repeatable) writes a ``spark-defaults.conf`` for
the service (properties there win over Sana's defaults), so the same commit
measures a setting both ways. Results go to
``benchmarks/results/change-cost-LABEL.json``; docs/runtime.md ("What a
change costs the rest") reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.reuse import workloads
from benchmarks.reuse_real import RealService, records_for
from benchmarks.reuse_replay import (JIT_THREADS, jvm_counters, jvm_pid, process_tree, program_name, replay, steps_to,
                                    thread_cpu)
from runtime import costs

def _queries(service: RealService) -> dict[str, dict[str, Any]]:
    listed = service.client.get("/runtime/queries").raise_for_status().json()["queries"]
    return {query["query"]: query for query in listed}


def pick_hosted(service: RealService, running: dict[int, str]) -> int:
    """The running dataflow whose own tasks share a query with the most other tasks (the latest submitted on ties).

    Removing it changes that query's plan and nothing else's; a dataflow whose
    own tasks run in a query of their own would touch nobody.
    """
    used: dict[str, int] = {}
    own_tasks = {}
    for index, dataflow_id in running.items():
        tasks = set(service.client.get(f"/dataflows/{dataflow_id}").raise_for_status().json()["tasks"].values())
        own_tasks[index] = tasks
        for task in tasks:
            used[task] = used.get(task, 0) + 1
    queries = _queries(service)
    hosts = {task: query for query, listed in queries.items() for task in listed["tasks"]}
    best, best_others = list(running)[-1], -1
    for index in running:  # in submit order: a later one wins a tie
        own = {task for task in own_tasks[index] if used[task] == 1}
        # tasks of no concern to this dataflow in the queries its own tasks run in
        others = max((len(set(queries[hosts[task]]["tasks"]) - own_tasks[index]) for task in own if task in hosts),
                     default=-1)
        if others >= best_others:
            best, best_others = index, others
    return best


def modified(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Queries a change started, stopped or changed the plan of: query -> what happened.

    >>> modified({"q1": {"tasks": ["a"], "outputs": []}, "q2": {"tasks": ["b"], "outputs": []}},
    ...          {"q1": {"tasks": ["a", "c"], "outputs": []}, "q3": {"tasks": ["d"], "outputs": []}})
    {'q1': 'plan changed', 'q2': 'stopped', 'q3': 'started'}
    """
    result = {}
    for query in sorted(set(before) | set(after)):
        if query not in after:
            result[query] = "stopped"
        elif query not in before:
            result[query] = "started"
        elif (before[query]["tasks"], before[query]["outputs"]) != (after[query]["tasks"], after[query]["outputs"]):
            result[query] = "plan changed"
    return result


class Window:
    """One measurement window: the process tree's CPU, the JVM's counters, JIT threads, batch durations."""

    def __init__(self, service: RealService) -> None:
        self.service = service
        self.pids = process_tree(service.process.pid)
        self.tree = costs.ProcessTreeCpu(service.process.pid)
        self.began = time.monotonic()
        self.wall_began = time.time()
        self.cpu = self.tree()
        self.threads = thread_cpu(self.pids)
        self.jvm = jvm_counters(jvm_pid(self.pids))

    def close(self, name: str) -> dict[str, Any]:
        seconds = time.monotonic() - self.began
        used = self.tree() - self.cpu
        pids = process_tree(self.service.process.pid)
        threads, jvm = thread_cpu(pids), jvm_counters(jvm_pid(pids))
        jit_s = sum(value - self.threads.get(key, 0.0) for key, value in threads.items()
                    if key[2].startswith(JIT_THREADS))
        by_program: dict[str, float] = {}
        for key, value in threads.items():
            program = program_name(pids, key[0])
            by_program[program] = by_program.get(program, 0.0) + value - self.threads.get(key, 0.0)
        batches = {}
        for query, listed in _queries(self.service).items():
            durations = [round(batch["duration_ms"]) for batch in listed["recent_batches"]
                         if batch["at"] >= self.wall_began]
            batches[query] = {"tasks": len(listed["tasks"]), "durations_ms": durations}
        return {"window": name, "seconds": round(seconds, 1), "core_seconds": round(used, 2),
                "cores": round(used / seconds, 3), "jit_core_seconds": round(jit_s, 2),
                "core_seconds_by_program": {program: round(value, 2) for program, value in sorted(by_program.items())},
                "classes_loaded": jvm.get("classes_loaded", 0.0) - self.jvm.get("classes_loaded", 0.0),
                "methods_jit_compiled": jvm.get("jit_compiled", 0.0) - self.jvm.get("jit_compiled", 0.0),
                "batches": batches}


def watch(service: RealService, name: str, seconds: float, step_s: float = 30.0) -> dict[str, Any]:
    window = Window(service)
    deadline = window.began + seconds
    last_at, last_cpu = window.began, window.cpu
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(step_s, left))
        now, cpu = time.monotonic(), window.tree()
        print(f"change cost: {name}: {now - window.began:.0f}/{seconds:.0f} s, {(cpu - last_cpu) / (now - last_at):.2f} cores",
              file=sys.stderr, flush=True)
        last_at, last_cpu = now, cpu
    return window.close(name)


def spark_conf_dir(pairs: list[str]) -> str | None:
    """A directory with a spark-defaults.conf holding ``KEY=VALUE`` pairs, or None without any."""
    if not pairs:
        return None
    folder = tempfile.mkdtemp(prefix="sana-change-cost-conf-")
    lines = []
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not key or not value:
            raise SystemExit(f"--spark-conf {pair!r}: expected KEY=VALUE")
        lines.append(f"{key} {value}\n")
    Path(folder, "spark-defaults.conf").write_text("".join(lines))
    return folder


def excess(window: dict[str, Any], control: dict[str, Any]) -> dict[str, float]:
    """What ``window`` used above the control window, scaled to the same length; ``spark_core_seconds`` is the
    Spark JVM's (the queries' plans, code and executors; the broker, its object store and the benchmark's
    producers left out)."""
    scale = window["seconds"] / control["seconds"]
    result = {key: round(window[key] - control[key] * scale, 2)
              for key in ("core_seconds", "jit_core_seconds", "classes_loaded", "methods_jit_compiled")}
    java = window["core_seconds_by_program"].get("java", 0.0)
    result["spark_core_seconds"] = round(java - control["core_seconds_by_program"].get("java", 0.0) * scale, 2)
    return result


def summary(result: dict[str, Any]) -> str:
    control, rows = result["windows"][0], []
    for window in result["windows"]:
        extra = excess(window, control)
        rows.append(f"| {window['window']} | {window['cores']:.3f} | {extra['core_seconds']:+.1f} | "
                    f"{extra['spark_core_seconds']:+.1f} | {window['jit_core_seconds']:.1f} | "
                    f"{window['classes_loaded']:.0f} | {window['methods_jit_compiled']:.0f} |")
    head = ("| window | cores | core-seconds above control | Spark JVM core-seconds above control | "
            "JIT threads, core-seconds | classes loaded | methods JIT-compiled |\n|---|---:|---:|---:|---:|---:|---:|")
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="opmw")
    parser.add_argument("--trace", default="seq")
    parser.add_argument("--walk-steps", type=int, default=20)
    parser.add_argument("--defrag-every", type=int, default=5)
    parser.add_argument("--upto", type=int, default=35, help="replay steps 1..UPTO of the trace (opmw seq 35: the peak)")
    parser.add_argument("--trigger", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=600.0)
    parser.add_argument("--window", type=float, default=240.0)
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/sana-change-cost"))
    parser.add_argument("--label", required=True, help="the results file's name: change-cost-LABEL.json")
    args = parser.parse_args(argv)
    steps = steps_to(args.workload, args.trace, args.walk_steps, args.defrag_every, args.upto, fresh=False)
    documents = workloads()[args.workload].documents
    conf_dir = spark_conf_dir(args.spark_conf)
    if conf_dir:
        os.environ["SPARK_CONF_DIR"] = conf_dir
    shutil.rmtree(args.run_dir, ignore_errors=True)
    service = RealService(args.run_dir, sharing=True, redis_url=args.redis_url, records=records_for(args.workload),
                          settle_s=0, measure_s=0, trigger_s=args.trigger, keyed_workers=2)
    result: dict[str, Any] = {"args": {key: str(value) for key, value in vars(args).items()}, "steps": steps}
    try:
        running = replay(service, documents, steps, "change cost: replayed", every=5)
        watch(service, "settle", args.settle, step_s=60.0)
        changed = pick_hosted(service, running)
        windows = [watch(service, "control", args.window)]
        before = _queries(service)
        service.remove(running.pop(changed))
        after_remove = _queries(service)
        windows.append(watch(service, f"after removing {documents[changed]['name']}", args.window))
        running[changed] = service.submit(documents[changed])
        after_add = _queries(service)
        windows.append(watch(service, f"after submitting {documents[changed]['name']} again", args.window))
        stats = service.client.get("/stats").raise_for_status().json()
        result.update(windows=windows, changed=documents[changed]["name"],
                      removal_modified=modified(before, after_remove), submit_modified=modified(after_remove, after_add),
                      running_tasks=stats["running_tasks"], queries=len(after_add),
                      tasks_per_query={query: len(listed["tasks"]) for query, listed in after_add.items()})
    finally:
        service.close()
        if conf_dir:
            shutil.rmtree(conf_dir, ignore_errors=True)
    out = Path(f"benchmarks/results/change-cost-{args.label}.json")
    out.write_text(json.dumps(result, indent=1))
    print(summary(result))
    for key in ("removal_modified", "submit_modified"):
        print(f"{key}: {result[key]}")
    for window in result["windows"]:
        for query, seen in window["batches"].items():
            if seen["durations_ms"]:
                print(f"{window['window']}: {query} ({seen['tasks']} tasks): batch ms {seen['durations_ms']} "
                      f"(median {statistics.median(seen['durations_ms']):.0f})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
