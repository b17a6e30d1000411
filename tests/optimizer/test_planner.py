"""Algorithm 1 and 2 on hand-made running sets: which shares are admitted, refused, and where tasks go."""

from __future__ import annotations

import pytest

from planning.model import PlanningOptions, QueryTask, RunningTask
from optimizer.planner import plan_query
from optimizer.views import DictRunning, EmptyRunning
from scheduler.exceptions import PlacementImpossible
from wan.monitor import WanMonitor
from wan.topology import parse_wan_config


def wan(links, sites=("x", "a", "b", "c"), loads=None):
    config = parse_wan_config({
        "sites": [{"name": sites[0], "compute": False}, *sites[1:]],
        "links": [{"from": f, "to": t, "bandwidth_mbps": bw, "latency_ms": lat} for f, t, bw, lat in links],
    })
    return WanMonitor(config, loads or {})


MESH = [("x", "a", 100, 10), ("x", "b", 100, 30), ("x", "c", 100, 30), ("a", "b", 100, 20), ("a", "c", 100, 20), ("b", "c", 100, 20)]


def running_chain():
    """Source s at x, filter f at a (signature F), aggregate g at a (signature G), sink at a."""
    return DictRunning([
        RunningTask("s", "S", "source", "x", (), 20.0),
        RunningTask("f", "F", "filter", "a", (("in", "s"),), 10.0),
        RunningTask("g", "G", "window_aggregate", "a", (("in", "f"),), 1.0),
        RunningTask("k", "K", "sink", "a", (("in", "g"),), 1.0),
    ])


def query(*tasks):
    return [QueryTask(*task) if isinstance(task, tuple) else task for task in tasks]


def test_in_op_share_of_a_whole_prefix_when_bandwidth_suffices():
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"),
                            ("f", "F", "filter", (("in", "s"),), 10.0),
                            ("g", "G", "window_aggregate", (("in", "f"),), 1.0),
                            ("k2", "K2", "sink", (("in", "g"),), 1.0, "c")),
                      running_chain(), wan(MESH))
    assert [(d.task, d.action, d.running, d.rule) for d in plan.decisions.values()] == [
        ("s", "reuse", "s", "source"), ("f", "reuse", "f", "IN-OP"), ("g", "reuse", "g", "IN-OP"), ("k2", "create", None, "pinned")]
    assert plan.link_delta == {("a", "c"): 1.0}
    assert (plan.compared, plan.skipped) == (3, 0)  # f, g and k2 are looked up


def test_early_termination_skips_the_descendants_of_an_unshared_vertex():
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"),
                            ("f2", "F2", "filter", (("in", "s"),), 10.0),
                            ("g2", "G2", "window_aggregate", (("in", "f2"),), 1.0),
                            ("k2", "K2", "sink", (("in", "g2"),), 1.0)),
                      running_chain(), wan(MESH))
    # f2 is compared (no equivalent runs); g2 and k2 read a new task, so they are not compared at all.
    assert (plan.compared, plan.skipped) == (1, 2)
    assert plan.decisions["f2"].rule == "IN" and plan.decisions["f2"].site == "a"
    assert plan.decisions["f2"].partner == "f"


def test_in_op_refused_for_egress_and_the_query_computes_its_own_copy_elsewhere():
    # a -> c has 0.5 Mbps spare; the shared filter's output (10 Mbps) must reach the sink at c.
    monitor = wan(MESH, loads={("a", "c"): 99.5})
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"),
                            ("f", "F", "filter", (("in", "s"),), 10.0),
                            ("k2", "K2", "sink", (("in", "f"),), 10.0, "c")),
                      running_chain(), monitor)
    decision = plan.decisions["f"]
    assert (decision.action, decision.site, decision.rule) == ("create", "c", "wan")
    assert [(r.kind, r.candidate, r.link, r.needed_mbps, r.available_mbps, r.direction) for r in decision.refused] == [
        ("IN-OP", "f", ("a", "c"), 10.0, 0.5, "egress"),
        ("IN", "f", ("a", "c"), 10.0, 0.5, "egress"),
    ]
    assert plan.link_delta == {("x", "c"): 20.0}


def test_without_bandwidth_checks_the_share_is_taken_whatever_the_link():
    monitor = wan(MESH, loads={("a", "c"): 99.5})
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"),
                            ("f", "F", "filter", (("in", "s"),), 10.0),
                            ("k2", "K2", "sink", (("in", "f"),), 10.0, "c")),
                      running_chain(), monitor, PlanningOptions(bandwidth_checks=False))
    assert plan.decisions["f"].action == "reuse"
    assert plan.link_delta == {("a", "c"): 10.0}


