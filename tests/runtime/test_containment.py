"""Containment sharing on real Spark: what a contained task computes equals what it computes alone.

Two levels. Spark itself evaluates random pairs of predicates and projections (drawn by the grammar of
tests/manager/test_implication.py) over a grid of rows with NULL, NaN and the infinities: every pair the
solver proves must hold on Spark's own evaluation, and every residual (or rebased select) over the
wider task's output must give exactly the narrower task's rows. Then dataflows run on the streaming
runtime with records flowing: a narrower filter and a select computed from a running select read the
running tasks, each sink equals its dataflow run alone, and removing the wider task's owner leaves the
narrower dataflows running without a gap.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from pyspark.sql import types as T

from runtime.exceptions import BucketMoveInvalid
from runtime.operators.implication import implies, residual
from runtime.operators.projection import rebase
from runtime.spark.session import spark_session
from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, values, wait_for
from tests.fixtures.sharing import raise_dead_queries, wait_sink
from tests.fixtures.streams import URBAN, as_written, iso, multiset, urban_records
from tests.manager.test_implication import DOUBLES, INTS, ROWS, SCHEMA, STRINGS

pytestmark = [pytest.mark.spark]

PAIRS = 60


def random_predicate(rng: random.Random, leaves: int = 3) -> str:
    """A predicate of the grammar tests/manager/test_implication.py draws from, drawn with ``rng``."""
    if leaves <= 1 or rng.random() < 0.3:
        column, values = rng.choice([("i", INTS), ("d", DOUBLES + INTS), ("s", STRINGS), ("abs(i)", INTS)])
        kind = rng.randrange(5)
        if kind == 0:
            return f"{column} IS {'NOT ' if rng.random() < 0.5 else ''}NULL"
        if kind == 1:
            return f"{column} IN ({', '.join(rng.sample(values, 2))})"
        if kind == 2 and column != "s":
            low, high = sorted(rng.sample(values, 2), key=float)
            return f"{column} BETWEEN {low} AND {high}"
        return f"{column} {rng.choice(['=', '<>', '<', '<=', '>', '>=', '<=>'])} {rng.choice(values)}"
    left = rng.randint(1, leaves - 1)
    a, b = random_predicate(rng, left), random_predicate(rng, leaves - left)
    return rng.choice([f"({a}) AND ({b})", f"({a}) OR ({b})", f"NOT ({a}) AND ({b})"])


@pytest.fixture(scope="module")
def spark():
    return spark_session("local[2]")


@pytest.fixture(scope="module")
def grid(spark):
    schema = T.StructType([T.StructField("i", T.IntegerType()), T.StructField("d", T.DoubleType()),
                           T.StructField("s", T.StringType()), T.StructField("b", T.BooleanType())])
    frame = spark.createDataFrame(ROWS, schema)
    frame.createOrReplaceTempView("grid")
    return frame


def test_spark_agrees_with_every_proved_implication_and_residual(spark, grid):
    rng = random.Random(37)
    pairs = []
    for _ in range(PAIRS):
        new, running = random_predicate(rng), random_predicate(rng)
        narrower = f"({new}) AND ({running})"  # implied by construction; its residual is checked too
        for mine, theirs in ((new, running), (narrower, running)):
            if implies(mine, theirs, SCHEMA):
                pairs.append((mine, theirs, residual(mine, theirs, SCHEMA)))
    assert len(pairs) >= PAIRS, "too few proved pairs for the check to mean anything"
    columns = []
    for index, (mine, theirs, rest) in enumerate(pairs):
        columns.append(f"count_if(({mine}) AND NOT coalesce({theirs}, false)) AS broken{index}")
        again = f"coalesce({theirs}, false)" if rest is None else f"coalesce({theirs}, false) AND coalesce({rest}, false)"
        columns.append(f"count_if(coalesce({mine}, false) <> ({again})) AS differs{index}")
    (row,) = spark.sql(f"SELECT {', '.join(columns)} FROM grid").collect()
    for index, (mine, theirs, rest) in enumerate(pairs):
        assert row[f"broken{index}"] == 0, f"Spark finds rows where {mine!r} holds and {theirs!r} does not"
        assert row[f"differs{index}"] == 0, f"{theirs!r} then {rest!r} keeps other rows than {mine!r}"


def test_spark_agrees_with_rebased_selects(spark, grid):
    running = {"i": "i", "half": "d / 2", "big": "upper(s)", "flag": "b AND i > 1", "sum": "i + d"}
    running_schema = {"i": "int", "half": "double", "big": "string", "flag": "boolean", "sum": "double"}
    wanted = [{"x": "d / 2 + 1"}, {"y": "concat(upper(s), 'z')", "i": "i"}, {"z": "NOT (b AND i > 1)"},
              {"w": "(i + d) * 2", "v": "abs(i)"}, {"u": "d"}]
    checked = 0
    for new in wanted:
        columns = rebase(new, running, SCHEMA, running_schema)
        if columns is None:
            assert new == {"u": "d"}  # d alone is not in the running output (d / 2 and i + d are)
            continue
        inner = ", ".join(f"{text} AS `{name}`" for name, text in running.items())
        outer = ", ".join(f"{text} AS `{name}`" for name, text in columns.items())
        direct = ", ".join(f"{text} AS `{name}`" for name, text in new.items())
        alone = spark.sql(f"SELECT {direct} FROM grid").collect()
        rebased = spark.sql(f"SELECT {outer} FROM (SELECT {inner} FROM grid)").collect()
        assert sorted(map(repr, alone)) == sorted(map(repr, rebased)), new
        checked += 1
    assert checked == 4


# -- the streaming runtime -------------------------------------------------------------------

def filtered(name: str, topic: str, sink: str, expr: str, columns: dict[str, str] | None = None) -> dict:
    tasks = [source("src", topic, dict(URBAN)), task("f", "filter", expr=expr)]
    streams = [stream("src", "f")]
    last = "f"
    if columns is not None:
        tasks.append(task("p", "select", columns=columns))
        streams.append(stream("f", "p"))
        last = "p"
    tasks.append(task("out", "sink", topic=sink))
    streams.append(stream(last, "out"))
    return {"name": name, "tasks": tasks, "streams": streams}


@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.slow
def test_contained_dataflows_give_what_they_give_alone_and_outlive_the_wider_one(manager_factory, kafka_bootstrap,
                                                                                  topic_factory):
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban", partitions=2)
    sinks = {name: f"{urban}-{name}" for name in ("wide", "narrow", "proj", "rebased")}
    wide = manager.submit(filtered("wide", urban, sinks["wide"], "temp > 20"))
    proj_columns = {"sensor": "sensor", "f": "temp * 9 / 5 + 32", "wet": "humidity > 10"}
    proj = manager.submit(filtered("proj", urban, sinks["proj"], "temp > 20", proj_columns))
    narrow = manager.submit(filtered("narrow", urban, sinks["narrow"], "temp > 35 AND sensor <> 's1'"))
    rebased = manager.submit(filtered("rebased", urban, sinks["rebased"], "temp > 20",
                                      {"hot": "temp * 9 / 5 + 32 > 100", "sensor": "upper(sensor)"}))
    assert [share["reads"] for share in narrow.contained] == [wide.tasks["f"]]
    assert narrow.contained[0]["residual"] == {"expr": "temp > 35 AND sensor <> 's1'"}
    assert [(share["task"], share["reads"]) for share in rebased.contained] == [("p", proj.tasks["p"])]
    assert rebased.tasks["f"] == wide.tasks["f"]  # exact share below the contained select
    assert manager.stats()["containment_shares"] == {"filter": 1, "select": 1, "window_aggregate": 0, "equivalent": 0}

    produced: list[dict] = []
    batch = urban_records(0, 200)
    produce(kafka_bootstrap, urban, batch)
    produced.extend(batch)
    expected = {
        "wide": lambda records: as_written(r for r in records if r["temp"] > 20),
        "narrow": lambda records: as_written(r for r in records if r["temp"] > 35 and r["sensor"] != "s1"),
        "proj": lambda records: [{"sensor": r["sensor"], "f": r["temp"] * 9 / 5 + 32, "wet": r["humidity"] > 10}
                                 for r in records if r["temp"] > 20],
        "rebased": lambda records: [{"hot": r["temp"] * 9 / 5 + 32 > 100, "sensor": r["sensor"].upper()}
                                    for r in records if r["temp"] > 20],
    }
    for name, expect in expected.items():
        wait_sink(manager, kafka_bootstrap, sinks[name], expect(produced))

    # The wider dataflow goes: its filter stays for the narrower one, which goes on without a gap.
    removed = manager.remove(wide.id)
    assert wide.tasks["f"] not in removed.terminated and wide.tasks["f"] in manager.state.tasks
    assert manager.state.users[wide.tasks["f"]] == {proj.id, narrow.id, rebased.id}
    stop = threading.Event()

    def keep_producing() -> None:
        start = 200
        while not stop.is_set() and start < 600:
            more = urban_records(start, 50)
            produce(kafka_bootstrap, urban, more, linger_ms=5)
            produced.extend(more)
            start += 50
            time.sleep(0.1)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    producer.join(timeout=60)
    stop.set()
    for name in ("narrow", "proj", "rebased"):
        wait_sink(manager, kafka_bootstrap, sinks[name], expected[name](produced))
    manager.remove(narrow.id)
    manager.remove(proj.id)
    manager.remove(rebased.id)
    assert not manager.state.tasks
    wait_for(lambda: not manager.runtime.queries, 30, "every query stopped", lambda: raise_dead_queries(manager))
    assert multiset(values(read_all(kafka_bootstrap, sinks["wide"]))) == multiset(expected["wide"](produced[:200]))


def windowed(name: str, topic: str, sink: str, window: str, aggregates: dict[str, str]) -> dict:
    return {"name": name, "tasks": [
        source("src", topic, dict(URBAN)),
        task("win", "window_aggregate", keys=["sensor"], time_column="ts", window=window, watermark="5 seconds",
             aggregates=aggregates),
        task("out", "sink", topic=sink)], "streams": [stream("src", "win"), stream("win", "out")]}


def window_rows(records: list[dict], size: int, last_end: int, names: tuple[str, ...] = ("n", "hi", "s")) -> list[dict]:
    """``names`` of count (n, c), max (hi), sum (s) and average (m) of temp per sensor and tumbling window of
    ``size`` s, for windows ending by ``last_end``."""
    groups: dict[tuple[str, int], list[float]] = {}
    for record in records:
        start = int(record["humidity"]) // size * size  # event time = the sequence number, in seconds
        if start + size <= last_end:
            groups.setdefault((record["sensor"], start), []).append(record["temp"])
    rows = []
    for (sensor, start), temps in groups.items():
        every = {"n": len(temps), "c": len(temps), "hi": max(temps), "s": sum(temps), "m": sum(temps) / len(temps)}
        rows.append({"sensor": sensor, "window_start": iso(start), "window_end": iso(start + size),
                     **{name: every[name] for name in names}})
    return rows


def sliding_rows(records: list[dict], size: int, slide: int, last_end: int, names: tuple[str, ...]) -> list[dict]:
    """As :func:`window_rows`, for windows of ``size`` s starting every ``slide`` s (each record in every window
    that holds it, windows starting before the first record included)."""
    groups: dict[tuple[str, int], list[float]] = {}
    for record in records:
        moment = int(record["humidity"])
        start = moment // slide * slide
        while start + size > moment:
            if start + size <= last_end:
                groups.setdefault((record["sensor"], start), []).append(record["temp"])
            start -= slide
    every = {name: value for name, value in (("n", len), ("hi", max), ("s", sum))}
    return [{"sensor": sensor, "window_start": iso(start), "window_end": iso(start + size),
             **{name: every[name](temps) for name in names}} for (sensor, start), temps in groups.items()]


@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.slow
def test_a_rolled_up_window_gives_what_it_gives_alone(manager_factory, kafka_bootstrap, topic_factory):
    """In-order input (each record within the watermark of its 10 s window): the 30 s windows read from the 10 s
    ones equal the 30 s windows computed from the records (sums of whole-number temperatures: exact; the average
    is the same sum over the same count, divided once). The average runs as a select after the roll-up. So do
    30 s windows every 10 s, rolled up from the same 10 s windows."""
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    short_names, long_names = ("n", "hi", "s", "c"), ("n", "hi", "s", "m")
    aggregates = {"n": "count(*)", "hi": "max(temp)", "s": "sum(temp)", "c": "count(temp)", "m": "avg(temp)"}
    short = manager.submit(windowed("short", urban, f"{urban}-short", "10 seconds", {n: aggregates[n] for n in short_names}))
    long = manager.submit(windowed("long", urban, f"{urban}-long", "30 seconds", {n: aggregates[n] for n in long_names}))
    (share,) = long.contained
    assert (share["kind"], share["reads"]) == ("window_aggregate", short.tasks["win"]) and share["finish"]
    sliding_document = windowed("sliding", urban, f"{urban}-sliding", "30 seconds", {n: aggregates[n] for n in ("n", "hi", "s")})
    sliding_document["tasks"][1]["config"]["slide"] = "10 seconds"
    sliding = manager.submit(sliding_document)
    (share,) = sliding.contained
    assert (share["reads"], share["residual"]["slide"]) == (short.tasks["win"], "10 seconds")
    records = urban_records(0, 300)
    for start in range(0, 300, 50):  # several micro-batches, in event-time order
        produce(kafka_bootstrap, urban, records[start:start + 50])
        time.sleep(0.6)
    # max event time 299, watermark 294: the 10 s windows up to [280, 290) are out, and the 30 s ones up to [240, 270)
    expected_long = window_rows(records, 30, 270, long_names)
    received = wait_for(lambda: (got := values(read_all(kafka_bootstrap, f"{urban}-long"))) and len(got) >= len(expected_long)
                        and got, 120, "the rolled-up windows", lambda: raise_dead_queries(manager))
    assert multiset(received) == multiset(expected_long)
    # the roll-ups run in the 10 s window's worker tasks (one query), so they close as the direct windows do, when the
    # watermark passes their end: the sliding ones up to [260, 290)
    expected_sliding = sliding_rows(records, 30, 10, 290, ("n", "hi", "s"))
    received = wait_for(lambda: (got := values(read_all(kafka_bootstrap, f"{urban}-sliding")))
                        and len(got) >= len(expected_sliding) and got, 120, "the rolled-up sliding windows",
                        lambda: raise_dead_queries(manager))
    assert multiset(received) == multiset(expected_sliding)
    wait_sink(manager, kafka_bootstrap, f"{urban}-short", window_rows(records, 10, 290, short_names))
    operators = {task_id: metrics for fragment in manager.runtime.fragment_metrics()["fragments"].values()
                 for task_id, metrics in fragment["keyed_operators"].items()}
    # the two roll-ups (the 30 s window before its average's select, the sliding one) ran in the 10 s window's tasks
    assert sorted(metrics["fused_in"] or "" for metrics in operators.values()) == ["", short.tasks["win"], short.tasks["win"]]
    # the 10 s window's and the sliding roll-up's sinks are written from one merge of the shuffle's output; the 30 s
    # roll-up's output goes on to its average's select, so its sink is written as any other output
    merged_by = {output["topic"]: output["merged_by"] for query in manager.runtime.fragment_metrics()["queries"].values()
                 for output in query["outputs"]}
    assert {topic: merged_by[topic] for topic in (f"{urban}-short", f"{urban}-sliding", f"{urban}-long")} == \
        {f"{urban}-short": short.tasks["win"], f"{urban}-sliding": short.tasks["win"], f"{urban}-long": None}
    rollup = next(task_id for task_id, metrics in operators.items() if metrics["fused_in"])
    with pytest.raises(BucketMoveInvalid, match=f"{rollup}.*worker tasks of {short.tasks['win']}"):
        manager.runtime.move_buckets(rollup, {0: 1})  # it follows the window's routing: its buckets move with it
    # what the broker's retention may not delete: the source's records from where a query has processed them
    # (it read them all, up to the last micro-batch), and no sink topic, which no query reads
    positions = manager.runtime.read_positions()
    assert 0 < positions[urban][0] <= 300 and not {f"{urban}-short", f"{urban}-long", f"{urban}-sliding"} & set(positions)
