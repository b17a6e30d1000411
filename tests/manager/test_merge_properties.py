"""Property-based: random dataflows and traces keep every invariant after every step."""

from __future__ import annotations

import uuid

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from manager.service import Manager
from runtime.dryrun import DryRunRuntime
from tests.conftest import REDIS_URL, delete_prefix
from tests.fixtures.generators import traces, workloads
from tests.fixtures.invariants import check_state

pytestmark = pytest.mark.redis

BOOKKEEPING = {"meta", "dryrun:log"}


@st.composite
def workload_and_trace(draw):
    workload = draw(workloads())
    return workload, draw(traces(len(workload)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=workload_and_trace())
def test_traces_keep_invariants(case):
    workload, trace = case
    client = redis.Redis.from_url(REDIS_URL)
    prefix = f"prop-{uuid.uuid4().hex[:10]}"
    runtime = DryRunRuntime(client, prefix)
    manager = Manager(client, prefix, runtime)
    manager.start()
    try:
        submitted: dict[str, dict] = {}
        ids: dict[int, str] = {}
        for op, index in trace:
            before = set(manager.state.tasks)
            dags_before = len(manager.state.dag_members)
            if op == "add":
                result = manager.submit(workload[index])
                ids[index] = result.id
                submitted[result.id] = workload[index]
                after = set(manager.state.tasks)
                assert set(result.reused) == {t for t, running in result.tasks.items() if running in before}
                assert set(result.created) == {t for t, running in result.tasks.items() if running not in before}
                assert set(result.reused) | set(result.created) == {t["id"] for t in workload[index]["tasks"]}
                assert after - before == {result.tasks[t] for t in result.created}
                event(f"submit reused {'some' if result.reused else 'none'}")
            else:
                result = manager.remove(ids.pop(index))
                del submitted[result.id]
                after = set(manager.state.tasks)
                assert set(result.terminated) == before - after
                event(f"remove terminated {'all' if not set(result.terminated) ^ set(before) else 'some' if result.terminated else 'none'}")
            check_state(manager.state, submitted)
            dags_after = len(manager.state.dag_members)
            if op == "add" and dags_after < dags_before:
                event("submit merged running DAGs")
            if op == "remove" and dags_after > dags_before:
                event("remove split a running DAG")
            assert runtime.deployed() == {tid: task.fragment for tid, task in manager.state.tasks.items()}
        reloaded = Manager(client, prefix, DryRunRuntime(client, prefix))
        reloaded.start()
        check_state(reloaded.state, submitted)
        assert not submitted
        left = {key.decode()[len(prefix) + 1:] for key in client.scan_iter(f"{prefix}:*")}
        assert left <= BOOKKEEPING, left
    finally:
        delete_prefix(client, prefix)
        client.close()


@settings(max_examples=25, deadline=None)
@given(workload=workloads(min_size=3, max_size=6), data=st.data())
def test_recovered_manager_sees_the_same_state(workload, data):
    client = redis.Redis.from_url(REDIS_URL)
    prefix = f"prop-{uuid.uuid4().hex[:10]}"
    try:
        first = Manager(client, prefix, DryRunRuntime(client, prefix))
        first.start()
        submitted = {}
        for document in workload:
            submitted[first.submit(document).id] = document
        for dataflow_id in data.draw(st.lists(st.sampled_from(sorted(submitted)), unique=True, max_size=2)):
            first.remove(dataflow_id)
            del submitted[dataflow_id]
        second = Manager(client, prefix, DryRunRuntime(client, prefix))
        second.start()
        check_state(second.state, submitted)
        assert second.state.tasks == first.state.tasks
        assert second.state.dag_members == first.state.dag_members
        assert {k: v.to_dict() for k, v in second.state.dataflows.items()} == {k: v.to_dict() for k, v in first.state.dataflows.items()}
    finally:
        delete_prefix(client, prefix)
        client.close()
