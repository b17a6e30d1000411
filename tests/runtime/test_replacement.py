"""Re-placement on the Spark runtime: a link degrades, a dataflow's work moves off it at a cut (docs/wan.md).

Nothing is lost or written twice: every sink ends up holding what its dataflow
run alone writes for all the input, and a window open at the cut keeps what it
had counted before it.
"""

from __future__ import annotations

import threading
import time

import pytest

from manager.replacement import plan_replacement
from manager.exceptions import DeployFailed
from runtime.exceptions import HandOverFailed
from runtime.spark.fragment import FragmentQuery
from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import copies_are_identical, produce, read_all, values, wait_for, without_replays
from tests.fixtures.streams import URBAN, multiset, urban_records
from tests.manager.test_wan_sharing import Died, die_at
from tests.runtime.test_keyed import window_reference
from tests.runtime.test_sharing import raise_dead_queries, wait_sink

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def wan(topic: str, p_to_h2: float) -> dict:
    """The stream originates at ``src`` (no compute); P, H2 and H3 compute; only P -> H2 is ever short."""
    links = [("src", "P"), ("src", "H2"), ("src", "H3"), ("P", "H3"), ("H2", "H3")]
    return {"sites": [{"name": "src", "compute": False}, "P", "H2", "H3"],
            "links": [{"from": a, "to": b, "bandwidth_mbps": 100, "latency_ms": 10} for a, b in links]
            + [{"from": "P", "to": "H2", "bandwidth_mbps": p_to_h2, "latency_ms": 20}],
            "sources": {topic: {"site": "src", "rate_mbps": 16}}, "selectivity": {"filter": 0.5}}


def hot_readings(topic: str, sink: str) -> dict:
    """Readings over 30 degrees, filtered at P, written at H3."""
    return {"name": "hot-at-h3",
            "tasks": [source("src", topic, dict(URBAN)), {**task("hot", "filter", expr="temp > 30"), "site": "P"},
                      {**task("out", "sink", topic=sink), "site": "H3"}],
            "streams": [stream("src", "hot"), stream("hot", "out")]}


def hot_counts(topic: str, sink: str) -> dict:
    """The same readings counted per sensor in 10 s windows at H2: it shares the filter at P while P -> H2 is wide."""
    return {"name": "counts-at-h2",
            "tasks": [source("src", topic, dict(URBAN)), task("hot", "filter", expr="temp > 30"),
                      {**task("per_sensor", "window_aggregate", keys=["sensor"], time_column="ts", window="10 seconds",
                              watermark="1 second", aggregates={"n": "count(*)"}), "site": "H2"},
                      {**task("out", "sink", topic=sink), "site": "H2"}],
            "streams": [stream("src", "hot"), stream("hot", "per_sensor"), stream("per_sensor", "out")]}


def wait_windows(manager, bootstrap: str, topic: str, records: list[dict], restarted: bool = False) -> None:
    expected = window_reference([[r for r in records if r["temp"] > 30]], 10, 10, 1, {"n": len})
    wait_exact(manager, bootstrap, topic, expected, restarted)


def wait_exact(manager, bootstrap: str, topic: str, expected: list[dict], restarted: bool = False) -> None:
    """``topic`` holds exactly ``expected``. After a restart, a batch that was in flight when the service stopped
    is written again under the same names (at least once: docs/architecture.md, "Guarantees"); a consumer drops those copies by name."""
    seen = without_replays if restarted else values
    got = wait_for(lambda: (rows := read_all(bootstrap, topic)) and len(seen(rows)) >= len(expected) and rows, 90,
                   f"{len(expected)} records on {topic}", check=lambda: raise_dead_queries(manager))
    assert multiset(seen(got)) == multiset(expected), f"{topic} differs from the dataflow run alone"
    if restarted:
        assert copies_are_identical(got), f"{topic}: a record written twice under one name differs"
    else:
        assert len(without_replays(got)) == len(got), f"{topic}: a record was written twice"


