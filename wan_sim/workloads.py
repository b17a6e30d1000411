"""The 14-site, 12-query WAN workload of Sana's section 7 (docs/wan.md, "Workload"), as scenarios.

Sites: 8 compute sites (Virginia, California, Canada, London, Frankfurt,
Sydney, Tokyo, Singapore) and 6 sites where tweet streams originate (Ohio,
Oregon, Ireland, Seoul, Mumbai, Sao Paulo), as in Sana's evaluation.

Latencies are one-way, half the inter-region round-trip times: for the ten
regions of a published 2017 EC2 inter-region table (Virginia, California,
Oregon, Ireland, Frankfurt, Tokyo, Seoul, Singapore, Sydney, Sao Paulo) its
values rounded; Ohio, Canada, London and Mumbai are estimated from their
neighbours (see :data:`RTT_MS`). Bandwidth falls with distance, between
20 and 280 Mbps as Sana measured: ``280 * exp(-rtt / 150)`` with a seeded
+-20 % jitter, clamped to [20, 280].

Streams: about 7,000 tweets/s in all (Sana replayed 6,000-8,000), 5,000
bytes each, split over the six origins. Queries (Sana's Table 1): tweet
statistics, user analysis, top-k, sentiment and system load; each reads 4-6
streams (system load 2-3), parses every stream (the same operator in every
query: IN-OP), applies its category's filter (shared within a category, IN
across categories: same parsed input, another operator), projects, unions,
aggregates over a window, optionally joins a static table at its home site
and ranks, and writes at its home site. Queries arrive 10 s apart.
"""

from __future__ import annotations

import math
import random
from typing import Any

COMPUTE = ["virginia", "california", "canada", "london", "frankfurt", "sydney", "tokyo", "singapore"]
ORIGINS = ["ohio", "oregon", "ireland", "seoul", "mumbai", "sao-paulo"]

#: Round-trip times in ms. Measured (2017 table, rounded) between the regions it covers; ``~`` estimated.
RTT_MS: dict[tuple[str, str], float] = {}


def _rtt(a: str, b: str, value: float) -> None:
    RTT_MS[(a, b)] = RTT_MS[(b, a)] = float(value)


_MEASURED = """
virginia california 72; virginia oregon 88; virginia ireland 81; virginia frankfurt 89; virginia tokyo 145
virginia seoul 177; virginia singapore 217; virginia sydney 230; virginia sao-paulo 120
california oregon 19; california ireland 153; california frankfurt 167; california tokyo 103; california seoul 132
california singapore 174; california sydney 158; california sao-paulo 193
oregon ireland 137; oregon frankfurt 160; oregon tokyo 89; oregon seoul 118; oregon singapore 161; oregon sydney 162
oregon sao-paulo 183
ireland frankfurt 20; ireland tokyo 212; ireland seoul 242; ireland singapore 239; ireland sydney 310; ireland sao-paulo 191
frankfurt tokyo 237; frankfurt seoul 266; frankfurt singapore 326; frankfurt sydney 323; frankfurt sao-paulo 195
tokyo seoul 31; tokyo singapore 74; tokyo sydney 104; tokyo sao-paulo 257
seoul singapore 72; seoul sydney 134; seoul sao-paulo 286
singapore sydney 175; singapore sao-paulo 328; sydney sao-paulo 322
"""
for _line in _MEASURED.replace("\n", ";").split(";"):
    if _line.strip():
        _a, _b, _v = _line.split()
        _rtt(_a, _b, float(_v))

_MEASURED_SITES = ["virginia", "california", "oregon", "ireland", "frankfurt", "tokyo", "seoul", "singapore", "sydney", "sao-paulo"]
# Estimates: Ohio ~ Virginia, a little closer to the west; Canada (Montreal) ~ Virginia, a little further;
# London ~ Ireland; Mumbai from its position between Singapore and Europe.
_rtt("ohio", "virginia", 12)
_rtt("canada", "virginia", 15)
_rtt("ohio", "canada", 20)
_rtt("london", "ireland", 11)
_rtt("london", "frankfurt", 15)
_rtt("london", "virginia", 76)
for _site in _MEASURED_SITES:
    if _site != "virginia":
        west = _site in ("california", "oregon", "tokyo", "seoul", "singapore", "sydney")
        _rtt("ohio", _site, RTT_MS[("virginia", _site)] + (-10 if west else 10))
        _rtt("canada", _site, RTT_MS[("virginia", _site)] + (5 if west else -3))
    if _site not in ("ireland", "frankfurt", "virginia"):
        _rtt("london", _site, RTT_MS[("ireland", _site)] + 5)
