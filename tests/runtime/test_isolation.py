"""One tenant's failing expression never stalls, slows or changes another tenant's dataflow (real Spark).

Alice runs the urban ETL dataflow; Mallory submits a dataflow over the same
topic, hosted in the same Spark query and sharing its source task, whose
expression fails at run time on some record. The query finds Mallory's task,
quarantines it and writes the same micro-batch for Alice: no restart, nothing
lost or repeated, Alice's sink equals what her dataflow gives alone, and
Mallory's dataflow reads ``failed`` naming the task, the expression and
Spark's error. By default expressions have Spark's non-ANSI semantics (a bad
cast, a division by zero, an index out of range give null); what still fails
there (a datetime overflow) and, in strict mode (``ansi_sql``), each failure
kind is checked.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, values, wait_for, without_replays
from tests.fixtures.streams import expect_a, flow_a, multiset, urban_records

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

TIMEOUT_S = 120


def probe_flow(topic: str, sink: str, **columns_or_expr: str) -> dict[str, Any]:
    """Mallory's dataflow: the same source as Alice's, then a filter or a select of her own, then a sink."""
    if "expr" in columns_or_expr:
        middle = task("bad", "filter", expr=columns_or_expr["expr"])
    else:
        middle = task("bad", "select", columns=columns_or_expr)
    return {"name": "probe", "owner": "mallory", "tasks": [source("src", topic), middle, task("out", "sink", topic=sink)],
            "streams": [stream("src", "bad"), stream("bad", "out")]}


def alice(topic: str, sink: str) -> dict[str, Any]:
    return {**flow_a(topic, sink), "owner": "alice"}


def sink_has(bootstrap: str, topic: str, expected: list[dict[str, Any]]):
    def check():
        got = without_replays(read_all(bootstrap, topic))
        return len(got) >= len(expected) and got
    return check


def status_of(manager, dataflow_id: str) -> dict[str, Any]:
    return manager.statuses([manager.dataflow(dataflow_id)])[dataflow_id]


def test_a_datetime_overflow_quarantines_only_the_failing_task_and_the_batch_goes_on(manager_factory, kafka_bootstrap,
                                                                                     topic_factory):
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    a_sink, bad_sink = f"{urban}-alice", f"{urban}-mallory"
    a = manager.submit(alice(urban, a_sink))
    bad = manager.submit(probe_flow(urban, bad_sink, expr="timestampadd(DAY, CAST(humidity AS BIGINT), ts) >= ts"))
    assert "src" in bad.reused, "the two owners' dataflows share the source task"
    (query,) = manager.runtime.queries.values()
    assert {t.id for t in query.plan.tasks} >= set(a.tasks.values()) | set(bad.tasks.values()), "one shared query"

    good = urban_records(0, 100)
    produce(kafka_bootstrap, urban, good)
    wait_for(sink_has(kafka_bootstrap, bad_sink, good), TIMEOUT_S, "mallory's output before the poison")
    poison = [{**urban_records(100, 1)[0], "humidity": 1e15, "temp": 45.0}]  # 1e15 days after ts: Spark overflows
    after = urban_records(101, 100)
    produce(kafka_bootstrap, urban, poison + after)

    everything = good + poison + after
    received = wait_for(sink_has(kafka_bootstrap, a_sink, expect_a(everything)), TIMEOUT_S, "alice's output after the poison")
    assert multiset(received) == multiset(expect_a(everything)), "alice's sink differs from her dataflow alone"
    assert query.restarts == 0 and manager.runtime.work()["degraded"] == [], "the query never failed"
    assert manager.runtime.health()["status"] == "ok"

    failed = status_of(manager, bad.id)
    assert failed["status"] == "failed"
    failure = failed["failure"]
    assert failure["task"] == "bad" and failure["running_task"] == bad.tasks["bad"]
    assert failure["error_class"] == "DATETIME_OVERFLOW" and "Datetime operation overflow" in failure["error"]
    assert "timestampadd" in (failure["expression"] or "").lower()
    assert failure["config"] == {"expr": "timestampadd(DAY, CAST(humidity AS BIGINT), ts) >= ts"}
    assert status_of(manager, a.id) == {"status": "running"}
    assert set(manager.runtime.failures()) == {bad.tasks["bad"]}, "only mallory's own task is quarantined"
    assert len(values(read_all(kafka_bootstrap, bad_sink))) == len(good), "nothing more for the quarantined task"

    # A restarted service keeps the failing task out instead of failing again on the replayed batch.
    manager.close()
    restarted = manager_factory(trigger_s=0.5)
    assert set(restarted.runtime.failures()) == {bad.tasks["bad"]}
    assert status_of(restarted, bad.id)["status"] == "failed"
    later = urban_records(201, 50)
    produce(kafka_bootstrap, urban, later)
    received = wait_for(sink_has(kafka_bootstrap, a_sink, expect_a(everything + later)), TIMEOUT_S, "alice after the restart")
    assert multiset(received) == multiset(expect_a(everything + later))

    # An equivalent task submitted now is not served by the quarantined one: it gets a fresh task, which runs.
    again = restarted.submit(probe_flow(urban, f"{bad_sink}-2", expr="timestampadd(DAY, CAST(humidity AS BIGINT), ts) >= ts"))
    assert again.tasks["bad"] != bad.tasks["bad"] and "bad" in again.created
    assert status_of(restarted, again.id) == {"status": "running"}
    fresh = urban_records(251, 20)
    produce(kafka_bootstrap, urban, fresh)
    wait_for(sink_has(kafka_bootstrap, f"{bad_sink}-2", fresh), TIMEOUT_S, "the resubmitted dataflow's output")

    # Removing the failed dataflow stops its quarantined task and forgets it.
    restarted.remove(bad.id)
    assert restarted.runtime.failures() == {}


def test_bad_casts_divisions_indexes_and_records_give_null_by_default_beside_another_owner(manager_factory,
                                                                                        kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    a_sink, nulls_sink = f"{urban}-alice", f"{urban}-nulls"
    manager.submit(alice(urban, a_sink))
    columns = {"sensor": "sensor", "as_int": "CAST(sensor AS INT)", "ratio": "temp / (humidity - humidity)",
               "third": "split(sensor, 's')[5]", "wide": "CAST(humidity * 1e12 AS INT)"}
    nulls = manager.submit(probe_flow(urban, nulls_sink, **columns))
    records = urban_records(0, 60)
    produce(kafka_bootstrap, urban, records)
    produce(kafka_bootstrap, urban, [{"not": "the schema"}])  # parses: every column null
    produce_raw(kafka_bootstrap, urban, b"this is not JSON")
    received = wait_for(sink_has(kafka_bootstrap, nulls_sink, records + [{}, {}]), TIMEOUT_S, "the null-semantics output")
    by_sensor = [row for row in received if row.get("sensor") is not None]
    assert len(by_sensor) == len(records) and len(received) == len(records) + 2
    assert all(row.get("as_int") is None and row.get("ratio") is None and row.get("third") is None for row in by_sensor)
    assert status_of(manager, nulls.id) == {"status": "running"}
    got = wait_for(sink_has(kafka_bootstrap, a_sink, expect_a(records)), TIMEOUT_S, "alice's output")
    assert multiset(got) == multiset(expect_a(records))
    assert manager.runtime.failures() == {}


@pytest.mark.parametrize(("kind", "columns", "error_class"), [
    ("cast", {"n": "CAST(sensor AS INT)"}, "CAST_INVALID_INPUT"),
    ("division", {"n": "CAST(temp AS INT) DIV CAST(humidity - humidity AS INT)"}, "DIVIDE_BY_ZERO"),
    ("index", {"n": "split(sensor, 's')[5]"}, "INVALID_ARRAY_INDEX"),
    ("overflow", {"n": "CAST(humidity AS INT) + 2147483647"}, "ARITHMETIC_OVERFLOW"),
])
def test_in_strict_mode_each_failure_kind_is_quarantined_and_the_other_owner_goes_on(manager_factory, kafka_bootstrap,
                                                                                   topic_factory, kind, columns,
                                                                                   error_class):
    manager = manager_factory(trigger_s=0.5, ansi_sql=True)
    urban = topic_factory("urban")
    a_sink, bad_sink = f"{urban}-alice", f"{urban}-{kind}"
    a = manager.submit(alice(urban, a_sink))
    bad = manager.submit(probe_flow(urban, bad_sink, sensor="sensor", **columns))
    records = urban_records(1, 80)  # humidity 1..80: CAST(humidity AS INT) + 2147483647 overflows on every row
    produce(kafka_bootstrap, urban, records)
    received = wait_for(sink_has(kafka_bootstrap, a_sink, expect_a(records)), TIMEOUT_S, f"alice's output ({kind})")
    assert multiset(received) == multiset(expect_a(records))
    (query,) = manager.runtime.queries.values()
    assert query.restarts == 0
    failed = wait_for(lambda: (s := status_of(manager, bad.id))["status"] == "failed" and s, TIMEOUT_S, "failed status")
    assert failed["failure"]["task"] == "bad" and failed["failure"]["error_class"].startswith(error_class)
    assert status_of(manager, a.id) == {"status": "running"}
    assert read_all(kafka_bootstrap, bad_sink, timeout_s=2) == []


def produce_raw(bootstrap: str, topic: str, value: bytes) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        producer.send(topic, value=value).get(timeout=30)
    finally:
        producer.close()
