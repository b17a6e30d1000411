"""Limits: tasks per dataflow, dataflows per owner (429) and running tasks of the service (503), naming the limit."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.api.clients import local_client
from tests.fixtures.dataflows import chain, source, task, urban_etl

pytestmark = pytest.mark.redis


def _client(settings_factory, **limits) -> TestClient:
    return local_client(create_app(settings_factory(**limits)))


def _unchanged(client: TestClient, before: dict) -> None:
    assert client.get("/stats").json() == before["stats"]
    assert client.get("/dataflows").json() == before["dataflows"]


def _snapshot(client: TestClient) -> dict:
    return {"stats": client.get("/stats").json(), "dataflows": client.get("/dataflows").json()}


def test_a_dataflow_over_the_task_limit_gets_429(settings_factory):
    with _client(settings_factory, max_tasks_per_dataflow=3) as client:
        before = _snapshot(client)
        refused = client.post("/dataflows", json=urban_etl())
        assert refused.status_code == 429
        assert refused.json()["code"] == "LIMIT_EXCEEDED"
        assert refused.json()["culprit"] == {"limit": "SANA_MAX_TASKS_PER_DATAFLOW"}
        assert "4 tasks; at most 3" in refused.json()["detail"]
        assert "retry-after" not in refused.headers  # it stays too big however long one waits
        _unchanged(client, before)


def test_an_owner_over_the_dataflow_limit_gets_429_until_one_is_removed(settings_factory):
    with _client(settings_factory, max_dataflows_per_owner=1) as client:
        first = client.post("/dataflows", json={**urban_etl("a"), "owner": "ann"}).json()
        assert client.post("/dataflows", json={**urban_etl("b"), "owner": "bob"}).status_code == 201  # another owner
        before = _snapshot(client)
        refused = client.post("/dataflows", json={**urban_etl("c"), "owner": "ann"})
        assert refused.status_code == 429 and refused.json()["culprit"] == {"limit": "SANA_MAX_DATAFLOWS_PER_OWNER"}
        assert "owner 'ann' has 1 dataflows" in refused.json()["detail"]
        assert "retry-after" not in refused.headers  # waiting does not help: only removing one does
        _unchanged(client, before)
        assert client.delete(f"/dataflows/{first['id']}").status_code == 200
        assert client.post("/dataflows", json={**urban_etl("c"), "owner": "ann"}).status_code == 201


def test_a_full_service_answers_503_but_shared_work_still_fits(settings_factory):
    with _client(settings_factory, max_running_tasks=5) as client:
        assert client.post("/dataflows", json=urban_etl("a")).status_code == 201  # 4 running
        assert client.post("/dataflows", json=urban_etl("b")).status_code == 201  # shares 3, adds a sink: 5
        before = _snapshot(client)
        other = chain(source(topic="elsewhere"), task("out", "sink", topic="c"), name="other")
        refused = client.post("/dataflows", json=other)
        assert refused.status_code == 503
        assert refused.json()["code"] == "SERVICE_FULL" and refused.json()["culprit"] == {"limit": "SANA_MAX_RUNNING_TASKS"}
        assert "runs 5 tasks and this dataflow needs 2 more; at most 5" in refused.json()["detail"]
        assert refused.headers["retry-after"] == "30"  # others' removals may make room meanwhile
        _unchanged(client, before)


def test_queries_are_bounded_through_the_fragments_they_need(settings_factory):
    with _client(settings_factory, max_queries=2) as client:
        assert client.post("/dataflows", json=urban_etl("a")).status_code == 201  # one fragment
        assert client.post("/dataflows", json=urban_etl("b")).status_code == 201  # shares it; its own sink: 2
        assert client.get("/stats").json()["fragments"] == 2
        before = _snapshot(client)
        other = chain(source(topic="elsewhere"), task("out", "sink", topic="c"), name="other")
        refused = client.post("/dataflows", json=other)
        assert refused.status_code == 503 and refused.json()["culprit"] == {"limit": "SANA_MAX_QUERIES"}
        assert "runs 2 fragments (each up to one Spark query) and this dataflow needs 1 more; at most 2" in refused.json()["detail"]
        assert refused.headers["retry-after"] == "30"
        _unchanged(client, before)
