"""The flow index, changed task by task, weighs a plan as the flow model built from scratch does.

Random running sets (sources and tasks of one or two inputs at four sites, thin and fat links, rates that may be
zero), grown and then pruned leaf by leaf, and random plans on top of them (tasks reading running ones and each
other, at any site, some reading nothing the index has): what the sinks would receive, at today's rates and at
twice them, with other traffic on the links, is the same by :class:`optimizer.contention.Contention` reading the
running tasks and reading the index.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.contention import Contention
from planning.model import Decision, QueryPlan, QueryTask, RunningTask
from wan.flow_index import FlowIndex, NewTask
from wan.monitor import WanMonitor
from wan.topology import parse_wan_config

SITES = ("a", "b", "c", "d")


@st.composite
def scenarios(draw):
    links = [{"from": src, "to": dst, "bandwidth_mbps": draw(st.sampled_from([1, 5, 50])), "latency_ms": 10}
             for i, src in enumerate(SITES) for dst in SITES[i + 1:]]
    config = parse_wan_config({"sites": list(SITES), "links": links})
    running: list[RunningTask] = []
    for number in range(draw(st.integers(1, 14))):
        parents = draw(st.lists(st.sampled_from([task.id for task in running]), max_size=2)) if running else []
        rate = draw(st.sampled_from([0.0, 0.5, 3.0, 12.0]))
        running.append(RunningTask(f"r{number}", f"sig{number}", "filter" if parents else "source",
                                   draw(st.sampled_from(SITES)), tuple(("in", parent) for parent in parents), rate))
    prune = draw(st.integers(0, len(running) - 1))
    new = []
    for number in range(draw(st.integers(0, 4))):
        pool = [task.id for task in running] + [task.id for task in new] + ["gone"]
        parents = draw(st.lists(st.sampled_from(pool), max_size=2))
        new.append(NewTask(f"n{number}", draw(st.sampled_from(SITES)), tuple(parents), draw(st.sampled_from([0.0, 1.0, 6.0]))))
    extra = {(src, dst): draw(st.sampled_from([0.0, 0.5, 4.0])) for src in SITES for dst in SITES if src != dst}
    return config, running, prune, new, extra


def _pruned(running: list[RunningTask], count: int) -> list[RunningTask]:
    """``running`` without ``count`` tasks, each one a task nothing left reads, dropped newest first."""
    left = list(running)
    for _ in range(count):
        read = {parent for task in left for _, parent in task.inputs}
        leaf = next(task for task in reversed(left) if task.id not in read)
        left.remove(leaf)
    return left


def _query_and_plan(running: list[RunningTask], new: list[NewTask]) -> tuple[list[QueryTask], QueryPlan]:
    """The plan as the planner makes it: a reuse decision per running task the new ones read, then the new ones."""
    created = {task.id for task in new}
    query, decisions = [], {}
    for task in new:
        for parent in task.inputs:  # a running task, or "gone": one the running set lists without a site
            if parent not in created and parent not in decisions:
                query.append(QueryTask(parent, "s", "filter"))
                decisions[parent] = Decision(parent, "reuse", "a", "IN-OP", running=parent)
        query.append(QueryTask(task.id, "s", "filter", tuple(("in", parent) for parent in task.inputs), rate_mbps=task.rate_mbps))
        decisions[task.id] = Decision(task.id, "create", task.site, "wan")
    return query, QueryPlan(decisions)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_index_weighs_plans_as_the_model_built_from_scratch(scenario):
    config, running, prune, new, extra = scenario
    index = FlowIndex()
    for task in running:
        index.add(task.id, task.site, [parent for _, parent in task.inputs], task.rate_mbps)
    left = _pruned(running, prune)
    for task in reversed(running):
        if task not in left:
            index.drop(task.id)
    kept = {task.id for task in left}
    new = [NewTask(task.id, task.site, tuple(p if p in kept or p.startswith("n") else "gone" for p in task.inputs),
                   task.rate_mbps) for task in new]
    scratch = Contention(left, WanMonitor(config), router=True)
    loads = {link: load + extra[link] for link, load in index.explained().items()}  # measured: streams and others
    monitor = WanMonitor(config, loads)
    query, plan = _query_and_plan(left, new)
    from_scratch, indexed = Contention(left, monitor, router=True), Contention((), monitor, router=True, index=index)
    assert indexed.background == pytest.approx(from_scratch.background)
    for scale in (1.0, 2.0):
        expected = from_scratch.delivered(query, plan, scale)
        assert math.isclose(indexed.delivered(query, plan, scale), expected, rel_tol=1e-9, abs_tol=1e-7), scale
    assert scratch.background == {}


def test_a_task_still_read_cannot_be_dropped():
    index = FlowIndex()
    index.add("s", "a", (), 5.0)
    index.add("f", "b", ("s",), 2.0)
    with pytest.raises(ValueError, match="'s' is still read by 1 task"):
        index.drop("s")
    index.drop("f")
    index.drop("s")
    assert len(index) == 0 and index.coefficients() == {} and index.sink_count == {} and index.arrivals == {}


def test_a_stream_crosses_to_a_site_once_whatever_its_consumers_there():
    index = FlowIndex()
    index.add("s", "a", (), 5.0)
    index.add("f", "b", ("s",), 2.0)
    index.add("g", "b", ("s",), 1.0)
    assert index.coefficients() == {("a", "b"): {"s": 5.0}} and index.arrivals == {("s", "b"): 2}
    assert index.sink_count == {"s": 2}
    index.drop("f")
    assert index.coefficients() == {("a", "b"): {"s": 5.0}} and index.sink_count == {"s": 1}
    index.drop("g")
    assert index.coefficients() == {} and index.explained() == {}
