"""Containment sharing on a workload of parameter variants (issue 37): what it saves and what a submit costs.

The workload is built like the RIoT construction of docs/reuse.md, but each dataflow picks its own parameters
(docs/containment.md, "The workload"): 70 % are apps reading one of three sensor streams (temperature,
humidity, light, dust, air quality, each uniform over its range) that keep readings above a threshold of one
column (drawn from a realistic range, rounded to a step, so some apps agree exactly and most do not), half of
them with a projection of derived columns and a view of two; 30 % are per-sensor dashboards, windows of 10 s
to 5 min with some of count/max/min/sum, half of those of a minute or more sliding by 10 or 30 s. Variants:

- ``exact``: Sana with exact sharing only (``SANA_CONTAINMENT=false``);
- ``containment``: with containment on.

For both it reports running tasks, containment shares, and the records the running tasks read per source
record, computed from each column's distribution (:func:`records_read`). Then submit p50/p99 at each level of running
dataflows with containment on and off (in process, Manager + DryRunRuntime on the real Redis).

    .venv/bin/python -m benchmarks.containment --apps 200 --levels 100,1000,10000 --probes 200
    .venv/bin/python -m benchmarks.containment --real 10     # the real runtime: cores, containment off then on
    .venv/bin/python -m benchmarks.containment --real 6 --real-workload dashboards --rate 500
    .venv/bin/python -m benchmarks.containment --real 6 --real-workload sliding --rate 500
    .venv/bin/python -m benchmarks.containment --real 6 --real-workload dashboards --rate 500 --bound   # + the widest alone
    .venv/bin/python -m benchmarks.containment --report      # tables into docs/containment.md, docs/img/containment.png
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.measure import summary
from runtime.operators.fields import duration_ms
from benchmarks.targets import UNLIMITED, delete_prefix, redis_client
from manager.service import Manager
from manager.state import parents_first
from runtime.dryrun import DryRunRuntime

REDIS_URL = os.environ.get("SANA_REDIS_URL", "redis://127.0.0.1:6379/0")
#: column -> (low, high, threshold step): readings are uniform over [low, high).
COLUMNS = {"temp": (-10.0, 45.0, 1.0), "humidity": (0.0, 100.0, 5.0), "light": (0.0, 2000.0, 50.0),
           "dust": (0.0, 500.0, 10.0), "airq": (0.0, 300.0, 10.0)}
SCHEMA = {"sensor": "string", **{column: "double" for column in COLUMNS}, "ts": "timestamp"}
DERIVED = {"sensor": "sensor", "temp_f": "temp * 9 / 5 + 32", "comfort": "humidity BETWEEN 30 AND 60",
           "bright": "light > 500", "dusty": "dust / 10", "ts": "ts"}
STREAMS = ("city-a", "city-b", "city-c")
WINDOWS = ("10 seconds", "30 seconds", "1 minute", "2 minutes", "5 minutes")
SLIDES = ("10 seconds", "30 seconds")
DASHBOARDS = 0.3
SLIDING = 0.5  # of the dashboards over a minute or more
RATE = 50.0  # records/s per stream, in the real-runtime run and the records-read estimate
SENSORS = 50


def app(rng: random.Random, index: int, salt: str, dense: bool = False) -> dict[str, Any]:
    """One app's dataflow (``dense``: all on the first stream, filtering temperature or humidity)."""
    topic = STREAMS[0] if dense else rng.choice(STREAMS)
    column = rng.choice(list(COLUMNS)[:2] if dense else list(COLUMNS))
    low, high, step = COLUMNS[column]
    threshold = round(rng.uniform(low + 0.3 * (high - low), low + 0.9 * (high - low)) / step) * step
    expr = f"{column} > {threshold:g}"
    tasks = [{"id": "src", "type": "source", "config": {"topic": topic, "schema": dict(SCHEMA)}},
             {"id": "keep", "type": "filter", "config": {"expr": expr}}]
    streams = [{"from": "src", "to": "keep"}]
    last = "keep"
    if rng.random() < 0.5:
        tasks.append({"id": "wide", "type": "select", "config": {"columns": dict(DERIVED)}})
        streams.append({"from": "keep", "to": "wide"})
        last = "wide"
        chosen = rng.sample([name for name in DERIVED if name not in ("sensor", "ts")], 2)
        tasks.append({"id": "view", "type": "select", "config": {"columns": {"sensor": "sensor", "ts": "ts",
                                                                             **{name: DERIVED[name] for name in chosen}}}})
        streams.append({"from": "keep", "to": "view"})
        tasks.append({"id": "out2", "type": "sink", "config": {"topic": f"{salt}-app{index}-view"}})
        streams.append({"from": "view", "to": "out2"})
    tasks.append({"id": "out", "type": "sink", "config": {"topic": f"{salt}-app{index}"}})
    streams.append({"from": last, "to": "out"})
    return {"name": f"app{index}", "tasks": tasks, "streams": streams}


