"""The flow index with buffered hops (wan/buffered.py), kept up to date task by task, weighs a plan as the buffered
model solved from scratch does.

The running sets and plans of tests/optimizer/test_flow_index.py, with and without other traffic on the links. The index is
asked for its buffered state before the first task arrives, so every add and drop after it changes the state where
the change reaches; a second index builds its state only when asked, after the running set is complete.
"""

from __future__ import annotations

import math

from hypothesis import given, settings

from optimizer.contention import Contention
from tests.optimizer.test_flow_index import _pruned, _query_and_plan, scenarios
from wan.flow_index import FlowIndex, NewTask
from wan.monitor import WanMonitor


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_the_index_weighs_plans_with_buffered_hops_as_the_model_solved_from_scratch(scenario):
    config, running, prune, new, extra = scenario
    monitor = WanMonitor(config)
    kept_up, built_late = FlowIndex(), FlowIndex()
    for scale in (1.0, 2.0):
        kept_up.delivered_buffered((), monitor.capacity, scale)
    for task in running:
        for index in (kept_up, built_late):
            index.add(task.id, task.site, [parent for _, parent in task.inputs], task.rate_mbps)
    left = _pruned(running, prune)
    for task in reversed(running):
        if task not in left:
            kept_up.drop(task.id)
            built_late.drop(task.id)
    kept = {task.id for task in left}
    new = [NewTask(task.id, task.site, tuple(p if p in kept or p.startswith("n") else "gone" for p in task.inputs),
                   task.rate_mbps) for task in new]
    query, plan = _query_and_plan(left, new)
    from_scratch = Contention(left, monitor, router=True, buffered=True)
    for scale in (1.0, 2.0):
        expected = from_scratch.delivered(query, plan, scale)
        for index in (kept_up, built_late):
            weighed = Contention((), monitor, router=True, index=index, buffered=True).delivered(query, plan, scale)
            assert math.isclose(weighed, expected, rel_tol=1e-7, abs_tol=1e-6), (scale, index is kept_up, weighed, expected)
        loads = {link: load + extra[link] for link, load in kept_up.explained().items()}  # other traffic measured too
        measured = WanMonitor(config, loads)
        expected = Contention(left, measured, router=True, buffered=True).delivered(query, plan, scale)
        weighed = Contention((), measured, router=True, index=kept_up, buffered=True).delivered(query, plan, scale)
        assert math.isclose(weighed, expected, rel_tol=1e-7, abs_tol=1e-6), (scale, "with other traffic", weighed, expected)
        assert math.isclose(kept_up.delivered_buffered((), monitor.capacity, scale),
                            Contention(left, monitor, router=True, buffered=True).delivered((), type(plan)({}), scale),
                            rel_tol=1e-7, abs_tol=1e-6)
