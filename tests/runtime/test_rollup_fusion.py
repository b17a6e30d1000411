"""A window's roll-ups run in the window's own worker tasks (real Spark): the same rows as read from its output.

A roll-up (a longer window over a running window's output, docs/containment.md)
in the query of the window it reads runs inside that window's shuffle: its step
folds the partials each worker emits. These tests drive a window and its
roll-ups batch by batch, fused and as operators of their own, and a window over
the records directly, and compare what each emits.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from runtime.operators.window.spark import WindowAggregate
from runtime.spark.keyed_operator import NOT_SCANNED, FusedOutput, TaggedOutput
from runtime.plan import TaskSpec
from runtime.spark.reshape import ReshapeSettings
from runtime.spark.session import spark_session
from runtime.spark.shuffle import BUCKETS
from runtime.spark.sql_text import cast_columns, ddl, encode_sql
from runtime.spark.statement import fusions
from runtime.spark.worker_state import WorkerStateStore
from tests.fixtures.keyed import keyed_task

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = {"sensor": "string", "temp": "double", "ts": "timestamp"}
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
SMALL = {"keys": ["sensor"], "time_column": "ts", "window": "10 seconds", "watermark": "3 seconds",
         "aggregates": {"n": "count(*)", "s": "sum(temp)", "lo": "min(temp)", "hi": "max(temp)", "c": "count(temp)"}}
ROLLED = {"n": "sum(n)", "s": "sum(s)", "lo": "min(lo)", "hi": "max(hi)", "c": "sum(c)"}
DIRECT = {"n": "count(*)", "s": "sum(temp)", "lo": "min(temp)", "hi": "max(temp)", "c": "count(temp)"}
STILL = ReshapeSettings(enabled=False)


def rollup_config(window: str, slide: str | None = None, aggregates: dict[str, str] = ROLLED) -> dict[str, Any]:
    """What the manager runs for a longer window over the small one (``manager/containment.py``)."""
    config = {"keys": ["sensor"], "time_column": "window_start", "window": window, "watermark": "1 milliseconds",
              "aggregates": aggregates}
    return {**config, "slide": slide} if slide else config


@pytest.fixture(scope="module")
def spark():
    return spark_session("local[2]")


class Windows:
    """The small window and its roll-ups, fused (one shuffle) or each an operator of its own after it."""

    def __init__(self, spark, root, rollups: dict[str, dict[str, Any]], fuse: bool, workers: int = 8) -> None:
        self.spark, self.fuse = spark, fuse
        small = keyed_task("window_aggregate", SMALL, {"in": [SCHEMA]}, "small")
        self.small = WindowAggregate(small, {"in": [SCHEMA]}, workers, STILL)
        self.rollups = {}
        for name, config in rollups.items():
            task = keyed_task("window_aggregate", config, {"in": [small.schema]}, name)
            self.rollups[name] = WindowAggregate(task, {"in": [small.schema]}, workers, STILL)
        self.store = WorkerStateStore(str(root))
        self.states = {name: op.initial_state() for name, op in [("small", self.small), *self.rollups.items()]}
        self.batch_id = 0

    def run(self, records: list[dict[str, Any]]) -> dict[str, Counter]:
        """One micro-batch; what each operator emitted in it."""
        view = f"records_{id(self)}"
        self.spark.createDataFrame(records, ddl(SCHEMA)).createOrReplaceTempView(view)
        relations = {"in": [f"SELECT * FROM {view}"]}
        drafts, outputs = {}, {}
        if self.fuse:
            inside = {name: (op, self.states[name]) for name, op in self.rollups.items()}
            output, drafts["small"], children, shared = self.small.plan_fused(
                self.spark, self.batch_id, relations, self.states["small"], self.store, NOT_SCANNED, inside)
            outputs["small"] = (self.spark.sql(output) if isinstance(output, str) else output).toArrow().to_pylist()
            for name, child in children.items():
                outputs[name], drafts[name] = self.spark.sql(child.sql).toArrow().to_pylist(), child.draft
        else:
            output, drafts["small"] = self.small.plan(self.spark, self.batch_id, relations, self.states["small"], self.store)
            table = output.toArrow()
            outputs["small"] = table.to_pylist()
            small_view = f"small_{id(self)}"
            self.spark.createDataFrame(table).createOrReplaceTempView(small_view)
            for name, op in self.rollups.items():
                frame, drafts[name] = op.plan(self.spark, self.batch_id, {"in": [f"SELECT * FROM {small_view}"]},
                                              self.states[name], self.store)
                outputs[name] = frame.toArrow().to_pylist()
        for name, draft in drafts.items():
            operator = self.small if name == "small" else self.rollups[name]
            self.states[name] = operator.finish(self.batch_id, draft, self.store)
        self.batch_id += 1
        return {name: Counter(tuple(sorted(row.items())) for row in rows) for name, rows in outputs.items()}


def in_order(batch: int, count: int, seed: int) -> list[dict[str, Any]]:
    """Readings of one batch in event-time order across batches (6 s a batch), whole-number temperatures (sums of
    doubles exact in any order), some null."""
    rng = random.Random(seed * 1000 + batch)
    return [{"sensor": f"s{rng.randrange(12)}", "temp": None if rng.random() < 0.1 else float(rng.randrange(-10, 40)),
             "ts": EPOCH + timedelta(seconds=batch * 6 + rng.uniform(0, 6))} for _ in range(count)]


def late(batch: int, count: int, seed: int) -> list[dict[str, Any]]:
    """Readings some of which come late, beyond their small window's end (then dropped by it)."""
    rng = random.Random(seed * 1000 + batch)
    return [{"sensor": f"s{min(int(rng.paretovariate(1.2)), 30)}", "temp": float(rng.randrange(0, 40)),
             "ts": EPOCH + timedelta(seconds=batch * 6 + rng.uniform(-8, 6))} for _ in range(count)]


