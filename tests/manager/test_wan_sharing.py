"""The manager with a WAN configuration: refused shares, their reasons, sites, unmerge and recovery."""

from __future__ import annotations

import copy
import json
import time

import pytest

import manager.replacement as replacement
from manager.exceptions import DeployFailed, SinkTopicTaken
from manager.service import Manager, task_wan_fields
from manager.store import StaleState
from runtime.exceptions import RuntimeFailure
from runtime.dryrun import DryRunRuntime
from scheduler.exceptions import PlacementImpossible
from tests.fixtures.dataflows import chain, source, stream, task
from tests.manager.wan_invariants import check_wan_state
from wan.exceptions import WanConfigInvalid, WanNotConfigured, WanSiteUnknown

pytestmark = pytest.mark.redis

# Stream "urban" (16 Mbps) originates at src, which cannot compute. P and H2 compute;
# P -> H2 has 5 Mbps, src -> P and src -> H2 100 Mbps: Sana's Figure 6 in small.
WAN = {
    "sites": [{"name": "src", "compute": False}, "P", "H2"],
    "links": [
        {"from": "src", "to": "P", "bandwidth_mbps": 100, "latency_ms": 10},
        {"from": "src", "to": "H2", "bandwidth_mbps": 100, "latency_ms": 30},
        {"from": "P", "to": "H2", "bandwidth_mbps": 5, "latency_ms": 20},
    ],
    "sources": {"urban": {"site": "src", "rate_mbps": 16}},
    "selectivity": {"filter": 0.5},
}


# ... and H3, reached from everywhere at 100 Mbps
THREE_SITES = {**WAN, "sites": [*WAN["sites"], "H3"],
               "links": WAN["links"] + [{"from": "src", "to": "H3", "bandwidth_mbps": 100, "latency_ms": 30},
                                        {"from": "P", "to": "H3", "bandwidth_mbps": 100, "latency_ms": 20},
                                        {"from": "H2", "to": "H3", "bandwidth_mbps": 100, "latency_ms": 20}]}


def hot(sink_topic: str, home: str, name: str) -> dict:
    sink = task("out", "sink", topic=sink_topic)
    sink["site"] = home
    return chain(source(), task("hot", "filter", expr="temp > 30"), sink, name=name)


@pytest.fixture
def manager(redis_client, state_prefix):
    made = Manager(redis_client, state_prefix, DryRunRuntime(redis_client, state_prefix))
    made.start()
    yield made


def test_without_a_wan_configuration_sharing_is_as_before(manager):
    first = manager.submit(hot("a", "P", "one"))
    second = manager.submit(hot("b", "H2", "two"))
    assert second.reused == ["src", "hot"] and second.not_shared == []
    assert second.to_dict()["sites"] == {"src": None, "hot": None, "out": "H2"}
    assert first.tasks["hot"] == second.tasks["hot"]
    with pytest.raises(WanNotConfigured, match="no WAN configuration"):
        manager.wan()


def test_a_share_the_link_cannot_carry_is_refused_and_explained(manager, redis_client, state_prefix):
    manager.set_wan(WAN)
    first = manager.submit(hot("a", "P", "one"))
    assert first.sites == {"src": "src", "hot": "P", "out": "P"}
    second = manager.submit(hot("b", "H2", "two"))
    assert second.reused == ["src"] and second.created == ["hot", "out"]
    assert second.sites == {"src": "src", "hot": "H2", "out": "H2"}
    assert second.tasks["hot"] != first.tasks["hot"]
    assert second.not_shared == [{
        "task": "hot",
        "running_task": second.tasks["hot"],
        "site": "H2",
        "equivalent": first.tasks["hot"],
        "equivalent_site": "P",
        "link": {"from": "P", "to": "H2"},
        "needed_mbps": 8.0,
        "available_mbps": 5.0,
        "reason": f"sharing {first.tasks['hot']} at P needs 8.000 Mbps of egress on P -> H2, which has 5.000 Mbps spare",
    }]
    assert second.placement["hot"]["rule"] == "wan"
    body = second.to_dict()
    assert body["not_shared"][0]["link"] == {"from": "P", "to": "H2"}
    state = manager.state
    fields = task_wan_fields(state, second.tasks["hot"])
    assert fields["equivalents"] == [{"id": first.tasks["hot"], "site": "P"}]
    assert fields["not_shared"][0]["candidate"] == first.tasks["hot"]
    assert task_wan_fields(state, first.tasks["hot"])["not_shared"] == []
    links = {(row["from"], row["to"]): row for row in manager.wan_links()["links"]}
    assert links[("src", "P")]["load_mbps"] == 16.0 and links[("src", "H2")]["load_mbps"] == 16.0
    assert links[("P", "H2")]["load_mbps"] == 0.0
    assert links[("src", "H2")]["streams"] == [{"producer": first.tasks["src"], "rate_mbps": 16.0, "measured_mbps": None,
                                                "consumers": [second.tasks["hot"]]}]
    assert links[("src", "H2")]["basis"] == "estimated" and manager.wan_links()["basis"] == "estimated"
    check_wan_state(state, {first.id: hot("a", "P", "one"), second.id: hot("b", "H2", "two")})
    # A restarted manager sees the same tasks, reasons and loads.
    again = Manager(redis_client, state_prefix, DryRunRuntime(redis_client, state_prefix))
    again.start()
    assert again.state.tasks == state.tasks and again.state.not_shared == state.not_shared
    assert again.state.link_load == state.link_load
    # Removing the first dataflow stops its filter; the second keeps its own.
    removed = manager.remove(first.id)
    assert set(removed.terminated) == {first.tasks["hot"], first.tasks["out"]}
    check_wan_state(manager.state, {second.id: hot("b", "H2", "two")})
    assert manager.state.by_signature[manager.state.tasks[second.tasks["hot"]].signature] == second.tasks["hot"]
    third = manager.submit(hot("c", "H2", "three"))
    assert third.reused == ["src", "hot"] and third.not_shared == []
    check_wan_state(manager.state, {second.id: hot("b", "H2", "two"), third.id: hot("c", "H2", "three")})


