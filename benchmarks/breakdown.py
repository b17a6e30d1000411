"""Where an in-process submit and remove spend their time, and how many Redis round trips they make.

:func:`phase_breakdown` wraps, for its duration only and in this process only,
the steps ``Manager.submit_validated`` / ``Manager.remove`` go through (lock,
sync, plan, pending marker, runtime record, commit, memory update, unlock) and
redis-py's ``send_packed_command`` (one call = one request written = one round
trip, a pipeline counting once). :func:`parse_profile` attributes the time of
``parse_dataflow`` to its stages with cProfile.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis.connection

from benchmarks.measure import summary
from benchmarks.riot import cross_source_dataflow, riot_dataflow
from manager import merge
from manager.service import Manager
from manager.validate import parse_dataflow
from runtime.operators import sql

PRED_SEARCH_BASE = 3_000_000
BRIDGE_BASE = 4_000_000
SUBMIT_PHASES = ("parse", "lock", "sync", "plan", "pending", "runtime", "commit", "apply", "unlock")
REMOVE_PHASES = ("lock", "sync", "plan", "pending", "runtime", "commit", "apply", "unlock")


class _Recorder:
    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.round_trips = 0

    def timed(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.current[label] += (time.perf_counter() - start) * 1000

        return wrapper

    def take(self) -> tuple[dict[str, float], int]:
        phases, trips = dict(self.current), self.round_trips
        self.current.clear()
        self.round_trips = 0
        return phases, trips


@contextmanager
def _instrumented(manager: Manager) -> Iterator[_Recorder]:
    recorder = _Recorder()
    store, runtime = manager.store, manager.runtime
    original_lock = store.lock

    @contextmanager
    def timed_lock(*args: Any, **kwargs: Any) -> Iterator[None]:
        context = original_lock(*args, **kwargs)
        start = time.perf_counter()
        context.__enter__()
        recorder.current["lock"] += (time.perf_counter() - start) * 1000
        try:
            yield
        except BaseException:
            if not context.__exit__(*sys.exc_info()):
                raise
        else:
            start = time.perf_counter()
            context.__exit__(None, None, None)
            recorder.current["unlock"] += (time.perf_counter() - start) * 1000

    send = redis.connection.AbstractConnection.send_packed_command

    def counting_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.round_trips += 1
        return send(self, *args, **kwargs)

    patched_objects = {
        (store, "lock"): timed_lock,
        (store, "mark_pending"): recorder.timed("pending", store.mark_pending),
        (store, "commit_group"): recorder.timed("commit", store.commit_group),
        (runtime, "apply"): recorder.timed("runtime", runtime.apply),
        (manager.ledger, "sync"): recorder.timed("sync", manager.ledger.sync),
    }
    module_functions = {
        "plan_merge": recorder.timed("plan", merge.plan_merge),
        "plan_unmerge": recorder.timed("plan", merge.plan_unmerge),
        "apply_merge": recorder.timed("apply", merge.apply_merge),
        "apply_unmerge": recorder.timed("apply", merge.apply_unmerge),
    }
    saved_module = {name: getattr(merge, name) for name in module_functions}
    for (target, name), replacement in patched_objects.items():
        setattr(target, name, replacement)
    for name, replacement in module_functions.items():
        setattr(merge, name, replacement)
    redis.connection.AbstractConnection.send_packed_command = counting_send
    try:
        yield recorder
    finally:
        redis.connection.AbstractConnection.send_packed_command = send
        for name, original in saved_module.items():
            setattr(merge, name, original)
        for target, name in patched_objects:
            del target.__dict__[name]  # back to the class's method


def phase_breakdown(manager: Manager, documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Submit and immediately remove each document with every step timed (ms)."""
    submit_rows: list[dict[str, float]] = []
    remove_rows: list[dict[str, float]] = []
    trips: dict[str, list[int]] = {"submit": [], "remove": []}
    with _instrumented(manager) as recorder:
        for document in documents:
            start = time.perf_counter()
            flow = parse_dataflow(document)
            parsed = time.perf_counter()
            result = manager.submit_validated(flow)
            end = time.perf_counter()
            phases, count = recorder.take()
            phases["parse"] = (parsed - start) * 1000
            phases["total"] = (end - start) * 1000
            submit_rows.append(phases)
            trips["submit"].append(count)

            start = time.perf_counter()
            manager.remove(result.id)
            end = time.perf_counter()
            phases, count = recorder.take()
            phases["total"] = (end - start) * 1000
            remove_rows.append(phases)
            trips["remove"].append(count)
    return {
        "dataflows": len(documents),
        "submit": _rows(submit_rows, SUBMIT_PHASES),
        "remove": _rows(remove_rows, REMOVE_PHASES),
        "redis_round_trips": {op: {"min": min(counts), "max": max(counts), "mean": round(sum(counts) / len(counts), 2)}
                              for op, counts in trips.items()},
    }


