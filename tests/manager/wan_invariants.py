"""Invariants of the running set when a WAN configuration may refuse shares (checked independently)."""

from __future__ import annotations

import math

import networkx as nx

from manager.state import RunningSet, State
from manager.traffic import link_loads_in_use, rates_in_use
from manager.validate import parse_dataflow
from optimizer.contention import Contention
from planning.model import QueryPlan
from tests.fixtures.invariants import runs_as
from optimizer.rates import estimate_rate
from wan.monitor import WanMonitor, crossings, link_loads


def check_wan_state(state: State, submitted: dict[str, dict]) -> None:
    """The manager's invariants, restated for a running set that may hold equivalent tasks at different sites."""
    assert set(state.dataflows) == set(submitted)
    used: set[str] = set()
    for dataflow_id, document in submitted.items():
        flow = runs_as(state, dataflow_id, document)
        record = state.dataflows[dataflow_id]
        parents: dict[str, list[tuple[str, str]]] = {}
        for item in flow.streams:
            parents.setdefault(item.dst, []).append((item.port, item.src))
        for task_id, signature in flow.signatures.items():
            running = state.tasks[record.tasks[task_id]]
            # Each submitted task is served by an equivalent task that reads what its parents map onto:
            # the dataflow's running tasks are its own DAG, closed under inputs.
            assert running.signature == signature
            assert running.inputs == tuple(sorted((port, record.tasks[parent]) for port, parent in parents.get(task_id, [])))
            assert dataflow_id in state.users[running.id]
            used.add(running.id)
        for sink_id in flow.sinks:  # sink coverage
            target = record.sinks[sink_id]
            assert state.tasks[target["running_task"]].signature == flow.signatures[sink_id]
    # Minimization: nothing runs for nobody; users are exactly the dataflows mapping onto a task.
    assert used == set(state.tasks)
    for task_id, users in state.users.items():
        assert users == {fid for fid, flow in state.dataflows.items() if task_id in flow.tasks.values()}
    # Equivalent tasks reading the same streams run only at different sites, and only because a share was refused.
    # Source readers are the exception: a dataflow planned privately (the weighing found that sharing a reader
    # held back by a slow link delivers less) has its own, at the stream's origin like the shared one; the
    # tasks it runs on top read that reader, so they are not equivalent to the shared chain's in this sense.
    seen: dict[tuple[str, tuple], list[str]] = {}
    for task in state.tasks.values():
        seen.setdefault((task.signature, task.inputs), []).append(task.id)
    for (_, inputs), ids in seen.items():
        if len(ids) > 1 and inputs:
            sites = [state.tasks[task_id].site for task_id in ids]
            assert len(set(sites)) == len(sites), ids
            assert any(state.not_shared.get(task_id) for task_id in ids), ids
    assert len(state.tasks) >= len({task.signature for task in state.tasks.values()})
    # The signature index names the smallest instance of every running signature.
    assert state.instances == {sig: {t.id for t in state.tasks.values() if t.signature == sig}
                               for sig in {t.signature for t in state.tasks.values()}}
    assert state.by_signature == {sig: min(ids) for sig, ids in state.instances.items()}
    # Notes only for running tasks, each with the link and the numbers.
    for task_id, notes in state.not_shared.items():
        assert task_id in state.tasks
        for note in notes:
            assert note["kind"] == "IN-OP" and note["needed_mbps"] > (note["available_mbps"] or -math.inf)
            assert set(note["link"]) == {"from", "to"}
    # Running DAGs: the connected components.
    graph = nx.Graph()
    graph.add_nodes_from(state.tasks)
    graph.add_edges_from((parent, task.id) for task in state.tasks.values() for _, parent in task.inputs)
    assert {frozenset(c) for c in nx.connected_components(graph)} == {frozenset(m) for m in state.dag_members.values()}
    # Every task on a site; fragments never span sites.
    if state.wan is not None:
        assert all(state.wan.has_site(task.site) for task in state.tasks.values())
        assert all(state.wan.can_compute(task.site) for task in state.tasks.values() if task.type != "source")
    assert {task for members in state.fragments.values() for task in members} == set(state.tasks)
    for members in state.fragments.values():
        assert len({state.tasks[task].site for task in members}) == 1
    # The link ledger equals a recomputation from the running tasks (routers: once per producer and site).
    if state.wan is not None:
        rates: dict[str, float] = {}
        from manager.state import parents_first

        for task_id in parents_first(state.tasks):
            task = state.tasks[task_id]
            rates[task_id] = estimate_rate(task.type, task.config, [rates[p] for _, p in task.inputs], state.wan)
        placed = {task.id: (task.site, [p for _, p in task.inputs]) for task in state.tasks.values()}
        expected = link_loads(crossings(placed, rates), {task.id: task.site for task in state.tasks.values()})
        assert set(expected) == set(state.link_load)
        for link, load in expected.items():
            assert math.isclose(state.link_load[link], load, rel_tol=1e-9, abs_tol=1e-9)
    # The flow index the weighing reads is the running set's flow model, as built from its tasks from scratch.
    if state.wan is not None:
        view = RunningSet(state)
        running = list(view.running_tasks())
        index = view.flow_index()
        assert index is state.flow and index.sites == {task.id: task.site for task in running}
        assert set(index.arrivals) == {(parent, task.site) for task in running for _, parent in task.inputs
                                       if index.sites[parent] != task.site}
        monitor = WanMonitor(state.wan, state.link_load)
        for scale in (1.0, 2.0):
            expected = Contention(running, monitor, router=True).delivered((), QueryPlan({}), scale)
            assert math.isclose(Contention((), monitor, True, index).delivered((), QueryPlan({}), scale), expected,
                                rel_tol=1e-9, abs_tol=1e-7)
        # With measured rates the view builds the same model from them, once: as from scratch, in both flow models.
        measured = rates_in_use(state, {task_id: rate * (0.5 + number % 5 / 4)
                                        for number, (task_id, rate) in enumerate(sorted(state.rates.items()))})
        rated = RunningSet(state, measured)
        built = rated.flow_index()
        assert built is not state.flow and built is rated.flow_index() and built.sites == index.sites
        measured_monitor = WanMonitor(state.wan, link_loads_in_use(state, measured))
        tasks = list(rated.running_tasks())
        for buffered in (False, True):
            for scale in (1.0, 2.0):
                expected = Contention(tasks, measured_monitor, True, buffered=buffered).delivered((), QueryPlan({}), scale)
                got = Contention((), measured_monitor, True, built, buffered=buffered).delivered((), QueryPlan({}), scale)
                assert math.isclose(got, expected, rel_tol=1e-7, abs_tol=1e-6), (buffered, scale, got, expected)


def reaches_apart(state: State, document: dict) -> bool:
    """Whether two sinks of ``document`` that equal running sinks reach one of its tasks through different running
    instances of it (each sink climbed along the running chain that writes its topic): then no single instance of
    that task can serve both, and the submit is refused."""
    flow = parse_dataflow(document)
    reached: dict[str, set[str]] = {}

    def climb(task_id: str, running: str) -> None:
        reached.setdefault(task_id, set()).add(running)
        for stream in flow.inputs(task_id):
            for port, parent in state.tasks[running].inputs:
                if port == stream.port and state.tasks[parent].signature == flow.signatures[stream.src]:
                    climb(stream.src, parent)

    for sink in flow.sinks:
        for running in state.instances.get(flow.signatures[sink], set()) - state.quarantined:
            climb(sink, running)
    return any(len(instances) > 1 for instances in reached.values())