def test_a_refusal_that_would_press_the_wan_harder_is_overruled_and_reported(manager):
    """Every link thin: the copy at H2 would read the raw stream (16 Mbps) over src -> H2's 4, the share sends
    the filter's 8 Mbps over P -> H2's 4: the manager shares and says which refusals it overruled."""
    scarce = json.loads(json.dumps(WAN))
    scarce["links"] = [
        {"from": "src", "to": "P", "bandwidth_mbps": 10, "latency_ms": 10},
        {"from": "src", "to": "H2", "bandwidth_mbps": 4, "latency_ms": 30},
        {"from": "P", "to": "H2", "bandwidth_mbps": 4, "latency_ms": 20},
    ]
    manager.set_wan({**scarce, "hops": "backpressure"})
    first = manager.submit(hot("a", "P", "one"))
    second = manager.submit(hot("b", "H2", "two"))
    assert second.reused == ["src", "hot"] and second.not_shared == []
    assert second.tasks["hot"] == first.tasks["hot"]
    overruled = second.placement["hot"]["overruled"]
    assert [(item["kind"], item["link"], item["needed_mbps"], item["available_mbps"]) for item in overruled] == [
        ("IN-OP", {"from": "P", "to": "H2"}, 8.0, 4.0), ("IN", {"from": "P", "to": "H2"}, 8.0, 4.0)]
    assert second.to_dict()["placement"]["hot"]["overruled"] == overruled
    # why: by the paper's flow model (backpressure), taking the share delivers 16 Mbps of the sources to the
    # sinks, the refusal 8
    weighing = second.to_dict()["weighing"]
    assert (weighing["kept"], weighing["deciding"]) == ("every share", "delivered_mbps")
    assert (weighing["algorithm_1"]["delivered_mbps"], weighing["every_share"]["delivered_mbps"]) == (8.0, 16.0)
    # with buffered hops (the default) src -> P delivers 10 of the 16 Mbps to P either way; the share then sends
    # the filter's 5 over P -> H2 (4: 8 of the source's 16 reach H2), the refusal's copy reads the raw stream over
    # src -> H2 (4 of 16): 18 Mbps against 14, the same choice
    assert first.to_dict()["weighing"]["kept"] == "algorithm 1" and first.weighing["deciding"] is None, "nothing to share"
    check_wan_state(manager.state, {first.id: hot("a", "P", "one"), second.id: hot("b", "H2", "two")})
    manager.remove(second.id)
    manager.set_wan(scarce)
    assert "hops" not in manager.wan(), "the default is not written out"
    again = manager.submit(hot("b", "H2", "two"))
    weighed = again.to_dict()["weighing"]
    assert (weighed["kept"], weighed["algorithm_1"]["delivered_mbps"], weighed["every_share"]["delivered_mbps"]) == (
        "every share", 14.0, 18.0)
    check_wan_state(manager.state, {first.id: hot("a", "P", "one"), again.id: hot("b", "H2", "two")})



def test_the_configured_policy_plans_as_net_or_max_share_for_comparisons(manager):
    """``policy`` in the WAN configuration: NET gives each query its own reader and filter, Max-Share takes the
    share Algorithm 1 refuses (the first test's WAN: P -> H2 cannot carry the 8 Mbps filter output)."""
    manager.set_wan({**WAN, "policy": "net"})
    assert manager.wan()["policy"] == "net"
    first = manager.submit(hot("a", "P", "one"))
    second = manager.submit(hot("b", "H2", "two"))
    assert second.reused == [] and set(second.tasks.values()).isdisjoint(first.tasks.values())
    assert second.sites == {"src": "src", "hot": "H2", "out": "H2"}
    check_wan_state(manager.state, {first.id: hot("a", "P", "one"), second.id: hot("b", "H2", "two")})
    manager.remove(first.id)
    manager.remove(second.id)

    manager.set_wan({**WAN, "policy": "max-share"})
    first = manager.submit(hot("a", "P", "one"))
    second = manager.submit(hot("b", "H2", "two"))
    assert second.reused == ["src", "hot"] and second.not_shared == []
    check_wan_state(manager.state, {first.id: hot("a", "P", "one"), second.id: hot("b", "H2", "two")})
    with pytest.raises(WanConfigInvalid, match="policy"):
        manager.set_wan({**WAN, "policy": "greedy"})
    assert manager.wan()["policy"] == "max-share", "a refused configuration changes nothing"