def test_a_degraded_link_moves_a_dataflow_off_it_without_loss_or_repeats(manager_factory, kafka_bootstrap,
                                                                         topic_factory, monkeypatch):
    manager = manager_factory(trigger_s=0.5)
    manager.runtime.meter.every_s = 1e9  # the links' loads are the configured estimates: what makes P -> H2 hot
    urban = topic_factory("urban")
    at_h3, at_h2 = f"{urban}-h3", f"{urban}-h2"
    manager.set_wan(wan(urban, p_to_h2=50))
    first = manager.submit(hot_readings(urban, at_h3))
    second = manager.submit(hot_counts(urban, at_h2))
    shared = first.tasks["hot"]
    assert second.tasks["hot"] == shared and second.sites["hot"] == "P", "P -> H2 carries the filtered stream"

    one, two, three = urban_records(0, 300), urban_records(300, 300), urban_records(600, 300)
    produce(kafka_bootstrap, urban, one)
    wait_sink(manager, kafka_bootstrap, at_h3, [r for r in one if r["temp"] > 30])
    wait_windows(manager, kafka_bootstrap, at_h2, one)

    manager.set_wan(wan(urban, p_to_h2=5))  # the link degrades: 8 Mbps estimated over 5
    assert manager.replacement(0.95)["hot_links"][0]["utilization"] == 1.6
    # a hand-over that cannot drain in time changes nothing: the same queries run on, unbounded
    planned = plan_replacement(manager.snapshot(), {}, 0.95)
    runs = {query.id: query.query.runId for query in manager.runtime.queries.values()}
    tasks = dict(manager.runtime.tasks)
    with pytest.raises(HandOverFailed, match="did not reach the cut"):
        manager.runtime.hand_over(planned.change, planned.seeds, timeout_s=0)
    assert {query.id: query.query.runId for query in manager.runtime.queries.values()} == runs
    assert manager.runtime.tasks == tasks
    assert not any(query.bound_file.exists() for query in manager.runtime.queries.values())

    # ... and so does one that fails after the drain, while new queries are being made (a state copy breaks)
    records = set(manager.runtime.query_records.load())

    def broken_copy(self, states, copies):
        raise LookupError("keyed operator per_sensor: worker 0 has no state version 7")

    monkeypatch.setattr(FragmentQuery, "seed", broken_copy)
    with pytest.raises(DeployFailed, match="not handed over .*keyed operator per_sensor: worker 0 has no state version 7"):
        manager.replace(0.95)
    monkeypatch.undo()
    assert {query.id: query.query.runId for query in manager.runtime.queries.values()} == runs
    assert manager.runtime.tasks == tasks and manager.snapshot().dataflows[second.id].tasks == second.tasks
    assert set(manager.runtime.query_records.load()) == records, "the new queries' records are gone"
    assert not any(query.bound_file.exists() for query in manager.runtime.queries.values())

    produce(kafka_bootstrap, urban, two)  # in flight when the work is handed over ...

    def trickle() -> None:  # ... and three produced while it is: some before the cut, some after
        for start in range(0, len(three), 10):
            produce(kafka_bootstrap, urban, three[start:start + 10])
            time.sleep(0.1)

    producer = threading.Thread(target=trickle)
    producer.start()
    done = manager.replace(0.95)
    producer.join()
    (entry,) = done["dataflows"]
    assert entry["dataflow"] == second.id and entry["links"] == ["P -> H2"]
    moved = manager.snapshot().dataflows[second.id].tasks
    assert moved["hot"] != shared and manager.state.tasks[moved["hot"]].site == "H2", "its own filter at H2"
    assert manager.state.dataflows[first.id].tasks == first.tasks, "the other dataflow is left alone"
    assert moved["per_sensor"] in done["hand_over"]["seeded"], "the window state was handed over"
    assert 600 <= done["hand_over"]["cut"][urban]["0"] <= 900, "cut after what was produced before the call"
    assert shared in manager.runtime.tasks and set(manager.runtime.tasks) == set(manager.state.tasks)
    assert manager.replacement(0.95)["hot_links"] == [], "P -> H2 carries nothing now"

    wait_sink(manager, kafka_bootstrap, at_h3, [r for r in one + two + three if r["temp"] > 30])
    wait_windows(manager, kafka_bootstrap, at_h2, one + two + three)  # a window open at the cut counted on

    manager.close()  # a restarted service runs the moved work from its checkpoints
    restarted = manager_factory(trigger_s=0.5)
    assert restarted.state.dataflows[second.id].tasks == moved
    four = urban_records(900, 300)
    produce(kafka_bootstrap, urban, four)
    wait_windows(restarted, kafka_bootstrap, at_h2, one + two + three + four, restarted=True)
    wait_exact(restarted, kafka_bootstrap, at_h3, [r for r in one + two + three + four if r["temp"] > 30], restarted=True)