def dashboard(rng: random.Random, index: int, salt: str, dense: bool = False) -> dict[str, Any]:
    """A per-sensor dashboard: a window of 10 s to 5 min over one stream, some of count/max/min/sum; half of the
    windows of a minute or more slide (the last minutes, updated every 10 or 30 s)."""
    topic = STREAMS[0] if dense else rng.choice(STREAMS)
    column = rng.choice(list(COLUMNS)[:2])
    pool = {"n": "count(*)", "hi": f"max({column})", "lo": f"min({column})", "s": f"sum({column})"}
    chosen = ["n", *rng.sample(["hi", "lo", "s"], rng.randint(1, 3))]
    window = rng.choice(WINDOWS)
    slide = rng.choice(SLIDES) if duration_ms(window) >= 60_000 and rng.random() < SLIDING else None
    return dashboard_document(f"dash{index}", topic, window, {name: pool[name] for name in chosen},
                              f"{salt}-dash{index}", slide)


def dashboard_document(name: str, topic: str, window: str, aggregates: dict[str, str], sink: str,
                       slide: str | None = None) -> dict[str, Any]:
    config = {"keys": ["sensor"], "time_column": "ts", "window": window, "watermark": "5 seconds",
              "aggregates": aggregates, **({"slide": slide} if slide else {})}
    return {"name": name, "tasks": [
        {"id": "src", "type": "source", "config": {"topic": topic, "schema": dict(SCHEMA)}},
        {"id": "win", "type": "window_aggregate", "config": config},
        {"id": "out", "type": "sink", "config": {"topic": sink}}],
        "streams": [{"from": "src", "to": "win"}, {"from": "win", "to": "out"}]}


def workload(rng: random.Random, index: int, salt: str, dense: bool = False) -> dict[str, Any]:
    """One dataflow of the workload: a dashboard (30 %) or an app. ``dense`` puts every dataflow on the first
    stream and filters on two columns: what a few users of one stream ask (the real-runtime run, where 2 cores
    hold about ten dataflows)."""
    return dashboard(rng, index, salt, dense) if rng.random() < DASHBOARDS else app(rng, index, salt, dense)


def records_read(manager: Manager) -> float:
    """Records the running filters and selects read per source record, summed over them.

    A task reads what its parent outputs: a source 1, a filter the share of readings above its threshold (a
    residual's predicate here is its dataflow's own, which implies its wider filter's, so it outputs the same
    share of the source), a select what it reads, a window a row per sensor and window (at :data:`RATE`).
    """
    state = manager.state
    out: dict[str, float] = {}
    total = 0.0
    for task_id in parents_first(state.tasks):
        spec = state.tasks[task_id]
        if spec.type == "source":
            out[task_id] = 1.0
            continue
        read = out[spec.inputs[0][1]]
        if spec.type != "sink":
            total += read
        if spec.type == "window_aggregate":  # a row per sensor and window, at RATE records/s per stream
            out[task_id] = SENSORS / (RATE * duration_ms(spec.config["window"]) / 1000)
        else:
            out[task_id] = _kept(spec.config["expr"]) if spec.type == "filter" else read
    return total


