"""Property-based: merge/unmerge under a WAN configuration that refuses some shares.

The random workloads and traces of test_merge_properties, submitted to a
manager with a random WAN (thin and fat links, sinks pinned at random sites):
after every step the running set satisfies the invariants of
:func:`tests.manager.wan_invariants.check_wan_state`; a restarted manager
loads the same state; draining leaves nothing but bookkeeping. With ample
bandwidth the running set is the manager's optimum exactly. A submit may be
refused only when two of its sinks equal running sinks whose chains hold one
of its tasks as different instances (checked independently), changing nothing.
"""

from __future__ import annotations

import contextlib
import copy
import uuid

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from manager.exceptions import SinkTopicTaken
from manager.service import Manager
from runtime.dryrun import DryRunRuntime
from tests.conftest import REDIS_URL, delete_prefix
from tests.fixtures.generators import traces, workloads
from tests.fixtures.invariants import check_state
from tests.manager.wan_invariants import check_wan_state, reaches_apart

pytestmark = pytest.mark.redis

BOOKKEEPING = {"meta", "dryrun:log", "wan"}
COMPUTE = ["us", "asia", "sa"]


@st.composite
def wan_configs(draw, ample: bool = False):
    sites = [{"name": "eu", "compute": False}, *COMPUTE]
    names = ["eu", *COMPUTE]
    links = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            choices = [2, 8, 200] if a != "eu" else [200, 8]
            links.append({"from": a, "to": b, "bandwidth_mbps": 10_000 if ample else draw(st.sampled_from(choices)),
                          "latency_ms": draw(st.integers(5, 150))})
    return {
        "sites": sites,
        "links": links,
        "sources": {"urban": {"site": "us", "rate_mbps": 10}, "grid": {"site": "asia", "rate_mbps": 4},
                    "taxi": {"site": "eu", "rate_mbps": 20}},
    }


@st.composite
def pinned_workloads(draw):
    workload = draw(workloads())
    result = []
    for document in workload:
        document = copy.deepcopy(document)
        for item in document["tasks"]:
            if item["type"] == "sink" and draw(st.booleans()):
                item["site"] = draw(st.sampled_from(COMPUTE))
        result.append(document)
    return result


@st.composite
def overlapping_workloads(draw):
    """Dataflows drawn from a small pool of prefixes, so that most have equivalent tasks running."""
    from tests.fixtures.dataflows import source, stream, task
    from tests.fixtures.generators import FILTERS, WINDOWS

    result = []
    for number in range(draw(st.integers(2, 6))):
        tasks = [source("s", draw(st.sampled_from(["urban", "taxi"])))]
        streams = []
        previous = "s"
        for depth in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["filter", "filter", "window"]))
            task_id = f"t{depth}"
            if kind == "filter":
                tasks.append(task(task_id, "filter", expr=draw(st.sampled_from(FILTERS[:2]))))
            else:
                tasks.append(task(task_id, "window_aggregate", **copy.deepcopy(WINDOWS[0])))
            streams.append(stream(previous, task_id))
            previous = task_id
            if kind == "window":
                break
        sink = task("k", "sink", topic=f"p-{number}")
        sink["site"] = draw(st.sampled_from(COMPUTE))
        tasks.append(sink)
        streams.append(stream(previous, "k"))
        result.append({"name": f"overlap-{number}", "tasks": tasks, "streams": streams})
    return result


@st.composite
def cases(draw, ample: bool = False):
    workload = draw(st.one_of(pinned_workloads(), overlapping_workloads()))
    return draw(wan_configs(ample)), workload, draw(traces(len(workload)))


@contextlib.contextmanager
def wan_manager(wan: dict):
    """A started manager on the dry-run runtime with ``wan``, under a prefix of its own (deleted after)."""
    client = redis.Redis.from_url(REDIS_URL)
    prefix = f"wanprop-{uuid.uuid4().hex[:10]}"
    runtime = DryRunRuntime(client, prefix)
    manager = Manager(client, prefix, runtime)
    manager.start()
    manager.set_wan(wan)
    try:
        yield manager, runtime, client, prefix
    finally:
        manager.close()
        delete_prefix(client, prefix)
        client.close()


