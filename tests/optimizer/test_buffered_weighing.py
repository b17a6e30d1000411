"""Weighing plans with buffered hops (``PlanningOptions.buffered_hops``): Sana's queries are linked by Kafka topics,
so a congested crossing slows only what reads it; it does not push back on the source (the emulated WAN agrees,
docs/wan.md "Emulated WAN")."""

from __future__ import annotations

from dataclasses import replace

from optimizer.contention import Contention
from optimizer.planner import plan_query
from optimizer.views import DictRunning
from planning.model import SANA, QueryPlan, QueryTask, RunningTask
from tests.optimizer.test_private_plan import monitor
from wan.flow_index import FlowIndex

BUFFERED = replace(SANA, buffered_hops=True)


SLOW_READER = [RunningTask("s", "S", "source", "x", (), 20.0), RunningTask("k1", "K1", "sink", "a", (("in", "s"),), 20.0),
               RunningTask("k2", "K2", "sink", "b", (("in", "s"),), 20.0)]


def test_a_slow_crossing_slows_only_its_reader_when_hops_are_buffered():
    """s (20 Mbps at x) is read at a over 5 Mbps and at b over 100: with backpressure the source runs at a
    quarter and b gets 5; buffered, b gets all 20 and a its 5."""
    pushed = Contention(SLOW_READER, monitor(5, 100), router=True).delivered((), QueryPlan({}))
    buffered = Contention(SLOW_READER, monitor(5, 100), router=True, buffered=True).delivered((), QueryPlan({}))
    assert (pushed, buffered) == (10.0, 25.0)


def test_buffered_weighing_keeps_the_shared_reader_that_backpressure_gives_up():
    """tests/optimizer/test_private_plan.py's first case: with backpressure the query at b runs its own reader
    of s (25 Mbps delivered against 10 sharing); buffered, sharing already delivers 25, and the private plan,
    which would send s over x -> b a second time for nothing, is not kept."""
    running = DictRunning(SLOW_READER[:2])
    query = [QueryTask("s", "S", "source", rate_mbps=20.0, site="x"),
             QueryTask("k2", "K2", "sink", (("in", "s"),), rate_mbps=20.0, site="b")]
    pushed = plan_query(query, running, monitor(5, 100))
    buffered = plan_query(query, running, monitor(5, 100), BUFFERED)
    assert pushed.weighing.kept == "private" and pushed.decisions["s"].action == "create"
    assert buffered.weighing.kept == "algorithm 1" and buffered.decisions["s"].action == "reuse"
    weighed = buffered.weighing.to_dict()
    assert weighed["algorithm_1"]["delivered_mbps"] == weighed["private"]["delivered_mbps"] == 25.0


def test_with_an_index_buffered_weighing_reads_the_index():
    """Given the running set's flow index, buffered hops are weighed on it (wan/buffered.py), as from the tasks."""
    index = FlowIndex()
    for task in SLOW_READER:
        index.add(task.id, task.site, [parent for _, parent in task.inputs], task.rate_mbps)
    contention = Contention((), monitor(5, 100), router=True, index=index, buffered=True)
    assert contention.index is index and contention.delivered((), QueryPlan({})) == 25.0