_rtt("ohio", "london", 86)
_rtt("canada", "london", 78)
_MUMBAI = {"singapore": 60, "frankfurt": 110, "london": 112, "ireland": 122, "virginia": 185, "tokyo": 120, "seoul": 125,
           "sydney": 150, "california": 230, "oregon": 220, "sao-paulo": 300, "canada": 190, "ohio": 195}
for _site, _value in _MUMBAI.items():
    _rtt("mumbai", _site, _value)

#: Tweets per second per origin at rate scale 1 (about 7,000 in all).
STREAM_RPS = {"ohio": 1800, "oregon": 1200, "ireland": 1300, "seoul": 900, "mumbai": 1000, "sao-paulo": 800}
RECORD_BYTES = 5000

#: Category -> (filter, its selectivity, projection size factor, number of streams read).
CATEGORIES = {
    "tweet-stats": ("has-hashtag", 0.4, 0.5, (4, 6)),
    "users": ("has-user-profile", 0.6, 0.4, (4, 6)),
    "top-k": ("hashtag-or-retweet", 0.5, 0.5, (4, 6)),
    "sentiment": ("language-supported", 0.7, 0.6, (4, 6)),
    "system-load": ("request-log", 1.0, 0.1, (2, 3)),
}
#: The twelve queries: (name, category, home site, variant). Same variant in a category: same projection.
QUERIES = [
    ("tweet-rate-by-location", "tweet-stats", "virginia", 0),
    ("hashtag-count-by-language", "tweet-stats", "london", 0),
    ("tweet-count-by-topic", "tweet-stats", "tokyo", 1),
    ("users-by-gender", "users", "california", 0),
    ("users-by-age-group", "users", "frankfurt", 0),
    ("retweets-by-age-group", "users", "singapore", 1),
    ("top-hashtags", "top-k", "canada", 0),
    ("trending-topics", "top-k", "sydney", 1),
    ("sentiment-by-hashtag", "sentiment", "london", 0),
    ("sentiment-by-country", "sentiment", "virginia", 1),
    ("bandwidth-per-node", "system-load", "frankfurt", 0),
    ("requests-per-region", "system-load", "tokyo", 1),
]


def bandwidth_mbps(rtt_ms: float, rng: random.Random) -> float:
    """Link bandwidth from the round-trip time: 280 Mbps nearby, 20 Mbps across the globe.

    >>> round(bandwidth_mbps(12, random.Random(0)))
    280
    """
    base = 280.0 * math.exp(-rtt_ms / 150.0)
    return round(min(280.0, max(20.0, base * rng.uniform(0.8, 1.2))), 1)


def fourteen_site_wan(seed: int = 7, bandwidth_scale: float = 1.0,
                      thin_egress: tuple[str, float] | None = None) -> dict[str, Any]:
    """The WAN block of a scenario: 14 sites, a full mesh of links.

    ``thin_egress`` = (compute site, factor) multiplies that site's links towards the other compute sites,
    in that direction only (Sana's Figure 6: the site of a shared vertex lacks egress for its consumers).

    >>> wan = fourteen_site_wan(thin_egress=("virginia", 0.1))
    >>> [(l["from"], l["to"], l["bandwidth_mbps"]) for l in wan["links"] if l.get("directed")][:1]
    [('virginia', 'california', 16.11)]
    """
    rng = random.Random(seed)
    sites = COMPUTE + ORIGINS
    links = []
    for i, a in enumerate(sites):
        for b in sites[i + 1:]:
            rtt = RTT_MS[(a, b)]
            links.append({"from": a, "to": b, "bandwidth_mbps": round(bandwidth_mbps(rtt, rng) * bandwidth_scale, 1),
                          "latency_ms": rtt / 2})
    if thin_egress is not None:
        site, factor = thin_egress
        links += [{"from": site, "to": other, "bandwidth_mbps": round(link["bandwidth_mbps"] * factor, 2),
                   "latency_ms": link["latency_ms"], "directed": True} for other, link in _egress(links, site)]
    return {"sites": [*COMPUTE, *({"name": origin, "compute": False} for origin in ORIGINS)], "links": links}