class MeasuringRuntime(DryRunRuntime):
    """The dry-run runtime with a cost window, as the Spark runtime measures it: bytes/s each task wrote."""

    written: dict[str, float] = {}

    def task_costs(self) -> dict:
        return {"measured": True, "window_s": 30.0,
                "tasks": {task_id: {"kafka_bytes_per_s": rate} for task_id, rate in self.written.items()}}


def test_measured_traffic_replaces_the_estimates_in_the_links_and_in_the_decisions(redis_client, state_prefix):
    """The filter is estimated at 8 Mbps (P -> H2 has 5 spare: refused), but the runtime measures it writing
    2 Mbps towards H3: a query wanting it at H2 shares it, and /wan/links shows the measured load."""
    three = json.loads(json.dumps(THREE_SITES))
    first_document = hot("a", "H3", "one")
    first_document["tasks"][1]["site"] = "P"
    for prefix, written in ((f"{state_prefix}:control", {}), (state_prefix, None)):
        runtime = MeasuringRuntime(redis_client, prefix)
        runtime.written = {}
        made = Manager(redis_client, prefix, runtime)
        made.start()
        made.set_wan(three)
        first = made.submit(first_document)
        assert first.sites == {"src": "src", "hot": "P", "out": "H3"}
        if written is not None:  # the control: with estimates only, the share is refused
            control = made.submit(hot("b", "H2", "two"))
            assert control.reused == ["src"] and control.not_shared[0]["needed_mbps"] == 8.0
            for key in redis_client.scan_iter(f"{prefix}:*"):
                redis_client.delete(key)
    estimated = {(row["from"], row["to"]): row for row in made.wan_links()["links"]}
    assert estimated[("P", "H3")]["load_mbps"] == 8.0 and estimated[("P", "H3")]["basis"] == "estimated"

    runtime.written = {first.tasks["hot"]: 250_000.0}  # 2 Mbps (value bytes per second)
    links = made.wan_links()
    measured = {(row["from"], row["to"]): row for row in links["links"]}
    assert measured[("P", "H3")]["load_mbps"] == 2.0 and measured[("P", "H3")]["estimated_load_mbps"] == 8.0
    assert measured[("P", "H3")]["basis"] == "measured" and measured[("src", "P")]["basis"] == "estimated"
    assert measured[("P", "H3")]["streams"][0]["measured_mbps"] == 2.0 and links["basis"] == "mixed"

    second = made.submit(hot("b", "H2", "two"))
    assert second.reused == ["src", "hot"] and second.not_shared == []
    assert second.placement["hot"]["rule"] == "IN-OP"
    runtime.written = {}
    third = made.submit(hot("c", "H2", "three"))  # nothing measured: the estimate stands, P -> H2 cannot take 8
    # The running filter already reaches H2, so Algorithm 1 shares it anyway; but with the estimate P -> H2 is
    # over capacity (8 on 5), and the private plan (its own reader of urban, its own filter at H2 over
    # src -> H2) delivers more to the sinks in all, by more than running them again costs: it is kept.
    assert third.reused == [] and third.sites["hot"] == "H2" and third.weighing["kept"] == "private"
    check_wan_state(made.state, {first.id: first_document, second.id: hot("b", "H2", "two"), third.id: hot("c", "H2", "three")})


def test_replacement_plans_to_unshare_what_a_hot_link_no_longer_carries(redis_client, state_prefix):
    planned_unsharing(redis_client, state_prefix)


def planned_unsharing(redis_client, state_prefix):
    """The filter at P is shared towards H2 while the runtime measures it at 2 Mbps (P -> H2 has 5). When it is
    measured at 6 Mbps the link is over capacity: re-placement would give the dataflow at H2 its own filter at
    H2 (reading the raw stream over src -> H2), and leave the other dataflow alone. Nothing changes meanwhile."""
    three = json.loads(json.dumps(THREE_SITES))
    runtime = MeasuringRuntime(redis_client, state_prefix)
    made = Manager(redis_client, state_prefix, runtime)
    made.start()
    made.set_wan(three)
    first_document = hot("a", "H3", "one")
    first_document["tasks"][1]["site"] = "P"
    first = made.submit(first_document)
    runtime.written = {first.tasks["hot"]: 250_000.0}  # 2 Mbps: the share towards H2 fits
    second = made.submit(hot("b", "H2", "two"))
    assert second.tasks["hot"] == first.tasks["hot"]
    calm = made.replacement(0.95)
    assert calm["hot_links"] == [] and calm["dataflows"] == [] and calm["executed"] is False

    runtime.written = {first.tasks["hot"]: 750_000.0}  # 6 Mbps over P -> H2's 5
    before = dict(made.state.tasks)
    plan = made.replacement(0.95)
    assert [(row["from"], row["to"], row["utilization"]) for row in plan["hot_links"]] == [("P", "H2", 1.2)]
    assert plan["basis"] == "mixed"
    (entry,) = plan["dataflows"]
    assert (entry["dataflow"], entry["links"]) == (second.id, ["P -> H2"])
    (move,) = entry["moves"]
    assert move["task"] == "hot"
    assert move["from"] == {"running_task": first.tasks["hot"], "site": "P", "shared": True}
    assert move["to"]["site"] == "H2" and move["to"]["new"] is True
    assert entry["not_shared"][0]["needed_mbps"] == 6.0 and entry["not_shared"][0]["available_mbps"] == 5.0
    assert made.state.tasks == before  # a plan only: nothing started or stopped
    assert made.replacement(1.5)["dataflows"] == []  # 1.2 is below this threshold
    return made, runtime, first, second, first_document


