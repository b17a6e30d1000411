"""Issue 33: the private plan (own source reader, own tasks) is weighed beside Algorithm 1's and Max-Share's."""

from __future__ import annotations

from optimizer.planner import plan_query
from optimizer.views import DictRunning
from planning.model import PRIVATE_GAIN, QueryTask, RunningTask
from wan.monitor import WanMonitor
from wan.topology import parse_wan_config


def monitor(x_to_a: float, x_to_b: float) -> WanMonitor:
    return WanMonitor(parse_wan_config({
        "sites": [{"name": "x", "compute": False}, "a", "b"],
        "links": [{"from": "x", "to": "a", "bandwidth_mbps": x_to_a, "latency_ms": 10},
                  {"from": "x", "to": "b", "bandwidth_mbps": x_to_b, "latency_ms": 10},
                  {"from": "a", "to": "b", "bandwidth_mbps": 100, "latency_ms": 10}]}))


def test_a_shared_read_over_a_slow_link_loses_to_a_private_reader():
    """The running query reads s (20 Mbps at x) at a, over x -> a's 5 Mbps: backpressure holds the reader at
    a quarter of its rate. Sharing that reader, a query at b (x -> b: 100 Mbps) would get a quarter too; its
    own reader delivers all of s: 5 + 20 Mbps of source data against 5 + 5."""
    running = DictRunning([RunningTask("s", "S", "source", "x", (), 20.0),
                           RunningTask("k1", "K1", "sink", "a", (("in", "s"),), 20.0)])
    plan = plan_query([QueryTask("s", "S", "source", rate_mbps=20.0, site="x"),
                       QueryTask("k2", "K2", "sink", (("in", "s"),), rate_mbps=20.0, site="b")], running, monitor(5, 100))
    assert plan.weighing.kept == "private" and plan.weighing.deciding == "delivered_mbps"
    weighed = plan.weighing.to_dict()
    assert (weighed["algorithm_1"]["delivered_mbps"], weighed["private"]["delivered_mbps"]) == (10.0, 25.0)
    assert (plan.decisions["s"].action, plan.decisions["s"].site) == ("create", "x")
    assert plan.link_delta == {("x", "b"): 20.0} and plan.overruled == ()


def test_sharing_still_wins_where_a_private_copy_would_crowd_the_link():
    """The running query filters s at b (x -> b: 30 Mbps carries s's 20). The same filter for a second sink at
    b is shared at no WAN cost; a private reader would send s over x -> b again (40 on 30) and slow both, or
    over x -> a (5 Mbps) to a filter at a, and get a quarter of it."""
    running = DictRunning([RunningTask("s", "S", "source", "x", (), 20.0),
                           RunningTask("f", "F", "filter", "b", (("in", "s"),), 10.0),
                           RunningTask("k1", "K1", "sink", "b", (("in", "f"),), 10.0)])
    plan = plan_query([QueryTask("s", "S", "source", rate_mbps=20.0, site="x"),
                       QueryTask("f", "F", "filter", (("in", "s"),), rate_mbps=10.0),
                       QueryTask("k2", "K2", "sink", (("in", "f"),), rate_mbps=10.0, site="b")], running, monitor(5, 30))
    assert plan.weighing.kept == "algorithm 1"  # every share is the same plan here
    weighed = plan.weighing.to_dict()
    assert (weighed["algorithm_1"]["delivered_mbps"], weighed["private"]["delivered_mbps"]) == (40.0, 30.0)
    assert [(d.action, d.running) for d in plan.decisions.values()] == [("reuse", "s"), ("reuse", "f"), ("create", None)]
    assert plan.link_delta == {}