def test_a_manager_killed_right_after_the_hand_over_completes_it_on_restart_without_loss(
        manager_factory, kafka_bootstrap, topic_factory, monkeypatch):
    """Killed between the hand-over and the pending marker saying so: the runtime's records host the staged
    state, so the restart commits it and the moved work resumes from its new queries' checkpoints, window
    state and all; what arrived while the manager was down reaches both sinks."""
    manager = manager_factory(trigger_s=0.5)
    manager.runtime.meter.every_s = 1e9
    urban = topic_factory("urban")
    at_h3, at_h2 = f"{urban}-h3", f"{urban}-h2"
    manager.set_wan(wan(urban, p_to_h2=50))
    first = manager.submit(hot_readings(urban, at_h3))
    second = manager.submit(hot_counts(urban, at_h2))
    one, two = urban_records(0, 300), urban_records(300, 300)
    produce(kafka_bootstrap, urban, one)
    wait_windows(manager, kafka_bootstrap, at_h2, one)

    manager.set_wan(wan(urban, p_to_h2=5))
    planned = manager.replacement(0.95)
    moved_filter = planned["dataflows"][0]["moves"][0]["to"]["running_task"]
    monkeypatch.setattr("manager.wan_control.fail_point", die_at("manager.replace.deployed"))
    with pytest.raises(Died):
        manager.replace(0.95)
    monkeypatch.undo()
    assert manager.store.read_pending()["handed_over"] is False, "killed before the marker says handed over"
    manager.close()
    produce(kafka_bootstrap, urban, two)  # while no manager runs

    restarted = manager_factory(trigger_s=0.5)
    assert restarted.state.dataflows[second.id].tasks["hot"] == moved_filter
    assert restarted.state.tasks[moved_filter].site == "H2"
    assert restarted.state.dataflows[first.id].tasks == first.tasks
    assert set(restarted.runtime.tasks) == set(restarted.state.tasks)
    wait_windows(restarted, kafka_bootstrap, at_h2, one + two, restarted=True)
    wait_exact(restarted, kafka_bootstrap, at_h3, [r for r in one + two if r["temp"] > 30], restarted=True)


def counts_at(topic: str, sink: str, home: str, name: str) -> dict:
    """Hot readings counted per sensor in 10 s windows, filtered and counted where placement puts them."""
    document = hot_counts(topic, sink)
    document["name"] = name
    document["tasks"][2].pop("site")
    document["tasks"][3]["site"] = home
    return document


def test_a_copy_of_a_shared_window_starts_from_its_state_at_the_cut(manager_factory, kafka_bootstrap, topic_factory):
    """The window itself is shared (at P, for a dataflow at H3 and one at H2). When P -> H2 can no longer carry
    its counts, the dataflow at H2 gets copies of the filter and the window at H2; the window's copy, under a
    name of its own, starts from the shared window's state at the cut while the shared one runs on."""
    manager = manager_factory(trigger_s=0.5)
    manager.runtime.meter.every_s = 1e9
    urban = topic_factory("urban")
    at_h3, at_h2 = f"{urban}-h3", f"{urban}-h2"
    manager.set_wan(wan(urban, p_to_h2=50))
    pinned = counts_at(urban, at_h3, "H3", "counts-at-h3")
    pinned["tasks"][1]["site"] = pinned["tasks"][2]["site"] = "P"
    first = manager.submit(pinned)
    second = manager.submit(counts_at(urban, at_h2, "H2", "counts-at-h2"))
    shared = first.tasks["per_sensor"]
    assert second.tasks["per_sensor"] == shared and second.sites["per_sensor"] == "P"

    one, two = urban_records(0, 300), urban_records(300, 300)
    produce(kafka_bootstrap, urban, one)
    wait_windows(manager, kafka_bootstrap, at_h3, one)
    wait_windows(manager, kafka_bootstrap, at_h2, one)

    manager.set_wan(wan(urban, p_to_h2=0.3))  # the counts (0.4 Mbps estimated) no longer fit
    done = manager.replace(0.95)
    copy_of_window = manager.snapshot().dataflows[second.id].tasks["per_sensor"]
    assert copy_of_window != shared and manager.state.tasks[copy_of_window].site == "H2"
    assert done["hand_over"]["seeded_from"][copy_of_window] == shared, "seeded from the window that runs on"
    assert shared in manager.runtime.tasks and manager.state.dataflows[first.id].tasks == first.tasks

    produce(kafka_bootstrap, urban, two)
    wait_windows(manager, kafka_bootstrap, at_h3, one + two)
    wait_windows(manager, kafka_bootstrap, at_h2, one + two)  # the windows open at the cut counted on in the copy
