"""Small scenarios whose numbers the tests compute by hand (factories, so each test gets a fresh copy)."""

from __future__ import annotations

from typing import Any

# Flow-model parameters chosen so that queueing delays are round numbers:
# a saturated link holds 0.375 MB = 3 Mbit (100 ms to drain at 30 Mbps, 30 ms at 100 Mbps);
# a network buffer is 125 KB = 1 Mbit (10 ms to send at 100 Mbps).
LATENCY = {"batch_kb": 125, "buffer_mb": 0.375}


def _query(name: str, filters: tuple[str, str], home: str, at_s: float) -> dict[str, Any]:
    return {
        "name": name,
        "at_s": at_s,
        "tasks": [
            {"id": "a", "type": "source", "stream": "A"},
            {"id": "b", "type": "source", "stream": "B"},
            {"id": "fa", "type": "filter", "config": {"expr": filters[0]}, "selectivity": 0.5},
            {"id": "fb", "type": "filter", "config": {"expr": filters[1]}, "selectivity": 0.5},
            {"id": "u", "type": "union"},
            {"id": "k", "type": "sink", "site": home},
        ],
        "streams": [["a", "fa"], ["b", "fb"], ["fa", "u"], ["fb", "u"], ["u", "k"]],
    }


def two_sources_two_queries() -> dict[str, Any]:
    """Streams A and B (20 Mbps each: 1000 records/s of 2500 bytes) originate at S, which cannot compute.

    Both queries filter A and B (different filters, selectivity 0.5), union
    the results and write them at H. The direct link S -> H has 30 Mbps (the
    congested link); S -> N has 100 Mbps and N -> H 100 Mbps.
    """
    return {
        "name": "two-sources-two-queries",
        "wan": {
            "sites": [{"name": "S", "compute": False}, "N", "H"],
            "links": [
                {"from": "S", "to": "H", "bandwidth_mbps": 30, "latency_ms": 50},
                {"from": "S", "to": "N", "bandwidth_mbps": 100, "latency_ms": 5},
                {"from": "N", "to": "H", "bandwidth_mbps": 100, "latency_ms": 40},
            ],
        },
        "sources": {"A": {"site": "S", "rate_rps": 1000, "record_bytes": 2500},
                    "B": {"site": "S", "rate_rps": 1000, "record_bytes": 2500}},
        "queries": [
            _query("q1", ("lang = 'en'", "lang = 'en'"), "H", 0),
            _query("q2", ("lang = 'fr'", "lang = 'fr'"), "H", 10),
        ],
        "duration_s": 70,
        "latency": LATENCY,
    }


def unaware_sharing_hurts() -> dict[str, Any]:
    """Sana's Figure 6 in small: the equivalent filter runs at P, whose egress to q2's home H2 is thin.

    Stream A (20 Mbps) originates at S. q1 filters it (selectivity 0.5) and
    writes at P; q2 applies the same filter and writes at H2. P -> H2 has
    5 Mbps, S -> H2 100 Mbps.
    """
    return {
        "name": "unaware-sharing-hurts",
        "wan": {
            "sites": [{"name": "S", "compute": False}, "P", "H2"],
            "links": [
                {"from": "S", "to": "P", "bandwidth_mbps": 100, "latency_ms": 10},
                {"from": "S", "to": "H2", "bandwidth_mbps": 100, "latency_ms": 30},
                {"from": "P", "to": "H2", "bandwidth_mbps": 5, "latency_ms": 20},
            ],
        },
        "sources": {"A": {"site": "S", "rate_rps": 1000, "record_bytes": 2500}},
        "queries": [
            {"name": name, "at_s": at_s,
             "tasks": [{"id": "a", "type": "source", "stream": "A"},
                       {"id": "f", "type": "filter", "config": {"expr": "lang = 'en'"}, "selectivity": 0.5},
                       {"id": "k", "type": "sink", "site": home}],
             "streams": [["a", "f"], ["f", "k"]]}
            for name, home, at_s in (("q1", "P", 0), ("q2", "H2", 10))
        ],
        "duration_s": 70,
        "latency": LATENCY,
    }