def test_replacement_carried_out_unshares_over_the_hot_link_and_keeps_the_dataflow_ids(redis_client, state_prefix):
    made, runtime, first, second, first_document = planned_unsharing(redis_client, state_prefix)
    planned = made.replacement(0.95)
    done = made.replace(0.95)
    assert done["executed"] is True and done["dataflows"] == planned["dataflows"]
    copy_at_h2 = planned["dataflows"][0]["moves"][0]["to"]["running_task"]
    # the dataflow at H2 gets its own filter (seeded from the shared one's state) and a sink reading it
    assert copy_at_h2 in done["start"] and done["hand_over"]["seeded"]
    assert set(done["hand_over"]["seeded"]) <= set(done["start"])
    assert first.tasks["hot"] not in done["stop"], "the other dataflow still uses the filter at P"
    assert set(made.state.dataflows) == {first.id, second.id}
    moved = made.state.dataflows[second.id]
    assert moved.tasks["hot"] == copy_at_h2 and made.state.tasks[copy_at_h2].site == "H2"
    assert made.state.dataflows[first.id].tasks == first.tasks
    check_wan_state(made.state, {first.id: first_document, second.id: hot("b", "H2", "two")})
    assert set(runtime.deployed()) == set(made.state.tasks)
    assert runtime.log(1)[0]["reason"].startswith("re-place 1 dataflow(s) over P -> H2")
    # the state committed to Redis is the one in memory: a manager started on it sees the same
    again = Manager(redis_client, state_prefix, MeasuringRuntime(redis_client, state_prefix))
    again.start()
    assert again.state.tasks == made.state.tasks and again.state.dataflows[second.id].tasks == moved.tasks
    assert again.state.link_load == made.state.link_load
    # P -> H2 carries nothing now: nothing is hot, a second round changes nothing
    quiet = made.replace(0.95)
    assert (quiet["hot_links"], quiet["start"], quiet["stop"], quiet["executed"]) == ([], [], [], True)
    assert made.remove(second.id).terminated  # it is removed like any dataflow, by the id it always had


def two_over_the_hot_link(redis_client, state_prefix, hops: str = "buffered"):
    """As :func:`planned_unsharing`, with a third dataflow at H2 sharing the filter at P too (P -> H2 at 1.2)."""
    runtime = MeasuringRuntime(redis_client, state_prefix)
    made = Manager(redis_client, state_prefix, runtime)
    made.start()
    made.set_wan({**json.loads(json.dumps(THREE_SITES)), "hops": hops})
    first_document = hot("a", "H3", "one")
    first_document["tasks"][1]["site"] = "P"
    first = made.submit(first_document)
    runtime.written = {first.tasks["hot"]: 250_000.0}
    second, third = made.submit(hot("b", "H2", "two")), made.submit(hot("c", "H2", "three"))
    assert second.tasks["hot"] == third.tasks["hot"] == first.tasks["hot"]
    runtime.written = {first.tasks["hot"]: 750_000.0}
    return made, first, second, third


def test_the_dataflows_over_a_hot_link_are_planned_again_together(redis_client, state_prefix):
    """Both dataflows at H2 come off together: the first planned again gets a filter at H2 (refused at P, whose
    link to H2 is over capacity), the second shares it there. Planned one at a time, each would see the other's
    old load still on P -> H2."""
    made, first, second, third = two_over_the_hot_link(redis_client, state_prefix)
    plan = made.replacement(0.95)
    rows = {row["dataflow"]: row for row in plan["dataflows"]}
    assert set(rows) == {second.id, third.id} and plan["planned"] == "together"
    (moved_second,), (moved_third,) = rows[second.id]["moves"], rows[third.id]["moves"]
    assert moved_second["to"]["site"] == moved_third["to"]["site"] == "H2"
    assert moved_second["to"]["running_task"] == moved_third["to"]["running_task"], "one filter at H2 for both"
    copy_at_h2 = moved_second["to"]["running_task"]
    assert plan["start"].count(copy_at_h2) == 1 and first.tasks["hot"] not in plan["stop"]