def test_only_what_folds_the_small_windows_partials_as_they_are_is_fused():
    small = WindowAggregate(keyed_task("window_aggregate", SMALL, {"in": [SCHEMA]}, "small"), {"in": [SCHEMA]})
    schema = small.task.schema

    def rollup(config: dict[str, Any], workers: int | None = None) -> WindowAggregate:
        return WindowAggregate(keyed_task("window_aggregate", config, {"in": [schema]}, "r"), {"in": [schema]}, workers)

    assert rollup(rollup_config("30 seconds")).fuses_into(small)
    assert rollup(rollup_config("1 minutes", "20 seconds")).fuses_into(small)
    refused = {
        "a window that is not a multiple": rollup_config("15 seconds"),
        "another time column": {**rollup_config("30 seconds"), "time_column": "window_end"},
        "other keys": {**rollup_config("30 seconds"), "keys": []},
        "a count of rows of the small window": {**rollup_config("30 seconds"), "aggregates": {"k": "count(*)"}},
        "a sum of maxima": {**rollup_config("30 seconds"), "aggregates": {"k": "sum(hi)"}},
        "an average": {**rollup_config("30 seconds"), "aggregates": {"k": "avg(s)"}},
    }
    for why, config in refused.items():
        assert not rollup(config).fuses_into(small), why
    assert not rollup(rollup_config("30 seconds"), workers=4).fuses_into(small)  # its state has other workers
    sliding = WindowAggregate(keyed_task("window_aggregate", {**SMALL, "slide": "5 seconds"}, {"in": [SCHEMA]}, "w"),
                              {"in": [SCHEMA]})
    assert not rollup(rollup_config("30 seconds")).fuses_into(sliding)  # its rows overlap


