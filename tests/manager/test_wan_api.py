"""The WAN endpoints (api/routes_wan.py) and ``sana wan-sim`` (wan_sim/cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from api.app import create_app
from tests.api.clients import local_client
from tests.fixtures.dataflows import chain, source, task
from tests.manager.test_wan_sharing import WAN, hot
from tests.wan_sim.scenarios import unaware_sharing_hurts
from wan_sim.cli import main


@pytest.fixture
def client(settings_factory):
    # this machine's caller (single-user mode serves no other), sending JSON bodies as JSON (api/guard.py)
    with local_client(create_app(settings_factory()), headers={"content-type": "application/json"}) as test_client:
        yield test_client


@pytest.mark.redis
def test_wan_configuration_round_trip_and_link_loads(client):
    assert client.get("/wan").status_code == 404
    assert client.get("/wan").json()["code"] == "WAN_NOT_CONFIGURED"
    assert client.get("/stats").json()["wan_configured"] is False  # the inspector asks /wan only once it is true
    answer = client.put("/wan", content=json.dumps(WAN))
    assert answer.status_code == 200, answer.text
    assert client.get("/stats").json()["wan_configured"] is True
    body = answer.json()
    assert [site["name"] for site in body["sites"]] == ["src", "P", "H2"]
    assert {(row["from"], row["to"]) for row in body["links"]} >= {("P", "H2"), ("H2", "P")}
    first = client.post("/dataflows", content=json.dumps(hot("a", "P", "one"))).json()
    second = client.post("/dataflows", content=json.dumps(hot("b", "H2", "two"))).json()
    assert second["tasks"]["hot"] != first["tasks"]["hot"]
    links = {(row["from"], row["to"]): row for row in client.get("/wan/links").json()["links"]}
    assert links[("src", "P")]["utilization"] == 0.16 and links[("src", "H2")]["load_mbps"] == 16.0
    assert links[("src", "P")]["streams"][0]["consumers"] == [first["tasks"]["hot"]]
    running = {task["id"]: task for dag in client.get("/running").json()["dags"] for task in dag["tasks"]}
    assert running[first["tasks"]["hot"]]["site"] == "P" and running[second["tasks"]["hot"]]["site"] == "H2"
    plan = client.get("/wan/replacement", params={"utilization": 0.1}).json()
    assert {(row["from"], row["to"]) for row in plan["hot_links"]} == {("src", "P"), ("src", "H2")}
    assert [entry["moves"] for entry in plan["dataflows"]] == [[], []], "nothing better to move to"
    assert plan["executed"] is False
    done = client.post("/wan/replacement", params={"utilization": 0.1})
    assert done.status_code == 200, done.text
    # planned again the same: nothing is stopped or started (no task restarts for a plan that did not change)
    assert (done.json()["executed"], done.json()["start"], done.json()["stop"]) == (True, [], [])
    assert client.get(f"/dataflows/{second['id']}").json()["tasks"] == second["tasks"]
    bad = client.get("/wan/replacement", params={"utilization": 0})
    assert bad.status_code == 422 and "utilization" in bad.text
    assert client.delete("/wan").json() == {"configured": False}
    assert client.get("/stats").json()["wan_configured"] is False
    assert client.get("/wan/links").status_code == 404
    assert client.get("/wan/replacement").status_code == 404
    assert client.post("/wan/replacement").status_code == 404


@pytest.mark.redis
def test_a_bad_configuration_is_refused_naming_the_field(client):
    answer = client.put("/wan", content=json.dumps({"sites": ["a"], "links": [{"from": "a", "to": "b", "bandwidth_mbps": 1, "latency_ms": 1}]}))
    assert answer.status_code == 422
    assert answer.json()["code"] == "WAN_CONFIG_INVALID"
    assert "links[0].to: unknown site 'b'" in answer.json()["detail"]
    nested = client.put("/wan", content=b'{"sites": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert nested.status_code == 422 and "nests deeper" in nested.json()["detail"]
    assert client.get("/wan").status_code == 404  # nothing was stored
    answer = client.post("/dataflows", content=json.dumps(chain(source(topic="nowhere"), task("o", "sink", topic="x"))))
    assert answer.status_code == 201  # no WAN configuration: sites are not needed


def test_wan_sim_command_prints_json(tmp_path, capsys):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(unaware_sharing_hurts()))
    assert main([str(path), "--policy", "max-share", "--summary"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "max-share" and out["summary"]["throughput_rps"] == 1000.0
    assert main([str(path), "--policy", "all", "--summary"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert set(every) == {"default", "net", "mqo", "sana", "no-share", "strict-share", "max-share",
                          "sana-printed"}
    assert every["sana"]["summary"]["throughput_rps"] == 2000.0
    assert main([str(path)]) == 0
    detail = json.loads(capsys.readouterr().out)
    assert detail["policy"] == "sana" and detail["not_shared"][0]["link"] == {"from": "P", "to": "H2"}
    assert {"links", "epochs", "placement"} <= set(detail)


def test_wan_sim_reports_a_bad_scenario(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"wan": {"sites": ["a"]}, "queries": [{"name": "q", "tasks": [{"id": "s", "type": "source", "stream": "nope"}]}]}))
    assert main([str(path)]) == 2
    assert "source 's' reads unknown stream 'nope'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read scenario" in capsys.readouterr().err


def test_sana_wan_sim_runs_the_simulator_with_its_arguments(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(unaware_sharing_hurts()))
    done = subprocess.run([sys.executable, "-m", "api.cli", "wan-sim", str(path), "--policy", "sana", "--summary"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) >= {"summary"}
    refused = subprocess.run([sys.executable, "-m", "api.cli", "wan-sim", str(path), "--policy", "nope"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "nope" in refused.stderr


def test_put_wan_over_one_mebibyte_is_413(client):
    response = client.put("/wan", content=b'{"sites": ["' + b"x" * (1 << 20) + b'"]}', headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"