def failing_for(dataflow_id: str, task_name: str):
    """``plan_merge`` that cannot place ``dataflow_id`` (as if no site could take ``task_name``)."""
    real = replacement.plan_merge

    def plan_merge(state, parsed, submitted_at, **kwargs):
        if kwargs.get("dataflow_id") == dataflow_id:
            raise PlacementImpossible(f"no compute site can take task {task_name!r}", culprit={"task": task_name})
        return real(state, parsed, submitted_at, **kwargs)

    return plan_merge


def test_a_dataflow_that_cannot_be_planned_again_stays_as_it_is(redis_client, state_prefix, monkeypatch):
    """Planning the third dataflow again fails (no site could take a task): it is reported with its error and
    left as it is, and the second is planned again without it."""
    made, first, second, third = two_over_the_hot_link(redis_client, state_prefix)
    monkeypatch.setattr(replacement, "plan_merge", failing_for(third.id, "hot"))
    before = dict(made.state.tasks)
    plan = made.replacement(0.95)
    rows = {row["dataflow"]: row for row in plan["dataflows"]}
    assert set(rows) == {second.id, third.id} and plan["planned"] == "together" and plan["left_out"] == [third.id]
    assert rows[third.id]["moves"] == [] and rows[third.id]["error"]["culprit"] == {"task": "hot"}
    # The second gets its private plan: its own reader of urban and its own filter at H2, away from the
    # saturated P -> H2, whose backpressure holds back the shared reader (and every query reading it).
    moves = {move["task"]: move for move in rows[second.id]["moves"]}
    assert "error" not in rows[second.id] and moves["hot"]["to"]["site"] == "H2" and moves["hot"]["to"]["new"] is True
    assert first.tasks["hot"] not in plan["stop"] and third.tasks["hot"] not in plan["stop"]
    assert made.state.tasks == before  # a plan only


@pytest.mark.parametrize("hops", ["buffered", "backpressure"])
def test_the_others_are_still_planned_together_when_one_cannot_be(redis_client, state_prefix, monkeypatch, hops):
    """A fourth dataflow over P -> H2 (its own filter pinned at P) cannot be planned again: it stays as it is,
    and the second and third still come off P -> H2 together."""
    made, first, second, third = two_over_the_hot_link(redis_client, state_prefix, hops)
    sink, cold = task("out", "sink", topic="d"), task("cold", "filter", expr="temp < -30")
    sink["site"], cold["site"] = "H2", "P"
    fourth = made.submit(chain(source(), cold, sink, name="four"))
    monkeypatch.setattr(replacement, "plan_merge", failing_for(fourth.id, "cold"))
    plan = made.replacement(0.95)
    assert [row["dataflow"] for row in plan["dataflows"]] == [second.id, third.id, fourth.id], "submission order"
    assert plan["planned"] == "together" and plan["left_out"] == [fourth.id]
    rows = {row["dataflow"]: row for row in plan["dataflows"]}
    assert rows[fourth.id]["moves"] == [] and rows[fourth.id]["error"]["culprit"] == {"task": "cold"}
    moved_second = {move["task"]: move for move in rows[second.id]["moves"]}
    moved_third = {move["task"]: move for move in rows[third.id]["moves"]}
    assert moved_second["hot"]["to"]["site"] == "H2" and moved_third["hot"]["to"]["site"] != "P"
    if hops == "buffered":  # the fourth's stream keeps P -> H2 saturated, which slows only what reads it there:
        # both move to one new filter at H2 reading the shared reader of urban
        assert set(moved_second) == set(moved_third) == {"hot"}
        assert moved_second["hot"]["to"]["running_task"] == moved_third["hot"]["to"]["running_task"]
    else:  # with backpressure that saturation would hold back the shared reader: each gets a reader of its own
        assert moved_second["src"]["to"]["new"] is True and moved_third["src"]["to"]["new"] is True
    assert fourth.tasks["cold"] not in plan["stop"] and first.tasks["hot"] not in plan["stop"]


def test_with_bandwidth_to_spare_every_equivalent_task_is_shared(manager):
    roomy = json.loads(json.dumps(WAN))
    roomy["links"][2]["bandwidth_mbps"] = 50
    manager.set_wan(roomy)
    first = manager.submit(hot("a", "P", "one"))
    second = manager.submit(hot("b", "H2", "two"))
    assert second.reused == ["src", "hot"] and second.not_shared == []
    assert second.sites["hot"] == "P"
    assert manager.wan_links()["total_load_mbps"] == 16.0 + 8.0
    assert first.tasks["hot"] == second.tasks["hot"]


def test_an_identical_dataflow_reuses_the_running_sink_whatever_the_bandwidth(manager):
    manager.set_wan(WAN)
    manager.submit(hot("a", "P", "one"))
    duplicate = hot("a", "H2", "one-again")  # same computation, same topic: its output already exists
    result = manager.submit(duplicate)
    assert result.created == [] and result.not_shared == []


