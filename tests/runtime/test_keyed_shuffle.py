"""The keyed shuffle on real Spark: identity partitioning, replays, and bucket moves that change nothing.

Each test drives one keyed operator batch by batch the way a fragment does
(``tests/fixtures/keyed.py``), so the batches, replays and moves are exactly
the ones asked for.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest

from runtime.broker.producer import BatchProducer
from runtime.operators.join.spark import StreamJoin
from runtime.plan import TaskSpec
from runtime.spark.fragment import FragmentQuery
from runtime.spark.kafka_source import RAW_SCHEMA
from runtime.spark.live_plan import LivePlan
from runtime.spark.sql_text import ddl
from runtime.spark.shuffle import BUCKETS, partition_keys
from runtime.spark.reshape import ReshapeSettings
from runtime.spark.session import spark_session
from runtime.operators.window.spark import WindowAggregate
from tests.fixtures.kafka_io import read_all
from tests.fixtures.keyed import KeyedDriver, keyed_task

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = {"sensor": "string", "temp": "double", "ts": "timestamp"}
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW_CONFIG = {"keys": ["sensor"], "time_column": "ts", "window": "10 seconds", "slide": "5 seconds",
                 "watermark": "3 seconds", "aggregates": {"n": "count(*)", "mean": "avg(temp)", "hi": "max(temp)"}}
JOIN_CONFIG = {"on": ["sensor"], "window": "4 seconds"}
STILL = ReshapeSettings(enabled=False)  # these tests move buckets by hand; test_skew.py runs Reshape


@pytest.fixture(scope="module")
def spark():
    return spark_session("local[2]")


def readings(batch: int, count: int, seed: int) -> list[dict]:
    """Skewed sensor readings of one batch, mostly in order, some late."""
    rng = random.Random(seed * 1000 + batch)
    base = batch * 6
    return [{"sensor": f"s{min(int(rng.paretovariate(1.2)), 40)}", "temp": round(rng.uniform(0, 40), 1),
             "ts": EPOCH + timedelta(seconds=base + rng.uniform(-4, 6))} for _ in range(count)]


def window_driver(spark, root, workers: int = 8) -> KeyedDriver:
    task = keyed_task("window_aggregate", WINDOW_CONFIG, {"in": [SCHEMA]}, "w")
    return KeyedDriver(spark, WindowAggregate(task, {"in": [SCHEMA]}, workers, STILL), {"in": SCHEMA}, root)


def join_driver(spark, root, workers: int = 8) -> KeyedDriver:
    task = keyed_task("join", JOIN_CONFIG, {"left": [SCHEMA], "right": [SCHEMA]}, "j")
    return KeyedDriver(spark, StreamJoin(task, {"left": [SCHEMA], "right": [SCHEMA]}, workers, STILL),
                       {"left": SCHEMA, "right": SCHEMA}, root)


def rows(output: list[dict]) -> Counter:
    return Counter(tuple(sorted(row.items())) for row in output)


def test_partition_keys_are_sparks_own_hash_partitions(spark):
    for workers in (1, 2, 3, 4, 8, 13, 32):
        keys = partition_keys(workers)
        listed = ", ".join(f"({key})" for key in keys)
        got = spark.sql(f"SELECT pmod(hash(CAST(v AS INT)), {workers}) AS p FROM VALUES {listed} AS t(v)").collect()
        assert [row.p for row in got] == list(range(workers))


def test_each_logical_worker_is_one_task_of_the_shuffle_stage(spark, tmp_path):
    driver = window_driver(spark, tmp_path, workers=8)
    batch = readings(0, 400, seed=1)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("sana-identity", "keyed shuffle", False)
    try:
        driver.run({"in": batch})
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    stages = [tracker.getStageInfo(stage) for job in tracker.getJobIdsForGroup("sana-identity")
              for stage in tracker.getJobInfo(job).stageIds]
    assert 8 in [stage.numTasks for stage in stages if stage is not None]
    # Every record went to the worker its bucket routes to, computed independently by Spark SQL.
    table = driver.state["routing"]["table"]
    frame = spark.createDataFrame([(r["sensor"],) for r in batch], "sensor string")
    buckets = frame.selectExpr(f"pmod(xxhash64(sensor), {BUCKETS}) AS b").collect()
    expected = Counter(table[row.b] for row in buckets)
    assert driver.operator.load.last == [expected.get(worker, 0) for worker in range(8)]


@pytest.mark.parametrize("make", [window_driver, join_driver], ids=["window_aggregate", "join"])
def test_a_replayed_batch_starts_from_the_state_before_it_and_gives_the_same_records(spark, tmp_path, make):
    driver = make(spark, tmp_path)
    batches = [_inputs(driver, batch) for batch in range(4)]
    for batch in batches[:3]:
        driver.run(batch)
    before_last = driver.state
    first = driver.run(batches[3])
    driver.state, driver.batch_id = before_last, 3  # Spark re-runs batch 3 after a crash
    again = driver.run(batches[3])
    assert first == again and first  # same records in the same order: the same (batch, seq) names


def test_a_batch_replayed_by_another_process_routes_and_names_its_join_rows_as_its_first_attempt(spark, tmp_path):
    """The first attempt at a batch applied requested bucket moves; another process (a new operator, nothing
    requested) replays it. Given the routing the attempt kept, the join's rows, which come out of the workers'
    partitions, come in the same order, so with the same names; routed by the saved state alone, they would not."""
    first_run = join_driver(spark, tmp_path)
    batches = [_inputs(first_run, batch) for batch in range(4)]
    for batch in batches[:3]:
        first_run.run(batch)
    before = first_run.state
    first_run.operator.request_moves({bucket: (bucket + 3) % 8 for bucket in range(0, BUCKETS, 2)})
    first = first_run.run(batches[3])
    kept = first_run.routing
    assert kept["version"] == before["routing"]["version"] + 1

    def replay(planned):
        again = join_driver(spark, tmp_path)
        again.state, again.batch_id = before, 3
        return again.run(batches[3], planned=planned)

    assert replay(kept) == first and first
    unplanned = replay(None)
    assert rows(unplanned) == rows(first) and unplanned != first  # the same rows, in another order: other names


def test_the_routings_a_batch_runs_with_are_kept_for_its_replays(spark, tmp_path):
    query = FragmentQuery(spark, "q", {}, "127.0.0.1:1", tmp_path, 1.0)
    assert query.kept_routings(5) is None
    routing = {"table": [1, 0], "version": 2, "requested": 4, "splits": [], "workers": 2}
    query.keep_routings(5, {"j": routing})
    assert query.kept_routings(5) == {"j": routing} and query.kept_routings(6) is None
    kept = json.loads(query.routings_file.read_text())
    query.routings_file.write_text(json.dumps({**kept, "process": "another"}))  # written by an earlier process
    assert query.kept_routings(5) == {"j": {**routing, "requested": 0}}  # its request numbers were its own


def _raw(spark, batch: dict[str, list[dict]], topics: dict[str, str]):
    rows = [(topics[port], json.dumps({**row, "ts": row["ts"].isoformat()}), None)
            for port, records in batch.items() for row in records]
    return spark.createDataFrame(rows, RAW_SCHEMA)


def test_a_join_batch_written_then_replayed_by_a_new_query_names_its_rows_as_before(spark, tmp_path, kafka_bootstrap,
                                                                                   topic_factory):
    """Batch 3 moves buckets of a join and is written; a new query on the same checkpoint (another process: none of
    those moves requested) runs batch 3 again, as Spark does when the first attempt was not committed. Every record
    comes again under the same name (writer, batch, seq) with the same value, so readers drop the copies; without
    the routing kept in the checkpoint the same records come under other names."""
    topics = {"left": topic_factory("left"), "right": topic_factory("right")}
    out = topic_factory("joined")
    join = keyed_task("join", JOIN_CONFIG, {"left": [SCHEMA], "right": [SCHEMA]}, "j")
    join = TaskSpec("j", "j", "join", join.config, None, (("left", "src-left"), ("right", "src-right")), "f", join.schema)
    tasks = (TaskSpec("src-left", "l", "source", {"topic": topics["left"], "schema": SCHEMA}, None, (), "f", SCHEMA),
             TaskSpec("src-right", "r", "source", {"topic": topics["right"], "schema": SCHEMA}, None, (), "f", SCHEMA),
             join, TaskSpec("out", "o", "sink", {"topic": out}, None, (("in", "j"),), "f", join.schema))
    plan = LivePlan(1, tasks, {}, (("out", out),), {task.id: task.schema for task in tasks})
    producer = BatchProducer(kafka_bootstrap)

    def query():
        operator = StreamJoin(join, {"left": [SCHEMA], "right": [SCHEMA]}, 8, STILL)
        return FragmentQuery(spark, "q", {}, kafka_bootstrap, tmp_path, 1.0, producer=producer), {"j": operator}

    batches = [{port: readings(batch, 150, seed=3 + index) for index, port in enumerate(topics)} for batch in range(4)]
    first, keyed = query()
    for batch in range(3):
        first.evaluate(plan, keyed, _raw(spark, batches[batch], topics), batch)
    keyed["j"].request_moves({bucket: (bucket + 3) % 8 for bucket in range(0, BUCKETS, 2)})
    first.evaluate(plan, keyed, _raw(spark, batches[3], topics), 3)

    def replayed():
        again, keyed_again = query()
        again.evaluate(plan, keyed_again, _raw(spark, batches[3], topics), 3)

    replayed()
    (tmp_path / "routings.json").unlink(missing_ok=True)  # as before the routings were kept
    replayed()
    producer.close()
    written = [record for record in read_all(kafka_bootstrap, out) if record.headers["sana.batch"] == "3"]
    size = len(written) // 3  # three attempts at batch 3, one after the other on one partition
    assert size and len(written) == 3 * size
    named = [{record.key: record.value for record in written[start:start + size]} for start in (0, size, 2 * size)]
    assert named[1] == named[0]  # the replay: every record under its name
    assert sorted(map(json.dumps, named[2].values())) == sorted(map(json.dumps, named[0].values()))
    assert named[2] != named[0]  # the same records under other names


@pytest.mark.parametrize("make", [window_driver, join_driver], ids=["window_aggregate", "join"])
def test_moving_buckets_between_batches_changes_no_result(spark, tmp_path, make):
    still, moving = make(spark, tmp_path / "still"), make(spark, tmp_path / "moving")
    rng = random.Random(11)
    for batch in range(8):
        inputs = _inputs(still, batch)
        if batch:
            moving.operator.request_moves({rng.randrange(BUCKETS): rng.randrange(8) for _ in range(12)})
        assert rows(moving.run(inputs)) == rows(still.run(inputs)), f"batch {batch}"
    assert moving.operator.moved_rows > 0 and moving.state["routing"]["version"] > 0
    assert still.operator.moved_rows == 0
    assert moving.state["state_rows"] == still.state["state_rows"]


@pytest.mark.parametrize("make", [window_driver, join_driver], ids=["window_aggregate", "join"])
def test_workers_packed_into_fewer_spark_tasks_give_the_same_records(spark, tmp_path, make):
    """A light operator runs its 8 workers in fewer Spark tasks (rows_per_task), each task running its workers in
    turn; the records are the ones one task per worker gives, batch by batch, and so is the state."""
    apart, packed = make(spark, tmp_path / "apart"), make(spark, tmp_path / "packed")
    apart.operator.rows_per_task = 1  # never packs
    packed.operator.rows_per_task = 400  # 300 rows a batch: one task; more when a batch brings more
    tracker = spark.sparkContext.statusTracker()
    task_counts = []
    for batch in range(6):
        inputs = _inputs(apart, batch) if batch != 4 else {port: readings(batch, 700, seed=9) for port in apart.schemas}
        expected = apart.run(inputs)
        group = f"sana-packed-{batch}"
        spark.sparkContext.setJobGroup(group, "packed keyed shuffle", False)
        try:
            got = packed.run(inputs)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        task_counts.append(max(stage.numTasks for job in tracker.getJobIdsForGroup(group)
                               for stage in map(tracker.getStageInfo, tracker.getJobInfo(job).stageIds) if stage))
        assert rows(got) == rows(expected), f"batch {batch}"
    assert packed.state["state_rows"] == apart.state["state_rows"]
    assert packed.operator.load.last == apart.operator.load.last, "every logical worker got the same rows"
    assert task_counts[0] == 8, "the first batch has no load to size by: one task per worker"
    assert max(task_counts[1:5]) < 8, f"light batches ran packed: {task_counts}"
    assert apart.state["tasks"] == 8 and packed.state["tasks"] < 8


def _inputs(driver: KeyedDriver, batch: int) -> dict[str, list[dict]]:
    return {port: readings(batch, 150, seed=index + 2) for index, port in enumerate(sorted(driver.schemas))}



@contextmanager
def rows_to_the_driver() -> Iterator[list[int]]:
    """Count the rows every collect-like DataFrame call brings to the driver while the block runs."""
    from pyspark.sql.classic.dataframe import DataFrame

    received: list[int] = []
    originals = {name: getattr(DataFrame, name) for name in ("collect", "toArrow", "toPandas")}

    def counting(original):
        def call(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            received.append(result.num_rows if hasattr(result, "num_rows") else len(result))
            return result
        return call

    for name, original in originals.items():
        setattr(DataFrame, name, counting(original))
    try:
        yield received
    finally:
        for name, original in originals.items():
            setattr(DataFrame, name, original)


@pytest.mark.parametrize("make", [window_driver, join_driver], ids=["window_aggregate", "join"])
def test_the_driver_receives_no_input_or_state_row(spark, tmp_path, make):
    """Planning and finishing a batch bring one row to the driver (the window's largest event time) or none (join)."""
    driver = make(spark, tmp_path)
    allowed = 1 if driver.operator.kind == "window_aggregate" else 0
    for batch in range(3):
        frames = {}
        for port, rows in _inputs(driver, batch).items():
            view = f"no_rows_{port}"
            spark.createDataFrame(rows, ddl(driver.schemas[port])).createOrReplaceTempView(view)
            frames[port] = [f"SELECT * FROM {view}"]
        with rows_to_the_driver() as received:
            output, draft = driver.operator.plan(spark, batch, frames, driver.state, driver.store)
        output.toArrow()  # collected here only to run the batch (a fragment writes it, on the executors in a cluster)
        with rows_to_the_driver() as after:
            driver.state = driver.operator.finish(batch, draft, driver.store)
        assert sum(received) == allowed and sum(after) == 0, (received, after)
        assert sum(driver.operator.load.last) > 0
