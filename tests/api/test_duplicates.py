"""A submit identical to a dataflow its owner already runs: a warning and ``duplicate_of`` in the 201, or 409 with
``?unique=true`` (manager/duplicates.py), over the real Redis (dry-run runtime), through the API and the CLI."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.api.clients import bearer, local_client, write_tokens
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.services import ServerThread

pytestmark = pytest.mark.redis


def renamed(document: dict, name: str) -> dict:
    """``document`` under another name, its task ids changed and its tasks and streams in another order."""
    other = copy.deepcopy(document)
    ids = {task["id"]: f"{task['id']}-2" for task in other["tasks"]}
    other["name"] = name
    other["tasks"] = [{**task, "id": ids[task["id"]]} for task in reversed(other["tasks"])]
    other["streams"] = [{**stream, "from": ids[stream["from"]], "to": ids[stream["to"]]} for stream in reversed(other["streams"])]
    return other


def counts(client: TestClient, **headers: str) -> tuple[int, int]:
    stats = client.get("/stats", headers=headers).json()
    return stats["submitted_dataflows"], stats["running_tasks"]


def test_a_first_submit_has_no_warning(client):
    answer = client.post("/dataflows", json=urban_etl("alerts-a")).json()
    assert answer["duplicate_of"] is None and answer["warnings"] == []


def test_the_same_document_again_is_accepted_with_a_warning_naming_the_first(client):
    first = client.post("/dataflows", json=urban_etl("alerts-a")).json()
    again = client.post("/dataflows", json=urban_etl("alerts-a"))
    assert again.status_code == 201
    answer = again.json()
    assert answer["id"] == "df-2" and answer["duplicate_of"] == first["id"]
    assert sorted(answer["reused"]) == ["hot", "out", "proj", "src"] and answer["created"] == []
    assert answer["tasks"] == first["tasks"]
    [warning] = answer["warnings"]
    assert warning.startswith("identical to df-1 ('urban-etl', the same name), already running for the same owner")
    assert "nothing new started" in warning and "sana remove df-2" in warning and "--unique" in warning
    assert counts(client) == (2, 4)


def test_another_name_and_other_task_ids_are_still_a_duplicate(client):
    client.post("/dataflows", json=urban_etl("alerts-a"))
    answer = client.post("/dataflows", json=renamed(urban_etl("alerts-a"), "my-copy")).json()
    assert answer["duplicate_of"] == "df-1"
    assert answer["warnings"][0].startswith("identical to df-1 ('urban-etl'), already running")  # not "the same name"


def test_the_same_computation_into_another_topic_or_another_filter_is_no_duplicate(client):
    client.post("/dataflows", json=urban_etl("alerts-a"))
    other_topic = client.post("/dataflows", json=urban_etl("alerts-b", name="urban-etl-b")).json()
    assert other_topic["duplicate_of"] is None and other_topic["warnings"] == []
    other_filter = client.post("/dataflows", json=urban_etl("alerts-c", threshold=35, name="urban-etl-c")).json()
    assert other_filter["duplicate_of"] is None and other_filter["warnings"] == []


def test_after_a_removal_the_same_document_is_no_duplicate(client):
    first = client.post("/dataflows", json=urban_etl("alerts-a")).json()
    client.delete(f"/dataflows/{first['id']}")
    assert client.post("/dataflows", json=urban_etl("alerts-a")).json()["duplicate_of"] is None


def test_unique_refuses_a_duplicate_with_409_naming_it_and_changes_nothing(client):
    first = client.post("/dataflows", json=urban_etl("alerts-a"), params={"unique": "true"})
    assert first.status_code == 201, first.text
    before = counts(client)
    refused = client.post("/dataflows", json=renamed(urban_etl("alerts-a"), "my-copy"), params={"unique": "true"})
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": "identical to df-1 ('urban-etl'), already running for the same owner (the same sinks writing the "
                  "same topics); nothing changed (unique). Use df-1 as it is, or remove it first",
        "code": "DATAFLOW_DUPLICATE", "culprit": {"dataflow": "df-1", "name": "urban-etl"}}
    assert counts(client) == before
    assert [flow["id"] for flow in client.get("/dataflows").json()["dataflows"]] == ["df-1"]
    # nothing was taken either: the next dataflow is df-2
    assert client.post("/dataflows", json=urban_etl("alerts-b"), params={"unique": "true"}).json()["id"] == "df-2"


def test_a_same_named_dataflow_writing_the_same_topic_but_computing_something_else_is_warned_about(client):
    client.post("/dataflows", json=urban_etl("alerts-a"))
    edited = client.post("/dataflows", json=urban_etl("alerts-a", threshold=35), params={"unique": "true"})
    assert edited.status_code == 201  # not identical: unique does not refuse it
    answer = edited.json()
    assert answer["duplicate_of"] is None
    assert answer["warnings"] == [
        "df-1 of the same owner is also named 'urban-etl' and writes topic 'alerts-a' too, but computes something "
        "else: the topic gets the records of both. If this one replaces it: sana remove df-1"]


def test_a_duplicate_under_sharing_off_is_found_and_says_it_writes_every_record_twice(settings_factory):
    with local_client(create_app(settings_factory(sharing=False))) as client:
        client.post("/dataflows", json=urban_etl("alerts-a"))
        answer = client.post("/dataflows", json=urban_etl("alerts-a")).json()
        assert answer["duplicate_of"] == "df-1" and answer["created"] == ["src", "hot", "proj", "out"]
        assert "4 task(s) started again" in answer["warnings"][0] and "each record twice" in answer["warnings"][0]
        assert client.post("/dataflows", json=urban_etl("alerts-a"), params={"unique": "1"}).status_code == 409


def test_with_tokens_duplicates_are_the_owners(settings_factory, tmp_path):
    tokens = {"ann": ("user", "ann-token"), "ops": ("admin", "ops-token")}
    settings = settings_factory(tokens_file=write_tokens(tmp_path, tokens))
    with TestClient(create_app(settings)) as client:
        ann, ops = bearer(tokens, "ann"), bearer(tokens, "ops")
        first = client.post("/dataflows", json=urban_etl("ann.alerts"), headers=ann).json()
        again = client.post("/dataflows", json=urban_etl("ann.alerts"), headers=ann).json()
        assert again["duplicate_of"] == first["id"] and again["reused"] and again["warnings"]
        # an admin submitting for ann is told of ann's running one
        for_ann = client.post("/dataflows", json={**urban_etl("ann.alerts"), "owner": "ann"}, headers=ops,
                              params={"unique": "true"})
        assert (for_ann.status_code, for_ann.json()["culprit"]) == (409, {"dataflow": first["id"], "name": "urban-etl"})
        # as itself, the admin shares ann's running sink (one writer) but duplicates nothing of its own
        mine = client.post("/dataflows", json=urban_etl("ann.alerts"), headers=ops, params={"unique": "true"})
        assert mine.status_code == 201 and mine.json()["duplicate_of"] is None and mine.json()["warnings"] == []


def sana(url: str, *args: str, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", "--api", url, *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_the_cli_prints_the_warning_on_stderr_and_unique_exits_1(settings_factory):
    document = json.dumps(urban_etl("alerts-a"))
    with ServerThread(create_app(settings_factory())) as url:
        first = sana(url, "submit", "-", stdin=document)
        assert first.returncode == 0 and first.stderr == ""
        again = sana(url, "submit", "-", stdin=document)
        assert again.returncode == 0
        assert "submitted df-2 (urban-etl): 4 task(s) reused, 0 created" in again.stdout
        assert again.stderr.startswith("sana: warning: identical to df-1 ('urban-etl', the same name)")
        as_json = sana(url, "submit", "-", "--json", stdin=document)
        assert json.loads(as_json.stdout)["duplicate_of"] == "df-1" and "sana: warning: " in as_json.stderr
        refused = sana(url, "submit", "-", "--unique", stdin=document)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.startswith("sana: 409: identical to df-1 ('urban-etl', the same name) and to df-2, df-3")