class FailingHandOver(MeasuringRuntime):
    def hand_over(self, change, seeds):
        raise RuntimeFailure("query q9 did not reach the cut within 120 s")


def test_a_replacement_the_runtime_cannot_carry_out_changes_nothing(redis_client, state_prefix):
    made, _, first, second, _ = planned_unsharing(redis_client, state_prefix)
    failing = FailingHandOver(redis_client, state_prefix)
    failing.written = {first.tasks["hot"]: 750_000.0}
    made.runtime = failing
    before, version = copy.deepcopy(made.state), made.state.version
    with pytest.raises(DeployFailed, match="did not reach the cut") as caught:
        made.replace(0.95)
    assert caught.value.culprit == {"dataflows": [second.id]}
    assert made.snapshot().version == version and made.state.tasks == before.tasks
    assert made.state.dataflows[second.id].tasks == second.tasks
    assert made.store.read_pending() is None, "the pending marker is cleared: a restart has nothing to undo"
    assert not redis_client.keys(f"{state_prefix}:staged:*"), "nor a staged state to complete"


def test_a_replacement_setting_re_places_on_its_own_when_a_link_runs_hot(redis_client, state_prefix):
    """With ``replacement`` in the WAN configuration, the manager watches the links and re-places by itself."""
    runtime = MeasuringRuntime(redis_client, state_prefix)
    made = Manager(redis_client, state_prefix, runtime)
    made.start()
    three = json.loads(json.dumps(THREE_SITES))
    made.set_wan({**three, "replacement": {"utilization": 0.9, "check_every_s": 0.05}})
    assert made.wan()["replacement"] == {"utilization": 0.9, "check_every_s": 0.05}
    document = hot("a", "H3", "one")
    document["tasks"][1]["site"] = "P"
    first = made.submit(document)
    runtime.written = {first.tasks["hot"]: 250_000.0}
    second = made.submit(hot("b", "H2", "two"))
    assert second.tasks["hot"] == first.tasks["hot"]
    runtime.written = {first.tasks["hot"]: 750_000.0}  # 6 Mbps over P -> H2's 5: the watcher acts
    try:
        deadline = time.monotonic() + 30
        while made.last_replacement is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert made.last_replacement is not None, "the watcher re-placed within 30 s"
        assert made.last_replacement["dataflows"][0]["dataflow"] == second.id
        assert made.snapshot().tasks[made.state.dataflows[second.id].tasks["hot"]].site == "H2"
        assert made.wan()["last_replacement"]["start"] == made.last_replacement["start"]
        made.set_wan(three)  # without ``replacement`` the watcher ends
        made.link_watch.join(5)
        assert not made.link_watch.is_alive() and "last_replacement" not in made.wan()
    finally:
        made.close()


def test_a_failed_commit_hands_the_work_back(redis_client, state_prefix, monkeypatch):
    made, runtime, first, second, _ = planned_unsharing(redis_client, state_prefix)
    before = copy.deepcopy(made.state)

    def stale(after, planned_against):
        raise StaleState("the state changed while committing")

    monkeypatch.setattr(made.store, "commit_state", stale)
    with pytest.raises(DeployFailed, match="the state changed underneath"):
        made.replace(0.95)
    assert runtime.log(1)[0]["reason"].startswith("undo re-place 1 dataflow(s)")
    assert runtime.deployed() == {task_id: spec.fragment for task_id, spec in before.tasks.items()}
    assert made.snapshot().tasks == before.tasks and made.state.dataflows[second.id].tasks == second.tasks
    assert made.store.read_pending() is None and not redis_client.keys(f"{state_prefix}:staged:*")


class Died(BaseException):
    """The process died here (a fail point's kill, without killing the test)."""


def die_at(point: str):
    def fail_point(name):
        if name == point:
            raise Died(name)
    return fail_point


@pytest.mark.parametrize("point", ["manager.replace.deployed", "manager.replace.staged"])
def test_a_manager_dead_after_the_hand_over_completes_the_replacement_on_restart(redis_client, state_prefix,
                                                                               monkeypatch, point):
    """Dead right after the runtime handed the work over (``deployed``: before the pending marker says so) or
    once it says so (``staged``): the runtime runs the state after it, which the restart commits. Undone, the
    moved work would start again from the topics' ends and lose what arrived meanwhile."""
    made, runtime, first, second, first_document = planned_unsharing(redis_client, state_prefix)
    planned = made.replacement(0.95)
    monkeypatch.setattr("manager.wan_control.fail_point", die_at(point))
    with pytest.raises(Died):
        made.replace(0.95)
    assert made.store.read_pending()["handed_over"] is (point == "manager.replace.staged")
    assert made.store.version() == made.state.version
    assert redis_client.keys(f"{state_prefix}:staged:*"), "the state after the hand-over waits beside the state"
    monkeypatch.undo()
    restarted = Manager(redis_client, state_prefix, runtime)
    restarted.start()
    copy_at_h2 = planned["dataflows"][0]["moves"][0]["to"]["running_task"]
    assert restarted.state.dataflows[second.id].tasks["hot"] == copy_at_h2
    check_wan_state(restarted.state, {first.id: first_document, second.id: hot("b", "H2", "two")})
    assert runtime.deployed() == {task_id: spec.fragment for task_id, spec in restarted.state.tasks.items()}
    assert restarted.store.read_pending() is None and not redis_client.keys(f"{state_prefix}:staged:*")


