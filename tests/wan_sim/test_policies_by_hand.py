"""Every policy on small scenarios whose loads, throughputs and latencies are computed by hand here."""

from __future__ import annotations

import pytest

from planning.model import QueryTask
from optimizer.planner import plan_query, pressure, standing
from tests.wan_sim.scenarios import (degrading_link, degrading_link_under_a_later_share, refusal_slows_the_running,
                                    scarce_everywhere, two_sources_two_queries, unaware_sharing_hurts)
from wan.monitor import WanMonitor
from wan_sim.policies import policy_options
from wan_sim.scenario import parse_scenario
from wan_sim.simulate import Deployment, simulate, to_query_tasks


def _run(document, policy):
    result = simulate(parse_scenario(document), policy)
    loads = {(link.src, link.dst): round(link.load_mbps, 6) for link in result.final.links}
    per_query = {query.name: (round(query.throughput_rps, 6), round(query.latency_ms, 6)) for query in result.final.queries}
    return result, loads, per_query


# Two sources, two queries, one congested link (S -> H, 30 Mbps).
#
# default: no sharing, WAN-unaware: every filter goes to the query's home H (its input's site S
#   cannot compute). Four source readers each send 20 Mbps over S -> H: 80 Mbps of demand on
#   30 Mbps, so every source runs at 30/80 = 0.375: 375 + 375 = 750 records/s per query.
#   Latency: 50 ms + a full 3 Mbit buffer at 30 Mbps (100 ms) = 150 ms.
# net / no-share: no sharing, WAN-aware. For q1's filter of A, H costs 20*50^2/30 = 1666.7 and
#   N costs 20*5^2/100 + 10*40^2/100 = 165, so N; likewise every filter, and the unions follow
#   locally. S -> N carries 4 x 20 = 80 Mbps (no routers), N -> H two unions of 20 Mbps = 40.
#   Nothing is congested: 2000 records/s per query; WAN 120 Mbps.
#   Latency: 5 + min(30, 10*0.8/0.2) = 35 on S -> N, 40 + 10*0.4/0.6 on N -> H: 81.667 ms.
# strict-share: sources are shared but, without routers, A and B still cross once per filter:
#   the same loads and numbers as net.
# mqo: shares the sources and co-locates q2's filters with q1's (IN) at H, where the WAN-unaware
#   default put them: S -> H carries A and B once each, 40 Mbps on 30: throttle 0.75,
#   1500 records/s per query, latency 150 ms.
# sana / max-share: q1 as net; q2's filters co-locate with q1's at N (IN: A and B already arrive
#   there; N -> H has 80 Mbps spare for their 10 Mbps). S -> N carries A and B once (40),
#   N -> H the two unions (40): 2000 records/s per query with 80 Mbps of WAN, a third less than net.
#   Latency: 5 + 10*0.4/0.6 + 40 + 10*0.4/0.6 = 58.333 ms.
TWO_SOURCES = {
    "default": ({("S", "H"): 30.0}, 750.0, 150.0),
    "net": ({("S", "N"): 80.0, ("N", "H"): 40.0}, 2000.0, 81.666667),
    "no-share": ({("S", "N"): 80.0, ("N", "H"): 40.0}, 2000.0, 81.666667),
    "strict-share": ({("S", "N"): 80.0, ("N", "H"): 40.0}, 2000.0, 81.666667),
    "mqo": ({("S", "H"): 30.0}, 1500.0, 150.0),
    "sana": ({("S", "N"): 40.0, ("N", "H"): 40.0}, 2000.0, 58.333333),
    "max-share": ({("S", "N"): 40.0, ("N", "H"): 40.0}, 2000.0, 58.333333),
}


@pytest.mark.parametrize("policy", sorted(TWO_SOURCES))
def test_two_sources_two_queries_one_congested_link(policy):
    loads, throughput, latency = TWO_SOURCES[policy]
    result, have_loads, per_query = _run(two_sources_two_queries(), policy)
    assert have_loads == loads
    assert per_query == {"q1": (throughput, latency), "q2": (throughput, latency)}
    assert result.final.wan_mbps == pytest.approx(sum(loads.values()))


