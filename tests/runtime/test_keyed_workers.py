"""What a keyed operator's worker does with a batch, its state store and bucket moves (pure Arrow, no Spark)."""

from __future__ import annotations

import doctest
import importlib
import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from runtime.operators.join.worker import LEFT, RIGHT, JoinStep, side_column
from runtime.spark.shuffle import BUCKET, MARKER, PKEY, SIDE, Router, Routing, Split, default_table
from runtime.spark.worker_task import WorkerTask
from runtime.operators.window.worker import END, START, TIMESTAMP, TS, WindowStep, part_input
from runtime.spark.worker_state import KEEP_VERSIONS, WorkerStateStore

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
SECOND = 1_000_000


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def us(seconds: float) -> int:
    return int(at(seconds).timestamp() * SECOND)


@pytest.mark.parametrize("name", ["runtime.spark.shuffle", "runtime.spark.worker_task", "runtime.operators.window.worker", "runtime.spark.reshape",
                                  "runtime.operators.keyed_options", "runtime.spark.fragment", "runtime.spark.statement", "runtime.spark.isolation",
                                  "runtime.spark.keyed_operator", "runtime.spark.session",
                                  "runtime.spark.live_plan", "runtime.spark.sql_text", "runtime.spark.layout",
                                  "runtime.spark.kafka_source"])
def test_docstring_examples(name):
    assert doctest.testmod(importlib.import_module(name)).failed == 0


# -- window_aggregate ---------------------------------------------------------------

PARTS = (("n", "sum", pa.int64()), ("total", "sum", pa.float64()), ("hi", "max", pa.float64()))


def window_rows(records: list[tuple[str, float, float]], bucket: int = 3) -> pa.Table:
    """``(sensor, seconds, temp)`` records as the shuffle delivers them to a worker."""
    return pa.table({
        PKEY: pa.array([7] * len(records), pa.int32()),
        BUCKET: pa.array([bucket] * len(records), pa.int32()),
        "sensor": [sensor for sensor, _, _ in records],
        TS: pa.array([at(t) for _, t, _ in records], TIMESTAMP),
        part_input("n"): pa.array([1] * len(records), pa.int64()),
        part_input("total"): pa.array([temp for _, _, temp in records], pa.float64()),
        part_input("hi"): pa.array([temp for _, _, temp in records], pa.float64()),
    })


def window_step(watermark: float | None, emit: float | None, slide: int = 10) -> WindowStep:
    return WindowStep(("sensor",), 10 * SECOND, slide * SECOND, PARTS,
                      None if watermark is None else us(watermark), None if emit is None else us(emit))


def emitted_rows(table: pa.Table | None) -> list[tuple]:
    if table is None:
        return []
    return sorted((row["sensor"], row[START], row["n"], row["total"], row["hi"]) for row in table.to_pylist())


def test_window_worker_merges_batches_and_emits_closed_windows_once():
    state, emitted, report = window_step(None, 2)(None, window_rows([("a", 1, 20.0), ("a", 4, 22.0), ("b", 12, 5.0)]))
    assert emitted_rows(emitted) == [] and report == {"rows": 3, "state_rows": 2}
    state, emitted, report = window_step(2, 9)(state, window_rows([("a", 7, 30.0)]))
    assert emitted_rows(emitted) == [] and report["state_rows"] == 2
    state, emitted, report = window_step(9, 15)(state, window_rows([("a", 3, 1.0), ("b", 25, 6.0)]))
    assert emitted_rows(emitted) == [("a", at(0), 4, 73.0, 30.0)]  # the late 3 s counts: [0, 10) was still open
    assert report["state_rows"] == 2 and sorted(state.column(END).to_pylist()) == [at(20), at(30)]


def test_window_worker_drops_pairs_the_watermark_closed_and_splits_sliding_windows():
    state, emitted, _ = window_step(12, 12, slide=5)(None, window_rows([("a", 8, 1.0), ("a", 13, 2.0)]))
    # t=8 lies in [0,10) (closed: dropped) and [5,15) (open); t=13 in [5,15) and [10,20)
    assert emitted_rows(emitted) == []
    windows = sorted(zip(state.column(START).to_pylist(), state.column("n").to_pylist()))
    assert windows == [(at(5), 2), (at(10), 1)]


