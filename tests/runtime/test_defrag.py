"""Defragmentation on the Spark runtime: queries linked by taps become one, nothing lost or repeated."""

from __future__ import annotations

import pytest

from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, topic_exists, values, wait_for
from tests.fixtures.streams import URBAN, expect_a, flow_a, multiset, urban_records
from tests.runtime.test_keyed import window_reference
from tests.runtime.test_replacement import wait_exact, wait_windows
from tests.runtime.test_sharing import raise_dead_queries, wait_sink

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def hot_counts(topic: str, other_topic: str, sink: str) -> dict:
    """A's hot readings with cold ones of another topic, counted per sensor in 10 s windows.

    Its second source keeps it out of A's query: it runs as a query of its own tapping A's hot.
    """
    return {
        "name": "hot-counts",
        "tasks": [source("src", topic, dict(URBAN)), task("hot", "filter", expr="temp > 30"),
                  source("src2", other_topic, dict(URBAN)), task("cold", "filter", expr="temp < 10"),
                  task("both", "union"),
                  task("per_sensor", "window_aggregate", keys=["sensor"], time_column="ts", window="10 seconds",
                       watermark="1 second", aggregates={"n": "count(*)"}),
                  task("out", "sink", topic=sink)],
        "streams": [stream("src", "hot"), stream("src2", "cold"), stream("hot", "both"), stream("cold", "both"),
                    stream("both", "per_sensor"), stream("per_sensor", "out")],
    }


def wait_counts(manager, bootstrap: str, topic: str, records: list[dict]) -> None:
    expected = window_reference([[r for r in records if r["temp"] > 30]], 10, 10, 1, {"n": len})
    got = wait_for(lambda: (rows := read_all(bootstrap, topic)) and len(rows) >= len(expected) and rows, 90,
                   f"{len(expected)} windows on {topic}", check=lambda: raise_dead_queries(manager))
    assert multiset(values(got)) == multiset(expected), "windows differ from the dataflow run alone"


def test_defragment_merges_tap_linked_queries_without_loss_or_repeats(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    urban, humid = topic_factory("urban"), topic_factory("humid")
    sink_a, sink_c = f"{urban}-a", f"{urban}-c"
    manager.submit(flow_a(urban, sink_a))
    manager.submit(hot_counts(urban, humid, sink_c))
    assert len(manager.runtime.queries) == 2
    (tap,) = {topic for plan in manager.runtime.plans.values() for topic in plan.reads.values()}
    first, second, third = urban_records(0, 300), urban_records(300, 300), urban_records(600, 300)
    produce(kafka_bootstrap, urban, first)
    wait_sink(manager, kafka_bootstrap, sink_a, expect_a(first))
    wait_counts(manager, kafka_bootstrap, sink_c, first)

    produce(kafka_bootstrap, urban, second)  # in flight while the queries are merged
    report = manager.defragment()
    assert (report["queries_before"], report["queries_after"], report["skipped"]) == (2, 1, [])
    (merged,) = report["merged"]
    assert len(merged["queries"]) == 2
    (query,) = manager.runtime.queries.values()
    assert query.id == merged["into"] and not query.plan.reads, "the tap between them is gone"
    assert wait_for(lambda: not topic_exists(kafka_bootstrap, tap), 30, f"tap topic {tap} deleted")
    wait_sink(manager, kafka_bootstrap, sink_a, expect_a(first + second))
    wait_counts(manager, kafka_bootstrap, sink_c, first + second)  # window state carried over the cut

    assert manager.defragment()["merged"] == []  # nothing left to merge
    manager.close()
    restarted = manager_factory(trigger_s=0.5)  # a restarted service runs the merged query from its checkpoint
    assert list(restarted.runtime.queries) == [merged["into"]]
    produce(kafka_bootstrap, urban, third)  # a batch in flight at the stop is written again under its names
    wait_exact(restarted, kafka_bootstrap, sink_a, expect_a(first + second + third), restarted=True)
    wait_windows(restarted, kafka_bootstrap, sink_c, first + second + third, restarted=True)


def third_source_over_both(topic: str, other_topic: str, third_topic: str, sink: str) -> dict:
    """Reads hot-counts' union ("both", in the second query) and a third topic: a third query, a chain of taps."""
    return {
        "name": "three-ways",
        "tasks": [source("src", topic, dict(URBAN)), task("hot", "filter", expr="temp > 30"),
                  source("src2", other_topic, dict(URBAN)), task("cold", "filter", expr="temp < 10"),
                  task("both", "union"), source("src3", third_topic, dict(URBAN)),
                  task("mild", "filter", expr="temp BETWEEN 10 AND 30"), task("all3", "union"),
                  task("out", "sink", topic=sink)],
        "streams": [stream("src", "hot"), stream("src2", "cold"), stream("hot", "both"), stream("cold", "both"),
                    stream("src3", "mild"), stream("both", "all3"), stream("mild", "all3"), stream("all3", "out")],
    }


def test_a_chain_of_three_queries_becomes_one_and_a_failed_drain_changes_nothing(manager_factory, kafka_bootstrap,
                                                                                topic_factory):
    manager = manager_factory(trigger_s=0.5)
    urban, humid, third = topic_factory("urban"), topic_factory("humid"), topic_factory("third")
    sink_a, sink_c, sink_d = f"{urban}-a", f"{urban}-c", f"{urban}-d"
    manager.submit(flow_a(urban, sink_a))
    manager.submit(hot_counts(urban, humid, sink_c))
    manager.submit(third_source_over_both(urban, humid, third, sink_d))
    assert len(manager.runtime.queries) == 3
    first, second = urban_records(0, 300), urban_records(300, 300)
    mild = urban_records(10_000, 200, seed=3)
    produce(kafka_bootstrap, urban, first)
    produce(kafka_bootstrap, third, mild)
    wait_sink(manager, kafka_bootstrap, sink_a, expect_a(first))

    runs = {query.id: query.query.runId for query in manager.runtime.queries.values()}
    failed = manager.runtime.defragment(timeout_s=0)  # cannot drain in no time: the group stays as it was
    assert failed["merged"] == [] and len(failed["skipped"]) == 1 and "did not reach the cut" in failed["skipped"][0]["error"]
    assert {query.id: query.query.runId for query in manager.runtime.queries.values()} == runs
    assert not any(query.bound_file.exists() for query in manager.runtime.queries.values())

    produce(kafka_bootstrap, urban, second)
    report = manager.defragment()
    assert (report["queries_before"], report["queries_after"]) == (3, 1) and len(report["merged"][0]["queries"]) == 3
    wait_sink(manager, kafka_bootstrap, sink_a, expect_a(first + second))
    wait_counts(manager, kafka_bootstrap, sink_c, first + second)
    hot = [r for r in first + second if r["temp"] > 30]
    wait_sink(manager, kafka_bootstrap, sink_d, hot + [r for r in mild if 10 <= r["temp"] <= 30])