def _egress(links: list[dict[str, Any]], site: str) -> list[tuple[str, dict[str, Any]]]:
    """(other compute site, link) for every two-way link between ``site`` and another compute site."""
    found = []
    for link in links:
        if site in (link["from"], link["to"]) and not link.get("directed"):
            other = link["to"] if link["from"] == site else link["from"]
            if other in COMPUTE:
                found.append((other, link))
    return found


def tweet_query(name: str, category: str, home: str, variant: int, streams: list[str], at_s: float, window_s: int) -> dict[str, Any]:
    """A query of Sana's Table 1 as a scenario query: ``category`` (a key of :data:`CATEGORIES`) over the tweet
    streams of ``streams`` (origin sites), written at ``home``; queries of one category and ``variant`` project
    the same columns. Its static table, for the categories that join one, is ``static-<home>``."""
    filter_name, selectivity, size, _ = CATEGORIES[category]
    tasks: list[dict[str, Any]] = []
    edges: list[list[str]] = []
    for stream in streams:
        tasks += [
            {"id": f"src-{stream}", "type": "source", "stream": f"tweets-{stream}"},
            {"id": f"parse-{stream}", "type": "parse", "config": {"format": "tweet-json"}, "selectivity": 1.0, "size": 0.5},
            {"id": f"filter-{stream}", "type": "filter", "config": {"keep": filter_name}, "selectivity": selectivity},
            {"id": f"project-{stream}", "type": "select", "config": {"columns": f"{category}-{variant}"}, "selectivity": 1.0, "size": size},
        ]
        edges += [[f"src-{stream}", f"parse-{stream}"], [f"parse-{stream}", f"filter-{stream}"], [f"filter-{stream}", f"project-{stream}"]]
    tail = f"project-{streams[0]}"
    if len(streams) > 1:
        tasks.append({"id": "union", "type": "union"})
        edges += [[f"project-{stream}", "union"] for stream in streams]
        tail = "union"
    tasks.append({"id": "window", "type": "window_aggregate", "config": {"query": name, "window_s": window_s}, "selectivity": 0.02})
    edges.append([tail, "window"])
    tail = "window"
    if category in ("sentiment", "top-k"):
        tasks.append({"id": "table", "type": "source", "stream": f"static-{home}"})
        tasks.append({"id": "join", "type": "join", "config": {"query": name}, "selectivity": 1.0})
        edges += [[tail, "join"], ["table", "join"]]
        tail = "join"
    if category == "top-k":
        tasks.append({"id": "rank", "type": "topk", "config": {"k": 10, "query": name}, "selectivity": 0.2})
        edges.append([tail, "rank"])
        tail = "rank"
    tasks.append({"id": "out", "type": "sink", "site": home})
    edges.append([tail, "out"])
    return {"name": name, "at_s": at_s, "tasks": tasks, "streams": edges}


def sources(rate_scale: float = 1.0) -> dict[str, Any]:
    result = {f"tweets-{origin}": {"site": origin, "rate_rps": round(rps * rate_scale, 3), "record_bytes": RECORD_BYTES}
              for origin, rps in STREAM_RPS.items()}
    for home in COMPUTE:
        result[f"static-{home}"] = {"site": home, "rate_rps": 10, "record_bytes": 200}
    return result


def fourteen_site_scenario(queries: int = 12, rate_scale: float = 1.0, bandwidth_scale: float = 1.0, seed: int = 7,
                           thin_egress: tuple[str, float] | None = None) -> dict[str, Any]:
    """The WAN workload of docs/wan.md: the first ``queries`` of :data:`QUERIES`, 10 s apart.

    >>> scenario = fourteen_site_scenario(3)
    >>> [query["name"] for query in scenario["queries"]], len(scenario["wan"]["links"])
    (['tweet-rate-by-location', 'hashtag-count-by-language', 'tweet-count-by-topic'], 91)
    """
    rng = random.Random(seed + 1)
    chosen = []
    for index, (name, category, home, variant) in enumerate(QUERIES[:queries]):
        low, high = CATEGORIES[category][3]
        streams = sorted(rng.sample(ORIGINS, rng.randint(low, high)), key=ORIGINS.index)
        chosen.append(tweet_query(name, category, home, variant, streams, 10.0 * index, window_s=10))
    return {
        "name": f"fourteen-sites-{queries}q",
        "wan": fourteen_site_wan(seed, bandwidth_scale, thin_egress),
        "sources": sources(rate_scale),
        "queries": chosen,
        "duration_s": 10.0 * queries + 60.0,
    }