def test_on_a_tie_the_shared_reader_is_kept():
    """Nothing is slow: sharing the reader and not sharing it deliver all, over the same path (x -> b, 10 ms)
    and the same WAN; on a tie Algorithm 1's plan, sharing the reader, is kept."""
    running = DictRunning([RunningTask("s", "S", "source", "x", (), 20.0),
                           RunningTask("k1", "K1", "sink", "a", (("in", "s"),), 20.0)])
    plan = plan_query([QueryTask("s", "S", "source", rate_mbps=20.0, site="x"),
                       QueryTask("k2", "K2", "sink", (("in", "s"),), rate_mbps=20.0, site="b")], running, monitor(100, 100))
    assert plan.weighing.kept == "algorithm 1" and plan.decisions["s"].action == "reuse"


def test_a_faster_private_plan_that_delivers_the_same_is_not_kept():
    """A filter of s (16 Mbps at x) runs at P, its 2 Mbps going on to H3. A query at H2 sharing it reads it over
    P -> H2 (5 Mbps, 20 ms, with queueing): 10 + 20 ms and more. Its private plan would read s at x and filter it
    at H2 over x -> H2 (30 ms, idle). Both deliver everything: running s's reader and the filter a second time
    buys only latency, so the shared filter is kept."""
    config = parse_wan_config({
        "sites": [{"name": "x", "compute": False}, "P", "H2", "H3"],
        "links": [{"from": "x", "to": "P", "bandwidth_mbps": 100, "latency_ms": 10},
                  {"from": "x", "to": "H2", "bandwidth_mbps": 100, "latency_ms": 30},
                  {"from": "x", "to": "H3", "bandwidth_mbps": 100, "latency_ms": 30},
                  {"from": "P", "to": "H2", "bandwidth_mbps": 5, "latency_ms": 20},
                  {"from": "P", "to": "H3", "bandwidth_mbps": 100, "latency_ms": 20},
                  {"from": "H2", "to": "H3", "bandwidth_mbps": 100, "latency_ms": 20}]})
    running = DictRunning([RunningTask("s", "S", "source", "x", (), 16.0),
                           RunningTask("f", "F", "filter", "P", (("in", "s"),), 2.0),
                           RunningTask("k1", "K1", "sink", "H3", (("in", "f"),), 2.0)])
    plan = plan_query([QueryTask("s", "S", "source", rate_mbps=16.0, site="x"),
                       QueryTask("f", "F", "filter", (("in", "s"),), rate_mbps=2.0),
                       QueryTask("k2", "K2", "sink", (("in", "f"),), rate_mbps=2.0, site="H2")],
                      running, WanMonitor(config, {("x", "P"): 16.0, ("P", "H3"): 2.0}))
    weighed = plan.weighing.to_dict()
    assert weighed["algorithm_1"]["delivered_mbps"] == weighed["private"]["delivered_mbps"] == 32.0
    assert plan.weighing.kept == "algorithm 1"
    assert [(d.action, d.running) for d in plan.decisions.values()] == [("reuse", "s"), ("reuse", "f"), ("create", None)]


def test_a_gain_below_the_cost_of_running_again_keeps_sharing():
    """The running query reads s (20 Mbps at x) at a over x -> a (19.9 Mbps): its reader is held to 99.5 %.
    A private reader for a query at b would lift the total by a quarter of a percent, less than
    PRIVATE_GAIN asks for running s's reader twice; the shared reader is kept. At 15 Mbps the gain is large."""
    running = DictRunning([RunningTask("s", "S", "source", "x", (), 20.0),
                           RunningTask("k1", "K1", "sink", "a", (("in", "s"),), 20.0)])
    query = [QueryTask("s", "S", "source", rate_mbps=20.0, site="x"),
             QueryTask("k2", "K2", "sink", (("in", "s"),), rate_mbps=20.0, site="b")]
    close = plan_query(query, running, monitor(19.9, 100))
    weighed = close.weighing.to_dict()
    assert weighed["algorithm_1"]["delivered_mbps"] < weighed["private"]["delivered_mbps"]
    assert weighed["private"]["delivered_mbps"] < PRIVATE_GAIN * weighed["algorithm_1"]["delivered_mbps"]
    assert close.weighing.kept == "algorithm 1" and close.decisions["s"].action == "reuse"
    assert plan_query(query, running, monitor(15, 100)).weighing.kept == "private"
