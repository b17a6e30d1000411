"""The emulated WAN's link proxy (the broker addresses it rewrites, its shaping arithmetic) and the flow model with
buffered hops that the emulation called for (pure logic)."""

from __future__ import annotations

import struct

import pytest

from wan.flow import FlowQuery, FlowTask, solve
from wan.topology import parse_wan_config
from wan_sim.emulation import FIND_COORDINATOR, METADATA, Shaper, rewrite_response


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(text: str | None, compact: bool) -> bytes:
    if text is None:
        return varint(0) if compact else struct.pack(">h", -1)
    raw = text.encode()
    return (varint(len(raw) + 1) if compact else struct.pack(">h", len(raw))) + raw


def broker(node: int, host: str, port: int, rack: str | None, version: int) -> bytes:
    compact = version >= 9
    out = struct.pack(">i", node) + string(host, compact) + struct.pack(">i", port)
    if version >= 1:
        out += string(rack, compact)
    return out + (b"\x00" if compact else b"")


def metadata(version: int, brokers: list[tuple[int, str, int, str | None]], rest: bytes) -> bytes:
    compact = version >= 9
    out = struct.pack(">i", 77) + (b"\x00" if compact else b"")  # correlation id, header tags
    if version >= 3:
        out += struct.pack(">i", 0)
    out += varint(len(brokers) + 1) if compact else struct.pack(">i", len(brokers))
    for node, host, port, rack in brokers:
        out += broker(node, host, port, rack, version)
    return out + rest


@pytest.mark.parametrize("version", [0, 1, 5, 8, 9, 12])
def test_metadata_names_the_proxy_for_every_broker_and_keeps_the_rest(version):
    rest = b"cluster-and-topics\x01\x02"
    before = metadata(version, [(1, "localhost", 9092, "r1"), (2, "broker-two.example", 19092, None)], rest)
    after = rewrite_response(METADATA, version, before, "127.0.0.1", 40001)
    assert after == metadata(version, [(1, "127.0.0.1", 40001, "r1"), (2, "127.0.0.1", 40001, None)], rest)


def coordinator(version: int, host: str, port: int) -> bytes:
    compact = version >= 3
    out = struct.pack(">i", 5) + (b"\x00" if compact else b"")
    if version < 4:
        if version >= 1:
            out += struct.pack(">i", 0)
        out += struct.pack(">h", 0)
        if version >= 1:
            out += string(None, compact)
        out += struct.pack(">i", 1) + string(host, compact) + struct.pack(">i", port)
        return out + (b"\x00" if compact else b"")
    out += struct.pack(">i", 0) + varint(3)
    for key in ("group-a", "group-b"):
        out += string(key, True) + struct.pack(">i", 1) + string(host, True) + struct.pack(">i", port)
        out += struct.pack(">h", 0) + string(None, True) + b"\x00"
    return out + b"\x00"


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 6])
def test_find_coordinator_names_the_proxy(version):
    after = rewrite_response(FIND_COORDINATOR, version, coordinator(version, "localhost", 9092), "127.0.0.1", 40002)
    assert after == coordinator(version, "127.0.0.1", 40002)


def test_a_response_that_does_not_parse_passes_unchanged_and_other_apis_are_not_touched():
    truncated = metadata(12, [(1, "localhost", 9092, None)], b"")[:-6]
    assert rewrite_response(METADATA, 12, truncated, "127.0.0.1", 1) == truncated
    fetch = b"\x00\x00\x00\x07anything"
    assert rewrite_response(1, 12, fetch, "127.0.0.1", 1) == fetch


def test_a_link_serializes_bytes_in_arrival_order_at_its_bandwidth():
    link = Shaper(bandwidth_mbps=8.0, delay_ms=20.0)  # 1 byte per microsecond
    assert link.departure(1_000_000, now=10.0) == pytest.approx(11.0)
    assert link.departure(500_000, now=10.5) == pytest.approx(11.5)  # queued behind the first
    assert link.departure(1_000, now=20.0) == pytest.approx(20.001)  # an idle link sends at once
    assert link.sent_bytes == 1_501_000 and link.busy_s == pytest.approx(1.501)
    unshaped = Shaper(bandwidth_mbps=None, delay_ms=5.0)
    assert unshaped.departure(10**9, now=3.0) == 3.0


