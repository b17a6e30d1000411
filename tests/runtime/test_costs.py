"""Cost attribution on the Spark runtime: measured task costs split among the dataflows that use them."""

from __future__ import annotations

import pytest

from manager.costs import METRICS
from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, wait_for
from tests.fixtures.streams import URBAN, expect_a, expect_b, flow_a, flow_b, urban_records
from tests.runtime.test_sharing import wait_sink

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def per_sensor_counts(topic: str, sink: str) -> dict:
    """Shares A's source only; keeps keyed state (a window per sensor)."""
    return {
        "name": "counts",
        "tasks": [source("src", topic, dict(URBAN)),
                  task("per_sensor", "window_aggregate", keys=["sensor"], time_column="ts", window="10 seconds",
                       watermark="1 second", aggregates={"n": "count(*)"}),
                  task("out", "sink", topic=sink)],
        "streams": [stream("src", "per_sensor"), stream("per_sensor", "out")],
    }


def _measured(manager):
    split = manager.costs()
    total = split["total"]
    return split if split["measured"] and total["cpu_cores"] > 0 and total["state_bytes"] > 0 else None


def test_shares_add_up_to_the_whole_and_shared_tasks_are_split(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    manager.runtime.meter.every_s = 0.5
    urban = topic_factory("urban")
    a = manager.submit(flow_a(urban, f"{urban}-a"))
    b = manager.submit(flow_b(urban, f"{urban}-b"))
    counts = manager.submit(per_sensor_counts(urban, f"{urban}-counts"))
    records = urban_records(0, 400)
    produce(kafka_bootstrap, urban, records)
    wait_sink(manager, kafka_bootstrap, f"{urban}-a", expect_a(records))
    wait_sink(manager, kafka_bootstrap, f"{urban}-b", expect_b(records))
    split = wait_for(lambda: _measured(manager), 60, "a measured cost with CPU and keyed state")

    for metric in METRICS:  # the dataflows' shares add up to the whole
        shares = sum(flow["cost"][metric] for flow in split["dataflows"].values())
        assert shares == pytest.approx(split["total"][metric], rel=1e-4, abs=1e-4), metric
    assert split["total"]["cpu_cores"] + split["unattributed"]["cpu_cores"] == pytest.approx(
        split["service_cpu_cores"], rel=1e-3, abs=1e-4), "every measured core is charged to some task"

    rows = {flow_id: {row["task"]: row for row in flow["tasks"]} for flow_id, flow in split["dataflows"].items()}
    src, hot = a.tasks["src"], a.tasks["hot"]
    assert rows[a.id][src]["users"] == rows[counts.id][src]["users"] == 3
    assert rows[a.id][hot]["users"] == rows[b.id][hot]["users"] == 2 and hot not in rows[counts.id]
    assert rows[a.id][hot]["share"] == pytest.approx(0.5)
    for flow in (a, b, counts):
        mine = split["dataflows"][flow.id]
        assert mine["alone"]["cpu_cores"] > mine["cost"]["cpu_cores"] > 0, f"{flow.id} shares its source"
        assert mine["saved"]["cpu_cores"] == pytest.approx(mine["alone"]["cpu_cores"] - mine["cost"]["cpu_cores"], abs=1e-5)
    assert rows[counts.id][counts.tasks["per_sensor"]]["state_bytes"] > 0  # only the keyed task holds state
    assert rows[a.id][hot]["state_bytes"] == 0

    one = manager.cost(b.id)
    assert one["id"] == b.id and one["measured"] and {row["task"] for row in one["tasks"]} == set(b.tasks.values())

    # what the runtime counted as written is what the sink topics hold
    written = {}
    for query in manager.runtime.queries.values():
        written.update(query.written_records)
    assert written[a.tasks["out"]] == len(read_all(kafka_bootstrap, f"{urban}-a")) == len(expect_a(records))
    assert written[b.tasks["out"]] == len(read_all(kafka_bootstrap, f"{urban}-b"))