def _rows(rows: list[dict[str, float]], phases: tuple[str, ...]) -> dict[str, Any]:
    result = {phase: summary([row.get(phase, 0.0) for row in rows]) for phase in (*phases, "total")}
    rest = [row["total"] - sum(row.get(phase, 0.0) for phase in phases) for row in rows]
    result["other"] = summary(rest)
    return result


_PARSE_STAGES = {
    "sqlglot type inference (infer_type / annotate_types)": ("runtime/operators/sql.py", "infer_type"),
    "sqlglot parse + checks (parse_expression)": ("runtime/operators/sql.py", "parse_expression"),
    "operator configs (pydantic, incl. canonical SQL)": ("manager/validate.py", "_config"),
    "document structure (pydantic)": ("manager/validate.py", "_structure"),
    "schema propagation (_propagate)": ("manager/validate.py", "_propagate"),
    "signatures (sha256 of canonical JSON)": ("manager/signature.py", "signatures"),
}


def _mean_parse_ms(documents: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    for document in documents:
        parse_dataflow(document)
    return (time.perf_counter() - start) * 1000 / len(documents)


def parse_profile(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean unprofiled ``parse_dataflow`` time, each stage's share of it under cProfile
    (stages nest: type inference is part of schema propagation), and, as an experiment,
    the mean with ``infer_type`` memoized by (expression, input schema)."""
    plain_ms = _mean_parse_ms(documents)
    profiler = cProfile.Profile()
    profiler.enable()
    for document in documents:
        parse_dataflow(document)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    whole = next(cumulative for (path, _, name), (_, _, _, cumulative, _) in stats.items()
                 if name == "parse_dataflow" and path.endswith("manager/validate.py"))
    shares = {}
    for label, (suffix, function) in _PARSE_STAGES.items():
        cumulative = sum(ct for (path, _, name), (_, _, _, ct, _) in stats.items() if name == function and path.endswith(suffix))
        shares[label] = round(100 * cumulative / whole, 1)
    original = sql.infer_type

    @functools.lru_cache(maxsize=65536)
    def cached(text: str, schema_items: tuple[tuple[str, str], ...]) -> str | None:
        return original(text, sql.parse_expression(text), dict(schema_items))

    sql.infer_type = lambda text, tree, schema: cached(text, tuple(sorted(schema.items())))
    try:
        _mean_parse_ms(documents)  # fill the cache
        memoized_ms = _mean_parse_ms(documents)
    finally:
        sql.infer_type = original
    return {"dataflows": len(documents), "mean_ms": round(plain_ms, 3), "share_percent": shares,
            "experiment_infer_type_memoized_mean_ms": round(memoized_ms, 3)}


def full_collection_ms() -> float:
    """How long one full (generation 2) collection of this process's heap takes now."""
    start = time.perf_counter()
    gc.collect()
    return round((time.perf_counter() - start) * 1000, 3)


def bridging_documents(count: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Dataflows whose removal (and, for ``bridge``, submission) touches a whole running DAG.

    - ``new_join``: a PRED app whose model join has a window no running app uses, so
      the join is created and stopped each time; its inputs (parse, model source) have
      different roots, so the remove plan looks for a split of the domain's DAG.
    - ``bridge``: a join of the grid and urban observations (weather vs. grid load, the
      reuse paper's motivating example), joining two running DAGs on submit and
      splitting them again on remove.
    """
    new_join = []
    number = PRED_SEARCH_BASE
    while len(new_join) < count:
        document = riot_dataflow(number, seed)
        number += 1
        join = next((task for task in document["tasks"] if task["id"] == "model_join"), None)
        if join is None:
            continue
        join["config"]["window"] = f"{7200 + len(new_join)} seconds"
        new_join.append(document)
    bridge = [cross_source_dataflow(BRIDGE_BASE + index, window=f"{3600 + index} seconds") for index in range(count)]
    return {"new_join": new_join, "bridge": bridge}
