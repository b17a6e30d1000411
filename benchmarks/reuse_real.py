"""The reuse evaluation's real-service target: ``sana up`` on Spark and Kafka, sources producing at a fixed rate.

:class:`RealService` starts ``sana up`` (its embedded broker on a free port,
local Spark, the real Redis under a fresh prefix, sharing on or off) as a
child process, feeds every source topic at a fixed rate from producer
threads, and measures each step of a trace:

- ``cores``: CPU of the service's whole process tree (the API, the Spark JVM
  and its Python workers, the embedded broker) from ``/proc``, over a
  measurement window that starts ``settle_s`` after the change returned; or,
  with ``step_s`` (the paper's protocol: an action every minute, ``top`` read
  at the step), over the last ``measure_s`` of a step that lasts ``step_s``
  from the change's start, and ``cores_step`` over the whole step, the
  change and what follows it included;
- ``queries`` (``GET /runtime/queries``), ``running_tasks`` and the sharing
  histogram (``GET /stats``);
- ``kafka_bytes_per_s`` written by sinks and taps and the per-dataflow cost
  split (``GET /costs``).

At the end :meth:`RealService.check_sinks` reads every sink topic written
during the run and counts records whose Sana name (writer, batch, seq)
repeats: replays the runtime must name (none are expected without faults).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from benchmarks.riot_records import produce_paced
from benchmarks.targets import delete_prefix, free_port, redis_client, wait_healthy
from runtime.costs import ProcessTreeCpu

START_TIMEOUT_S = 180.0


class RealService:
    """``sana up`` with Spark and its embedded broker, fed at ``rate`` records/s per source topic."""

    def __init__(self, run_dir: Path, *, sharing: bool, redis_url: str, records: Callable[[str, int], Callable],
                 master: str = "local[2]", rate: float = 10.0, settle_s: float = 5.0, measure_s: float = 20.0,
                 trigger_s: float = 1.0, keyed_workers: int = 8, step_s: float = 0.0, containment: bool = False,
                 durable: bool = False) -> None:
        """``records(topic, seed)`` gives ``make(i, at)``, the ``i``-th input record of a source topic;
        ``containment`` is ``SANA_CONTAINMENT``, off by default: the reuse paper's evaluation shares equivalent
        tasks only (docs/containment.md measures containment). ``durable`` runs the broker on its object store
        (``sana up``'s default); without it, ``--ephemeral``: the broker in memory, as the runs in the run
        histories were measured. The store costs CPU per record batch, the same with sharing or without: at the
        paced sources' batch a record, SeaweedFS and Tansu took 0.9 cores of the 1.6 a RIoT replay used."""
        self.run_dir = run_dir
        self.records = records
        self.sharing = sharing
        self.redis_url = redis_url
        self.rate = rate
        self.settle_s = settle_s
        self.measure_s = measure_s
        self.step_s = step_s
        self.prefix = f"bench-reuse-{uuid.uuid4().hex[:8]}-{'reuse' if sharing else 'alone'}"
        self.port = free_port()
        self.broker_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.broker_port}"
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {key: value for key, value in os.environ.items() if not key.startswith("SANA_")}
        env.update(SANA_STATE_PREFIX=self.prefix, SANA_REDIS_URL=redis_url, SANA_SHARING="1" if sharing else "0",
                   SANA_CONTAINMENT="1" if containment else "0",
                   SANA_SPARK_MASTER=master, SANA_TRIGGER_S=str(trigger_s),
                   SANA_KEYED_WORKERS=str(keyed_workers), SANA_EMBEDDED_KAFKA_PORT=str(self.broker_port),
                   SANA_CHECKPOINT_DIR=str(run_dir / "checkpoints"), SANA_RUN_DIR=str(run_dir / "run"),
                   SANA_DATA_DIR=str(run_dir / "data"))
        self.log_path = run_dir / "sana-up.log"
        self._log = open(self.log_path, "ab")
        command = [sys.executable, "-m", "api.cli", "up", "--port", str(self.port), *([] if durable else ["--ephemeral"])]
        self.process = subprocess.Popen(command, env=env,
                                        stdout=self._log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=600)
        self._stop = threading.Event()
        self._producers: dict[str, threading.Thread] = {}
        self.produced: Counter[str] = Counter()
        self.sinks: set[str] = set()
        self._cpu = ProcessTreeCpu(self.process.pid)
        wait_healthy(self.process, self.client, self.log_path, START_TIMEOUT_S, pause_s=0.5)

    # -- sources -------------------------------------------------------------------------

    def feed(self, topics: list[str]) -> None:
        """Produce into every topic of ``topics`` not yet fed, at the fixed rate (model topics at a tenth of it)."""
        from runtime.broker.topics import Topics

        new = [topic for topic in topics if topic not in self._producers]
        if not new:
            return
        admin = Topics(self.bootstrap, 1)
        try:
            admin.ensure(new)
        finally:
            admin.close()
        for number, topic in enumerate(new, start=len(self._producers)):
            rate = self.rate / 10 if "model" in topic else self.rate
            thread = threading.Thread(target=produce_paced, daemon=True, name=f"produce-{topic}",
                                      args=(self.bootstrap, topic, self.records(topic, number + 1), rate, self._stop,
                                            self.produced))
            self._producers[topic] = thread
            thread.start()

    # -- the target interface ------------------------------------------------------------

    def submit(self, document: dict[str, Any]) -> str:
        self.feed(sorted({task["config"]["topic"] for task in document["tasks"] if task["type"] == "source"}))
        self.sinks.update(task["config"]["topic"] for task in document["tasks"] if task["type"] == "sink")
        response = self.client.post("/dataflows", json=document)
        if response.status_code != 201:
            raise RuntimeError(f"POST /dataflows {document['name']}: {response.status_code} {response.text[:500]}")
        return response.json()["id"]

    def remove(self, dataflow_id: str) -> None:
        response = self.client.delete(f"/dataflows/{dataflow_id}")
        if response.status_code != 200:
            raise RuntimeError(f"DELETE /dataflows/{dataflow_id}: {response.status_code} {response.text[:500]}")

    def defragment(self) -> dict[str, Any]:
        response = self.client.post("/runtime/defrag")
        if response.status_code != 200:
            raise RuntimeError(f"POST /runtime/defrag: {response.status_code} {response.text[:500]}")
        return response.json()

    def cpu_s(self) -> float:
        return self._cpu()

    def batches(self, queries: list[dict[str, Any]] | None = None) -> int:
        """Micro-batches the running queries (``GET /runtime/queries``, fetched unless given) have completed."""
        if queries is None:
            queries = self.client.get("/runtime/queries").raise_for_status().json()["queries"]
        return sum(query["batches"] for query in queries)

    def measure_step(self, started: float, cpu_at_start: float) -> dict[str, Any]:
        """The step's measurements; ``started`` and ``cpu_at_start`` are the clock and CPU when its change began.

        The CPU is also read every 5 s from the change's start (``cpu_timeline``:
        seconds since the start, cores over the slice), so a step's shape can be
        read afterwards.
        """
        now = time.monotonic()
        at, cpu = started, cpu_at_start
        began, ended = step_window(started, now, self.step_s, self.settle_s, self.measure_s)
        marks = sorted({began, ended, *(started + k * 5.0 for k in range(1, int((ended - started) // 5) + 1))})
        timeline: list[list[float]] = []
        cpu_before = None
        for mark in [now] + [mark for mark in marks if mark > now]:
            time.sleep(max(0.0, mark - time.monotonic()))
            previous_at, previous_cpu = at, cpu
            at, cpu = time.monotonic(), self.cpu_s()
            if at - previous_at > 0.5:
                timeline.append([round(at - started, 1), round((cpu - previous_cpu) / (at - previous_at), 4)])
            if cpu_before is None and mark >= began:  # the window opens here (or now, when it should have already)
                began, cpu_before = at, cpu
                batches_before = self.batches()
        seconds = at - began
        cores = (cpu - cpu_before) / seconds
        stats = self.client.get("/stats").raise_for_status().json()
        queries = self.client.get("/runtime/queries").raise_for_status().json()["queries"]
        costs = self.client.get("/costs").raise_for_status().json()
        batches = self.batches(queries) - batches_before
        return {
            "cores": round(cores, 4),
            "measured_s": round(seconds, 2),
            "batches_measured": batches,
            "cpu_s_per_batch": round(cores * seconds / batches, 3) if batches else None,
            "cores_step": round((cpu - cpu_at_start) / (at - started), 4),
            "step_s": round(at - started, 2),
            "cpu_timeline": timeline,
            "queries": len(queries),
            "degraded_queries": sum(1 for query in queries if query["status"] != "running"),
            "running_tasks": stats["running_tasks"],
            "submitted_tasks": stats["submitted_tasks"],
            "fragments": stats["fragments"],
            "sharing_histogram": stats["sharing_histogram"],
            "kafka_bytes_per_s": costs["total"]["kafka_bytes_per_s"],
            "dataflow_costs": {flow_id: {"cost": flow["cost"], "alone": flow["alone"]}
                               for flow_id, flow in costs["dataflows"].items()},
        }

    # -- the end -------------------------------------------------------------------------

    def check_sinks(self) -> dict[str, Any]:
        """Records and repeated Sana names (writer, batch, seq) on every sink topic of the run."""
        from kafka import KafkaConsumer, TopicPartition

        from runtime.broker.offsets import probe_consumer, topic_end_offsets

        probe = probe_consumer(self.bootstrap)
        try:
            ends = topic_end_offsets(probe, sorted(self.sinks))
        finally:
            probe.close()
        result = {}
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False)
        try:
            for topic in sorted(self.sinks):
                names: Counter[tuple[str, ...]] = Counter()
                partitions = {TopicPartition(topic, p): end for p, end in ends.get(topic, {}).items() if end > 0}
                if partitions:
                    consumer.assign(list(partitions))
                    consumer.seek_to_beginning(*partitions)
                    remaining = dict(partitions)
                    deadline = time.monotonic() + 60
                    while remaining and time.monotonic() < deadline:
                        for part, records in consumer.poll(timeout_ms=1000).items():
                            for record in records:
                                headers = {key: value.decode() for key, value in record.headers or []}
                                names[(headers.get("sana.writer", ""), headers.get("sana.batch", ""),
                                       headers.get("sana.seq", ""))] += 1
                                if record.offset + 1 >= remaining.get(part, 0):
                                    remaining.pop(part, None)
                result[topic] = {"records": sum(names.values()),
                                 "repeated": sum(count - 1 for count in names.values() if count > 1)}
        finally:
            consumer.close()
        return result

    def close(self) -> None:
        self._stop.set()
        for thread in self._producers.values():
            thread.join(timeout=30)
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._log.close()
        client = redis_client(self.redis_url)
        try:
            delete_prefix(client, self.prefix)
        finally:
            client.close()


# -- one trace on the real service ------------------------------------------------------------


def step_window(started: float, changed: float, step_s: float, settle_s: float, measure_s: float) -> tuple[float, float]:
    """The (begin, end) clock times over which a step's ``cores`` are measured.

    Without ``step_s``: from ``settle_s`` after the change returned (``changed``), for
    ``measure_s``. With it (the paper's fixed step): the last ``measure_s`` of a step
    that lasts ``step_s`` from the change's start, or, when the change itself ran
    so long that less than ``measure_s`` is left, ``measure_s`` from its end.

    >>> step_window(100.0, 102.0, 0.0, 5.0, 20.0)
    (107.0, 127.0)
    >>> step_window(100.0, 102.0, 60.0, 5.0, 20.0)
    (140.0, 160.0)
    >>> step_window(100.0, 150.0, 60.0, 5.0, 20.0)
    (150.0, 170.0)
    """
    if not step_s:
        return changed + settle_s, changed + settle_s + measure_s
    end = max(started + step_s, changed + measure_s)
    return end - measure_s, end


RETRIES = 3


def run_trace(documents: list[dict[str, Any]], steps: list[tuple[str, int]], *, sharing: bool, run_dir: Path,
              redis_url: str, records: Callable[[str, int], Callable], rate: float, settle_s: float, measure_s: float,
              master: str, trigger_s: float, keyed_workers: int, label: str, step_s: float = 0.0,
              checkpoint: Callable[[dict[str, Any]], None] = lambda partial: None,
              containment: bool = False) -> dict[str, Any]:
    """Every step of ``steps`` (``("add" | "remove" | "defrag", index into documents)``) through a fresh service.

    A change the service refuses (it says nothing changed) is tried again up to
    ``RETRIES`` times, as a client would; the failures are recorded in the step.
    ``checkpoint`` gets the partial result after every step.
    """
    from benchmarks.measure import Progress

    progress = Progress(every=30.0)
    service = RealService(run_dir, sharing=sharing, redis_url=redis_url, records=records, master=master, rate=rate,
                          settle_s=settle_s, measure_s=measure_s, trigger_s=trigger_s, keyed_workers=keyed_workers,
                          step_s=step_s, containment=containment)
    running: dict[int, str] = {}
    rows = []
    began = time.monotonic()
    try:
        for number, (action, index) in enumerate(steps, start=1):
            started, cpu_at_start, failures, outcome = time.monotonic(), service.cpu_s(), [], None
            for _ in range(RETRIES):
                try:
                    if action == "add":
                        running[index] = service.submit(documents[index])
                    elif action == "remove":
                        service.remove(running[index])
                        running.pop(index)
                    else:
                        outcome = service.defragment()
                    break
                except RuntimeError as error:
                    failures.append(str(error))
                    time.sleep(10)
            else:
                raise RuntimeError(f"{label}: step {number} ({action} {index}) failed {RETRIES} times: {failures}")
            change_s = time.monotonic() - started
            row = {"step": number, "action": action, "dataflow": index, "running_dataflows": len(running),
                   "change_s": round(change_s, 2), "failures": failures, "at": round(time.monotonic() - began, 1),
                   **service.measure_step(started, cpu_at_start)}
            if outcome is not None:
                row["defrag"] = outcome
            rows.append(row)
            checkpoint({"label": label, "sharing": sharing, "steps": rows, "partial": True})
            progress.say(f"{label}: step {number}/{len(steps)} {action} {index}: {row['running_tasks']} tasks, "
                         f"{row['queries']} queries, {row['cores']:.2f} cores ({time.monotonic() - began:.0f} s)",
                         force=number == len(steps))
        sinks = service.check_sinks()
    finally:
        service.close()
    return {"label": label, "sharing": sharing, "steps": rows, "sinks": sinks,
            "produced": dict(service.produced), "seconds": round(time.monotonic() - began, 1)}


# -- the report ---------------------------------------------------------------------------------

WORKLOADS = {"riot": "RIoT,", "riot-paper": "RIoT (the paper's construction),", "opmw": "OPMW,",
             "opmw-hist": "OPMW (shaped by the paper's histogram),"}


def records_for(workload: str):
    """The record maker of ``workload``'s source topics (``make = records_for(w)(topic, seed)``).

    >>> records_for("opmw-hist").__module__, records_for("riot").__module__
    ('benchmarks.opmw', 'benchmarks.riot_records')
    """
    if workload.startswith("opmw"):
        from benchmarks.opmw import record_maker as opmw_records
        return opmw_records
    from benchmarks.riot_records import record_maker as riot_records
    return riot_records


def markers(kind: str, trace: str, workload: str = "riot", step_s: float = 0.0) -> tuple[str, str]:
    """The comments in docs/reuse.md between which a run's ``kind`` (``real`` or ``defrag``) table goes.

    >>> markers("real", "rw2", "riot-paper", 60.0)[0]
    '<!-- reuse real riot-paper rw2 step60: begin -->'
    """
    tag = trace if workload == "riot" else f"{workload} {trace}"
    tag += f" step{step_s:g}" if step_s else ""
    return f"<!-- reuse {kind} {tag}: begin -->", f"<!-- reuse {kind} {tag}: end -->"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def repaired(step: dict[str, Any], measure_s: float) -> dict[str, Any]:
    """``step`` with its cores taken from the 5 s slices of its ``cpu_timeline`` that did not go negative.

    In runs read with the stateless ``process_tree_cpu_s`` the process tree's
    CPU fell when a process left it with its time (the Spark JVM's Python
    daemons, orphaned when the JVM exits after the last query stops): such a
    slice measures nothing, so the step's ``cores`` (its last ``measure_s``)
    and ``cores_step`` are the duration-weighted mean of the other slices.
    A step without such a slice is returned as it is. Runs read with
    :class:`runtime.costs.ProcessTreeCpu` keep an orphan's time and have none.

    >>> step = {"cores": -3.0, "cores_step": -1.0, "step_s": 20.0,
    ...         "cpu_timeline": [[5.0, 0.4], [10.0, 0.2], [15.0, 0.1], [20.0, -60.0]]}
    >>> fixed = repaired(step, 10.0)
    >>> round(fixed["cores"], 3), round(fixed["cores_step"], 3), fixed["repaired"]
    (0.1, 0.233, 1)
    """
    timeline = step.get("cpu_timeline") or []
    if not any(cores < 0 for _, cores in timeline):
        return step
    slices, begin = [], 0.0
    for end, cores in timeline:
        slices.append((begin, end, cores))
        begin = end
    valid = [(begin, end, cores) for begin, end, cores in slices if cores >= 0]

    def mean(after: float) -> float:
        inside = [(end - max(begin, after), cores) for begin, end, cores in valid if end > after]
        seconds = sum(length for length, _ in inside)
        return sum(length * cores for length, cores in inside) / seconds if seconds else 0.0

    return {**step, "cores": mean(step["step_s"] - measure_s), "cores_step": mean(0.0),
            "repaired": len(slices) - len(valid)}


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per metric: peak and step-mean alone vs with reuse, and the reduction (the paper's way of reporting)."""
    runs = results["runs"]
    rows = []
    metrics = [("running_tasks", "running tasks"), ("queries", "Spark queries"), ("cores", "cores (process tree)"),
               ("kafka_bytes_per_s", "Kafka bytes/s written")]
    if all("cores_step" in step for run in runs.values() for step in run["steps"]):
        metrics.insert(3, ("cores_step", "cores over the whole step"))
    for metric, label in metrics:
        alone = [step[metric] for step in runs["alone"]["steps"]]
        reuse = [step[metric] for step in runs["reuse"]["steps"]]
        peak_a, peak_r, mean_a, mean_r = max(alone), max(reuse), _mean(alone), _mean(reuse)
        rows.append({"metric": label, "peak_alone": peak_a, "peak_reuse": peak_r,
                     "peak_cut": 100 * (1 - peak_r / peak_a) if peak_a else 0.0,
                     "mean_alone": mean_a, "mean_reuse": mean_r,
                     "mean_cut": 100 * (1 - mean_r / mean_a) if mean_a else 0.0})
    return rows


def phases(actions: list[str], fill: int, walk: int) -> list[str]:
    """The trace phase of each step: the first ``fill`` changes ``fill``, the next ``walk`` changes ``walk``, the
    rest ``drain``; a defrag step belongs to the phase of the change before it.

    >>> phases(["add", "add", "remove", "defrag", "add", "remove", "defrag", "remove"], fill=2, walk=2)
    ['fill', 'fill', 'walk', 'walk', 'walk', 'drain', 'drain', 'drain']
    """
    result, changes = [], 0
    for action in actions:
        if action != "defrag":
            changes += 1
        result.append("fill" if changes <= fill else "walk" if changes <= fill + walk else "drain")
    return result


def _fill_and_walk(results: dict[str, Any]) -> tuple[int, int]:
    """How many changes fill the service before a walk and how many the walk makes (SEQ: all adds, no walk)."""
    if results["trace"] == "seq":
        return results["apps"], 0
    initial = results.get("initial")
    if initial is None:  # results written before the runner recorded it
        from benchmarks.reuse import workloads

        initial = workloads()[results["workload"]].initial
    return initial, results["walk_steps"]


def phase_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase of the trace (fill, walk, drain): its steps, mean dataflows running, and alone vs reuse means.

    Both modes run the same steps, so the phase of step k is the same in each.
    """
    runs = results["runs"]
    fill, walk = _fill_and_walk(results)
    labels = phases([step["action"] for step in runs["alone"]["steps"]], fill, walk)
    metrics = ["running_tasks", "cores"] + (["cores_step"] if all("cores_step" in step for run in runs.values()
                                                                   for step in run["steps"]) else [])
    rows = []
    for phase in ("fill", "walk", "drain"):
        picked = [k for k, label in enumerate(labels) if label == phase]
        if not picked:
            continue
        row: dict[str, Any] = {"phase": phase, "steps": len(picked),
                               "dataflows": _mean([runs["alone"]["steps"][k]["running_dataflows"] for k in picked])}
        for metric in metrics:
            alone = _mean([runs["alone"]["steps"][k][metric] for k in picked])
            reuse = _mean([runs["reuse"]["steps"][k][metric] for k in picked])
            row[metric] = (alone, reuse, 100 * (1 - reuse / alone) if alone else 0.0)
        rows.append(row)
    return rows


def phase_markdown(results: dict[str, Any]) -> str:
    """:func:`phase_rows` as a table."""
    rows = phase_rows(results)
    columns = [("running_tasks", "tasks"), ("cores", "cores"), ("cores_step", "cores, whole step")]
    columns = [(metric, label) for metric, label in columns if metric in rows[0]]
    lines = ["| phase | steps | dataflows running | " + " | ".join(f"{label} alone | {label} reuse | cut"
                                                                for _, label in columns) + " |",
             "|---|---:|---:|" + "---:|---:|---:|" * len(columns)]
    for row in rows:
        cells = " | ".join(f"{_cell(row[metric][0])} | {_cell(row[metric][1])} | {row[metric][2]:.0f}%"
                           for metric, _ in columns)
        lines.append(f"| {row['phase']} | {row['steps']} | {row['dataflows']:.1f} | {cells} |")
    return "\n".join(lines)


def _cell(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def markdown(results: dict[str, Any]) -> str:
    """The run's settings, the alone-vs-reuse table when both modes ran (else the one mode's means), the sink check."""
    runs = results["runs"]
    lines = [f"{WORKLOADS[results['workload']]} {results['trace'].upper()} ({results['apps']} apps, trace seed {results['seed']}"
             f"{', walk of ' + str(results['walk_steps']) + ' steps' if results['trace'] != 'seq' else ''}), "
             f"`{results['master']}`, {results['rate']:g} records/s per source, trigger {results['trigger_s']:g} s, "
             + (f"a step every {results['step_s']:g} s from its change's start (the paper's protocol), cores over its "
                f"last {results['measure_s']:g} s and over the whole step" if results.get("step_s") else
                f"each step measured over {results['measure_s']:g} s after {results['settle_s']:g} s")
             +
             f"{', commit ' + results['commit'] if results.get('commit') else ''}:", ""]
    if {"alone", "reuse"} <= set(runs):
        lines += ["| metric | peak alone | peak reuse | cut | step mean alone | step mean reuse | cut |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for row in summary(results):
            lines.append(f"| {row['metric']} | {_cell(row['peak_alone'])} | {_cell(row['peak_reuse'])} | {row['peak_cut']:.0f}% | "
                         f"{_cell(row['mean_alone'])} | {_cell(row['mean_reuse'])} | {row['mean_cut']:.0f}% |")
        lines += ["", "Step means by phase of the trace:", "", phase_markdown(results)]
    else:
        lines += ["| mode | steps | peak tasks | mean tasks | peak queries | mean queries | mean cores |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for mode, run in runs.items():
            steps = run["steps"]
            lines.append(f"| {mode} | {len(steps)} | {max(s['running_tasks'] for s in steps)} | "
                         f"{_mean([s['running_tasks'] for s in steps]):.1f} | {max(s['queries'] for s in steps)} | "
                         f"{_mean([s['queries'] for s in steps]):.1f} | {_mean([s['cores'] for s in steps]):.2f} |")
    fixed = {mode: [step["step"] for step in run["steps"] if step.get("repaired")] for mode, run in runs.items()}
    if any(fixed.values()):
        lines += ["", "Cores of steps " + "; ".join(f"{mode} {', '.join(map(str, steps))}" for mode, steps in fixed.items()
                                              if steps)
                  + " leave out a 5 s slice in which a process left the tree with its CPU time (`repaired`)."]
    for mode, run in runs.items():
        checked = run.get("sinks") or {}
        written = sum(sink["records"] for sink in checked.values())
        repeated = sum(sink["repeated"] for sink in checked.values())
        lines.append("")
        lines.append(f"Sinks, {mode}: {len(checked)} topics, {written:,} records, {repeated} repeated (writer, batch, seq) names.")
    return "\n".join(lines)


def defrag_markdown(results: dict[str, Any]) -> str:
    """Every defragmentation step: queries and cores of the step before and after it, what it merged."""
    lines = ["| mode | after step | dataflows running | queries before -> after | cores before -> after | merged |",
             "|---|---:|---:|---:|---:|---|"]
    for mode, run in results["runs"].items():
        steps = run["steps"]
        for before, step in zip(steps, steps[1:]):
            if step["action"] != "defrag":
                continue
            merged = "; ".join(f"{' + '.join(group['queries'])} -> {group['into']}" for group in step["defrag"]["merged"])
            skipped = "; ".join(f"left {' + '.join(group['queries'])}: {group['error']}" for group in step["defrag"]["skipped"])
            lines.append(f"| {mode} | {before['step']} | {step['running_dataflows']} | {before['queries']} -> {step['queries']} | "
                         f"{before['cores']:.2f} -> {step['cores']:.2f} | {merged or skipped or 'nothing to merge'} |")
    return "\n".join(lines)


def _between(page: str, markers: tuple[str, str], text: str) -> str:
    begin, end = page.index(markers[0]) + len(markers[0]), page.index(markers[1])
    return page[:begin] + "\n" + text + "\n" + page[end:]


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    for axis, metric, title in zip(axes, ("running_tasks", "queries", "cores"),
                                   ("running tasks (Fig. 2)", "Spark queries", "cores used (Fig. 3)")):
        for mode, colour in (("alone", "tab:red"), ("reuse", "tab:blue")):
            if mode not in results["runs"]:
                continue
            steps = results["runs"][mode]["steps"]
            axis.plot([step["step"] for step in steps], [step[metric] for step in steps], color=colour,
                      label="alone (SANA_SHARING=0)" if mode == "alone" else "reuse")
            if metric == "cores" and all("cores_step" in step for step in steps):
                axis.plot([step["step"] for step in steps], [step["cores_step"] for step in steps], color=colour,
                          linestyle="--", linewidth=1, label=f"{mode}, whole step")
            for step in steps:
                if step["action"] == "defrag":
                    axis.axvline(step["step"], color="grey", linestyle=":", linewidth=1)
        axis.set_title(title)
        axis.set_xlabel("step (dotted: sana defrag)")
        axis.grid(alpha=0.3)
    axes[0].legend()
    if results.get("step_s"):
        axes[2].legend(fontsize=8)
    figure.suptitle(f"{WORKLOADS[results['workload']].rstrip(',')} {results['trace'].upper()} on Spark + Kafka, 2 cores")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


HISTORY = Path("benchmarks/results/reuse-history.md")


def report(path: Path, docs: Path | None) -> str:
    results = json.loads(path.read_text())
    results.setdefault("trace", "seq")
    for run in results["runs"].values():
        run["steps"] = [repaired(step, results["measure_s"]) for step in run["steps"]]
    trace, workload, step_s = results["trace"], results["workload"], results.get("step_s", 0.0)
    text, defrag = markdown(results), defrag_markdown(results)
    image = f"reuse_real_{workload.replace('-', '_')}_{trace}{f'_step{step_s:g}' if step_s else ''}.png"
    plot(results, Path("docs/img") / image)
    if docs is not None:
        # runs the page no longer shows (superseded) keep their tables in the run history
        target = docs if markers("real", trace, workload, step_s)[0] in docs.read_text() else HISTORY
        images = "img" if target == docs else "../../docs/img"
        page = _between(target.read_text(), markers("real", trace, workload, step_s),
                        f"{text}\n\n![{WORKLOADS[workload].rstrip(',')} {trace.upper()} on the real runtime]({images}/{image})")
        target.write_text(_between(page, markers("defrag", trace, workload, step_s), defrag))
    return text + "\n\n" + defrag


def with_defrag(steps: list[tuple[str, int]], every: int) -> list[tuple[str, int]]:
    """``steps`` with a ``("defrag", -1)`` step after every ``every``-th removal (none when ``every`` is 0).

    >>> with_defrag([("add", 0), ("add", 1), ("remove", 1), ("remove", 0)], 1)
    [('add', 0), ('add', 1), ('remove', 1), ('defrag', -1), ('remove', 0), ('defrag', -1)]
    """
    result, removed = [], 0
    for step in steps:
        result.append(step)
        if step[0] == "remove" and every:
            removed += 1
            if removed % every == 0:
                result.append(("defrag", -1))
    return result


def _commit() -> str:
    """The commit the run measures (``-dirty`` when the work tree has changes)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
    return head + ("-dirty" if dirty.strip() else "") if head else "unknown"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from benchmarks.reuse import TRACES, workloads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="riot")
    parser.add_argument("--trace", choices=sorted(TRACES), default="seq", help="the dry run's traces (benchmarks.reuse)")
    parser.add_argument("--seed", type=int, default=None, help="trace seed (default: the dry run's)")
    parser.add_argument("--walk-steps", type=int, default=None, help="random walks: steps of the walk (default: the dry run's)")
    parser.add_argument("--modes", default="alone,reuse")
    parser.add_argument("--rate", type=float, default=10.0, help="records/s per source topic (paper: 10)")
    parser.add_argument("--trigger", type=float, default=10.0, help="SANA_TRIGGER_S of the service")
    parser.add_argument("--keyed-workers", type=int, default=2, help="SANA_KEYED_WORKERS of the service")
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--measure", type=float, default=20.0)
    parser.add_argument("--step", type=float, default=0.0,
                        help="a fixed step of this many seconds from each change's start, cores over its last --measure "
                             "seconds (the paper: 60); 0: measure --settle after the change returned, then the next")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--defrag-every", type=int, default=5,
                        help="defragment after every N removals (0: never)")
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/sana-reuse-real"), help="logs and checkpoints")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/reuse-real-WORKLOAD-TRACE.json (-stepS.json with --step)")
    parser.add_argument("--report", action="store_true", help="only redraw the table and plot from --out")
    parser.add_argument("--write-docs", action="store_true", help="with --report: write the table into docs/reuse.md")
    args = parser.parse_args(argv)
    out = args.out or Path(f"benchmarks/results/reuse-real-{args.workload}-{args.trace}"
                           f"{f'-step{args.step:g}' if args.step else ''}.json")
    if args.report:
        print(report(out, Path("docs/reuse.md") if args.write_docs else None))
        return 0
    workload = workloads()[args.workload]
    spec = TRACES[args.trace]
    spec = replace(spec, seed=spec.seed if args.seed is None else args.seed,
                   walk_steps=spec.walk_steps if args.walk_steps is None else args.walk_steps)
    documents = workload.documents
    steps = with_defrag(spec.steps(workload), args.defrag_every)
    results = {"workload": args.workload, "apps": len(documents), "trace": args.trace, "seed": spec.seed,
               "walk_steps": spec.walk_steps, "rate": args.rate, "trigger_s": args.trigger,
               "keyed_workers": args.keyed_workers, "settle_s": args.settle, "measure_s": args.measure, "step_s": args.step,
               "master": args.master, "defrag_every": args.defrag_every, "initial": workload.initial,
               "commit": _commit(), "runs": {}}

    def save(mode: str, run: dict[str, Any]) -> None:
        results["runs"][mode] = run
        out.write_text(json.dumps(results, indent=1))

    records = records_for(args.workload)
    for mode in args.modes.split(","):
        run_dir = args.run_dir / mode
        shutil.rmtree(run_dir, ignore_errors=True)
        save(mode, run_trace(documents, steps, sharing=mode == "reuse", run_dir=run_dir, redis_url=args.redis_url,
                             records=records, rate=args.rate, settle_s=args.settle, measure_s=args.measure,
                             master=args.master, trigger_s=args.trigger, keyed_workers=args.keyed_workers,
                             step_s=args.step, label=f"{args.workload} {args.trace} {mode}",
                             checkpoint=lambda partial, mode=mode: save(mode, partial)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
