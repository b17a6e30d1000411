"""What one tenant learns of another: nothing but aggregate counts (api/visibility.py).

Two users, alice and bob, and the admin ops share one service (dry-run
runtime, real Redis). Every answer bob gets is checked to name nothing of
alice's: not her name, not her dataflows' ids, not that she runs what he runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.fixtures.dataflows import urban_etl
from tests.manager.test_wan_sharing import WAN, hot
from tests.api.clients import bearer, write_tokens

pytestmark = pytest.mark.redis

TOKENS = {"alice": ("user", "alice-token"), "bob": ("user", "bob-token"), "ops": ("admin", "ops-token")}


def _tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path, TOKENS)


def _as(name: str) -> dict[str, str]:
    return bearer(TOKENS, name)


@pytest.fixture
def service(settings_factory, tmp_path) -> Iterator[TestClient]:
    with TestClient(create_app(settings_factory(tokens_file=_tokens_file(tmp_path)))) as client:
        yield client


def _names_nothing_of_alice(answer: httpx.Response, her_dataflows: list[str]) -> None:
    text = answer.text
    assert not re.search(r"\balice\b", text), text
    for flow_id in her_dataflows:
        assert not re.search(rf"\b{re.escape(flow_id)}\b", text), (flow_id, text)


def test_a_user_is_told_only_of_their_own_work_reused(service):
    alice = service.post("/dataflows", json=urban_etl("alice.a"), headers=_as("alice")).json()
    bob = service.post("/dataflows", json=urban_etl("bob.b"), headers=_as("bob"))
    assert bob.status_code == 201, bob.text
    _names_nothing_of_alice(bob, [alice["id"]])
    answer = bob.json()
    assert (answer["reused"], answer["created"]) == ([], ["src", "hot", "proj", "out"])  # alice's are not his
    assert answer["tasks"]["hot"] == alice["tasks"]["hot"]  # though they run once
    again = service.post("/dataflows", json=urban_etl("bob.c"), headers=_as("bob")).json()
    assert (again["reused"], again["created"]) == (["src", "hot", "proj"], ["out"])  # his own first dataflow's
    on_behalf = service.post("/dataflows", json={**urban_etl("carol.x"), "owner": "carol"}, headers=_as("ops")).json()
    assert on_behalf["reused"] == ["src", "hot", "proj"]  # an admin sees everything

    stats = service.get("/stats", headers=_as("bob"))
    _names_nothing_of_alice(stats, [alice["id"]])
    assert stats.json()["submitted_dataflows"] == 4  # counts of everyone's work stay: they are aggregates
    assert [flow["id"] for flow in service.get("/dataflows", headers=_as("bob")).json()["dataflows"]] == [
        answer["id"], again["id"]]


def test_another_owners_dataflow_answers_exactly_as_a_missing_one(service):
    alice = service.post("/dataflows", json=urban_etl("alice.a"), headers=_as("alice")).json()
    for method, suffix in (("GET", ""), ("GET", "/cost"), ("DELETE", "")):
        hers = service.request(method, f"/dataflows/{alice['id']}{suffix}", headers=_as("bob"))
        missing = service.request(method, f"/dataflows/df-404{suffix}", headers=_as("bob"))
        assert hers.status_code == missing.status_code == 404, (method, suffix)
        assert hers.json() == json.loads(missing.text.replace("df-404", alice["id"])), (method, suffix)
        assert dict(hers.headers) == {**missing.headers, "content-length": hers.headers["content-length"]}
        _names_nothing_of_alice(hers, [])
    assert service.get(f"/dataflows/{alice['id']}", headers=_as("alice")).status_code == 200  # nothing was removed


def test_costs_and_removals_count_no_sharers(service):
    alice = service.post("/dataflows", json=urban_etl("alice.a"), headers=_as("alice")).json()
    bob = service.post("/dataflows", json=urban_etl("bob.b"), headers=_as("bob")).json()
    cost = service.get(f"/dataflows/{bob['id']}/cost", headers=_as("bob"))
    assert cost.status_code == 200, cost.text
    _names_nothing_of_alice(cost, [alice["id"]])
    assert {(row["users"], row["share"]) for row in cost.json()["tasks"]} == {(None, None)}
    admin_view = service.get(f"/dataflows/{bob['id']}/cost", headers=_as("ops")).json()
    assert sorted(row["users"] for row in admin_view["tasks"]) == [1, 2, 2, 2]

    removed = service.delete(f"/dataflows/{bob['id']}", headers=_as("bob"))
    _names_nothing_of_alice(removed, [alice["id"]])
    # from bob's point of view all four stopped; only his sink really did (alice's dataflow uses the rest)
    assert removed.json() == {"id": bob["id"], "terminated": sorted(bob["tasks"].values())}
    assert service.get("/stats", headers=_as("ops")).json()["running_tasks"] == 4
    # an admin's answer says what really stopped
    again = service.post("/dataflows", json=urban_etl("bob.b"), headers=_as("bob")).json()
    assert service.delete(f"/dataflows/{again['id']}", headers=_as("ops")).json()["terminated"] == [again["tasks"]["out"]]


def test_a_topic_another_owner_writes_is_refused_without_naming_them(service):
    # an admin may put alice's dataflow on any topic, here one in bob's namespace
    alice = service.post("/dataflows", json={**urban_etl("bob.alerts", threshold=30), "owner": "alice"},
                         headers=_as("ops")).json()
    refused = service.post("/dataflows", json=urban_etl("bob.alerts", threshold=35), headers=_as("bob"))
    assert refused.status_code == 409 and refused.json()["code"] == "SINK_TOPIC_TAKEN"
    assert refused.json()["detail"] == ("sink 'out' writes topic 'bob.alerts', which a running dataflow of another "
                                        "owner already writes; a topic takes the writers of one owner")
    _names_nothing_of_alice(refused, [alice["id"]])


def test_wan_refusals_and_placements_of_others_are_left_out(service):
    assert service.put("/wan", json=WAN, headers=_as("ops")).status_code == 200
    alice = service.post("/dataflows", json=hot("alice.a", "P", "one"), headers=_as("alice")).json()
    bob = service.post("/dataflows", json=hot("bob.b", "H2", "two"), headers=_as("bob"))
    _names_nothing_of_alice(bob, [alice["id"]])
    answer = bob.json()
    # alice's filter at P was not shared for lack of bandwidth: that she runs it is hers to know
    assert (answer["not_shared"], answer["reused"]) == ([], [])
    assert (answer["placement"], answer["weighing"]) == ({}, None)  # they weigh every share, alice's too
    running = [task for dag in service.get("/running", headers=_as("ops")).json()["dags"] for task in dag["tasks"]]
    assert [task["id"] for task in running if task["not_shared"]] == [answer["tasks"]["hot"]]  # it was refused

    # bob's own filter at P, not shared at H2 for lack of bandwidth: that is his to know
    own_p, own_h2 = hot("bob.c", "P", "three"), hot("bob.d", "H2", "four")
    for document in (own_p, own_h2):  # contained in no running filter (temp > 40 would read bob's temp > 30 at H2)
        document["tasks"][1]["config"]["expr"] = "temp < 10"
    at_p = service.post("/dataflows", json=own_p, headers=_as("bob")).json()
    at_h2 = service.post("/dataflows", json=own_h2, headers=_as("bob")).json()
    assert (at_p["reused"], at_h2["reused"]) == (["src"], ["src"])  # the source his first dataflow reads
    assert [(row["task"], row["equivalent"], row["link"]) for row in at_h2["not_shared"]] == [
        ("hot", at_p["tasks"]["hot"], {"from": "P", "to": "H2"})]


def test_limits_name_no_other_owner(settings_factory, tmp_path):
    settings = settings_factory(tokens_file=_tokens_file(tmp_path), max_running_tasks=5, max_dataflows_per_owner=1)
    with TestClient(create_app(settings)) as service:
        alice = service.post("/dataflows", json=urban_etl("alice.a"), headers=_as("alice")).json()
        full = service.post("/dataflows", json=urban_etl("bob.b", threshold=35), headers=_as("bob"))
        assert (full.status_code, full.json()["code"], full.headers["retry-after"]) == (503, "SERVICE_FULL", "30")
        assert full.json()["detail"] == ("the service runs 4 tasks and this dataflow needs 3 more; at most 5 "
                                         "(SANA_MAX_RUNNING_TASKS)")
        _names_nothing_of_alice(full, [alice["id"]])
        assert service.post("/dataflows", json=urban_etl("bob.b"), headers=_as("bob")).status_code == 201
        over = service.post("/dataflows", json=urban_etl("bob.c"), headers=_as("bob"))
        assert (over.status_code, over.json()["code"]) == (429, "LIMIT_EXCEEDED")
        assert over.json()["detail"].startswith("owner 'bob' has 1 dataflows")
        assert "retry-after" not in over.headers
        _names_nothing_of_alice(over, [alice["id"]])


def test_a_containment_share_on_another_owners_filter_is_not_named(service):
    alice = service.post("/dataflows", json=urban_etl("alice.a", threshold=20), headers=_as("alice")).json()
    bob = service.post("/dataflows", json=urban_etl("bob.b", threshold=30), headers=_as("bob"))
    _names_nothing_of_alice(bob, [alice["id"]])
    assert bob.json()["contained"] == [] and alice["tasks"]["hot"] not in bob.text
    for answer in (service.get("/dataflows", headers=_as("bob")), service.get(f"/dataflows/{bob.json()['id']}",
                                                                              headers=_as("bob"))):
        _names_nothing_of_alice(answer, [alice["id"]])
        assert alice["tasks"]["hot"] not in answer.text
    # the admin sees the share: bob's filter reads alice's wider one
    (share,) = service.get(f"/dataflows/{bob.json()['id']}", headers=_as("ops")).json()["contained"]
    assert (share["kind"], share["reads"]) == ("filter", alice["tasks"]["hot"])
    assert service.get("/stats", headers=_as("bob")).json()["containment_shares"]["filter"] == 1
    # bob's narrower filter reads alice's too (the narrowest over the source): not named either
    hidden = service.post("/dataflows", json=urban_etl("bob.c", threshold=40), headers=_as("bob"))
    assert hidden.json()["contained"] == [] and alice["tasks"]["hot"] not in hidden.text
    # once bob runs alice's filter as his own (temp > 20: shared exactly), a share reading it is his to know
    same = service.post("/dataflows", json=urban_etl("bob.d", threshold=20), headers=_as("bob")).json()
    assert same["tasks"]["hot"] == alice["tasks"]["hot"]
    told = service.post("/dataflows", json=urban_etl("bob.e", threshold=45), headers=_as("bob")).json()
    assert [item["reads"] for item in told["contained"]] == [alice["tasks"]["hot"]]
    # and so are the earlier shares on it, now that he runs it
    listed = {flow["id"]: [share["reads"] for share in flow["contained"]]
              for flow in service.get("/dataflows", headers=_as("bob")).json()["dataflows"]}
    hot = alice["tasks"]["hot"]
    assert listed == {bob.json()["id"]: [hot], hidden.json()["id"]: [hot], same["id"]: [], told["id"]: [hot]}


def test_an_average_roll_up_shows_the_select_that_finishes_it(service):
    """Over HTTP the share of a rolled-up avg carries ``finish`` (the select dividing the rolled-up sum by the count);
    shares without one do not."""
    def windowed(name: str, window: str, aggregates: dict[str, str]) -> dict:
        return {"name": name, "tasks": [
            {"id": "src", "type": "source", "config": {"topic": "alice.readings", "schema": {"sensor": "string", "temp": "double",
                                                                                      "ts": "timestamp"}}},
            {"id": "win", "type": "window_aggregate", "config": {"keys": ["sensor"], "time_column": "ts", "window": window,
                                                                 "watermark": "5 seconds", "aggregates": aggregates}},
            {"id": "out", "type": "sink", "config": {"topic": f"alice.{name}"}}],
            "streams": [{"from": "src", "to": "win"}, {"from": "win", "to": "out"}]}

    short = service.post("/dataflows", json=windowed("short", "10 seconds", {"s": "sum(temp)", "c": "count(temp)"}),
                         headers=_as("alice")).json()
    rolled = service.post("/dataflows", json=windowed("long", "1 minute", {"mean": "avg(temp)"}), headers=_as("alice"))
    assert rolled.status_code == 201, rolled.text
    (share,) = rolled.json()["contained"]
    assert share["reads"] == short["tasks"]["win"] and "/" in share["finish"]["columns"]["mean"]
    summed = service.post("/dataflows", json=windowed("sums", "1 minute", {"total": "sum(temp)"}), headers=_as("alice"))
    (plain,) = summed.json()["contained"]
    assert plain["finish"] is None and plain["residual"]["aggregates"] == {"total": "SUM(s)"}
    listed = service.get(f"/dataflows/{rolled.json()['id']}", headers=_as("alice")).json()["contained"]
    assert listed == [share]
