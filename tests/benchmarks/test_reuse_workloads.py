"""The reuse benchmark's workloads, traces and runner (docs/reuse.md)."""

from __future__ import annotations

import doctest
import importlib
from collections import Counter
from typing import Any

import json

import pytest

from benchmarks import opmw, reuse, traces
from benchmarks.riot import PAPER_TASKS, paper_dataflow, paper_workload, riot_workload
from manager.validate import parse_dataflow


@pytest.mark.parametrize("name", ["benchmarks.opmw", "benchmarks.riot", "benchmarks.traces", "benchmarks.reuse",
                                  "benchmarks.reuse_real", "benchmarks.reuse_replay", "benchmarks.jfr_summary",
                                  "benchmarks.statement_shapes"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# -- the paper's RIoT construction -----------------------------------------------------


def test_the_papers_riot_construction_has_its_three_numbers():
    """138 tasks, 19 distinct (type, config) pairs besides the sinks, 75 running with all 21 apps and reuse."""
    flows = [parse_dataflow(document) for document in paper_workload()]
    assert len(flows) == 21 and sum(len(flow.tasks) for flow in flows) == 138
    assert all(4 <= len(flow.tasks) <= 8 for flow in flows)
    assert len({signature for flow in flows for signature in flow.signatures.values()}) == 75
    abstract = {json.dumps([task.type, task.config], sort_keys=True)
                for flow in flows for task in flow.tasks.values() if task.type != "sink"}
    assert len(abstract) == 19
    kinds = {task_id for flow in flows for task_id in flow.tasks} - {"src", "senml_parse"}
    assert {kind for kind in kinds if not kind.startswith("pub_")} == set(PAPER_TASKS), "every task kind is used"
    sinks = Counter(task.config["topic"] for flow in flows for task in flow.tasks.values() if task.type == "sink")
    assert all(count == 1 for count in sinks.values()), "a sink topic is written by two apps"


def test_the_papers_riot_construction_shares_only_equal_ancestries():
    """The bloom check has one config, but the one behind RangeFilter (ETL) and the one behind SenMLParse (STATS)
    have other ancestors, so they never share a signature; apps over different sources share nothing."""
    behind: dict[str, set[str]] = {}
    by_source: dict[str, set[str]] = {}
    for document in paper_workload():
        flow = parse_dataflow(document)
        parent = {stream.dst: stream.src for stream in flow.streams}
        if "bloom_check" in flow.tasks:
            behind.setdefault(parent["bloom_check"], set()).add(flow.signatures["bloom_check"])
        by_source.setdefault(flow.tasks["src"].config["topic"], set()).update(flow.signatures.values())
    assert set(behind) == {"range_filter", "senml_parse"} and not behind["range_filter"] & behind["senml_parse"]
    grid, urban, taxi = by_source.values()
    assert not (grid & urban or grid & taxi or urban & taxi)
    with pytest.raises(ValueError, match="apps 0-20, not 21"):
        paper_dataflow(21)


# -- the OPMW-like workload -------------------------------------------------------------


def test_opmw_workload_is_the_same_for_a_seed_and_differs_between_seeds():
    assert opmw.opmw_workload(seed=0) == opmw.opmw_workload(seed=0)
    assert opmw.opmw_workload(seed=0) != opmw.opmw_workload(seed=1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_opmw_workload_has_the_papers_shape(seed):
    documents = opmw.opmw_workload(seed)
    flows = [parse_dataflow(document) for document in documents]
    sizes = [len(flow.tasks) for flow in flows]
    assert len(flows) == 35
    assert sum(sizes) == 471
    assert (min(sizes), max(sizes)) == (2, 38)
    topics_by_flow = [{task.config["topic"] for task in flow.tasks.values() if task.type == "sink"} for flow in flows]
    everything = Counter(topic for topics in topics_by_flow for topic in topics)
    assert all(count == 1 for count in everything.values()), "a sink topic is written by two workflows"
    for flow in flows:
        assert len(set(flow.signatures.values())) == len(flow.tasks), f"{flow.name} holds two equivalent tasks"
        sources = [task for task in flow.tasks.values() if task.type == "source"]
        assert len(sources) == 1 and sources[0].config["topic"].startswith("opmw-")
        assert "ts" in sources[0].config["schema"]
    fan_in = sum(1 for flow in flows for count in Counter(s.dst for s in flow.streams).values() if count > 1)
    fan_out = sum(1 for flow in flows for count in Counter(s.src for s in flow.streams).values() if count > 1)
    assert fan_in > 10 and fan_out > 10


def test_opmw_default_workload_totals_are_pinned():
    """The committed results (docs/reuse.md) were measured on these totals; a generator change must update them."""
    summary = opmw.check(seed=0)
    assert (summary["tasks"], summary["distinct_signatures"], summary["distinct_abstract_tasks"]) == (471, 279, 211)


def test_the_histogram_shape_is_pinned_and_shares_as_calibrated():
    """opmw-hist (docs/reuse.md): the paper's peak, and its SEQ reuse histogram within a point or so."""
    summary = opmw.check(opmw.HISTOGRAM_SEED, opmw.HISTOGRAM_SHAPE)
    assert (summary["tasks"], summary["distinct_signatures"], summary["distinct_abstract_tasks"]) == (471, 274, 212)
    workload = reuse.workloads()["opmw-hist"]
    signatures = [frozenset(parse_dataflow(document).signatures.values()) for document in workload.documents]
    running: set[int] = set()
    by_two = by_more = total = 0
    for action, index in reuse.TRACES["seq"].steps(workload):
        (running.add if action == "add" else running.discard)(index)
        users = Counter(signature for number in running for signature in signatures[number])
        total += len(users)
        by_two += sum(1 for count in users.values() if count == 2)
        by_more += sum(1 for count in users.values() if count > 2)
    assert (round(by_two / total, 3), round(by_more / total, 3)) == (0.098, 0.032)


def test_a_version_repeats_its_predecessors_body_and_every_workflow_takes_the_trunk():
    documents = opmw.opmw_workload(opmw.HISTOGRAM_SEED, opmw.HISTOGRAM_SHAPE)
    flows = [parse_dataflow(document) for document in documents]
    sets = [set(flow.signatures.values()) for flow in flows]
    common = set.intersection(*sets)
    assert len(common) == 1, "the 2-task workflows share only the source"
    big = [signature_set for flow, signature_set in zip(flows, sets) if len(flow.tasks) >= 6]
    assert len(set.intersection(*big)) == 5, "every workflow with room takes the source and the 4 trunk stages"
    versions = [number for number in range(35) if opmw._is_version(number, opmw.HISTOGRAM_SEED, opmw.HISTOGRAM_SHAPE)]
    assert len(versions) == 15  # a predecessor is never a version itself, so 0.7 makes fewer than 70 %
    plan = opmw.workload_plan(opmw.HISTOGRAM_SEED, opmw.HISTOGRAM_SHAPE)
    beyond_trunk = 0
    for number in versions:
        before = max(other for other in range(number) if plan[other][0] == plan[number][0])
        beyond_trunk += len(sets[number] & sets[before]) > len(common | (sets[number] & set.intersection(*big)))
    # the others are too small, follow one too small, or their budget allows other moves at once
    assert beyond_trunk == 6, "versions share body tasks with their predecessor"
    assert opmw.opmw_workload(0) == opmw.opmw_workload(0, opmw.TOTALS), "the default shape is unchanged"


def test_workflows_of_a_domain_share_a_prefix_but_not_everything():
    flows = [parse_dataflow(document) for document in opmw.opmw_workload(seed=0)]
    by_domain: dict[str, list[set[str]]] = {}
    for flow in flows:
        by_domain.setdefault(flow.name.split("-")[1], []).append(set(flow.signatures.values()))
    for domain, signature_sets in by_domain.items():
        assert len(set.intersection(*signature_sets)) >= 1, f"{domain}: workflows do not even share their source"
    shared_beyond_source = sum(
        1 for sets in by_domain.values() for index, first in enumerate(sets) for second in sets[index + 1:]
        if len(first & second) > 1
    )
    assert shared_beyond_source > 0
    domains = list(by_domain.values())
    assert all(not (first & second) for i, group in enumerate(domains) for other in domains[i + 1:]
               for first in group for second in other), "workflows of different domains share a task"


# -- traces -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_sequential_adds_everything_then_removes_everything(seed):
    trace = traces.sequential(21, seed)
    assert [action for action, _ in trace] == ["add"] * 21 + ["remove"] * 21
    assert sorted(i for _, i in trace[:21]) == sorted(i for _, i in trace[21:]) == list(range(21))
    assert traces.running_after(trace) == set()


@pytest.mark.parametrize(("n", "initial", "seed"), [(35, 20, 1), (35, 20, 2), (21, 15, 1), (21, 15, 2), (3, 2, 7)])
def test_random_walk_obeys_the_papers_rules(n, initial, seed):
    trace = traces.random_walk(n, initial, steps=100, seed=seed)
    fill, walk, drain = trace[:initial], trace[initial:initial + 100], trace[initial + 100:]
    assert [action for action, _ in fill] == ["add"] * initial and len({i for _, i in fill}) == initial
    assert len(walk) == 100 and {action for action, _ in walk} == {"add", "remove"}
    assert drain == [("remove", i) for _, i in drain]
    assert len(drain) == len(traces.running_after(trace[:initial + 100]))
    assert traces.running_after(trace) == set()  # never adds a running one, never removes an idle one, ends empty
    assert trace == traces.random_walk(n, initial, steps=100, seed=seed)


def test_random_walks_of_two_seeds_differ():
    assert traces.random_walk(35, 20, seed=1) != traces.random_walk(35, 20, seed=2)


@pytest.mark.parametrize(("trace", "message"), [
    ([("add", 0), ("add", 0)], r"step 1: \('add', 0\) adds a running dataflow"),
    ([("remove", 3)], r"step 0: \('remove', 3\) removes a dataflow that is not running"),
    ([("pause", 1)], r"step 0: unknown action 'pause'"),
])
def test_running_after_names_the_step_that_breaks_a_rule(trace, message):
    with pytest.raises(ValueError, match=message):
        traces.running_after(trace)


# -- the runner -----------------------------------------------------------------------------


class RecordingTarget:
    """A target without a service: remembers the calls, measures how many dataflows it holds."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.held: set[str] = set()
        self.closed = False

    def submit(self, document: dict[str, Any]) -> str:
        dataflow_id = f"df-{len(self.calls)}"
        self.calls.append(("submit", document["name"]))
        self.held.add(dataflow_id)
        return dataflow_id

    def remove(self, dataflow_id: str) -> None:
        self.calls.append(("remove", dataflow_id))
        self.held.remove(dataflow_id)

    def measure_step(self) -> dict[str, Any]:
        return {"held": len(self.held)}

    def close(self) -> None:
        self.closed = True


def test_run_trace_drives_any_target_and_removes_by_the_id_it_returned():
    documents = list(riot_workload(3, seed=0))
    steps = [("add", 2), ("add", 0), ("remove", 2), ("remove", 0)]
    target = RecordingTarget()
    records = reuse.run_trace(target, documents, steps, ["fill", "fill", "drain", "drain"], sharing=True)
    assert target.calls == [("submit", documents[2]["name"]), ("submit", documents[0]["name"]),
                            ("remove", "df-0"), ("remove", "df-1")]
    assert [record["held"] for record in records] == [record["running_dataflows"] for record in records] == [1, 2, 1, 0]
    assert [record["step"] for record in records] == [1, 2, 3, 4]
    assert records[-1]["optimal_tasks"] == 0


def test_run_all_closes_every_target_it_built():
    built: list[RecordingTarget] = []

    def factory(workload: reuse.Workload, sharing: bool) -> RecordingTarget:
        built.append(RecordingTarget())
        return built[-1]

    runs = reuse.run_all(factory, ["riot"], ["seq"])
    assert [(run["workload"], run["trace"], run["mode"]) for run in runs] == [("riot", "seq", "alone"), ("riot", "seq", "reuse")]
    assert len(built) == 2 and all(target.closed for target in built)
    assert [step["action"] for step in runs[0]["steps"]] == [step["action"] for step in runs[1]["steps"]]


@pytest.mark.redis
def test_riot_sequential_trace_on_the_dry_run_manager(redis_client, state_prefix):
    workload = reuse.workloads()["riot"]
    spec = reuse.TRACES["seq"]
    steps, phases = spec.steps(workload), spec.phases(workload)
    flows = [parse_dataflow(document) for document in workload.documents]
    distinct = len({signature for flow in flows for signature in flow.signatures.values()})
    submitted = sum(len(flow.tasks) for flow in flows)
    runs = []
    for mode, sharing in reuse.MODES.items():
        target = reuse.DryRunTarget(redis_client, f"{state_prefix}-{mode}", sharing)
        try:
            records = reuse.run_trace(target, workload.documents, steps, phases, sharing)
        finally:
            target.close()
        assert not list(redis_client.scan_iter(f"{state_prefix}-{mode}:*")), "close() left keys behind"
        peak = records[len(workload.documents) - 1]
        assert peak["running_dataflows"] == 21 and peak["submitted_tasks"] == submitted
        assert peak["running_tasks"] == (distinct if sharing else submitted)
        assert all(record["running_tasks"] == record["optimal_tasks"] == record["deployed_tasks"] for record in records)
        assert records[-1]["running_tasks"] == records[-1]["deployed_tasks"] == 0
        runs.append({"workload": "riot", "trace": "seq", "trace_seed": spec.seed, "mode": mode, "sharing": sharing,
                     "seconds": 0.0, "steps": records})
    assert distinct < submitted

    results = {"date": "today", "commit": "0" * 40, "command": "test", "runs": runs,
               "workloads": {"riot": reuse.describe_workload(workload)}}
    text = reuse.markdown(results)
    assert f"| riot | seq | 42 | {submitted} / {distinct} |" in text
    assert "running tasks equal the optimum at every step (" in text and "**no**" not in text


# -- the real runner's report (pure: from a results document) ---------------------------------


def _real_step(step: int, action: str, tasks: int, queries: int, cores: float, **extra: Any) -> dict[str, Any]:
    return {"step": step, "action": action, "running_tasks": tasks, "queries": queries, "cores": cores,
            "kafka_bytes_per_s": 1000.0, "running_dataflows": 1, **extra}


def _real_results(modes: dict[str, list[dict[str, Any]]], trace: str = "seq") -> dict[str, Any]:
    return {"workload": "riot", "trace": trace, "apps": 2, "seed": 0, "walk_steps": 40, "master": "local[2]", "rate": 10.0,
            "trigger_s": 10.0, "settle_s": 5.0, "measure_s": 20.0,
            "runs": {mode: {"steps": steps, "sinks": {"out": {"records": 10, "repeated": 0}}} for mode, steps in modes.items()}}


def test_real_report_compares_peaks_and_step_means_of_both_modes():
    from benchmarks.reuse_real import markdown, summary

    results = _real_results({"alone": [_real_step(1, "add", 10, 2, 1.0), _real_step(2, "add", 20, 4, 2.0)],
                             "reuse": [_real_step(1, "add", 10, 1, 1.0), _real_step(2, "add", 15, 1, 1.0)]})
    rows = {row["metric"]: row for row in summary(results)}
    assert rows["running tasks"]["peak_cut"] == pytest.approx(25.0)
    assert rows["running tasks"]["mean_cut"] == pytest.approx(100 * (1 - 12.5 / 15))
    assert rows["cores (process tree)"]["mean_cut"] == pytest.approx(100 * (1 - 1.0 / 1.5))
    text = markdown(results)
    assert "| running tasks | 20.00 | 15.00 | 25% |" in text
    assert "Sinks, reuse: 1 topics, 10 records, 0 repeated" in text


def test_real_report_of_fixed_steps_adds_the_whole_step_cores():
    """With the paper's fixed step the table also compares the cores over the whole step (the change included)."""
    from benchmarks.reuse_real import markdown, summary

    results = _real_results({"alone": [_real_step(1, "add", 10, 2, 1.0, cores_step=1.2)],
                             "reuse": [_real_step(1, "add", 6, 1, 0.5, cores_step=0.9)]})
    results["step_s"] = 60.0
    rows = {row["metric"]: row for row in summary(results)}
    assert rows["cores (process tree)"]["mean_cut"] == pytest.approx(50.0)
    assert rows["cores over the whole step"]["mean_cut"] == pytest.approx(25.0)
    text = markdown(results)
    assert "a step every 60 s from its change's start (the paper's protocol), cores over its last 20 s" in text
    assert "| cores over the whole step | 1.20 | 0.90 | 25% |" in text
    del results["runs"]["alone"]["steps"][0]["cores_step"]  # a run without it (older results) has no such row
    assert "cores over the whole step" not in markdown(results)


def test_real_report_of_a_walk_splits_the_step_means_by_phase():
    """A walk's table also gives the means of its fill, walk and drain: the paper's walks are 100 steps, ours 20,
    so its means are mostly the walk's; a defrag step counts in the phase of the change before it."""
    from benchmarks.reuse_real import markdown, phase_rows

    actions = ["add", "add", "remove", "add", "remove", "defrag", "remove"]
    alone = [_real_step(k + 1, action, 10 * (k + 1), 1, 1.0 + k) for k, action in enumerate(actions)]
    reuse = [_real_step(k + 1, action, 5 * (k + 1), 1, 0.5 + k) for k, action in enumerate(actions)]
    results = _real_results({"alone": alone, "reuse": reuse}, trace="rw1")
    results.update(initial=2, walk_steps=2)
    rows = {row["phase"]: row for row in phase_rows(results)}
    assert [(phase, row["steps"]) for phase, row in rows.items()] == [("fill", 2), ("walk", 2), ("drain", 3)]
    assert rows["walk"]["running_tasks"] == pytest.approx((35.0, 17.5, 50.0))
    assert rows["drain"]["cores"] == pytest.approx((6.0, 5.5, 100 * (1 - 5.5 / 6.0)))
    text = markdown(results)
    assert "| walk | 2 | 1.0 | 35.00 | 17.50 | 50% | 3.50 | 3.00 | 14% |" in text
    results.update(trace="seq", apps=4)  # SEQ: every add fills, every removal drains
    assert [(row["phase"], row["steps"]) for row in phase_rows(results)] == [("fill", 4), ("drain", 3)]


def test_real_report_of_one_mode_and_its_defrag_steps():
    from benchmarks.reuse_real import defrag_markdown, markdown

    defrag = {"merged": [{"queries": ["q1", "q2"], "into": "q3"}], "skipped": []}
    results = _real_results({"reuse": [_real_step(1, "remove", 10, 2, 1.5), _real_step(2, "defrag", 10, 1, 1.25, defrag=defrag)]},
                            trace="rw1")
    text = markdown(results)
    assert "RIoT, RW1 (2 apps, trace seed 0, walk of 40 steps)" in text
    assert "| reuse | 2 | 10 | 10.0 | 2 | 1.5 | 1.38 |" in text
    assert "| reuse | 1 | 1 | 2 -> 1 | 1.50 -> 1.25 | q1 + q2 -> q3 |" in defrag_markdown(results)


@pytest.mark.redis
def test_the_walk_sweep_counts_what_the_manager_runs():
    """benchmarks.reuse_walks computes a walk's running tasks from signatures; the manager (dry run) runs
    exactly those at every walk step, alone and with reuse, and a walk with more dataflows running saves more."""
    from benchmarks.measure import Progress
    from benchmarks.reuse_walks import check, grouped, signature_sets, walk

    workload = reuse.workloads()["riot-paper"]
    assert check(workload, range(7, 8), Progress(every=1e9)) == 200
    signatures = signature_sets(workload)
    rows = [walk(workload, seed, signatures) for seed in range(1, 61)]
    assert all(0 < row["reduction"] < 1 and row["mean_reuse"] < row["mean_alone"] for row in rows)
    groups = grouped(rows)
    assert sum(group["seeds"] for group in groups) == 60
    few, many = groups[0], groups[-1]
    assert few["median_dataflows"] < many["median_dataflows"] and few["reduction_median"] < many["reduction_median"]