def test_a_manager_dead_before_the_hand_over_undoes_the_replacement_on_restart(redis_client, state_prefix,
                                                                             monkeypatch):
    made, runtime, first, second, _ = planned_unsharing(redis_client, state_prefix)
    before = copy.deepcopy(made.state)
    monkeypatch.setattr("manager.wan_control.fail_point", die_at("manager.replace.pending"))
    with pytest.raises(Died):
        made.replace(0.95)
    assert made.store.read_pending()["handed_over"] is False and redis_client.keys(f"{state_prefix}:staged:*")
    monkeypatch.undo()
    restarted = Manager(redis_client, state_prefix, runtime)
    restarted.start()
    assert restarted.state.tasks == before.tasks and restarted.state.dataflows[second.id].tasks == second.tasks
    assert runtime.deployed() == {task_id: spec.fragment for task_id, spec in before.tasks.items()}
    assert restarted.store.read_pending() is None and not redis_client.keys(f"{state_prefix}:staged:*")


def test_wan_errors_name_the_culprit(manager):
    with pytest.raises(WanConfigInvalid, match=r"links\[0\]\.to: unknown site 'Q'"):
        manager.set_wan({"sites": ["P"], "links": [{"from": "P", "to": "Q", "bandwidth_mbps": 1, "latency_ms": 1}]})
    manager.set_wan(WAN)
    with pytest.raises(WanSiteUnknown, match="source 'src' reads topic 'grid', whose site is unknown"):
        manager.submit(chain(source(topic="grid"), task("out", "sink", topic="x")))
    bad = hot("a", "P", "one")
    bad["tasks"][1]["site"] = "src"
    with pytest.raises(WanSiteUnknown, match=r"task 'hot' \(filter\) is placed at 'src', where nothing can compute"):
        manager.submit(bad)
    moon = hot("a", "moon", "one")
    with pytest.raises(WanSiteUnknown, match="task 'out' names site 'moon'"):
        manager.submit(moon)


def test_the_configuration_file_is_applied_at_start(redis_client, state_prefix, tmp_path):
    path = tmp_path / "wan.json"
    path.write_text(json.dumps(WAN))
    made = Manager(redis_client, state_prefix, DryRunRuntime(redis_client, state_prefix), wan_config=path)
    made.start()
    assert made.wan()["configured"] is True
    assert made.state.wan.link("P", "H2").bandwidth_mbps == 5
    made.set_wan(None)
    with pytest.raises(WanNotConfigured):
        made.wan()


def test_a_task_whose_input_has_no_site_does_not_break_the_weighing(manager):
    """A union of two topics ran before any WAN configuration; the configuration names only one topic's origin,
    so the other source has no site, and the union's input from it is unknown to the optimizer. Later submits
    are planned (the flow model leaves the unknown input out) instead of failing."""
    union = {"name": "both", "tasks": [source("a", "urban"), source("b", "other"), task("u", "union"),
                                       {**task("out", "sink", topic="both-out"), "site": "P"}],
             "streams": [{"from": "a", "to": "u"}, {"from": "b", "to": "u"}, {"from": "u", "to": "out"}]}
    manager.submit(union)
    manager.set_wan(WAN)
    assert any(manager.state.tasks[task_id].site is None for task_id in manager.state.tasks), "a task without a site"
    later = manager.submit(hot("c", "H2", "later"))
    assert later.sites["out"] == "H2"


# Grid (4 Mbps) at asia, urban (10 Mbps) at us; the compute sites joined by 2 Mbps links.
APART = {  # the paper's backpressure plans the private dataflow apart; buffered hops (the default) share its reader
    "hops": "backpressure",
    "sites": [{"name": "eu", "compute": False}, "us", "asia", "sa"],
    "links": [{"from": "eu", "to": site, "bandwidth_mbps": 200, "latency_ms": 5} for site in ("us", "asia", "sa")]
    + [{"from": a, "to": b, "bandwidth_mbps": 2, "latency_ms": 5} for a, b in (("us", "asia"), ("us", "sa"), ("asia", "sa"))],
    "sources": {"urban": {"site": "us", "rate_mbps": 10}, "grid": {"site": "asia", "rate_mbps": 4}},
}
COUNT = {"keys": ["sensor"], "time_column": "ts", "window": "10 seconds", "watermark": "5 seconds",
         "aggregates": {"n": "count(*)"}}


def _sink(task_id: str, topic: str, site: str | None = None) -> dict:
    made = task(task_id, "sink", topic=topic)
    if site:
        made["site"] = site
    return made


