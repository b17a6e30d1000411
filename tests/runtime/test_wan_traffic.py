"""Measured WAN traffic on the real runtime: a hop between fragments at two sites is counted (docs/wan.md)."""

from __future__ import annotations

import pytest

from tests.fixtures.kafka_io import produce, read_all, wait_for
from tests.fixtures.streams import expect_a, flow_a, urban_records
from tests.runtime.test_sharing import wait_sink

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def _measured_link(manager):
    links = manager.wan_links()
    row = next(row for row in links["links"] if (row["from"], row["to"]) == ("edge", "core"))
    return (links, row) if row["basis"] == "measured" and row["load_mbps"] > 0 else None


def test_a_hop_between_two_sites_is_measured_and_the_links_say_so(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    manager.runtime.meter.every_s = 0.5
    urban = topic_factory("urban")
    manager.set_wan({"sites": ["edge", "core"],
                     "links": [{"from": "edge", "to": "core", "bandwidth_mbps": 10, "latency_ms": 20}],
                     "sources": {urban: {"site": "edge", "rate_mbps": 4}}})
    document = flow_a(urban, f"{urban}-a")
    document["tasks"][1]["site"] = "edge"  # the filter runs where the data originates ...
    document["tasks"][3]["site"] = "core"  # ... and the results are needed at the core
    a = manager.submit(document)
    assert a.sites == {"src": "edge", "hot": "edge", "proj": "edge", "out": "core"}
    before = {(row["from"], row["to"]): row for row in manager.wan_links()["links"]}
    # the estimate, 4 Mbps x 0.5 (filter) x 0.8 (select), is kept beside the load; with no record yet the
    # runtime measures nothing written (or has not sampled twice yet, and the estimate stands)
    assert before[("edge", "core")]["estimated_load_mbps"] == 1.6
    assert before[("edge", "core")]["load_mbps"] in (0.0, 1.6)

    records = urban_records(0, 300)
    produce(kafka_bootstrap, urban, records)
    wait_sink(manager, kafka_bootstrap, f"{urban}-a", expect_a(records))
    links, row = wait_for(lambda: _measured_link(manager), 60, "a measured load on edge -> core")
    manager.runtime.meter.every_s = 1e9  # no new sample: the cost window and the links read the same numbers

    links, row = _measured_link(manager)
    (stream,) = row["streams"]
    producer = stream["producer"]
    assert producer == a.tasks["proj"] and stream["consumers"] == [a.tasks["out"]]
    costs = manager.runtime.task_costs()["tasks"][producer]
    assert row["load_mbps"] == stream["measured_mbps"] == round(costs["kafka_bytes_per_s"] * 8 / 1e6, 6)
    assert row["estimated_load_mbps"] == 1.6 and stream["rate_mbps"] == 1.6 and links["basis"] == "measured"
    assert row["utilization"] == pytest.approx(row["load_mbps"] / 10, abs=1e-6)
    # what the runtime counts for the hop is what the hop's topic holds
    (tap,) = [topic for query in manager.runtime.queries.values() for task_id, topic in query.plan.outputs
              if task_id == producer]
    written = sum(query.written_records.get(producer, 0) for query in manager.runtime.queries.values())
    assert written == len(read_all(kafka_bootstrap, tap)) == len(expect_a(records))
