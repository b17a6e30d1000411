"""The sweep of issue 33 (benchmarks.wan_families): every family builds valid scenarios of the shape it names."""

from __future__ import annotations

import doctest
from collections import Counter

import pytest

from benchmarks import wan_behind, wan_families
from wan_sim.scenario import parse_scenario


def test_docstring_examples():
    result = doctest.testmod(wan_families)
    assert result.attempted > 0 and result.failed == 0


def test_there_are_at_least_400_cases_besides_the_held_out_family():
    families = Counter(case["family"] for case in wan_families.cases())
    assert sum(count for family, count in families.items() if family not in wan_families.HELD_OUT) >= 400
    assert set(wan_families.HELD_OUT) <= set(families) and len(families) == 11


@pytest.mark.parametrize("family", ["heterogeneous", "bursty", "sites", "hub", "edge", "order", "records", "chains",
                                    "small", "ring", "regions"])
def test_each_family_builds_scenarios_the_simulator_accepts(family):
    case = next(case for case in wan_families.cases(quick=True) if case["family"] == family)
    document = wan_families.scenario(case)
    scenario = parse_scenario(document)
    assert scenario.queries and scenario.wan.sites


def test_the_families_vary_what_they_name():
    def first(family, **match):
        return wan_families.scenario(next(case for case in wan_families.cases() if case["family"] == family
                                          and all(case[key] == value for key, value in match.items())))

    edge = first("edge")
    assert len({source["site"] for name, source in edge["sources"].items() if name.startswith("tweets-")}) == 1
    hub = first("hub", sites=10, scale=1.0)
    spokes = [link["bandwidth_mbps"] for link in hub["wan"]["links"] if "c0" not in (link["from"], link["to"])]
    to_hub = [link["bandwidth_mbps"] for link in hub["wan"]["links"] if "c0" in (link["from"], link["to"])]
    assert max(spokes) < min(to_hub)
    regions = first("regions", sites=15, scale=1.0)["wan"]["links"]
    near = [link["bandwidth_mbps"] for link in regions if link["latency_ms"] < 40]  # within a cluster
    far = [link["bandwidth_mbps"] for link in regions if link["latency_ms"] >= 40]
    assert near and far and max(far) < min(near)
    reversed_order = first("order", order="reversed")
    assert [query["name"] for query in reversed_order["queries"]][0] == "requests-per-region"
    sizes = {source["record_bytes"] for name, source in first("records")["sources"].items() if name.startswith("tweets-")}
    assert len(sizes) > 1 and all(300 <= size <= 5000 for size in sizes)
    assert len(first("small", queries=100)["queries"]) == 100
    assert len(first("sites", sites=30)["wan"]["sites"]) == 30
    short = first("chains", chains="short")
    filters = {json_key(task) for query in short["queries"] for task in query["tasks"] if task["type"] == "filter"}
    assert len(filters) == len(short["queries"])  # every query filters its own way


def json_key(task):
    return task["config"]["keep"], task["config"]["own"]


def test_a_case_behind_max_share_is_traced_to_the_copy_kept_before_it():
    """bursty, seed 4, links x0.3, 4 queries, scored and weighed with buffered hops: Sana keeps Algorithm 1's
    refusal for the second query (it delivers more then), and falls behind Max-Share after the third. Until
    that first other plan, Sana placed as Max-Share does: their totals are equal query by query."""
    case = {"family": "bursty", "seed": 4, "scale": 0.3, "share": 0.25, "queries": 4}
    trace = wan_behind.replay(case, "max-share", decoupled=True, weigh_buffered=True)
    (first,) = trace["differing_decisions"]
    assert (first["query"], first["kept"], first["deciding"]) == (2, "algorithm 1", "delivered_mbps")
    assert first["over_every_share_pct"] > 0 and trace["first_behind_after_query"] == 3 and trace["cause"] == "greedy refusal"
    assert trace["totals_rps"][0][0] == trace["totals_rps"][0][1]
    assert trace["behind_pct"] < 0 and trace["losing_queries"]


def test_a_case_slower_than_net_at_equal_throughput_is_one_where_net_runs_more_tasks():
    """heterogeneous, seed 4, links x1 (bandwidth to spare), 4 queries: both deliver every record; NET's private
    readers and chains are faster by over a tenth, and it runs far more tasks for it (issue 33's latency cases)."""
    case = {"family": "heterogeneous", "seed": 4, "scale": 1.0, "share": 0.25, "queries": 4}
    found = wan_behind.slower(case, "net", decoupled=True, weigh_buffered=True)
    assert found["latency_ratio"] > 1.1 and found["latency_ms"][0] > found["latency_ms"][1]
    sana_tasks, net_tasks = found["running_tasks"]
    assert net_tasks > 1.5 * sana_tasks and found["more_tasks_pct"] > 50