def scarce_everywhere() -> dict[str, Any]:
    """Why Algorithm 1 as printed lost to Max-Share when every link is thin (docs/wan.md).

    As :func:`unaware_sharing_hurts`, but the copy's way is thinner than the
    share's: S -> P has 10 Mbps, P -> H2 4 Mbps and S -> H2 4 Mbps. Refusing
    the share of q1's filter at P means a copy at H2 whose input, the raw
    stream (20 Mbps), crosses S -> H2, where the share's output (10 Mbps)
    would have crossed P -> H2.
    """
    document = unaware_sharing_hurts()
    document["name"] = "scarce-everywhere"
    document["wan"]["links"] = [
        {"from": "S", "to": "P", "bandwidth_mbps": 10, "latency_ms": 10},
        {"from": "S", "to": "H2", "bandwidth_mbps": 4, "latency_ms": 30},
        {"from": "P", "to": "H2", "bandwidth_mbps": 4, "latency_ms": 20},
    ]
    return document


def degrading_link() -> dict[str, Any]:
    """The Figure-6 sites with a link that degrades mid-run, and re-placement on (utilization >= 0.9, every 10 s).

    P -> H2 has 100 Mbps at first, so q2 (at 10 s) shares q1's filter at P;
    at 55 s it drops to 5 Mbps, less than the filter's 10.
    """
    document = unaware_sharing_hurts()
    document["name"] = "degrading-link"
    document["wan"]["links"][2]["bandwidth_mbps"] = 100
    document["wan"]["replacement"] = {"utilization": 0.9, "check_every_s": 10}
    document["bandwidth_changes"] = [{"at_s": 55, "from": "P", "to": "H2", "bandwidth_mbps": 5}]
    document["duration_s"] = 90
    return document


def degrading_link_under_a_later_share() -> dict[str, Any]:
    """:func:`degrading_link` with the homes swapped: q1 writes at H2 and q2 at P, and S -> H2 is slower (60 ms).

    q1's filter goes to P (its output crosses P -> H2 at 100 Mbps) and q2 shares it there without crossing
    any link of its own; when P -> H2 degrades, q1 is planned again while q2 still uses the filter q1 made.
    """
    document = degrading_link()
    document["name"] = "degrading-link-under-a-later-share"
    document["queries"][0]["tasks"][2]["site"] = "H2"
    document["queries"][1]["tasks"][2]["site"] = "P"
    document["wan"]["links"][1]["latency_ms"] = 60
    return document


def refusal_slows_the_running() -> dict[str, Any]:
    """A refusal whose copy slows a query already running (docs/wan.md, "Why Sana lost to Max-Share").

    The Figure-6 sites with a second stream B (20 Mbps) at S, which q0 reads
    at H2 from the start. Then q1 and q2 as in :func:`unaware_sharing_hurts`.
    S -> H2 has 32 Mbps, P -> H2 7.5 Mbps.
    """
    document = unaware_sharing_hurts()
    document["name"] = "refusal-slows-the-running"
    document["wan"]["links"] = [
        {"from": "S", "to": "P", "bandwidth_mbps": 100, "latency_ms": 10},
        {"from": "S", "to": "H2", "bandwidth_mbps": 32, "latency_ms": 20},
        {"from": "P", "to": "H2", "bandwidth_mbps": 7.5, "latency_ms": 20},
    ]
    document["sources"]["B"] = {"site": "S", "rate_rps": 1000, "record_bytes": 2500}
    for query in document["queries"]:
        query["at_s"] += 10
    document["queries"].insert(0, {
        "name": "q0", "at_s": 0,
        "tasks": [{"id": "b", "type": "source", "stream": "B"}, {"id": "k", "type": "sink", "site": "H2"}],
        "streams": [["b", "k"]],
    })
    return document