def test_two_admitted_shares_cannot_both_count_on_the_same_spare_bandwidth():
    running = DictRunning([
        RunningTask("s", "S", "source", "x", (), 20.0),
        RunningTask("f", "F", "filter", "a", (("in", "s"),), 3.0),
        RunningTask("h", "H", "filter", "a", (("in", "s"),), 3.0),
    ])
    monitor = wan(MESH, loads={("a", "c"): 95.0})  # 5 Mbps spare: room for one 3 Mbps share, not two
    # Algorithm 1 as printed. The weighing keeps the private plan here: its own reader of s at x and filters at
    # c (x -> c is idle) deliver 60 Mbps of source data in all, where Algorithm 1's plan, whose streams over the
    # nearly full a -> c hold back the shared reader of s and the running filters with it, delivers 40.
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"),
                            ("f", "F", "filter", (("in", "s"),), 3.0),
                            ("h", "H", "filter", (("in", "s"),), 3.0),
                            ("u", "U", "union", (("in", "f"), ("in", "h")), 6.0, "c")),
                      running, monitor, PlanningOptions(weigh_refusals=False))
    assert plan.decisions["f"].action == "reuse"
    assert plan.decisions["h"].action == "create"
    assert plan.decisions["h"].refused[0].available_mbps == pytest.approx(2.0)
    # The union at c reads f over a -> c (3 Mbps, within the 5 spare) and the new h.
    assert plan.link_delta[("a", "c")] == pytest.approx(3.0)


def test_partial_input_sharing_checks_the_missing_inputs_ingress():
    running = DictRunning([
        RunningTask("s", "S", "source", "x", (), 20.0),
        RunningTask("t", "T", "source", "x", (), 30.0),
        RunningTask("f", "F", "filter", "a", (("in", "s"),), 10.0),
    ])
    q = query(("s", "S", "source", (), 20.0, "x"), ("t", "T", "source", (), 30.0, "x"),
              ("j", "J", "join", (("left", "s"), ("right", "t")), 5.0))
    # Stream s already arrives at a; t would have to cross x -> a: 30 Mbps.
    roomy = plan_query(q, running, wan(MESH, loads={("x", "a"): 50.0}))
    assert (roomy.decisions["j"].rule, roomy.decisions["j"].site, roomy.decisions["j"].shared_inputs) == ("IN", "a", ("s",))
    assert roomy.link_delta == {("x", "a"): 30.0}
    tight = plan_query(q, running, wan(MESH, loads={("x", "a"): 80.0}))
    refusal = tight.decisions["j"].refused[0]
    assert (refusal.kind, refusal.link, refusal.needed_mbps, refusal.available_mbps, refusal.direction) == (
        "IN", ("x", "a"), 30.0, 20.0, "ingress")
    assert tight.decisions["j"].site != "a"


def test_site_locality_then_hourglass_cost():
    monitor = wan(MESH)
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"),
                            ("f", "F", "filter", (("in", "s"),), 10.0),
                            ("g", "G", "window_aggregate", (("in", "f"),), 1.0)),
                      EmptyRunning(), monitor)
    # f: a costs 20*10^2/100 = 20, b and c 20*30^2/100 = 180. g reads only f: locality.
    assert [(d.site, d.rule) for d in plan.decisions.values()] == [("x", "source"), ("a", "wan"), ("a", "locality")]


def test_wan_unaware_default_takes_the_first_inputs_site_or_the_destination():
    options = PlanningOptions(False, False, False, False, wan_placement=False)
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"),
                            ("f", "F", "filter", (("in", "s"),), 10.0),
                            ("k", "K", "sink", (("in", "f"),), 10.0, "c")),
                      EmptyRunning(), wan(MESH), options)
    assert [(d.site, d.rule) for d in plan.decisions.values()] == [("x", "source"), ("c", "default"), ("c", "pinned")]


def test_a_refused_candidate_at_the_chosen_site_is_shared_after_all():
    running = DictRunning([RunningTask("s", "S", "source", "x", (), 20.0), RunningTask("f", "F", "filter", "a", (("in", "s"),), 10.0)])
    # Only a can compute; the sink at b is pinned and a -> b is full: the share is refused,
    # but a copy at a would send the same data over the same link.
    config = parse_wan_config({"sites": [{"name": "x", "compute": False}, "a", {"name": "b", "compute": False}],
                               "links": [{"from": "x", "to": "a", "bandwidth_mbps": 100, "latency_ms": 1},
                                         {"from": "a", "to": "b", "bandwidth_mbps": 5, "latency_ms": 1}]})
    # Algorithm 1 as printed. The weighing keeps the private plan here: its own reader and filter leave the
    # running f all of s (30 Mbps of source data delivered in all), where sharing f would hold s, and f with
    # it, to a -> b's 5 Mbps (10 in all).
    plan = plan_query(query(("s", "S", "source", (), 20.0, "x"), ("f", "F", "filter", (("in", "s"),), 10.0),
                            ("k", "K", "sink", (("in", "f"),), 10.0, "b")), running, WanMonitor(config),
                      PlanningOptions(weigh_refusals=False))
    decision = plan.decisions["f"]
    assert (decision.action, decision.running, decision.rule) == ("reuse", "f", "IN-OP")
    assert decision.refused and decision.refused[0].needed_mbps == 10.0


def test_placement_impossible_names_the_task():
    config = parse_wan_config({"sites": [{"name": "x", "compute": False}, "a"], "links": []})
    with pytest.raises(PlacementImpossible, match=r"task 'f' \(filter\): no compute site is reachable from its input sites \['x'\]"):
        plan_query(query(("s", "S", "source", (), 1.0, "x"), ("f", "F", "filter", (("in", "s"),), 1.0)),
                   EmptyRunning(), WanMonitor(config))
    with pytest.raises(PlacementImpossible, match="source 's' has no site"):
        plan_query(query(("s", "S", "source", (), 1.0)), EmptyRunning(), WanMonitor(config))