def test_window_worker_sum_of_only_nulls_is_null():
    rows = window_rows([("a", 1, 0.0)]).set_column(5, part_input("total"), pa.array([None], pa.float64()))
    _, emitted, _ = window_step(None, 20)(None, rows)
    (row,) = emitted.to_pylist()
    assert row["total"] is None and row["n"] == 1


# -- join ------------------------------------------------------------------------------

LEFT_COLUMNS = ("sensor", "temp", "ts")
RIGHT_COLUMNS = ("sensor", "temp", "ts")


def join_step(watermark: float | None, window: int | None = 5) -> JoinStep:
    return JoinStep(("sensor",), LEFT_COLUMNS, RIGHT_COLUMNS, (("temp", "right_temp"), ("ts", "right_ts")),
                    ("sensor", "temp", "ts", "right_temp", "right_ts"), "ts",
                    None if window is None else window * SECOND, None if watermark is None else us(watermark))


def join_rows(left: list[tuple[str, float, float]], right: list[tuple[str, float, float]]) -> pa.Table:
    records = [(LEFT, record) for record in left] + [(RIGHT, record) for record in right]
    columns = {PKEY: pa.array([1] * len(records), pa.int32()), BUCKET: pa.array([0] * len(records), pa.int32()),
               SIDE: pa.array([side for side, _ in records], pa.int8())}
    for side in (LEFT, RIGHT):
        columns[side_column(side, "sensor")] = pa.array([r[0] if s == side else None for s, r in records], pa.string())
        columns[side_column(side, "temp")] = pa.array([r[2] if s == side else None for s, r in records], pa.float64())
        columns[side_column(side, "ts")] = pa.array([at(r[1]) if s == side else None for s, r in records], TIMESTAMP)
    return pa.table(columns)


def pairs(table: pa.Table | None) -> list[tuple]:
    return [] if table is None else [(r["sensor"], r["temp"], r["right_temp"]) for r in table.to_pylist()]


def test_join_worker_emits_each_pair_once_and_evicts_what_cannot_match():
    state, out, report = join_step(None)(None, join_rows([("a", 1, 1.0), ("b", 1, 2.0)], [("a", 2, 10.0)]))
    assert pairs(out) == [("a", 1.0, 10.0)] and report["max_left_us"] == us(1) and report["max_right_us"] == us(2)
    state, out, _ = join_step(None)(state, join_rows([("a", 3, 3.0)], [("a", 9, 11.0)]))
    assert sorted(pairs(out)) == [("a", 3.0, 10.0)]  # 1 and 9 are 8 s apart: no pair
    state, out, report = join_step(20)(state, join_rows([], [("a", 22, 12.0)]))
    assert pairs(out) == [] and report["state_rows"] == 1  # everything older than 20 - 5 is gone


def test_join_worker_drops_new_rows_older_than_the_watermark_in_force():
    """The SQL of a batch carries no watermark (its generated code stays the same): the worker drops late rows."""
    state, _, _ = join_step(None)(None, join_rows([("a", 10, 1.0)], [("a", 12, 10.0)]))
    state, out, report = join_step(11)(state, join_rows([("a", 10.5, 2.0), ("a", 13, 3.0)], [("a", 9, 11.0)]))
    assert pairs(out) == [("a", 3.0, 10.0)], "the left row at 10.5 and the right row at 9 are too late"
    assert report["rows"] == 1 and report["state_rows"] == 3  # 10 and 12 kept (>= 11 - 5), 13 added


def test_join_worker_output_order_does_not_depend_on_arrival_order():
    left = [(f"k{i % 3}", i, float(i)) for i in range(12)]
    right = [(f"k{i % 3}", i + 0.5, float(100 + i)) for i in range(12)]
    first = join_step(None, window=None)(None, join_rows(left, right))[1].to_pylist()
    random.Random(3).shuffle(left)
    random.Random(4).shuffle(right)
    second = join_step(None, window=None)(None, join_rows(left, right))[1].to_pylist()
    assert first == second and len(first) == 48


# -- the state store ----------------------------------------------------------------------

