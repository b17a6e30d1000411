"""Load: many concurrent clients submitting and removing dataflows, then the manager's invariants.

``python -m benchmarks.load --clients 200 --seconds 300`` starts ``sana up --dry-run``
(:class:`benchmarks.targets.HttpTarget`, the real Redis under a fresh prefix)
and runs ``clients`` asyncio clients for ``seconds``. Each client loops: submit
one of the first ``--apps`` RIoT apps (:mod:`benchmarks.riot`; apps overlap, so
concurrent submits share and unshare tasks), then remove what it submitted.
Every answer is recorded with its latency; any 5xx, timeout or transport error
is a failure. At the end the service must be consistent:

- every running task is used by at least one submitted dataflow, and every
  dataflow's running tasks exist (``GET /running`` against ``GET /dataflows``);
- ``GET /stats`` counts what ``GET /running`` shows;
- after the clients' dataflows are removed, nothing runs.

``--real`` starts ``sana up`` with Spark (``local[2]``) and its embedded broker
instead; there the runtime must agree too: the Spark queries host exactly the
running tasks, all running, and none is left once everything is removed.
``--feed R`` keeps the apps' source topics flowing meanwhile, R records/s each
(model topics a tenth of it; :mod:`benchmarks.riot_records`), so the queries
changed under load are busy ones. The result also has the change rate and
the service's group commit counts (``change_groups`` of ``/stats``).

Results go to ``benchmarks/results/load-<target>.json``; ``--report --write-docs``
puts the table into docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from benchmarks.riot import riot_workload
from benchmarks.riot_records import produce_paced, record_maker
from benchmarks.targets import HttpTarget, delete_prefix, redis_client

MARKERS = {"dry-run": ("<!-- load: begin -->", "<!-- load: end -->"),
           "real": ("<!-- load real: begin -->", "<!-- load real: end -->")}


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank; 0 for no values.

    >>> percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5), percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.99)
    (3.0, 5.0)
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def by_window(calls: list[tuple[float, float]], window_s: float = 60.0) -> list[dict[str, float]]:
    """Latency per window of the run: ``calls`` are (seconds since the run began when the call was made, ms).

    >>> by_window([(1.0, 10.0), (2.0, 30.0), (3.0, 20.0), (61.0, 5.0)])
    [{'from_s': 0, 'calls': 3, 'p50': 20.0, 'p99': 30.0, 'max': 30.0}, {'from_s': 60, 'calls': 1, 'p50': 5.0, 'p99': 5.0, 'max': 5.0}]
    """
    windows: dict[int, list[float]] = {}
    for at, ms in calls:
        windows.setdefault(int(at // window_s), []).append(ms)
    return [{"from_s": round(index * window_s), "calls": len(values), "p50": percentile(values, 0.5),
             "p99": percentile(values, 0.99), "max": max(values)} for index, values in sorted(windows.items())]


class Recorder:
    def __init__(self) -> None:
        self.began = time.monotonic()
        self.calls: dict[str, list[tuple[float, float]]] = {"submit": [], "remove": []}  # (made at, ms)
        self.statuses: dict[str, Counter[str]] = {"submit": Counter(), "remove": Counter()}
        self.failures: list[str] = []

    @property
    def latency_ms(self) -> dict[str, list[float]]:
        return {op: [ms for _, ms in calls] for op, calls in self.calls.items()}

    def record(self, op: str, status: str, ms: float) -> None:
        self.statuses[op][status] += 1
        self.calls[op].append((time.monotonic() - self.began - ms / 1000, ms))
        if not status.isdigit() or int(status) >= 500:
            if len(self.failures) < 20:
                self.failures.append(f"{op}: {status}")


async def _call(client: httpx.AsyncClient, recorder: Recorder, op: str, method: str, path: str,
                **kwargs: Any) -> httpx.Response | None:
    started = time.perf_counter()
    try:
        response = await client.request(method, path, **kwargs)
    except httpx.HTTPError as error:
        recorder.record(op, type(error).__name__, 1000 * (time.perf_counter() - started))
        return None
    recorder.record(op, str(response.status_code), 1000 * (time.perf_counter() - started))
    return response


async def _client(number: int, base_url: str, documents: list[dict[str, Any]], deadline: float,
                  recorder: Recorder, timeout_s: float) -> None:
    rng = random.Random(number)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s) as client:
        while time.monotonic() < deadline:
            document = rng.choice(documents)
            answer = await _call(client, recorder, "submit", "POST", "/dataflows", json=document)
            if answer is not None and answer.status_code == 201:
                await asyncio.sleep(rng.uniform(0, 0.5))
                await _call(client, recorder, "remove", "DELETE", f"/dataflows/{answer.json()['id']}")


def check_invariants(client: httpx.Client) -> list[str]:
    """What is wrong with the service's state, as read through the API (empty: consistent)."""
    problems = []
    flows = {flow["id"]: flow for flow in client.get("/dataflows").raise_for_status().json()["dataflows"]}
    running = {task["id"]: task for dag in client.get("/running").raise_for_status().json()["dags"] for task in dag["tasks"]}
    stats = client.get("/stats").raise_for_status().json()
    for task_id, task in running.items():
        if not task["dataflows"]:
            problems.append(f"running task {task_id} has no user")
        for flow in task["dataflows"]:
            if flow not in flows:
                problems.append(f"running task {task_id} is used by {flow}, which is not submitted")
    for flow_id, flow in flows.items():
        for running_id in flow["tasks"].values():
            if running_id not in running:
                problems.append(f"dataflow {flow_id} uses {running_id}, which does not run")
    if stats["running_tasks"] != len(running):
        problems.append(f"/stats counts {stats['running_tasks']} running tasks, /running shows {len(running)}")
    if stats["submitted_dataflows"] != len(flows):
        problems.append(f"/stats counts {stats['submitted_dataflows']} dataflows, /dataflows lists {len(flows)}")
    return problems