def test_fusions_pick_a_roll_up_reading_one_window_alone():
    small = WindowAggregate(keyed_task("window_aggregate", SMALL, {"in": [SCHEMA]}, "small"), {"in": [SCHEMA]})
    schema = small.task.schema
    rollup = WindowAggregate(keyed_task("window_aggregate", rollup_config("30 seconds"), {"in": [schema]}, "r"),
                             {"in": [schema]})
    again = WindowAggregate(keyed_task("window_aggregate", rollup_config("1 minutes"), {"in": [schema]}, "rr"),
                            {"in": [schema]})

    def task(task_id: str, *parents: str) -> TaskSpec:
        return TaskSpec(task_id, task_id, "window_aggregate", {}, None, tuple(("in", p) for p in parents), "f", {})

    tasks = [task("src"), task("small", "src"), task("r", "small"), task("rr", "r")]
    assert fusions(tasks, {"small": small, "r": rollup, "rr": again}) == {"r": "small"}
    assert fusions(tasks[:3], {"r": rollup}) == {}  # the small window runs in another query


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "own-operators"])
def test_rolled_up_windows_equal_the_windows_of_the_records(spark, tmp_path, fuse):
    """In-order input: the 30 s windows and the 30 s windows every 10 s rolled up from the 10 s ones hold the rows
    of 30 s windows computed from the records. Fused, each comes out in the very batch the direct window does."""
    rolled = Windows(spark, tmp_path / "rolled", {"long": rollup_config("30 seconds"),
                                                  "sliding": rollup_config("30 seconds", "10 seconds")}, fuse)
    direct = {name: WindowAggregate(keyed_task("window_aggregate", {**SMALL, "window": "30 seconds", "aggregates": DIRECT,
                                                                   **extra}, {"in": [SCHEMA]}, name), {"in": [SCHEMA]}, 8, STILL)
              for name, extra in (("long", {}), ("sliding", {"slide": "10 seconds"}))}
    direct_store, direct_states = WorkerStateStore(str(tmp_path / "direct")), {n: op.initial_state() for n, op in direct.items()}
    totals: dict[str, Counter] = {"long": Counter(), "sliding": Counter()}
    expected: dict[str, Counter] = {"long": Counter(), "sliding": Counter()}
    for batch in range(14):
        records = in_order(batch, 150, seed=3)
        got = rolled.run(records)
        spark.createDataFrame(records, ddl(SCHEMA)).createOrReplaceTempView("direct_records")
        for name, op in direct.items():
            frame, draft = op.plan(spark, batch, {"in": ["SELECT * FROM direct_records"]}, direct_states[name], direct_store)
            want = Counter(tuple(sorted(row.items())) for row in frame.toArrow().to_pylist())
            direct_states[name] = op.finish(batch, draft, direct_store)
            if fuse:
                assert got[name] == want, f"{name}, batch {batch}"
            totals[name] += got[name]
            expected[name] += want
    for name in totals:
        assert sum(expected[name].values()) > 10
        if fuse:
            assert totals[name] == expected[name]
        else:  # a window closes once a small window past its end is out: one small window later
            assert totals[name] <= expected[name]
            assert_only_the_last(expected[name] - totals[name], expected[name], timedelta(seconds=20))


def assert_only_the_last(extra: Counter, emitted: Counter, span: timedelta) -> None:
    """Every row of ``extra`` is of a window that ends within ``span`` of the last window ``emitted`` holds."""
    last = max(dict(row)["window_end"] for row in emitted)
    assert all(dict(row)["window_end"] > last - span for row in extra), sorted(dict(row)["window_end"] for row in extra)


def test_fused_roll_ups_hold_what_they_hold_as_operators_of_their_own_with_late_records(spark, tmp_path):
    """Records late for their small window are dropped by it either way; what the roll-ups emitted, summed over the
    batches, is the same, fused ones no later. Bucket moves of the small window mid-way change nothing. The two
    roll-ups ask for different aggregates (each output is its own roll-up's)."""
    rollups = {"long": rollup_config("30 seconds"),
               "sliding": rollup_config("1 minutes", "20 seconds", {"top": "max(hi)", "n": "sum(n)"})}
    fused, apart = Windows(spark, tmp_path / "fused", rollups, True), Windows(spark, tmp_path / "apart", rollups, False)
    rng = random.Random(5)
    emitted = {True: {name: Counter() for name in ["small", *rollups]}, False: {name: Counter() for name in ["small", *rollups]}}
    for batch in range(16):
        if batch in (4, 9):
            fused.small.request_moves({rng.randrange(BUCKETS): rng.randrange(8) for _ in range(10)})
        records = late(batch, 200, seed=9)
        for windows in (fused, apart):
            for name, rows in windows.run(records).items():
                emitted[windows.fuse][name] += rows
        for name in rollups:
            assert emitted[False][name] <= emitted[True][name], f"{name}, batch {batch}"
    assert fused.small.moved_rows > 0
    assert emitted[True]["small"] == emitted[False]["small"]
    for name in rollups:
        # emitted fused and not yet apart: only the windows closed last
        assert_only_the_last(emitted[True][name] - emitted[False][name], emitted[True][name], timedelta(seconds=20))
        assert sum(emitted[False][name].values()) > 10


def test_a_replayed_fused_batch_gives_the_same_records(spark, tmp_path):
    windows = Windows(spark, tmp_path, {"long": rollup_config("30 seconds")}, True)
    batches = [in_order(batch, 150, seed=4) for batch in range(11)]  # batch 10 closes [30 s, 60 s)
    for records in batches[:10]:
        windows.run(records)
    before = dict(windows.states)
    first = windows.run(batches[10])
    windows.states, windows.batch_id = before, 10  # Spark runs batch 10 again after a crash
    again = windows.run(batches[10])
    assert first == again and first["long"] and first["small"]