def test_state_store_reads_the_newest_version_before_a_batch_and_keeps_a_few(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    for batch in range(6):
        store.save("op", 2, batch, pa.table({"x": [batch]}), {"rows": batch})
    assert store.load_before("op", 2, 6)[0] == 5
    version, table = store.load_before("op", 2, 5)
    assert version == 4 and table.column("x").to_pylist() == [4]
    assert store.load_before("op", 2, 3) == (None, None)  # pruned: only the newest KEEP_VERSIONS stay
    assert len(list((tmp_path / "op" / "w2").iterdir())) == KEEP_VERSIONS
    assert store.meta("op", 2, 5) == {"rows": 5} and store.meta("op", 2, 9) is None
    store.save("op", 3, 0, None, {"rows": 0})
    assert store.load_before("op", 3, 1) == (0, None)
    store.drop("op")
    assert not (tmp_path / "op").exists()


def test_a_copy_takes_each_workers_state_as_of_a_batch_its_operator_may_have_skipped(tmp_path):
    """A batch an operator had nothing to do in writes no version: its state after batch 7 is the one batch 5 left."""
    store, target = WorkerStateStore(str(tmp_path / "old")), WorkerStateStore(str(tmp_path / "new"))
    for worker in range(2):
        store.save("op", worker, 5, pa.table({"x": [worker]}), {"rows": 5})
        store.save("op", worker, 8, pa.table({"x": [99]}), {"rows": 8})  # a batch after 7 that did not commit
    assert store.copy_version("op", 7, target, 0, "taken") == 2
    assert [target.load_before("taken", worker, 1)[1].column("x").to_pylist() for worker in range(2)] == [[0], [1]]
    assert target.meta("taken", 1, 0) == {"rows": 5}
    with pytest.raises(LookupError, match="keyed operator op: worker 0 has no state version up to 4"):
        store.copy_version("op", 4, target, 0)


# -- routing and moves ----------------------------------------------------------------------

def test_router_applies_requests_at_the_next_batch_and_checks_them():
    router = Router(workers=4, buckets=8)
    routing = router.initial()
    assert routing["table"] == list(default_table(4, 8))
    request = router.request({1: 3, 6: 0})
    after = router.next_table(routing)
    assert after["table"] == [0, 3, 2, 3, 0, 1, 0, 3] and after["version"] == 1 and after["requested"] == request
    assert router.next_table(after)["version"] == 1  # nothing pending: the table stays
    with pytest.raises(ValueError, match="worker 4 is not in 0..3"):
        router.request({0: 4})
    with pytest.raises(ValueError, match="bucket 8 is not in 0..7"):
        router.request({8: 0})


def test_a_moved_bucket_takes_exactly_its_state_rows_along(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    store.save("op", 0, 4, pa.table({BUCKET: pa.array([0, 2, 2, 4], pa.int32()), "v": [1, 2, 3, 4]}), {})
    store.save("op", 1, 4, pa.table({BUCKET: pa.array([1, 3], pa.int32()), "v": [5, 6]}), {})
    old, new = Routing((0, 1, 0, 1, 0)), Routing((0, 1, 1, 1, 0))  # bucket 2: worker 0 -> 1
    task = WorkerTask(store, "op", 5, (5, 6), old, new, None, None)
    _, mine = store.load_before("op", 0, 5)
    left, moved = task._transition(0, mine)
    assert left.column("v").to_pylist() == [1, 4] and moved == 0
    _, theirs = store.load_before("op", 1, 5)
    arrived, moved = task._transition(1, theirs)
    assert sorted(arrived.column("v").to_pylist()) == [2, 3, 5, 6] and moved == 2


# -- splits (Reshape, split by records) -------------------------------------------------------

def _join_state(buckets: list[int], sides: list[int], values: list[int]) -> pa.Table:
    return pa.table({BUCKET: pa.array(buckets, pa.int32()), SIDE: pa.array(sides, pa.int8()), "v": values})


def test_a_helper_joining_a_join_split_copies_the_replicated_side_and_gives_its_rows_back_when_it_leaves(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    table = (0, 1, 0, 1)  # worker 0 owns buckets 0 and 2
    # worker 0: left rows 1, 2 and right rows 3, 4 of its buckets; worker 1: its own bucket 1
    store.save("op", 0, 4, _join_state([0, 2, 0, 2], [0, 0, 1, 1], [1, 2, 3, 4]), {})
    store.save("op", 1, 4, _join_state([1], [1], [9]), {})
    plain, split = Routing(table), Routing(table, (Split(0, 0, ((1, 0, 5000),)),))  # left side split, right replicated
    joining = WorkerTask(store, "op", 5, (5, 6), plain, split, None, None, sides=2)
    _, helper_state = store.load_before("op", 1, 5)
    helper_state, copied = joining._transition(1, helper_state)
    assert sorted(helper_state.column("v").to_pylist()) == [3, 4, 9] and copied == 2  # the right side, replicated
    _, skewed_state = store.load_before("op", 0, 5)
    assert joining._transition(0, skewed_state)[0].column("v").to_pylist() == [1, 2, 3, 4]  # the skewed keeps all

    # batch 5 ran: the helper now also holds a left row (7) of bucket 2 and a copied right row (8)
    store.save("op", 1, 5, pa.concat_tables([helper_state, _join_state([2, 2], [0, 1], [7, 8])]), {})
    store.save("op", 0, 5, _join_state([0, 2, 0, 2, 2], [0, 0, 1, 1, 1], [1, 2, 3, 4, 8]), {})
    leaving = WorkerTask(store, "op", 6, (5, 6), split, plain, None, None, sides=2)
    _, helper_state = store.load_before("op", 1, 6)
    assert leaving._transition(1, helper_state)[0].column("v").to_pylist() == [9]  # only its own bucket stays
    _, skewed_state = store.load_before("op", 0, 6)
    back, moved = leaving._transition(0, skewed_state)
    assert sorted(back.column("v").to_pylist()) == [1, 2, 3, 4, 7, 8] and moved == 1  # its left row 7 came back


def test_a_window_split_ending_merges_the_helpers_partials_into_the_skewed_worker(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    table = (0, 1)
    store.save("op", 0, 1, pa.table({BUCKET: pa.array([0], pa.int32()), "v": [10]}), {})
    store.save("op", 1, 1, pa.table({BUCKET: pa.array([1, 0], pa.int32()), "v": [5, 3]}), {})  # 3: a partial of bucket 0
    split = Routing(table, (Split(0, None, ((1, 0, 10_000),)),))
    ending = WorkerTask(store, "op", 2, (5, 6), split, Routing(table), None, None)
    _, skewed_state = store.load_before("op", 0, 2)
    merged, moved = ending._transition(0, skewed_state)
    assert sorted(merged.column("v").to_pylist()) == [3, 10] and moved == 1
    _, helper_state = store.load_before("op", 1, 2)
    assert ending._transition(1, helper_state)[0].column("v").to_pylist() == [5]


def test_a_bucket_moving_into_a_split_join_worker_is_copied_to_the_helpers_it_keeps(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    # worker 0 is split (left side scattered, right side copied) with helper 1; bucket 1 moves from worker 2 to 0
    before = Routing((0, 2, 1), (Split(0, 0, ((1, 0, 5000),)),))
    after = Routing((0, 0, 1), before.splits)
    store.save("op", 0, 4, _join_state([0, 0], [0, 1], [1, 2]), {})
    store.save("op", 1, 4, _join_state([0, 0, 2], [0, 1, 1], [3, 2, 4]), {})  # a share (3), a copy (2), its own
    store.save("op", 2, 4, _join_state([1, 1], [0, 1], [5, 6]), {})
    task = WorkerTask(store, "op", 5, (5, 6, 7), before, after, None, None, sides=2)
    states = {worker: task._transition(worker, store.load_before("op", worker, 5)[1])[0] for worker in range(3)}
    assert sorted(states[0].column("v").to_pylist()) == [1, 2, 5, 6]  # the new owner takes the whole bucket
    assert sorted(states[1].column("v").to_pylist()) == [2, 3, 4, 6]  # the helper it keeps: the bucket's right side
    assert states[2] is None


def test_a_split_ending_as_a_bucket_moves_gives_the_helpers_partials_to_the_buckets_new_owner(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    before = Routing((0, 0, 2), (Split(0, None, ((1, 0, 5000),)),))  # a window's worker 0 split, helper 1
    after = Routing((0, 2, 2))  # the split ends and bucket 1 moves to worker 2
    store.save("op", 0, 4, pa.table({BUCKET: pa.array([0, 1], pa.int32()), "v": [1, 2]}), {})
    store.save("op", 1, 4, pa.table({BUCKET: pa.array([0, 1], pa.int32()), "v": [3, 4]}), {})  # partials
    store.save("op", 2, 4, pa.table({BUCKET: pa.array([2], pa.int32()), "v": [5]}), {})
    task = WorkerTask(store, "op", 5, (5, 6, 7), before, after, None, None)
    states = {worker: task._transition(worker, store.load_before("op", worker, 5)[1]) for worker in range(3)}
    assert sorted(states[0][0].column("v").to_pylist()) == [1, 3] and states[0][1] == 1
    assert states[1][0] is None
    assert sorted(states[2][0].column("v").to_pylist()) == [2, 4, 5] and states[2][1] == 2


def _random_routing(rng: random.Random, workers: int, buckets: int, sides: int) -> Routing:
    table = tuple(rng.randrange(workers) for _ in range(buckets))
    skewed = rng.sample(range(workers), rng.randint(0, 2))
    others = [worker for worker in range(workers) if worker not in skewed]
    splits = tuple(Split(worker, rng.randrange(sides) if sides > 1 else None,
                         tuple((helper, 0, 1) for helper in rng.sample(others, rng.randint(1, 2))))
                   for worker in skewed)
    return Routing(table, splits)


@pytest.mark.parametrize("sides", [1, 2])
def test_any_routing_change_keeps_every_row_once_where_scattered_and_complete_where_copied(tmp_path, sides):
    """Random routings before and after (moves, splits starting, ending, changing side or helpers, all at once),
    states laid out as the old routing places them: after the change each bucket's rows are laid out as the new
    one places them, none lost or doubled."""
    rng, workers, buckets = random.Random(7), 4, 8
    sides_of = (None,) if sides == 1 else (0, 1)
    for trial in range(60):
        old, new = _random_routing(rng, workers, buckets, sides), _random_routing(rng, workers, buckets, sides)
        rows: dict[int, list[tuple[int, int, int]]] = {worker: [] for worker in range(workers)}  # (bucket, side, id)
        truth: dict[tuple[int, int | None], list[int]] = {}
        for bucket in range(buckets):
            for side in sides_of:
                _, members, copied = old.holders(bucket, side)
                ids = [len(truth) * 100 + index for index in range(rng.randint(0, 3))]
                truth[(bucket, side)] = ids
                for row in ids:
                    for member in (members if copied else [rng.choice(members)]):
                        rows[member].append((bucket, side or 0, row))
        for worker, held in rows.items():
            columns = {BUCKET: pa.array([bucket for bucket, _, _ in held], pa.int32()), "v": [row for _, _, row in held]}
            if sides > 1:
                columns[SIDE] = pa.array([side for _, side, _ in held], pa.int8())
            store_table = pa.table(columns)
            WorkerStateStore(str(tmp_path / str(trial))).save("op", worker, 4, store_table, {})
        store = WorkerStateStore(str(tmp_path / str(trial)))
        task = WorkerTask(store, "op", 5, tuple(range(workers)), old, new, None, None, sides=sides)
        after = {worker: task._transition(worker, store.load_before("op", worker, 5)[1])[0] for worker in range(workers)}
        for (bucket, side), ids in truth.items():
            _, members, copied = new.holders(bucket, side)
            held = {worker: sorted(row for row, b, s in _rows(state, sides) if b == bucket and s == (side or 0))
                    for worker, state in after.items()}
            where = f"trial {trial}, bucket {bucket}, side {side}: {old} -> {new}"
            assert all(not held[worker] for worker in range(workers) if worker not in members), where
            if copied:
                assert all(held[member] == sorted(ids) for member in members), where
            else:
                assert sorted(row for member in members for row in held[member]) == sorted(ids), where


def _rows(state, sides: int) -> list[tuple[int, int, int]]:
    if state is None:
        return []
    side = state.column(SIDE).to_pylist() if sides > 1 else [0] * state.num_rows
    return list(zip(state.column("v").to_pylist(), state.column(BUCKET).to_pylist(), side))


def test_arrivals_count_each_record_once_replicas_left_out():
    split = Routing((0, 1), (Split(0, 0, ((1, 0, 5000),)),))
    task = WorkerTask(None, "op", 1, (5, 6), split, split, None, None, sides=2)
    rows = pa.table({BUCKET: pa.array([0, 0, 0, 1], pa.int32()), SIDE: pa.array([0, 1, 1, 1], pa.int8())})
    # at the helper (worker 1): a left row of bucket 0 (split share, counted), two right replicas, its own right row
    assert task._arrivals(1, rows) == [[1, 0], [0, 1]]
    assert task._arrivals(0, rows) == [[1, 0], [2, 1]]  # the owner counts the right side of its bucket


def test_the_router_applies_splits_at_the_next_batch_and_routes_with_them():
    router = Router(workers=2, buckets=4)
    routing = router.initial()
    router.request_splits([{"worker": 0, "side": None, "helpers": [[1, 0, 2500]]}])
    after = router.next_table(routing)
    assert after["splits"] == [{"worker": 0, "side": None, "helpers": [[1, 0, 2500]]}] and after["version"] == 1
    assert router.next_table(after) == {**after, "requested": 0}  # nothing pending: the split stays
    bucket, pkey = router.columns(["k"], after, ["`k`", "`v`"])
    assert "CASE WHEN" in pkey and ">= 0 AND" in pkey and "explode" not in pkey
    _, other_side = router.columns(["k"], {**after, "splits": [{"worker": 0, "side": 0, "helpers": [[1, 0, 2500]]}]},
                                   ["`k`"], side=1)
    assert other_side.startswith("explode(")


# -- several workers in one Spark task (a packed shuffle) ---------------------------------------

def _counting_step(state, rows):
    """A step that keeps how many rows its worker has seen and outputs one row per call."""
    seen = (state.column("n")[0].as_py() if state is not None else 0) + (rows.num_rows if rows is not None else 0)
    return pa.table({"n": [seen]}), pa.table({"n": [seen]}), {"rows": rows.num_rows if rows is not None else 0}


def _shuffled(rows_of: dict[int, int], markers: list[int]) -> list[pa.RecordBatch]:
    keys = [key for key, count in rows_of.items() for _ in range(count)] + markers
    buckets = [0] * (len(keys) - len(markers)) + [MARKER] * len(markers)
    return pa.table({PKEY: pa.array(keys, pa.int32()), BUCKET: pa.array(buckets, pa.int32())}).to_batches()


def test_a_packed_task_runs_each_of_its_workers_on_its_own_rows_and_state(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    pkeys = (11, 12, 13, 14)  # four workers in two Spark tasks: workers 0 and 2 in task 0
    routing = Routing((0, 1, 2, 3))
    task = WorkerTask(store, "op", 1, pkeys, routing, routing, _counting_step, pa.schema([("n", pa.int64())]), tasks=2)
    out = list(task(_shuffled({11: 3, 13: 5}, markers=[13, 11])))
    assert [batch.column(0).to_pylist() for batch in out] == [[3], [5]]  # worker 0, then worker 2
    assert store.meta("op", 0, 1)["rows"] == 3 and store.meta("op", 2, 1)["rows"] == 5
    assert store.meta("op", 1, 1) is None, "workers of the other task are not this task's"
    again = WorkerTask(store, "op", 2, pkeys, routing, routing, _counting_step, pa.schema([("n", pa.int64())]), tasks=2)
    assert [b.column(0).to_pylist() for b in again(_shuffled({13: 1}, markers=[11, 13]))] == [[3], [6]]


def test_a_packed_task_refuses_rows_or_markers_the_partitioning_did_not_plan(tmp_path):
    store = WorkerStateStore(str(tmp_path))
    pkeys, routing = (11, 12, 13, 14), Routing((0, 1, 2, 3))
    task = WorkerTask(store, "op", 1, pkeys, routing, routing, _counting_step, pa.schema([("n", pa.int64())]), tasks=2)
    with pytest.raises(RuntimeError, match="row\\(s\\) of other workers"):
        list(task(_shuffled({12: 1}, markers=[11, 13])))
    with pytest.raises(RuntimeError, match="worker marker"):  # workers 0 and 1 are in different tasks
        list(task(_shuffled({}, markers=[11, 12])))
    one_each = WorkerTask(store, "op", 1, pkeys, routing, routing, _counting_step, pa.schema([("n", pa.int64())]))
    with pytest.raises(RuntimeError, match="worker marker"):  # unpacked: one worker per task
        list(one_each(_shuffled({}, markers=[11, 13])))
