"""The WAN configuration: its format, its errors, the monitor's view of it."""

from __future__ import annotations

import json
import math

import pytest

from wan.exceptions import WanConfigInvalid
from wan.monitor import WanMonitor, crossings, link_loads
from wan.topology import load_wan_config, parse_wan_config

BASE = {
    "sites": [{"name": "virginia"}, {"name": "ohio", "compute": False}, "london"],
    "links": [
        {"from": "ohio", "to": "virginia", "bandwidth_mbps": 100, "latency_ms": 6},
        {"from": "virginia", "to": "london", "bandwidth_mbps": 50, "latency_ms": 38, "directed": True},
    ],
    "sources": {"tweets": {"site": "ohio", "rate_mbps": 16}, "logs": "london"},
    "sinks": {"alerts": "virginia"},
    "selectivity": {"filter": 0.25},
}


def test_links_are_two_way_unless_directed():
    wan = parse_wan_config(BASE)
    assert wan.link("virginia", "ohio").bandwidth_mbps == 100
    assert wan.link("virginia", "london").latency_ms == 38
    assert wan.link("london", "virginia") is None
    assert wan.compute_sites == ("virginia", "london")
    assert wan.sources["tweets"].rate_mbps == 16 and wan.sources["logs"].site == "london"
    assert wan.factor("filter") == 0.25 and wan.factor("window_aggregate") == 0.05 and wan.factor("mystery") == 1.0


def test_default_link_fills_missing_pairs():
    wan = parse_wan_config({**BASE, "default_link": {"bandwidth_mbps": 20, "latency_ms": 150}})
    assert wan.link("london", "virginia").bandwidth_mbps == 20
    assert wan.link("london", "nowhere") is None
    assert len(wan.all_links()) == 6


def test_round_trip_through_the_canonical_document():
    wan = parse_wan_config(BASE)
    again = parse_wan_config(json.loads(json.dumps(wan.to_dict())))
    assert again == wan or again.to_dict() == wan.to_dict()
    replacing = parse_wan_config({**BASE, "replacement": {"utilization": 0.9}})
    assert (replacing.replace_above, replacing.check_every_s) == (0.9, 10.0) and wan.replace_above is None
    assert parse_wan_config(replacing.to_dict()).to_dict() == replacing.to_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"links": [{"from": "ohio", "to": "mars", "bandwidth_mbps": 1, "latency_ms": 1}]}, r"links\[0\]\.to: unknown site 'mars'"),
        ({"links": [{"from": "ohio", "to": "london", "bandwidth_mbps": 0, "latency_ms": 1}]}, r"links\[0\]\.bandwidth_mbps: Input should be greater than 0"),
        ({"links": [{"from": "ohio", "to": "ohio", "bandwidth_mbps": 1, "latency_ms": 1}]}, r"links\[0\]: a link joins two different sites"),
        ({"sites": ["a", "a"]}, r"sites\[1\]: site 'a' is listed twice"),
        ({"sites": ["bad site"]}, r"sites\[0\]: bad site name 'bad site'"),
        ({"sources": {"t": {"site": "pluto"}}}, r"sources\.t\.site: unknown site 'pluto'"),
        ({"sinks": {"t": "pluto"}}, r"sinks\.t: unknown site 'pluto'"),
        ({"colour": "blue"}, r"colour: Extra inputs are not permitted"),
        ({"replacement": {"utilization": 0}}, r"replacement\.utilization: Input should be greater than 0"),
        ({"replacement": {"utilization": 0.9, "check_every_s": -1}}, r"replacement\.check_every_s: Input should be greater than 0"),
        ({"replacement": {"utilisation": 0.9}}, r"replacement\.utilization: Field required"),
    ],
)
def test_errors_name_the_field(change, message):
    with pytest.raises(WanConfigInvalid, match=message):
        parse_wan_config({**BASE, **change})


def test_not_json_and_unreadable_file(tmp_path):
    with pytest.raises(WanConfigInvalid, match="not JSON"):
        parse_wan_config("{nope")
    with pytest.raises(WanConfigInvalid, match="cannot read the WAN configuration"):
        load_wan_config(tmp_path / "missing.json")
    path = tmp_path / "wan.json"
    path.write_text(json.dumps({"sites": []}))
    with pytest.raises(WanConfigInvalid, match=r"wan.json: sites: List should have at least 1 item"):
        load_wan_config(path)


def test_time_varying_bandwidth_changes_one_direction():
    wan = parse_wan_config(BASE).with_bandwidth("ohio", "virginia", 10)
    assert wan.link("ohio", "virginia").bandwidth_mbps == 10
    assert wan.link("virginia", "ohio").bandwidth_mbps == 100
    with pytest.raises(WanConfigInvalid, match="no link london -> ohio"):
        wan.with_bandwidth("london", "ohio", 1)


def test_monitor_spare_and_utilization():
    monitor = WanMonitor(parse_wan_config(BASE), {("ohio", "virginia"): 120.0})
    assert monitor.spare("ohio", "virginia") == -20.0
    assert monitor.utilization("ohio", "virginia") == 1.2
    assert monitor.spare("london", "virginia") == -math.inf
    assert not monitor.reachable("london", "virginia")
    row = next(item for item in monitor.report() if (item["from"], item["to"]) == ("ohio", "virginia"))
    assert row == {"from": "ohio", "to": "virginia", "bandwidth_mbps": 100.0, "latency_ms": 6.0, "load_mbps": 120.0,
                   "spare_mbps": -20.0, "utilization": 1.2}


def test_a_stream_crosses_to_a_site_once_whatever_its_consumers_there():
    placed = {"s": ("ohio", []), "a": ("virginia", ["s"]), "b": ("virginia", ["s"]), "c": ("london", ["s", "a"])}
    crossed = crossings(placed, {"s": 16.0, "a": 4.0})
    assert crossed == {("s", "virginia"): 16.0, ("s", "london"): 16.0, ("a", "london"): 4.0}
    assert link_loads(crossed, {"s": "ohio", "a": "virginia"}) == {
        ("ohio", "virginia"): 16.0, ("ohio", "london"): 16.0, ("virginia", "london"): 4.0}