def degrading_scenario(queries: int = 12, bandwidth_scale: float = 0.3, site: str = "virginia", factor: float = 0.1,
                       at_s: float = 125.0, replacement: bool = True, seed: int = 7) -> dict[str, Any]:
    """The 14-site workload where ``site``'s egress to the other compute sites drops to ``factor`` at ``at_s``
    (after every query arrived), with re-placement at 0.95 utilization checked every 10 s, or without it.

    >>> scenario = degrading_scenario()
    >>> len(scenario["bandwidth_changes"]), scenario["wan"]["replacement"], scenario["duration_s"]
    (7, {'utilization': 0.95, 'check_every_s': 10}, 250.0)
    """
    scenario = fourteen_site_scenario(queries, bandwidth_scale=bandwidth_scale, seed=seed)
    changes = [{"at_s": at_s, "from": site, "to": other, "bandwidth_mbps": round(link["bandwidth_mbps"] * factor, 2)}
               for other, link in _egress(scenario["wan"]["links"], site)]
    scenario["name"] = f"fourteen-sites-{queries}q-{site}-degrades"
    scenario["bandwidth_changes"] = changes
    scenario["duration_s"] = at_s + 125.0
    if replacement:
        scenario["wan"]["replacement"] = {"utilization": 0.95, "check_every_s": 10}
    return scenario


def sharing_ratio_scenario(ratio: float, queries: int = 4, seed: int = 11, bandwidth_scale: float = 100.0) -> dict[str, Any]:
    """Sana 7.4's second experiment: ``queries`` queries over the same four streams, a ``ratio`` of their vertices shared.

    Every query parses, filters and projects four streams, unions and
    aggregates. Each per-stream branch is, with probability ``ratio``, the
    common one (the same stream, parse, filter and projection in every
    query), else the query's own (its own stream from the same site, its own
    operators). Bandwidth is ample by default (x100), as in Sana's CloudLab runs.
    """
    rng = random.Random(seed)
    streams = ["ohio", "ireland", "seoul", "mumbai"]
    homes = ["virginia", "london", "tokyo", "singapore", "canada", "frankfurt", "sydney", "california"]
    result = []
    for number in range(queries):
        tasks: list[dict[str, Any]] = []
        edges: list[list[str]] = []
        for stream in streams:
            common = rng.random() < ratio
            tag = "common" if common else f"q{number}"
            tasks += [
                {"id": f"src-{stream}", "type": "source", "stream": f"tweets-{stream}" if common else f"tweets-{stream}-q{number}"},
                {"id": f"parse-{stream}", "type": "parse", "config": {"format": "tweet-json", "by": tag}, "selectivity": 1.0, "size": 0.5},
                {"id": f"filter-{stream}", "type": "filter", "config": {"keep": tag}, "selectivity": 0.5},
                {"id": f"project-{stream}", "type": "select", "config": {"columns": tag}, "size": 0.5},
            ]
            edges += [[f"src-{stream}", f"parse-{stream}"], [f"parse-{stream}", f"filter-{stream}"], [f"filter-{stream}", f"project-{stream}"]]
        tasks += [{"id": "union", "type": "union"},
                  {"id": "window", "type": "window_aggregate", "config": {"query": number}, "selectivity": 0.02},
                  {"id": "out", "type": "sink", "site": homes[number % len(homes)]}]
        edges += [[f"project-{stream}", "union"] for stream in streams] + [["union", "window"], ["window", "out"]]
        result.append({"name": f"q{number}", "at_s": 10.0 * number, "tasks": tasks, "streams": edges})
    own = {f"tweets-{stream}-q{number}": {"site": stream, "rate_rps": STREAM_RPS[stream], "record_bytes": RECORD_BYTES}
           for stream in streams for number in range(queries)}
    return {
        "name": f"sharing-ratio-{ratio}",
        "wan": fourteen_site_wan(seed, bandwidth_scale),
        "sources": {**sources(), **own},
        "queries": result,
        "duration_s": 10.0 * queries + 60.0,
    }
