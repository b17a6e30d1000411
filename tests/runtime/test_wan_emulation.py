"""The emulated WAN on the real runtime: a hop between two sites is read through the link's shaping proxy
(wan_sim.emulation; docs/wan.md, "Emulated WAN")."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.kafka_io import produce, read_all
from tests.fixtures.streams import expect_a, flow_a, urban_records
from tests.runtime.test_sharing import wait_sink
from wan_sim.emulation import Emulator

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def test_a_hop_between_two_sites_crosses_the_emulated_link_and_loses_nothing(manager_factory, kafka_bootstrap,
                                                                               topic_factory):
    urban = topic_factory("urban")
    with Emulator(kafka_bootstrap, {("edge", "core"): (2.0, 30.0), ("core", "edge"): (2.0, 30.0)}) as wan:
        manager = manager_factory(trigger_s=0.5, links=wan.addresses)
        manager.set_wan({"sites": ["edge", "core"],
                         "links": [{"from": "edge", "to": "core", "bandwidth_mbps": 2, "latency_ms": 30}],
                         "sources": {urban: {"site": "edge", "rate_mbps": 1}}})
        document = flow_a(urban, f"{urban}-a")
        document["tasks"][1]["site"] = "edge"
        document["tasks"][3]["site"] = "core"
        a = manager.submit(document)
        assert a.sites == {"src": "edge", "hot": "edge", "proj": "edge", "out": "core"}
        # the core's query reads the edge's stream over the link; nothing else does
        (reader,) = [query for query in manager.runtime.queries.values() if query.routes]
        (tap,) = reader.routes
        assert reader.routes == {tap: wan.addresses[("edge", "core")]}

        records = urban_records(0, 400)
        produce(kafka_bootstrap, urban, records)
        wait_sink(manager, kafka_bootstrap, f"{urban}-a", expect_a(records))
        crossed = {stats.link: stats for stats in wan.stats()}
        tap_bytes = sum(len(json.dumps(record.value)) for record in read_all(kafka_bootstrap, tap))
        # every byte of the tap reached the core through the proxy (plus the protocol's framing); the other
        # direction carried no stream
        assert crossed[("edge", "core")].bytes_forward >= tap_bytes > 0
        assert crossed[("core", "edge")].bytes_forward == 0


def test_two_instances_of_one_task_each_write_their_own_stream(manager_factory, kafka_bootstrap, topic_factory):
    """NET plans each dataflow with its own source reader: two running instances of one signature, both read from
    another site. Each sink holds exactly its dataflow's records (one shared topic gave each reader both copies)."""
    urban = topic_factory("urban")
    manager = manager_factory(trigger_s=0.5)
    manager.set_wan({"sites": [{"name": "edge", "compute": False}, "east", "west"],
                     "default_link": {"bandwidth_mbps": 100, "latency_ms": 5},
                     "sources": {urban: {"site": "edge", "rate_mbps": 1}}, "policy": "net"})
    results = {}
    for site in ("east", "west"):
        document = flow_a(urban, f"{urban}-{site}")
        document["tasks"][3]["site"] = site
        results[site] = manager.submit(document)
    east, west = results["east"], results["west"]
    assert west.reused == [] and east.tasks["src"] != west.tasks["src"]
    assert manager.state.tasks[east.tasks["src"]].signature == manager.state.tasks[west.tasks["src"]].signature
    records = urban_records(0, 300)
    produce(kafka_bootstrap, urban, records)
    for site in ("east", "west"):
        wait_sink(manager, kafka_bootstrap, f"{urban}-{site}", expect_a(records))