def check_runtime(client: httpx.Client) -> list[str]:
    """What the Spark runtime disagrees with the state about (empty: the queries host exactly the running tasks)."""
    running = {task["id"] for dag in client.get("/running").raise_for_status().json()["dags"] for task in dag["tasks"]}
    queries = client.get("/runtime/queries").raise_for_status().json()["queries"]
    hosted = Counter(task for query in queries for task in query["tasks"])
    problems = [f"query {q['query']} is {q['status']}: {q.get('error')}" for q in queries if q["status"] != "running"]
    problems += [f"task {task} is hosted by {count} queries" for task, count in hosted.items() if count > 1]
    if set(hosted) != running:
        problems.append(f"queries host {len(hosted)} tasks, {len(running)} run; not hosted: "
                        f"{sorted(running - set(hosted))[:5]}, hosted but stopped: {sorted(set(hosted) - running)[:5]}")
    return problems


class Feed:
    """The apps' source topics kept flowing by one thread each (librdkafka producers), until stopped."""

    def __init__(self, bootstrap: str, topics: list[str], rate: float) -> None:
        from runtime.broker.topics import Topics

        admin = Topics(bootstrap, 1)
        try:
            admin.ensure(topics)
        finally:
            admin.close()
        self.produced: Counter[str] = Counter()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=produce_paced, name=f"feed-{topic}", daemon=True,
                                          args=(bootstrap, topic, record_maker(topic, seed=len(topic)),
                                                rate / 10 if "model" in topic else rate, self._stop, self.produced))
                         for topic in topics]
        for thread in self._threads:
            thread.start()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        return dict(self.produced)


def source_topics(documents: list[dict[str, Any]]) -> list[str]:
    return sorted({task["config"]["topic"] for document in documents for task in document["tasks"] if task["type"] == "source"})