def _kept(expr: str) -> float:
    column, _, value = expr.partition(" > ")
    low, high, _ = COLUMNS[column]
    return (high - max(low, min(high, float(value)))) / (high - low)


def fill(manager: Manager, count: int, rng: random.Random, salt: str, start: int = 0) -> None:
    for index in range(start, start + count):
        manager.submit(workload(rng, index, salt))
        if (index - start + 1) % 2000 == 0:
            print(f"  {index - start + 1:,}/{count:,} submitted", file=sys.stderr, flush=True)


@contextmanager
def dry_manager(variant: str) -> Iterator[tuple[Manager, str]]:
    """A started Manager on the dry-run runtime under a fresh Redis prefix (deleted afterwards), containment on for
    the ``containment`` variant; with the prefix, which salts sink topics."""
    client = redis_client(REDIS_URL)
    prefix = f"bench-contain-{uuid.uuid4().hex[:8]}"
    manager = Manager(client, prefix, DryRunRuntime(client, prefix), containment=variant == "containment",
                      limits=UNLIMITED)
    manager.start()
    try:
        yield manager, prefix
    finally:
        delete_prefix(client, prefix)
        client.close()


def saving(apps: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for variant in ("exact", "containment"):
        with dry_manager(variant) as (manager, prefix):
            fill(manager, apps, random.Random(seed), prefix)
            stats = manager.stats()
            rows.append({"variant": variant, "apps": apps, "submitted_tasks": stats["submitted_tasks"],
                         "running_tasks": stats["running_tasks"], "containment_shares": stats["containment_shares"],
                         "records_read_per_source_record": round(records_read(manager), 2)})
    return rows


def latency(levels: list[int], probes: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for variant in ("exact", "containment"):
        with dry_manager(variant) as (manager, prefix):
            rng = random.Random(seed)
            running = 0
            for level in levels:
                fill(manager, level - running, rng, prefix, start=running)
                running = level
                submits, removes = [], []
                for probe in range(probes):
                    document = workload(rng, 10_000_000 + probe, prefix)
                    began = time.perf_counter()
                    result = manager.submit(document)
                    middle = time.perf_counter()
                    manager.remove(result.id)
                    submits.append((middle - began) * 1000)
                    removes.append((time.perf_counter() - middle) * 1000)
                row = {"variant": variant, "running": level, "submit_ms": summary(submits), "remove_ms": summary(removes)}
                print(f"{variant:>11} at {level:>6,}: submit p50 {row['submit_ms']['p50']:.2f} ms, "
                      f"p99 {row['submit_ms']['p99']:.2f} ms", file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def record_maker(topic: str, seed: int):
    """``make(i, at)``: a reading of ``topic`` (:data:`SENSORS` sensors, each column uniform over its range)."""
    rng = random.Random(seed)

    def make(i: int, at) -> dict[str, Any]:
        return {"sensor": f"s{rng.randrange(SENSORS):02d}",
                **{column: round(rng.uniform(low, high), 2) for column, (low, high, _) in COLUMNS.items()},
                "ts": at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"}

    return make


def dashboards(salt: str) -> list[dict[str, Any]]:
    """Six per-sensor dashboards over one stream, 10 s to 5 min, the 10 s one with every aggregate the others ask:
    where containment saves most (every longer window rolls the 10 s one up instead of shuffling every record)."""
    return [dashboard_document(f"dash{index}", STREAMS[0], window, _dashboard_aggregates(index), f"{salt}-dash{index}")
            for index, window in enumerate(("10 seconds", *WINDOWS[1:], "10 minutes"))]


def sliding_dashboards(salt: str) -> list[dict[str, Any]]:
    """The same 10 s window and five sliding ones (1, 2 and 5 minutes every 10 s, 5 minutes every 30 s, 10 minutes
    every minute): a record is in 68 windows read directly, each 10 s window's row in as many rolled up."""
    windows = (("10 seconds", None), ("1 minute", "10 seconds"), ("2 minutes", "10 seconds"),
               ("5 minutes", "10 seconds"), ("5 minutes", "30 seconds"), ("10 minutes", "1 minute"))
    return [dashboard_document(f"slide{index}", STREAMS[0], window, _dashboard_aggregates(index),
                               f"{salt}-slide{index}", slide) for index, (window, slide) in enumerate(windows)]


def _dashboard_aggregates(index: int) -> dict[str, str]:
    """The first dashboard's aggregates hold every one the others ask for."""
    if index == 0:
        return {"n": "count(*)", "hi": "max(temp)", "lo": "min(temp)", "s": "sum(temp)"}
    return {"n": "count(*)", "hi": "max(temp)"} if index % 2 else {"n": "count(*)", "s": "sum(temp)"}


def real(count: int, seed: int, run_dir: Path, settle_s: float, measure_s: float, kind: str = "variants",
         rate: float = RATE, bound: bool = False, max_delay_s: int = 0, jit_quiet: float = 0.0, pairs: int = 1,
         ) -> list[dict[str, Any]]:
    """``count`` dataflows of the workload (``kind`` ``variants``, dense), the six :func:`dashboards` or the six
    :func:`sliding_dashboards` on ``sana up`` (local Spark, its broker), containment off then on: the cores of the
    whole process tree once all run, with the source producing at ``rate`` records/s.

    ``bound`` (dashboards only) adds a third run, ``widest-only``: the first dashboard alone, the one every other
    rolls up. No containment can cost less than it, since a rolled-up dashboard still writes its own sink: one
    minus its cores over exact sharing's bounds what containment can save on the workload. ``max_delay_s``
    gives every sink that ``max_delay`` (a dashboard refreshed every few seconds needs no batch a second).
    ``cores_by_process``: the cores of the Spark JVM, PySpark's Python workers, the service's Python (``driver``)
    and the broker, from the last submit to the end of the measurement (the settle time included).

    ``jit_quiet`` (cores, 0: off): before the ``settle_s``, wait until the Spark JVM's JIT compiler threads use less
    than that (:func:`~benchmarks.reuse_replay.settle_jit`): the queries' steady cost rather than the JVM's warm-up.
    ``jit_settled_s`` is that wait; ``jit_cores`` the compiler threads' cores from its end to the end of the
    measurement.

    ``pairs`` runs of each variant, in the order :func:`run_order` gives (each row says its ``pair``)."""
    from benchmarks.batch_cost import cores_by_kind, cpu_by_process
    from benchmarks.reuse_replay import jit_cpu_s, settle_jit
    from benchmarks.reuse_real import RealService

    if bound and kind == "variants":
        raise SystemExit("--bound: the dashboards workloads only (the variants have no single widest dataflow)")
    rows = []
    for pair, containment, label in run_order(pairs, bound):
        rng = random.Random(seed)
        documents = dashboards(f"real-{label}") if kind == "dashboards" else \
            sliding_dashboards(f"real-{label}") if kind == "sliding" else \
            [workload(rng, index, f"real-{label}", dense=True) for index in range(count)]
        if label == "widest-only":
            documents = documents[:1]
        if max_delay_s:
            documents = [with_max_delay(document, max_delay_s) for document in documents]
        service = RealService(run_dir / f"{label}-{pair}", sharing=True, redis_url=REDIS_URL, records=record_maker,
                              rate=rate, settle_s=settle_s, measure_s=measure_s, containment=containment, keyed_workers=2)
        try:
            service.feed(list(STREAMS[:1]))
            for number, document in enumerate(documents, start=1):
                service.submit(document)
                print(f"{label} (pair {pair}): {number}/{len(documents)} submitted", file=sys.stderr, flush=True)
            settled = settle_jit(service.process.pid, jit_quiet, label=label) if jit_quiet else 0.0
            jit_before = jit_cpu_s(service.process.pid)
            produced, at, processes = sum(service.produced.values()), time.monotonic(), cpu_by_process(service.process.pid)
            measured = service.measure_step(at, service.cpu_s())
            jit_cores = (jit_cpu_s(service.process.pid) - jit_before) / (time.monotonic() - at)
            by_kind = cores_by_kind(processes, cpu_by_process(service.process.pid), time.monotonic() - at)
            input_rps = (sum(service.produced.values()) - produced) / (time.monotonic() - at)
            stats = service.client.get("/stats").raise_for_status().json()
            batches = keyed_batches(service.client.get("/runtime/queries").raise_for_status().json()["queries"])
            sinks = service.check_sinks()
        finally:
            service.close()
        row = {"variant": label, "pair": pair, "workload": kind, "dataflows": len(documents), "rate_per_stream": rate,
               "max_delay_s": max_delay_s,
               "produced_per_s": round(input_rps, 1), "cores": measured["cores"],
               "measured_s": measured["measured_s"], "batches_measured": measured["batches_measured"],
               "cpu_s_per_batch": measured["cpu_s_per_batch"], "running_tasks": measured["running_tasks"],
               "queries": measured["queries"], "containment_shares": stats["containment_shares"], **batches,
               "cores_by_process": by_kind, "jit_settled_s": round(settled, 1), "jit_cores": round(jit_cores, 3),
               "sinks": sinks}
        print(json.dumps({key: value for key, value in row.items() if key != "sinks"}), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def run_order(pairs: int, bound: bool) -> list[tuple[int, bool, str]]:
    """The real runs, ``(pair, containment on, label)`` in the order they run: pair by pair, exact sharing first
    in the first pair, containment first in the next (A B B A ...), so that what drifts from run to run (the
    machine, the first JVM's longer warm-up) weighs on both variants alike; then ``widest-only`` with ``bound``.

    >>> [(pair, label) for pair, _, label in run_order(2, bound=True)]
    [(0, 'exact'), (0, 'containment'), (1, 'containment'), (1, 'exact'), (2, 'widest-only')]
    """
    runs = []
    for pair in range(pairs):
        both = [(pair, False, "exact"), (pair, True, "containment")]
        runs += both if pair % 2 == 0 else both[::-1]
    return runs + ([(pairs, False, "widest-only")] if bound else [])


def with_max_delay(document: dict[str, Any], seconds: int) -> dict[str, Any]:
    """``document`` with every sink allowing ``seconds`` of delay.

    >>> with_max_delay({"tasks": [{"id": "o", "type": "sink", "config": {"topic": "t"}}]}, 10)["tasks"][0]["config"]
    {'topic': 't', 'max_delay': '10 seconds'}
    """
    return {**document, "tasks": [{**task, "config": {**task["config"], "max_delay": f"{seconds} seconds"}}
                                  if task["type"] == "sink" else task for task in document["tasks"]]}


def keyed_batches(queries: list[dict[str, Any]]) -> dict[str, int]:
    """The queries' batches (``GET /runtime/queries``) and, summed over their keyed operators, the batches run and
    those skipped as idle, and the operators that ran in another's worker tasks (a roll-up in its window's).

    >>> keyed_batches([{"batches": 10, "state": {"operators": {"w1": {"idle_batches": 0, "fused_in": None},
    ...                                                        "w2": {"idle_batches": 9, "fused_in": "w1"}}}}])
    {'batches': 10, 'keyed_batches': 20, 'keyed_idle_batches': 9, 'keyed_fused': 1}
    """
    batches = keyed = idle = fused = 0
    for query in queries:
        operators = query["state"]["operators"].values()
        batches += query["batches"]
        keyed += query["batches"] * len(operators)
        idle += sum(operator.get("idle_batches", 0) for operator in operators)
        fused += sum(1 for operator in operators if operator.get("fused_in"))
    return {"batches": batches, "keyed_batches": keyed, "keyed_idle_batches": idle, "keyed_fused": fused}


MARKERS = ("<!-- containment results -->", "<!-- end containment results -->")


def report(results: Path, docs: Path, image: Path) -> str:
    """The results' tables (written into ``docs`` between :data:`MARKERS`) and a plot of what containment saves."""
    dry = json.loads(results.read_text())
    real_rows = []
    for suffix in ("-real.json", "-real-delay-10s.json", "-real-dashboards.json", "-real-sliding.json"):
        path = results.with_name(results.stem + suffix)
        real_rows += json.loads(path.read_text()) if path.exists() else []
    lines = ["Dry run, the workload's first 200 dataflows (`--apps 200`):", "",
             "| | running tasks | containment shares (filter / select / window) | records read per source record |",
             "|---|---:|---|---:|"]
    for row in dry["saving"]:
        shares = row["containment_shares"]
        lines.append(f"| {row['variant']} | {row['running_tasks']} | {shares['filter']} / {shares['select']} / "
                     f"{shares['window_aggregate']} | {row['records_read_per_source_record']} |")
    lines += ["", "Submit and remove latency (in process, Manager and the dry-run runtime on the real Redis), ms:", "",
              "| running dataflows | exact: submit p50 / p99 | containment: submit p50 / p99 | exact: remove p99 | "
              "containment: remove p99 |", "|---:|---|---|---:|---:|"]
    by_level: dict[int, dict[str, dict]] = {}
    for row in dry["latency"]:
        by_level.setdefault(row["running"], {})[row["variant"]] = row
    for level, rows in sorted(by_level.items()):
        exact, contained = rows["exact"], rows["containment"]
        lines.append(f"| {level:,} | {exact['submit_ms']['p50']:.2f} / {exact['submit_ms']['p99']:.2f} | "
                     f"{contained['submit_ms']['p50']:.2f} / {contained['submit_ms']['p99']:.2f} | "
                     f"{exact['remove_ms']['p99']:.2f} | {contained['remove_ms']['p99']:.2f} |")
    if real_rows:
        lines += ["", "Real runtime (`sana up`, local Spark on 2 cores, one stream, cores of the whole process tree "
                  f"over {real_rows[0]['measured_s']:.0f} s once all run):", "",
                  "| workload | dataflows | records/s | sinks' max delay | | cores | running tasks | queries | "
                  "containment shares (filter / select / window) | sink records (repeated) |",
                  "|---|---:|---:|---:|---|---:|---:|---:|---|---:|"]
        for row in real_rows:
            shares = row["containment_shares"]
            pair = f" (pair {row['pair']})" if "pair" in row else ""
            lines.append(f"| {row.get('workload', 'variants')} | {row['dataflows']} | {row['rate_per_stream']:g} | "
                         f"{row.get('max_delay_s', 0)} s | {row['variant']}{pair} | {row['cores']:.3f} | {row['running_tasks']} | {row['queries']} | "
                         f"{shares['filter']} / {shares['select']} / {shares['window_aggregate']} | "
                         f"{sum(topic['records'] for topic in row['sinks'].values()):,} "
                         f"({sum(topic['repeated'] for topic in row['sinks'].values())}) |")
    text = "\n".join(lines)
    page = docs.read_text()
    start, end = page.index(MARKERS[0]) + len(MARKERS[0]), page.index(MARKERS[1])
    docs.write_text(page[:start] + "\n" + text + "\n" + page[end:])
    _plot(dry, real_rows, image)
    return text


def _plot(dry: dict[str, Any], real_rows: list[dict[str, Any]], image: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("records read per source record", [row["records_read_per_source_record"] for row in dry["saving"]]),
              ("running tasks", [row["running_tasks"] for row in dry["saving"]])]
    def group(row: dict[str, Any]) -> tuple[str, int, int]:
        return row.get("workload", "variants"), row["dataflows"], row.get("max_delay_s", 0)

    for kind, dataflows, delay in dict.fromkeys(group(row) for row in real_rows if row["variant"] != "widest-only"):
        rows = [row for row in real_rows if group(row) == (kind, dataflows, delay)]
        runs = sum(1 for row in rows if row["variant"] == "exact")
        title = f"{dataflows} {kind}{f', {delay} s batches' if delay else ''}{f', mean of {runs}' if runs > 1 else ''}"
        panels.append((f"cores, real runtime\n({title})",
                       [round(sum(row["cores"] for row in rows if row["variant"] == variant)
                              / max(1, sum(1 for row in rows if row["variant"] == variant)), 3)
                        for variant in ("exact", "containment")]))
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for axis, (title, values) in zip(axes, panels):
        axis.bar(["exact", "containment"], values, color=["#8899aa", "#3377bb"])
        axis.set_title(title, fontsize=10)
        for x, value in enumerate(values):
            axis.annotate(f"{value:g}", (x, value), ha="center", va="bottom", fontsize=9)
    figure.suptitle("Containment sharing on the parameter-variant workload", fontsize=11)
    figure.tight_layout()
    figure.savefig(image, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", type=int, default=200)
    parser.add_argument("--levels", default="100,1000,10000")
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/containment.json"))
    parser.add_argument("--real", type=int, default=0, metavar="N",
                        help="also run N dataflows of the workload on the real runtime, containment off then on")
    parser.add_argument("--real-workload", choices=["variants", "dashboards", "sliding"], default="variants")
    parser.add_argument("--rate", type=float, default=RATE, help="records/s per stream in the real-runtime run")
    parser.add_argument("--max-delay", type=int, default=0, metavar="S",
                        help="real runtime: every sink allows S seconds of delay (its max_delay)")
    parser.add_argument("--pairs", type=int, default=1,
                        help="real runtime: run each variant this many times, alternating which runs first")
    parser.add_argument("--bound", action="store_true",
                        help="real dashboards: also run the widest dashboard alone (what containment can save at most)")
    parser.add_argument("--run-dir", type=Path, default=Path(".sana/bench-containment"))
    parser.add_argument("--settle-s", type=float, default=30.0)
    parser.add_argument("--measure-s", type=float, default=60.0)
    parser.add_argument("--jit-quiet", type=float, default=0.1, metavar="CORES",
                        help="real runtime: first wait until the Spark JVM's JIT compiles with under CORES (0: no wait)")
    parser.add_argument("--report", action="store_true",
                        help="write the tables into docs/containment.md and the plot docs/img/containment.png")
    args = parser.parse_args(argv)
    if args.report:
        print(report(args.out, Path("docs/containment.md"), Path("docs/img/containment.png")))
        return 0
    if args.real:
        rows = real(args.real, args.seed, args.run_dir, args.settle_s, args.measure_s, args.real_workload, args.rate,
                    args.bound, args.max_delay, args.jit_quiet, args.pairs)
        suffix = "-real" if args.real_workload == "variants" else f"-real-{args.real_workload}"
        suffix += ("-bound" if args.bound else "") + (f"-delay-{args.max_delay}s" if args.max_delay else "")
        path = args.out.with_name(args.out.stem + suffix + ".json")
        path.write_text(json.dumps(rows, indent=2) + "\n")
        print(f"wrote {path}", file=sys.stderr)
        return 0
    saved = saving(args.apps, args.seed)
    for row in saved:
        print(json.dumps(row), file=sys.stderr)
    timed = latency([int(level) for level in args.levels.split(",")], args.probes, args.seed)
    args.out.write_text(json.dumps({"saving": saved, "latency": timed}, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
