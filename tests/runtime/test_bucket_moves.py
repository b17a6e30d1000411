"""``SparkRuntime.move_buckets`` while records flow: the moved operators give what unmoved twins give.

One dataflow holds two window aggregates and two joins over the same
sources, each pair computing the same thing with configs that differ only in
form (an extra aggregate; the join's default watermark spelled out), so the
manager runs them as separate operators in the same query. Buckets of one of
each pair are moved several times while a producer keeps writing; at the
end both of a pair have emitted the same records, and the window aggregates
what the plain-Python reference computes.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, values, wait_for
from tests.fixtures.streams import URBAN, multiset, urban_records
from tests.runtime.test_keyed import window_reference
from tests.runtime.test_sharing import raise_dead_queries

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

SENSORS = 24


def twins_flow(left: str, right: str, sinks: dict[str, str]) -> dict:
    # Reshape off: this test moves buckets by hand (test_skew.py runs Reshape against unmitigated twins)
    window = {"keys": ["sensor"], "time_column": "ts", "window": "10 seconds", "watermark": "2 seconds",
              "reshape": {"enabled": False}}
    return {
        "name": "twins",
        "tasks": [
            source("left", left, dict(URBAN)), source("right", right, dict(URBAN)),
            task("w_still", "window_aggregate", **window, aggregates={"n": "count(*)", "total": "sum(temp)"}),
            task("w_moving", "window_aggregate", **window, aggregates={"n": "count(*)", "total": "sum(temp)", "hi": "max(temp)"}),
            task("j_still", "join", on=["sensor"], window="3 seconds", reshape={"enabled": False}),
            task("j_moving", "join", on=["sensor"], window="3 seconds", watermark="3 seconds", reshape={"enabled": False}),
            *[task(f"out_{name}", "sink", topic=topic) for name, topic in sinks.items()],
        ],
        "streams": [
            stream("left", "w_still"), stream("left", "w_moving"),
            stream("left", "j_still", "left"), stream("right", "j_still", "right"),
            stream("left", "j_moving", "left"), stream("right", "j_moving", "right"),
            *[stream(name, f"out_{name}") for name in sinks],
        ],
    }


def test_moving_buckets_while_records_flow_loses_and_repeats_nothing(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    left, right = topic_factory("left"), topic_factory("right")  # one partition: no record arrives late
    sinks = {name: f"{left}-{name}" for name in ("w_still", "w_moving", "j_still", "j_moving")}
    flow = manager.submit(twins_flow(left, right, sinks))
    moving = {name: flow.tasks[name] for name in ("w_moving", "j_moving")}
    produced: list[dict] = []
    stop = threading.Event()

    def keep_producing() -> None:
        while not stop.is_set():  # until every move was applied: moves need batches to run
            chunk = urban_records(len(produced), 60, sensors=SENSORS)
            produce(kafka_bootstrap, left, chunk, linger_ms=5)
            produce(kafka_bootstrap, right, urban_records(len(produced), 60, seed=9, sensors=SENSORS), linger_ms=5)
            produced.extend(chunk)
            time.sleep(0.3)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    rng = random.Random(5)
    moved_requests = 0
    try:
        for _ in range(4):
            time.sleep(1.5)
            for task_id in moving.values():
                answer = manager.runtime.move_buckets(task_id, {rng.randrange(64): rng.randrange(8) for _ in range(10)})
                moved_requests += answer["request"] > 0
    finally:
        stop.set()
        producer.join()
    # Event time is the record's number: the closing records come well after the last one produced (a slow
    # run produced more than 5,000) and move every watermark past the last window.
    closing_at = len(produced) + 5000
    closing = urban_records(closing_at, 4, sensors=SENSORS)
    produce(kafka_bootstrap, left, closing)
    produce(kafka_bootstrap, right, urban_records(closing_at, 4, seed=9, sensors=SENSORS))
    expected = window_reference([produced, closing], 10, None, 2, {"n": len, "total": sum})
    check = lambda: raise_dead_queries(manager)  # noqa: E731

    def windows(name: str) -> list[dict]:
        got = values(read_all(kafka_bootstrap, sinks[name]))
        return [{key: row[key] for key in ("sensor", "window_start", "window_end", "n", "total")} for row in got]

    wait_for(lambda: len(windows("w_moving")) >= len(expected), 120, "the moved window aggregate", check)
    wait_for(lambda: len(windows("w_still")) >= len(expected), 120, "the unmoved window aggregate", check)
    assert multiset(windows("w_moving")) == multiset(windows("w_still")) == multiset(expected)
    # Both joins ran in the same micro-batches as the window aggregates, the last one included.
    joined_still, joined_moving = (values(read_all(kafka_bootstrap, sinks[name])) for name in ("j_still", "j_moving"))
    assert joined_still and multiset(joined_moving) == multiset(joined_still)
    metrics = manager.runtime.fragment_metrics()
    (fragment,) = metrics["fragments"].values()
    for task_id in moving.values():
        operator = fragment["keyed_operators"][task_id]
        assert operator["routing"]["version"] >= 1 and operator["moved_state_rows"] > 0
    assert moved_requests == 8
