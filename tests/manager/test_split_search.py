"""A removal's DAG splits found by searching from the border (merge._split_off) equal those of a walk over the whole DAG."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from manager import merge
from manager.state import State
from manager.validate import parse_dataflow
from tests.fixtures.generators import traces, workloads

SEARCH = merge._split_off


def _plan_with(state: State, dataflow_id: str, split_off: Callable) -> merge.UnmergePlan:
    """``plan_unmerge`` with ``split_off`` in place of the border search (pure; restored afterwards)."""
    merge._split_off = split_off
    try:
        return merge.plan_unmerge(state, dataflow_id)
    finally:
        merge._split_off = SEARCH


@st.composite
def workload_and_trace(draw):
    workload = draw(workloads())
    return workload, draw(traces(len(workload)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=workload_and_trace())
def test_border_search_plans_every_removal_as_the_whole_dag_walk(case):
    workload, trace = case
    state = State()
    ids: dict[int, str] = {}
    for step, (op, index) in enumerate(trace):
        if op == "add":
            plan = merge.plan_merge(state, parse_dataflow(workload[index]), float(step))
            merge.apply_merge(state, plan)
            ids[index] = plan.dataflow.id
            continue
        dataflow_id = ids.pop(index)
        outcomes: list = []
        searched = _plan_with(state, dataflow_id, lambda *args: outcomes.append(SEARCH(*args)) or outcomes[-1])
        walked = _plan_with(state, dataflow_id, lambda *args: None)  # None: the whole DAG is walked
        assert searched == walked
        for outcome in outcomes:
            event("searched: " + ("fell back" if outcome is None else "split found" if outcome else "held together"))
        merge.apply_unmerge(state, searched)