def _shared_and_private() -> tuple[dict, dict]:
    """Two dataflows reading grid and urban; the second also ships urban to sa over a thin link."""
    shared = {"name": "shared", "tasks": [source("g", "grid"), task("w", "window_aggregate", **COUNT),
                                          _sink("out", "grid-counts"), source("u", "urban"), _sink("near", "urban-near")],
              "streams": [stream("g", "w"), stream("w", "out"), stream("u", "near")]}
    private = {"name": "private", "tasks": [source("g", "grid"), source("u", "urban"), _sink("raw", "grid-raw"),
                                            _sink("far", "urban-far", "sa")],
               "streams": [stream("g", "raw"), stream("u", "far")]}
    return shared, private


def _apart(manager) -> dict[str, dict]:
    """Grid's reader runs twice at asia: once shared (under a window), once private to a dataflow that also ships
    urban to sa over a thin link (sharing urban's reader with it would hold the other back: planned apart)."""
    manager.set_wan(APART)
    submitted = {manager.submit(document).id: document for document in _shared_and_private()}
    readers = sorted(t for t, spec in manager.state.tasks.items() if spec.type == "source" and spec.site == "asia")
    assert len(readers) == 2, readers
    return submitted


def test_with_buffered_hops_the_default_the_reader_backpressure_would_copy_is_shared(manager):
    """The private dataflow ships urban to sa over a thin link. With backpressure that throttle would hold back
    urban's reader for the other dataflow too, so it gets a reader of its own (and grid's is copied with it:
    :func:`_apart`); with buffered hops only the crossing to sa lags, and one reader of each serves both."""
    manager.set_wan({key: value for key, value in APART.items() if key != "hops"})  # the default: buffered
    assert "hops" not in manager.wan()
    submitted = {manager.submit(document).id: document for document in _shared_and_private()}
    readers = sorted(spec.config["topic"] for spec in manager.state.tasks.values() if spec.type == "source")
    assert readers == ["grid", "urban"]
    check_wan_state(manager.state, submitted)


def test_one_task_two_reused_sinks_reach_through_different_instances_is_refused(manager):
    submitted = _apart(manager)
    both = {"name": "both", "tasks": [source("g", "grid"), task("w", "window_aggregate", **COUNT),
                                      _sink("out", "grid-counts"), _sink("raw", "grid-raw")],
            "streams": [stream("g", "w"), stream("w", "out"), stream("g", "raw")]}
    before = copy.deepcopy(manager.state.tasks)
    with pytest.raises(SinkTopicTaken) as refused:
        manager.submit(both)
    assert refused.value.culprit == {"task": "raw", "field": "config.topic"} or \
        refused.value.culprit == {"task": "out", "field": "config.topic"}
    assert "'g'" in str(refused.value) and "separate dataflows" in str(refused.value)
    assert manager.state.tasks == before and set(manager.state.dataflows) == set(submitted)
    check_wan_state(manager.state, submitted)


def test_equal_tasks_forced_onto_different_instances_keep_a_vertex_each(manager):
    """The same dataflow with grid read twice: each sink reuses the chain writing its topic, and each copy of the
    reader maps onto the instance that chain reads (de-duplicated, they could serve only one)."""
    submitted = _apart(manager)
    twice = {"name": "twice", "tasks": [source("g", "grid"), source("g2", "grid"),
                                        task("w", "window_aggregate", **COUNT), _sink("out", "grid-counts"),
                                        _sink("raw", "grid-raw")],
             "streams": [stream("g", "w"), stream("w", "out"), stream("g2", "raw")]}
    result = manager.submit(twice)
    submitted[result.id] = twice
    check_wan_state(manager.state, submitted)
    record = manager.state.dataflows[result.id].tasks
    assert record["g"] != record["g2"] and not result.created


def test_a_private_plan_shares_what_reads_only_the_chain_a_running_sink_forces_on_it(manager):
    """Urban's reader is held back by a thin link, so each later dataflow reading urban is planned apart; its
    taxi reader is the running one (its raw sink equals a running sink), and the filter over that reader is the
    running filter too: a private copy reading the same stream at the same site would gain nothing."""
    manager.set_wan({**APART, "sources": {**APART["sources"], "taxi": {"site": "eu", "rate_mbps": 20}}})

    def apart(name: str) -> dict:
        return {"name": name, "tasks": [source("t", "taxi"), _sink("raw", "taxi-raw"),
                                        task("f", "filter", expr="temp > 10"), _sink("hot", f"{name}-hot"),
                                        source("u", "urban"), _sink("near", f"{name}-urban")],
                "streams": [stream("t", "raw"), stream("t", "f"), stream("f", "hot"), stream("u", "near")]}

    submitted = {}
    for document in (chain(source("u", "urban"), _sink("k", "far", "asia"), name="far"), apart("b"), apart("c")):
        submitted[manager.submit(document).id] = document
    check_wan_state(manager.state, submitted)
    b, c = (manager.state.dataflows[dataflow_id].tasks for dataflow_id in sorted(submitted)[1:])
    assert b["u"] != c["u"] and b["f"] == c["f"]  # planned apart, yet one filter over the one taxi reader