def _run(case, check):
    wan, workload, trace = case
    with wan_manager(wan) as (manager, runtime, client, prefix):
        submitted: dict[str, dict] = {}
        ids: dict[int, str] = {}
        for op, index in trace:
            before, deployed = set(manager.state.tasks), runtime.deployed()
            if op == "add":
                try:
                    result = manager.submit(workload[index])
                except SinkTopicTaken as error:
                    # Two sinks reuse running chains that hold one of its tasks as different instances.
                    assert reaches_apart(manager.state, workload[index]), error
                    assert error.culprit["field"] == "config.topic"
                    assert set(manager.state.tasks) == before and runtime.deployed() == deployed
                    event("submit refused: sinks reuse different instances of one task")
                    continue
                ids[index] = result.id
                submitted[result.id] = workload[index]
                assert set(manager.state.tasks) - before == {result.tasks[t] for t in result.created}
                assert set(result.sites) == {t["id"] for t in workload[index]["tasks"]}
                for item in result.not_shared:
                    assert item["needed_mbps"] > (item["available_mbps"] if item["available_mbps"] is not None else float("-inf"))
                    assert manager.state.tasks[item["equivalent"]].signature == manager.state.tasks[item["running_task"]].signature
                    assert item["site"] != item["equivalent_site"]
                event(f"submit refused {'some' if result.not_shared else 'no'} share")
            elif index not in ids:
                continue  # its submit was refused
            else:
                result = manager.remove(ids.pop(index))
                del submitted[result.id]
                assert set(result.terminated) == before - set(manager.state.tasks)
            check(manager.state, submitted)
            assert runtime.deployed() == {tid: task.fragment for tid, task in manager.state.tasks.items()}
            if op == "add" and len({t.signature for t in manager.state.tasks.values()}) < len(manager.state.tasks):
                event("equivalent tasks run at different sites")
        reloaded = Manager(client, prefix, DryRunRuntime(client, prefix))
        reloaded.start()
        assert reloaded.state.tasks == manager.state.tasks
        assert not submitted
        left = {key.decode()[len(prefix) + 1:] for key in client.scan_iter(f"{prefix}:*")}
        assert left <= BOOKKEEPING, left


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases())
def test_traces_keep_the_wan_invariants(case):
    _run(case, check_wan_state)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases(ample=True))
def test_with_ample_bandwidth_the_running_set_is_the_optimum(case):
    def both(state, submitted):
        check_wan_state(state, submitted)
        check_state(state, submitted)  # the manager issue's invariants, unchanged: one task per signature
        assert not state.not_shared

    _run(case, both)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases(), scale=st.sampled_from([0.01, 0.1, 0.5]), threshold=st.sampled_from([0.5, 0.95, 2.0]))
def test_re_placement_after_links_thin_keeps_the_invariants_and_the_ids(case, scale, threshold):
    """Everything submitted, then every link thinned: re-placement keeps each dataflow (its id, its document),
    the running set keeps the invariants, the runtime runs exactly it, every task handed state continues one
    of the same computation, and what Redis holds is what the manager holds."""
    wan, workload, _ = case
    with wan_manager(wan) as (manager, runtime, client, prefix):
        submitted = {}
        for document in workload:
            try:
                submitted[manager.submit(document).id] = document
            except SinkTopicTaken:
                assert reaches_apart(manager.state, document)
        manager.set_wan({**wan, "links": [{**link, "bandwidth_mbps": link["bandwidth_mbps"] * scale} for link in wan["links"]]})
        before = copy.deepcopy(manager.state)
        planned = manager.replacement(threshold)
        done = manager.replace(threshold)
        assert done["dataflows"] == planned["dataflows"] and done["executed"] is True
        check_wan_state(manager.state, submitted)
        assert runtime.deployed() == {tid: task.fragment for tid, task in manager.state.tasks.items()}
        changed = {t for t, spec in manager.state.tasks.items() if before.tasks.get(t) != spec}
        touched = {manager.state.tasks[t].fragment for t in changed}
        # what changed starts again, with every task of a fragment it starts in (a fragment is one query)
        restarted = changed | {t for t, spec in manager.state.tasks.items() if spec.fragment in touched}
        assert set(done["start"]) == restarted
        assert set(done["stop"]) == {t for t, spec in before.tasks.items() if manager.state.tasks.get(t) != spec} | (
            restarted & set(before.tasks))
        kept_fragments = {spec.fragment for t, spec in manager.state.tasks.items() if t not in done["start"]}
        for task_id, source in done.get("hand_over", {}).get("seeded_from", {}).items():
            assert manager.state.tasks[task_id].signature == before.tasks[source].signature
            # the Spark runtime seeds state only into a new query: a seeded task starts in a fragment of its own
            assert manager.state.tasks[task_id].fragment not in kept_fragments
        replanned = {row["dataflow"] for row in done["dataflows"]}
        for dataflow_id, flow in manager.state.dataflows.items():
            if dataflow_id not in replanned:
                assert flow.tasks == before.dataflows[dataflow_id].tasks, f"{dataflow_id} crosses no hot link"
        assert not client.keys(f"{prefix}:staged:*") and manager.store.read_pending() is None
        event(f"re-placement {'moved tasks' if done['start'] else 'changed nothing'}")
        reloaded = Manager(client, prefix, DryRunRuntime(client, prefix))
        reloaded.start()
        assert reloaded.state.tasks == manager.state.tasks and reloaded.state.dataflows.keys() == submitted.keys()