def test_a_roll_up_fused_after_running_on_its_own_routing_moves_its_state_to_the_windows(spark, tmp_path):
    """A roll-up that ran as an operator of its own, its buckets moved by its own routing, then runs inside the
    window (a query change put them together): its open windows move to the workers the window's routing names,
    and what it emits, summed over the batches, is what a roll-up fused from the start emits."""
    rollups = {"long": rollup_config("30 seconds"), "sliding": rollup_config("1 minutes", "20 seconds")}
    reference, switching = Windows(spark, tmp_path / "ref", rollups, True), Windows(spark, tmp_path / "sw", rollups, False)
    rng = random.Random(8)
    emitted = {id(w): {name: Counter() for name in ["small", *rollups]} for w in (reference, switching)}
    for batch in range(14):
        if batch in (2, 4):
            for operator in switching.rollups.values():
                operator.request_moves({bucket: rng.randrange(8) for bucket in range(BUCKETS)})
        switching.fuse = batch >= 6
        records = in_order(batch, 150, seed=6)
        for windows in (reference, switching):
            for name, rows in windows.run(records).items():
                emitted[id(windows)][name] += rows
    assert switching.states["long"]["routing"]["table"] == switching.states["small"]["routing"]["table"]
    assert sum(operator.moved_rows for operator in switching.rollups.values()) > 0
    for name in ["small", *rollups]:
        assert emitted[id(switching)][name] == emitted[id(reference)][name], name


def encoded_alone(spark, windows: Windows, outputs: list[TaggedOutput], own: str,
                  children: dict[str, FusedOutput]) -> list[tuple[str, str, int]]:
    """Each output encoded from its own merge, as the fragment encodes an output that is not written together."""
    relations = {0: own, **{child.tag: child.sql for child in children.values()}}
    branches = []
    for output in outputs:
        relation = f"({relations[output.tag]})"
        if output.casts is not None:
            relation = f"(SELECT {cast_columns(output.casts)} FROM {relation})"
        branches.append(encode_sql(relation, output.topic, output.slot))
    return sorted(tuple(row.values()) for row in spark.sql(" UNION ALL ".join(branches)).toArrow().to_pylist())


def test_outputs_written_together_are_named_as_each_alone(spark, tmp_path):
    """The window's and its roll-ups' outputs from one merge (combined_output_sql) are the rows each output's own
    merge gives, with the same names (sana.seq), in batches run in one Spark task and in several; and so they are
    with one roll-up left out (a replay after its removal names the others' rows as before)."""
    rollups = {"r1": rollup_config("20 seconds"), "r2": rollup_config("1 minutes"), "r3": rollup_config("30 seconds")}
    windows = Windows(spark, tmp_path, rollups, fuse=True, workers=4)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert partitions > 1
    both_kinds = set()
    for batch in range(8):
        # A large batch makes the next one run its workers in several Spark tasks (their merges then shuffle).
        records = in_order(batch, 25_000 if batch in (2, 5) else 300, seed=batch)
        windows.spark.createDataFrame(records, ddl(SCHEMA)).createOrReplaceTempView("records_named")
        inside = {name: (op, windows.states[name]) for name, op in windows.rollups.items()}
        own, draft, children, tagged = windows.small.plan_fused(
            spark, batch, {"in": ["SELECT * FROM records_named"]}, windows.states["small"], windows.store, NOT_SCANNED,
            inside)
        tagged.persist()
        try:
            single = windows.small.tasks_for(windows.states["small"], draft["routing"]) == 1
            both_kinds.add(single)
            outputs = [TaggedOutput(0, windows.small, {}, "out-small", 7, windows.small.task.schema),
                       *(TaggedOutput(child.tag, windows.rollups[name], child.renames, f"out-{name}", 40 + child.tag)
                         for name, child in children.items())]
            expected = encoded_alone(spark, windows, outputs, own, children)
            together = windows.small.combined_output_sql(windows.small.tagged_view, outputs, 1 if single else partitions)
            got = sorted(tuple(row.values()) for row in spark.sql(together).toArrow().to_pylist())
            assert got == expected, f"batch {batch}"
            fewer = [output for output in outputs if output.topic != "out-r1"]
            fewer_sql = windows.small.combined_output_sql(windows.small.tagged_view, fewer, 1 if single else partitions)
            assert sorted(tuple(row.values()) for row in spark.sql(fewer_sql).toArrow().to_pylist()) == \
                [row for row in expected if row[0] != "out-r1"], f"batch {batch}"
        finally:
            tagged.unpersist()
        windows.states["small"] = windows.small.finish(batch, draft, windows.store)
        for name, child in children.items():
            windows.states[name] = windows.rollups[name].finish(batch, child.draft, windows.store)
    assert both_kinds == {True, False}