def run(clients: int, seconds: float, apps: int, redis_url: str, run_dir: Path, timeout_s: float,
        real: bool = False, feed_rate: float = 0.0, server_log: Path | None = None) -> dict[str, Any]:
    """``server_log``: where to copy the server's log (its slow changes say where their time went)."""
    prefix = f"bench-load-{uuid.uuid4().hex[:8]}"
    target = HttpTarget(redis_url, prefix, run_dir, dry_run=not real)
    checks = [check_invariants, check_runtime] if real else [check_invariants]
    documents = list(riot_workload(apps, seed=0))
    feed = Feed(target.bootstrap, source_topics(documents), feed_rate) if feed_rate and target.bootstrap else None
    produced: dict[str, int] = {}
    recorder = Recorder()
    began = recorder.began
    try:
        async def main() -> None:
            deadline = time.monotonic() + seconds
            tasks = [asyncio.create_task(_client(n, target.base_url, documents, deadline, recorder, timeout_s))
                     for n in range(clients)]
            pending = set(tasks)
            while pending:
                _, pending = await asyncio.wait(pending, timeout=10)
                done = sum(len(v) for v in recorder.calls.values())
                print(f"[{time.monotonic() - began:7.1f}s] {clients} clients: {done} calls, "
                      f"{sum(recorder.statuses['submit'].values())} submits, {len(recorder.failures)} failures",
                      flush=True)
            await asyncio.gather(*tasks)  # re-raises what a client raised

        asyncio.run(main())
        elapsed = time.monotonic() - began
        with httpx.Client(base_url=target.base_url, timeout=max(120.0, timeout_s)) as client:
            groups = client.get("/stats").raise_for_status().json().get("change_groups", {})
            during = [problem for check in checks for problem in check(client)]
            leftover = [flow["id"] for flow in client.get("/dataflows").json()["dataflows"]]
            for flow_id in leftover:
                client.delete(f"/dataflows/{flow_id}").raise_for_status()
            after = [problem for check in checks for problem in check(client)]
            final = client.get("/stats").json()
    finally:
        if feed is not None:
            produced = feed.stop()
        if server_log is not None:  # before close() deletes the run directory
            shutil.copyfile(target.log_path, server_log)
        target.close()
        connection = redis_client(redis_url)
        try:
            delete_prefix(connection, prefix)
        finally:
            connection.close()
    return {
        "target": "real" if real else "dry-run",
        "clients": clients, "seconds": round(elapsed, 1), "apps": apps, "timeout_s": timeout_s,
        "statuses": {op: dict(counter) for op, counter in recorder.statuses.items()},
        "latency_ms": {op: {"p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "max": max(v, default=0.0),
                            "count": len(v)} for op, v in recorder.latency_ms.items()},
        "failures": recorder.failures, "invariant_problems": during + after,
        "left_over_dataflows": len(leftover), "final_running_tasks": final["running_tasks"],
        "changes_per_s": round(sum(len(v) for v in recorder.calls.values()) / elapsed, 2),
        "change_groups": groups, "feed_records_per_s": feed_rate, "produced": produced,
        "by_minute": {op: by_window(calls) for op, calls in recorder.calls.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    feed = f"sources fed at {result['feed_records_per_s']:g} records/s each" if result.get("feed_records_per_s") else "sources idle"
    against = (f"`sana up` (Spark `local[2]`, the embedded broker, {feed})" if result.get("target") == "real"
               else "`sana up --dry-run`")
    lines = [f"{result['clients']} clients for {result['seconds']:g} s against {against} (apps 0-{result['apps'] - 1} "
             f"of benchmarks/riot.py, client timeout {result['timeout_s']:g} s):", "",
             "| operation | calls | answers | p50 ms | p99 ms | max ms |", "|---|---:|---|---:|---:|---:|"]
    for op in ("submit", "remove"):
        latency = result["latency_ms"][op]
        answers = ", ".join(f"{status}: {count}" for status, count in sorted(result["statuses"][op].items()))
        lines.append(f"| {op} | {latency['count']} | {answers} | {latency['p50']:.0f} | {latency['p99']:.0f} | "
                     f"{latency['max']:.0f} |")
    if "changes_per_s" in result:
        groups = result.get("change_groups") or {}
        lines += ["", f"Changes (submits and removals answered) per second: {result['changes_per_s']:g}; group commit: "
                  f"{groups.get('changes', 0)} changes in {groups.get('groups', 0)} groups, the largest "
                  f"{groups.get('largest', 0)}."]
    if result.get("by_minute"):
        lines += ["", "Submit p99 by minute of the run (the minute the call was made in): " + ", ".join(
            f"{window['p99'] / 1000:.1f} s" for window in result["by_minute"]["submit"]) + "."]
    lines += ["", f"Failures (5xx, timeouts, transport errors): {len(result['failures'])}. Invariant problems: "
              f"{len(result['invariant_problems'])}. Dataflows left at the end: {result['left_over_dataflows']}, "
              f"removed; then running tasks: {result['final_running_tasks']}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--apps", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=60.0, help="per call, seconds (a slower answer is a failure)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/sana-load"))
    parser.add_argument("--real", action="store_true", help="against sana up with Spark and the embedded broker")
    parser.add_argument("--feed", type=float, default=0.0, help="with --real: records/s into each source topic (0: idle)")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/load-dryrun.json (load-real.json with --real)")
    parser.add_argument("--server-log", type=Path, help="keep a copy of the server's log here")
    parser.add_argument("--report", action="store_true", help="only print the table from --out")
    parser.add_argument("--write-docs", action="store_true", help="with --report: write it into docs/reliability.md")
    args = parser.parse_args(argv)
    args.out = args.out or Path(f"benchmarks/results/load-{'real' if args.real else 'dryrun'}.json")
    if not args.report:
        result = run(args.clients, args.seconds, args.apps, args.redis_url, args.run_dir, args.timeout, args.real, args.feed,
                     args.server_log)
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    result = json.loads(args.out.read_text())
    text = markdown(result)
    print(text)
    if args.write_docs:
        page = Path("docs/reliability.md")
        content = page.read_text()
        markers = MARKERS[result.get("target", "dry-run")]
        begin, end = content.index(markers[0]) + len(markers[0]), content.index(markers[1])
        page.write_text(content[:begin] + "\n" + text + "\n" + content[end:])
    failed = result["failures"] or result["invariant_problems"] or result["final_running_tasks"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