def test_two_sources_sana_saves_a_third_of_net_bandwidth_at_equal_throughput():
    sana = simulate(parse_scenario(two_sources_two_queries()), "sana").summary()
    net = simulate(parse_scenario(two_sources_two_queries()), "net").summary()
    assert sana["throughput_rps"] == net["throughput_rps"] == 4000.0
    assert sana["wan_mbps"] == pytest.approx(net["wan_mbps"] * 2 / 3)


def test_two_sources_sana_places_q2_filters_with_q1s_through_the_router():
    result = simulate(parse_scenario(two_sources_two_queries()), "sana")
    q2 = result.deployment.placement["q2"]
    assert (q2["a"]["running"], q2["a"]["rule"]) == ("q1.a", "source")
    assert (q2["fa"]["site"], q2["fa"]["rule"], q2["fa"]["partner"]) == ("N", "IN", "q1.fa")
    assert (q2["u"]["site"], q2["u"]["rule"]) == ("N", "locality")
    assert (q2["k"]["site"], q2["k"]["rule"]) == ("H", "pinned")


# WAN-unaware sharing worse than not sharing (Sana's Figure 6).
#
# max-share / mqo: q2 reuses q1's filter at P (IN-OP) and its sink at H2 reads it over P -> H2:
#   10 Mbps of demand on 5 Mbps. Backpressure throttles the shared source A to 0.5, so q1 is
#   slowed too: 500 records/s each, 1000 in all. Achieved loads: S -> P 10, P -> H2 5.
#   Latency of q2: 10 + S->P queue (u = 0.1: 10*0.1/0.9 = 1.111) + 20 + 3 Mbit at 5 Mbps (600) = 631.111 ms.
# no-share / net / default: q2 filters its own copy of A; at H2 it costs 20*30^2/100 = 180,
#   at P its output would oversubscribe P -> H2: H2. 2000 records/s in all; S -> P 20, S -> H2 20.
# sana: Algorithm 1 refuses the IN-OP share (P -> H2 has 5 Mbps spare, the filter's output needs 10)
#   and the IN co-location at P for the same reason; the new filter goes to H2 and reads the shared
#   source through its router: 2000 records/s, S -> P 20, S -> H2 20.
UNAWARE = {
    "max-share": ({("S", "P"): 10.0, ("P", "H2"): 5.0}, {"q1": 500.0, "q2": 500.0}),
    "mqo": ({("S", "P"): 10.0, ("P", "H2"): 5.0}, {"q1": 500.0, "q2": 500.0}),
    "no-share": ({("S", "P"): 20.0, ("S", "H2"): 20.0}, {"q1": 1000.0, "q2": 1000.0}),
    "default": ({("S", "P"): 20.0, ("S", "H2"): 20.0}, {"q1": 1000.0, "q2": 1000.0}),
    "sana": ({("S", "P"): 20.0, ("S", "H2"): 20.0}, {"q1": 1000.0, "q2": 1000.0}),
}


@pytest.mark.parametrize("policy", sorted(UNAWARE))
def test_wan_unaware_sharing_is_worse_than_not_sharing_and_sana_is_not(policy):
    loads, throughput = UNAWARE[policy]
    _, have_loads, per_query = _run(unaware_sharing_hurts(), policy)
    assert have_loads == loads
    assert {name: value[0] for name, value in per_query.items()} == throughput


def test_max_share_latency_includes_the_saturated_thin_link():
    _, _, per_query = _run(unaware_sharing_hurts(), "max-share")
    assert per_query["q2"][1] == pytest.approx(10 + 10 * 0.1 / 0.9 + 20 + 600)
    assert per_query["q1"][1] == pytest.approx(10 + 10 * 0.1 / 0.9)