# -- the flow model with buffered hops (what the emulation showed the runtime does) ---------------------------------

THREE = parse_wan_config({"sites": ["src", "east", "west"],
                          "links": [{"from": "src", "to": "east", "bandwidth_mbps": 100, "latency_ms": 5},
                                    {"from": "src", "to": "west", "bandwidth_mbps": 100, "latency_ms": 5},
                                    {"from": "east", "to": "west", "bandwidth_mbps": 2, "latency_ms": 5}]})


def shared_filter() -> tuple[list[FlowTask], list[FlowQuery]]:
    """One filter at east shared by a query at east and one at west (across east -> west)."""
    tasks = [FlowTask("s", "src", demand_mbps=10, rate_rps=1000), FlowTask("f", "east", ("s",), factor=0.4),
             FlowTask("k1", "east", ("f",)), FlowTask("k2", "west", ("f",))]
    return tasks, [FlowQuery("q1", ("s", "f", "k1"), ("k1",)), FlowQuery("q2", ("s", "f", "k2"), ("k2",))]


def test_with_buffered_hops_a_slow_reader_lags_alone_where_backpressure_slows_every_query_sharing_the_source():
    tasks, queries = shared_filter()
    pushed = solve(tasks, queries, THREE)
    buffered = solve(tasks, queries, THREE, decoupled=True)
    # the filter's 4 Mbps over east -> west's 2: backpressure halves the source, so both queries get half ...
    assert (pushed.query("q1").throughput_rps, pushed.query("q2").throughput_rps) == (500.0, 500.0)
    # ... buffered, the source runs at full rate, q1 is whole and only the west reader lags
    assert (buffered.query("q1").throughput_rps, buffered.query("q2").throughput_rps) == (1000.0, 500.0)
    assert buffered.link("east", "west").load_mbps == pytest.approx(2.0)
    assert buffered.link("src", "east").load_mbps == pytest.approx(10.0) == buffered.link("src", "east").demand_mbps


def test_without_congestion_both_models_agree():
    tasks, queries = shared_filter()
    wide = parse_wan_config({**THREE.to_dict(), "links": [{**link, "bandwidth_mbps": 100} for link in THREE.to_dict()["links"]]})
    pushed, buffered = solve(tasks, queries, wide), solve(tasks, queries, wide, decoupled=True)
    assert [q.throughput_rps for q in pushed.queries] == [q.throughput_rps for q in buffered.queries] == [1000.0, 1000.0]
    assert pushed.wan_mbps == pytest.approx(buffered.wan_mbps)


def test_buffered_lag_compounds_along_a_chain_of_congested_hops():
    """src -> east at 5 of 10 Mbps, then east -> west at 1 of the 2 that arrive (factor 0.4): a quarter at the end."""
    wan = parse_wan_config({"sites": ["src", "east", "west"],
                            "links": [{"from": "src", "to": "east", "bandwidth_mbps": 5, "latency_ms": 5},
                                      {"from": "east", "to": "west", "bandwidth_mbps": 1, "latency_ms": 5}]})
    tasks = [FlowTask("s", "src", demand_mbps=10, rate_rps=1000), FlowTask("f", "east", ("s",), factor=0.4),
             FlowTask("k", "west", ("f",))]
    result = solve(tasks, [FlowQuery("q", ("s", "f", "k"), ("k",))], wan, decoupled=True)
    assert result.query("q").throughput_rps == pytest.approx(250.0)
    assert result.link("src", "east").load_mbps == pytest.approx(5.0) and result.link("east", "west").load_mbps == pytest.approx(1.0)
