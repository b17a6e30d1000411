"""``window_aggregate`` and ``join`` on Spark: exact results for in-order and late data.

Input arrives in three phases, each processed before the next is produced,
so lateness is relative to a known watermark: phase 1 is in order; phase 2
holds a record late but within the watermark (counted) and one later than the
watermark (dropped); phase 3 moves the watermark past every window. The
references below compute, in plain Python, the semantics documented in
runtime/operators/window/spark.py and runtime/operators/join/spark.py.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, values, wait_for
from tests.fixtures.streams import URBAN, iso, multiset
from tests.runtime.test_sharing import raise_dead_queries

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

WINDOW, SLIDE, DELAY, BOUND = 10, 5, 5, 5


def reading(t: int, sensor: str, temp: float) -> dict:
    return {"sensor": sensor, "temp": temp, "humidity": float(t), "ts": iso(t)}


def left_phase(times) -> list[dict]:
    return [reading(t, f"s{t % 3}", float(20 + (t * 7) % 30)) for t in times]


def right_phase(times) -> list[dict]:
    return [reading(t, f"s{t % 2}", float(t % 11)) for t in times]


def windows_of(t: int, size: int, slide: int | None) -> list[int]:
    step = slide or size
    first = (t // step) * step
    return [start for start in range(first - size + step, first + 1, step) if start <= t < start + size]


def window_reference(phases, size, slide, delay, aggregates):
    """Emitted rows of a keyed window aggregate fed ``phases`` (one micro-batch each)."""
    watermark, max_event, state, emitted = None, None, defaultdict(list), []
    for batch in phases:
        for record in batch:
            t = int(record["humidity"])
            for start in windows_of(t, size, slide):
                if watermark is not None and start + size <= watermark:
                    continue
                state[(record["sensor"], start)].append(record["temp"])
            max_event = t if max_event is None else max(max_event, t)
        watermark = max_event - delay if watermark is None else max(watermark, max_event - delay)
        for (sensor, start) in sorted(key for key in state if key[1] + size <= watermark):
            temps = state.pop((sensor, start))
            row = {"sensor": sensor, "window_start": iso(start), "window_end": iso(start + size)}
            row.update({name: function(temps) for name, function in aggregates.items()})
            emitted.append(row)
    return emitted


def join_reference(phases, bound, delay):
    """Pairs of a time-bounded join fed ``(left, right)`` phases; rows older than the watermark are dropped."""
    watermark, max_left, max_right, lefts, rights = None, None, None, [], []
    for left, right in phases:
        left = [r for r in left if watermark is None or int(r["humidity"]) >= watermark]
        right = [r for r in right if watermark is None or int(r["humidity"]) >= watermark]
        lefts += left
        rights += right
        if left:
            max_left = max([max_left or 0, *(int(r["humidity"]) for r in left)])
        if right:
            max_right = max([max_right or 0, *(int(r["humidity"]) for r in right)])
        if max_left is not None and max_right is not None:
            candidate = min(max_left, max_right) - delay
            watermark = candidate if watermark is None else max(watermark, candidate)
    return [
        {"sensor": l["sensor"], "temp": l["temp"], "humidity": l["humidity"], "ts": l["ts"],
         "right_temp": r["temp"], "right_humidity": r["humidity"], "right_ts": r["ts"]}
        for l in lefts for r in rights
        if l["sensor"] == r["sensor"] and abs(int(l["humidity"]) - int(r["humidity"])) <= bound
    ]


def keyed_flow(left_topic: str, right_topic: str, sinks: dict[str, str]) -> dict:
    aggregates = {"n": "count(*)", "total": "sum(temp)", "mean": "avg(temp)", "lo": "min(temp)", "hi": "max(temp)"}
    return {
        "name": "keyed",
        "tasks": [
            source("left", left_topic, dict(URBAN)),
            source("right", right_topic, dict(URBAN)),
            task("tumbling", "window_aggregate", keys=["sensor"], time_column="ts", window=f"{WINDOW} seconds",
                 watermark=f"{DELAY} seconds", aggregates=aggregates),
            task("sliding", "window_aggregate", keys=["sensor"], time_column="ts", window=f"{WINDOW} seconds",
                 slide=f"{SLIDE} seconds", watermark=f"{DELAY} seconds", aggregates={"n": "count(*)", "hi": "max(temp)"}),
            task("pairs", "join", on=["sensor"], window=f"{BOUND} seconds"),
            task("out_tumbling", "sink", topic=sinks["tumbling"]),
            task("out_sliding", "sink", topic=sinks["sliding"]),
            task("out_pairs", "sink", topic=sinks["pairs"]),
        ],
        "streams": [
            stream("left", "tumbling"), stream("left", "sliding"),
            stream("left", "pairs", "left"), stream("right", "pairs", "right"),
            stream("tumbling", "out_tumbling"), stream("sliding", "out_sliding"), stream("pairs", "out_pairs"),
        ],
    }


def test_window_aggregate_and_join_are_exact_with_late_data(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    left_topic, right_topic = topic_factory("left", partitions=2), topic_factory("right")
    sinks = {name: f"{left_topic}-{name}" for name in ("tumbling", "sliding", "pairs")}
    manager.submit(keyed_flow(left_topic, right_topic, sinks))
    phases = [
        (left_phase(range(0, 30)), right_phase(range(0, 30))),      # in order
        (left_phase([26, 15]), right_phase([27])),                  # 26, 27: late within the watermark (24); 15: too late
        (left_phase(range(40, 46)), right_phase(range(40, 46))),    # closes every window up to 40
    ]
    full = {"n": len, "total": sum, "mean": lambda xs: sum(xs) / len(xs), "lo": min, "hi": max}
    check = lambda: raise_dead_queries(manager)  # noqa: E731
    for number, (left, right) in enumerate(phases, start=1):
        produce(kafka_bootstrap, left_topic, left)
        produce(kafka_bootstrap, right_topic, right)
        so_far = phases[:number]
        pairs = join_reference(so_far, BOUND, DELAY)
        wait_for(lambda: len(read_all(kafka_bootstrap, sinks["pairs"])) >= len(pairs), 90, f"join output of phase {number}", check)
        tumbling = window_reference([l for l, _ in so_far], WINDOW, None, DELAY, full)
        wait_for(lambda: len(read_all(kafka_bootstrap, sinks["tumbling"])) >= len(tumbling), 90,
                 f"tumbling windows of phase {number}", check)
    assert multiset(values(read_all(kafka_bootstrap, sinks["pairs"]))) == multiset(join_reference(phases, BOUND, DELAY))
    lefts = [left for left, _ in phases]
    assert multiset(values(read_all(kafka_bootstrap, sinks["tumbling"]))) == multiset(
        window_reference(lefts, WINDOW, None, DELAY, full))
    sliding = window_reference(lefts, WINDOW, SLIDE, DELAY, {"n": len, "hi": max})
    received = wait_for(lambda: (got := values(read_all(kafka_bootstrap, sinks["sliding"]))) and len(got) >= len(sliding) and got,
                        60, "sliding windows", check)
    assert multiset(received) == multiset(sliding)
    metrics = manager.runtime.fragment_metrics()
    (fragment,) = metrics["fragments"].values()
    workers = fragment["keyed_operators"][manager.state.dataflows["df-1"].tasks["tumbling"]]["workers"]
    assert sum(workers["total_rows"]) > 0 and len(workers["total_rows"]) == 8


def test_a_window_over_a_join_in_one_query_is_exact(manager_factory, kafka_bootstrap, topic_factory):
    """Two keyed operators chained in one query: the join's shuffle runs once per batch, the window reads it."""
    manager = manager_factory(trigger_s=0.5)
    left_topic, right_topic = topic_factory("left"), topic_factory("right")
    sink = f"{left_topic}-chained"
    flow = {
        "name": "chained",
        "tasks": [
            source("left", left_topic, dict(URBAN)), source("right", right_topic, dict(URBAN)),
            task("pairs", "join", on=["sensor"], window=f"{BOUND} seconds"),
            task("per_window", "window_aggregate", keys=["sensor"], time_column="ts", window=f"{WINDOW} seconds",
                 watermark=f"{DELAY} seconds", aggregates={"n": "count(*)", "hi": "max(right_temp)"}),
            task("out", "sink", topic=sink),
        ],
        "streams": [stream("left", "pairs", "left"), stream("right", "pairs", "right"),
                    stream("pairs", "per_window"), stream("per_window", "out")],
    }
    manager.submit(flow)
    phases = [(left_phase(range(0, 30)), right_phase(range(0, 30))), (left_phase(range(40, 52)), right_phase(range(40, 52)))]
    check = lambda: raise_dead_queries(manager)  # noqa: E731
    per_phase, seen = [], Counter()
    for number, (left, right) in enumerate(phases, start=1):
        produce(kafka_bootstrap, left_topic, left)
        produce(kafka_bootstrap, right_topic, right)
        pairs = Counter(json.dumps(pair, sort_keys=True) for pair in join_reference(phases[:number], BOUND, DELAY))
        per_phase.append([json.loads(text) for text in (pairs - seen).elements()])
        seen = pairs
        windows = window_reference(per_phase, WINDOW, None, DELAY, {"n": len})
        wait_for(lambda: len(read_all(kafka_bootstrap, sink)) >= len(windows), 90, f"windows of phase {number}", check)
    received = values(read_all(kafka_bootstrap, sink))
    expected = window_reference(per_phase, WINDOW, None, DELAY, {"n": len, "hi": lambda _: None})
    assert received and Counter((r["sensor"], r["window_start"], r["n"]) for r in received) == Counter(
        (r["sensor"], r["window_start"], r["n"]) for r in expected)
    (query,) = manager.runtime.queries.values()
    assert set(query.keyed) == {manager.state.dataflows["df-1"].tasks[name] for name in ("pairs", "per_window")}