def test_sana_says_why_it_did_not_share():
    result = simulate(parse_scenario(unaware_sharing_hurts()), "sana")
    refusals = result.deployment.refusals
    inop = [item for item in refusals if item["kind"] == "IN-OP"]
    assert inop == [{
        "query": "q2", "task": "f", "kind": "IN-OP", "candidate": "q1.f", "site": "P",
        "link": {"from": "P", "to": "H2"}, "needed_mbps": 10.0, "available_mbps": 5.0, "direction": "egress",
        "reason": "sharing q1.f at P needs 10.000 Mbps of egress on P -> H2, which has 5.000 Mbps spare",
    }]
    assert result.deployment.placement["q2"]["f"] == {"running": "q2.f", "site": "H2", "rule": "wan", "action": "create"}
    summary = result.summary()
    assert summary["throughput_rps"] == 2000.0 and summary["running_tasks"] == 5


# Why Sana, with Algorithm 1 as printed, lost to Max-Share where bandwidth is scarce (docs/wan.md).
# Stream A (20 Mbps) at S; S -> P 10 Mbps, S -> H2 4, P -> H2 4. q1 filters A (output 10 Mbps) and writes
# at P; q2 applies the same filter and writes at H2. Every policy throttles A on its first hop S -> P
# (20 Mbps of demand on 10: at most 0.5).
#
# max-share: q2 reuses q1's filter at P; P -> H2 carries its 10 Mbps on 4: A runs at min(0.5, 4/10) = 0.4,
#   400 records/s per query, 800 in all. Achieved loads: S -> P 8, P -> H2 4.
# sana-printed: Algorithm 1 refuses the share (10 Mbps needed on P -> H2, 4 spare) and the co-location at P
#   for the same reason; the copy goes to H2 and reads the raw stream there: 20 Mbps on S -> H2's 4.
#   A, read once at S for both queries, runs at min(0.5, 4/20) = 0.2: 200 records/s per query, 400 in all,
#   half of Max-Share. The refusal meant to avoid contention put twice the Mbps on an equally thin link.
# sana: the plan with the refusal (S -> H2 at 20/4 = 5x its capacity) presses the WAN harder than the plan
#   that shares (P -> H2 at 10/4 = 2.5x), so the refusal is overruled: Max-Share's 800, with the refusal
#   reported.
SCARCE = {
    "max-share": ({("S", "P"): 8.0, ("P", "H2"): 4.0}, 400.0),
    "sana-printed": ({("S", "P"): 4.0, ("S", "H2"): 4.0}, 200.0),
    "sana": ({("S", "P"): 8.0, ("P", "H2"): 4.0}, 400.0),
}


@pytest.mark.parametrize("policy", sorted(SCARCE))
def test_where_every_link_is_scarce_a_refusal_adds_contention_and_sana_overrules_it(policy):
    loads, per_query_rps = SCARCE[policy]
    _, have_loads, per_query = _run(scarce_everywhere(), policy)
    assert have_loads == loads
    assert {name: value[0] for name, value in per_query.items()} == {"q1": per_query_rps, "q2": per_query_rps}


def test_sana_reports_the_refusals_it_overruled_and_keeps_those_that_relieve_the_wan():
    scarce = simulate(parse_scenario(scarce_everywhere()), "sana")
    assert scarce.deployment.refusals == []
    assert [(item["task"], item["kind"], item["link"]) for item in scarce.deployment.overruled] == [
        ("f", "IN-OP", {"from": "P", "to": "H2"}), ("f", "IN", {"from": "P", "to": "H2"})]
    assert scarce.deployment.placement["q2"]["f"]["rule"] == "IN-OP"
    # Figure 6: the copy at H2 reads A over S -> H2 (20 Mbps on 100), the share would put 10 on P -> H2's 5.
    unaware = simulate(parse_scenario(unaware_sharing_hurts()), "sana")
    assert unaware.deployment.overruled == [] and len(unaware.deployment.refusals) == 2


# Why weighing by pressure alone still lost to Max-Share: it sees the links a plan adds to, not the queries
# already running on them. q0 streams B (20 Mbps) from S to H2 (32 Mbps); then q1 and q2 as in Figure 6, with
# P -> H2 at 7.5 Mbps.
#
# sana-printed: Algorithm 1 refuses the share of q1's filter (10 Mbps needed on P -> H2, 7.5 spare) and the
#   co-location at P; the copy at H2 costs 20*20^2/32 = 250 against 10*20^2/7.5 = 533 at P, so it reads A over
#   S -> H2: A and B, 40 Mbps on 32, both run at 0.8: q0, q1 and q2 800 records/s each, 2400 in all.
#   Achieved loads: S -> H2 32, S -> P 16.
# Pressure, the rule before this one, kept that refusal: the refusal plan takes S -> H2 to 40/32 = 1.25 of its
#   capacity, the sharing plan P -> H2 to 10/7.5 = 1.333.
# sana: the flow model of the whole running set with each plan. Refusing: A and B at 0.8, 20*0.8 = 16 Mbps of
#   source data reach each of the three sinks, 48 in all. Sharing: P -> H2 carries 10 on 7.5, so A runs at
#   0.75 (15 Mbps to q1's sink and q2's); B alone on S -> H2 (20 on 32) at 1 (20 to q0's): 50. Sharing
#   delivers more, the refusals are overruled: q0 1000, q1 and q2 750 each, 2500 in all, as Max-Share.
#   (At twice the rates, the headroom check: refusing, 80 on 32, all at 0.4: 3 x 40 x 0.4 = 48; sharing,
#   A at 7.5/20 = 0.375, B at 32/40 = 0.8: 2 x 15 + 32 = 62.)
#   Achieved loads: S -> P 15, P -> H2 7.5, S -> H2 20.
# sana now weighs a third plan, q2's private one (issue 33): its own reader of A at S and its own filter at P.
#   q1's A no longer waits for P -> H2: q1 at 1000, q2 at 7.5/10 = 750, q0 at 1000: 2750, above Max-Share's
#   2500 (delivered: 20 + 20 + 15 = 55 Mbps of source data against sharing's 50). Nothing is overruled.
#   Achieved loads: S -> P 20 + 15 = 35, P -> H2 7.5, S -> H2 20.
RUNNING = {
    "max-share": ({("P", "H2"): 7.5, ("S", "H2"): 20.0, ("S", "P"): 15.0}, {"q0": 1000.0, "q1": 750.0, "q2": 750.0}),
    "sana-printed": ({("S", "H2"): 32.0, ("S", "P"): 16.0}, {"q0": 800.0, "q1": 800.0, "q2": 800.0}),
    "sana": ({("P", "H2"): 7.5, ("S", "H2"): 20.0, ("S", "P"): 35.0}, {"q0": 1000.0, "q1": 1000.0, "q2": 750.0}),
}


@pytest.mark.parametrize("policy", sorted(RUNNING))
def test_a_refusal_that_slows_running_queries_is_overruled(policy):
    loads, throughput = RUNNING[policy]
    result, have_loads, per_query = _run(refusal_slows_the_running(), policy)
    assert have_loads == loads
    assert {name: value[0] for name, value in per_query.items()} == throughput
    if policy == "sana":
        overruled = [(item["query"], item["kind"]) for item in result.deployment.overruled]
        assert overruled == []  # the private plan, not Max-Share's, was kept
        assert result.deployment.placement["q2"]["a"]["action"] == "create"