def test_a_window_with_no_rows_in_a_batch_skips_it_and_keeps_its_state(manager_factory, kafka_bootstrap, topic_factory):
    """Batches that bring the window no row (the filter before it drops all their records; the query still runs
    them for its other sink) run no task of it and write no state version; the windows open before them still
    count the rows that came before."""
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    sinks = {"window": f"{urban}-window", "copy": f"{urban}-copy"}
    made = manager.submit({
        "name": "idle",
        "tasks": [
            source("src", urban, dict(URBAN)),
            task("measured", "filter", expr="sensor <> 'other'"),
            task("tumbling", "window_aggregate", keys=["sensor"], time_column="ts", window=f"{WINDOW} seconds",
                 watermark=f"{DELAY} seconds", aggregates={"n": "count(*)", "hi": "max(temp)"}),
            task("out_window", "sink", topic=sinks["window"]),
            task("out_copy", "sink", topic=sinks["copy"]),
        ],
        "streams": [stream("src", "measured"), stream("measured", "tumbling"), stream("tumbling", "out_window"),
                    stream("src", "out_copy")],
    })
    check = lambda: raise_dead_queries(manager)  # noqa: E731
    aggregates = {"n": len, "hi": max}
    first, later = left_phase(range(0, 15)), left_phase(range(15, 41))
    produce(kafka_bootstrap, urban, first)
    emitted = window_reference([first], WINDOW, None, DELAY, aggregates)  # [0, 10) is out; [10, 20) holds 10..14
    wait_for(lambda: len(read_all(kafka_bootstrap, sinks["window"])) >= len(emitted), 90, "the first windows", check)
    operator_id = made.tasks["tumbling"]

    def window_metrics() -> dict:
        (fragment,) = manager.runtime.fragment_metrics()["fragments"].values()
        return fragment["keyed_operators"][operator_id]

    skipped, copied = window_metrics()["idle_batches"], len(first)
    for round_ in range(3):  # batches of records the filter drops
        produce(kafka_bootstrap, urban, [{**reading(t, "other", 99.0)} for t in range(15 + round_, 18 + round_)])
        copied += 3
        wait_for(lambda: len(read_all(kafka_bootstrap, sinks["copy"])) >= copied, 90, "the copied records", check)
    assert window_metrics()["idle_batches"] > skipped
    produce(kafka_bootstrap, urban, later)
    expected = window_reference([first, later], WINDOW, None, DELAY, aggregates)
    received = wait_for(lambda: (got := values(read_all(kafka_bootstrap, sinks["window"]))) and len(got) >= len(expected)
                        and got, 90, "the windows after the idle batches", check)
    assert multiset(received) == multiset(expected)
    assert {"sensor": "s1", "window_start": iso(10), "window_end": iso(20), "n": 4, "hi": 42.0} in received  # both sides