def test_the_refusal_above_presses_the_wan_less_yet_delivers_less():
    scenario = parse_scenario(refusal_slows_the_running())
    deployment = Deployment(router=True)
    for query in scenario.queries[:2]:
        monitor = WanMonitor(scenario.wan, deployment.link_loads())
        deployment.apply(query, plan_query(to_query_tasks(query), deployment, monitor).decisions)
    monitor = WanMonitor(scenario.wan, deployment.link_loads())
    tasks: list[QueryTask] = to_query_tasks(scenario.queries[2])
    refusing = plan_query(tasks, deployment, monitor, policy_options("sana-printed"))
    sharing = plan_query(tasks, deployment, monitor, policy_options("max-share"))
    assert pressure(refusing, monitor) == (1.25, 8.0) and pressure(sharing, monitor) == (1.333333333, 2.5)
    running = tuple(deployment.running_tasks())
    assert standing(refusing, tasks, running, monitor, True)[:3] == (-48.0, -48.0, 20.0)
    assert standing(sharing, tasks, running, monitor, True)[:3] == (-50.0, -62.0, 10.0)
    private = plan_query(tasks, deployment, monitor, policy_options("sana").private())
    assert standing(private, tasks, running, monitor, True)[:2] == (-55.0, -87.0)  # q1's A no longer waits for P -> H2


# Re-placement when a link degrades mid-run (paper section 6: the monitor triggers it).
# Figure 6's sites with P -> H2 at 100 Mbps, so q2 (10 s) shares q1's filter at P: 1000 + 1000 records/s.
# At 55 s P -> H2 drops to 5 Mbps: the share's 10 Mbps get 5, A is throttled to 0.5: 500 + 500.
# At the check at 60 s P -> H2 is full (utilization 1 >= 0.9); q2 is the only query with a stream over it
# (q1's filter -> q2's sink). q2 is planned again: Algorithm 1 refuses the share (10 needed, 5 spare), the copy
# at H2 reads A over S -> H2 (20 on 100): 1000 + 1000 again. q1 and its filter are untouched.
# Max-Share re-plans q2 the same way and shares again (it checks no bandwidth): it stays at 500 + 500.
@pytest.mark.parametrize("policy, after", [("sana", 2000.0), ("max-share", 1000.0)])
def test_a_degraded_link_triggers_re_placement_and_sana_un_shares(policy, after):
    result = simulate(parse_scenario(degrading_link()), policy)
    by_time = {epoch.start_s: epoch.result.throughput_rps for epoch in result.epochs}
    assert (by_time[0.0], by_time[10.0], by_time[50.0], by_time[55.0]) == (1000.0, 2000.0, 2000.0, 1000.0)
    assert by_time[60.0] == by_time[80.0] == after
    if policy == "sana":
        assert result.replacements == ({"at_s": 60.0, "links": ["P -> H2"], "queries": ["q2"], "moved": {"q2": ["f"]}},)
        assert result.deployment.placement["q2"]["f"] == {"running": "q2.f", "site": "H2", "rule": "wan", "action": "create"}
        assert result.deployment.placement["q1"]["f"]["running"] == "q1.f"
    else:
        assert result.replacements == ()


def test_a_query_re_placed_while_its_task_runs_for_another_gives_its_copy_a_name_of_its_own():
    """q1 made the filter q1.f at P, which q2 shares. P -> H2 degrades: q1 is planned again and copies the
    filter at H2 while q2 still uses q1.f. The copy used to take the same name and overwrite q1.f (the running
    set then lost track of it); it is q1.f~2, and every running task is indexed once, under its signature."""
    result = simulate(parse_scenario(degrading_link_under_a_later_share()), "sana")
    assert result.replacements == ({"at_s": 60.0, "links": ["P -> H2"], "queries": ["q1"], "moved": {"q1": ["f"]}},)
    deployment = result.deployment
    assert sorted(deployment.tasks) == ["q1.a", "q1.f", "q1.f~2", "q1.k", "q2.k"]
    assert deployment.placement["q1"]["f"] == {"running": "q1.f~2", "site": "H2", "rule": "wan", "action": "create"}
    assert deployment.placement["q2"]["f"]["running"] == "q1.f" and deployment.tasks["q1.f"].site == "P"
    indexed = sorted(task_id for ids in deployment._by_signature.values() for task_id in ids)
    assert indexed == sorted(deployment.tasks)


def test_without_a_replacement_setting_nothing_is_re_placed():
    document = degrading_link()
    del document["wan"]["replacement"]
    result = simulate(parse_scenario(document), "sana")
    assert result.replacements == () and result.final.throughput_rps == 1000.0
