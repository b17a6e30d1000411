"""Principals and tokens through the API: owners, admins, single-user mode (sana/auth.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api import cli
from api.app import create_app
from api.launcher import Launcher, LaunchError
from sana.auth import token_hash
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.services import ServerThread
from tests.api.clients import bearer, write_tokens

pytestmark = pytest.mark.redis

TOKENS = {"ann": ("user", "ann-token"), "bob": ("user", "bob-token"), "ops": ("admin", "ops-token")}


def _tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path, TOKENS)


@pytest.fixture
def app_client(settings_factory, tmp_path) -> Iterator[TestClient]:
    with TestClient(create_app(settings_factory(tokens_file=_tokens_file(tmp_path)))) as test_client:
        yield test_client


def _as(name: str) -> dict[str, str]:
    return bearer(TOKENS, name)


def test_requests_without_a_valid_token_get_401(app_client):
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic YW5uOmFubi10b2tlbg=="}):
        response = app_client.get("/dataflows", headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["code"] == "UNAUTHENTICATED"
    assert app_client.post("/dataflows", json=urban_etl()).status_code == 401
    assert app_client.get("/dataflows", headers=_as("ops")).json() == {"dataflows": []}  # nothing was created
    assert app_client.get("/healthz").status_code == 200  # probes need no token


def test_the_caller_owns_what_it_submits_and_only_the_owner_or_an_admin_sees_or_removes_it(app_client):
    created = app_client.post("/dataflows", json=urban_etl("ann.alerts"), headers=_as("ann"))
    assert created.status_code == 201, created.text
    flow_id = created.json()["id"]

    assert [flow["owner"] for flow in app_client.get("/dataflows", headers=_as("ann")).json()["dataflows"]] == ["ann"]
    assert app_client.get("/dataflows", headers=_as("bob")).json() == {"dataflows": []}
    assert [flow["id"] for flow in app_client.get("/dataflows", headers=_as("ops")).json()["dataflows"]] == [flow_id]

    for method, path in (("GET", f"/dataflows/{flow_id}"), ("GET", f"/dataflows/{flow_id}/cost"),
                         ("DELETE", f"/dataflows/{flow_id}")):
        refused = app_client.request(method, path, headers=_as("bob"))
        assert refused.status_code == 404, (method, path)  # as if it did not exist (test_what_a_user_sees_of_others)
        assert refused.json() == {"detail": f"no dataflow {flow_id!r}", "code": "DATAFLOW_NOT_FOUND",
                                  "culprit": {"dataflow": flow_id}}
        assert app_client.request(method, path, headers=_as("ann")).status_code == 200, (method, path)
    assert app_client.get("/dataflows", headers=_as("ops")).json() == {"dataflows": []}


def test_sharing_crosses_owners(app_client):
    first = app_client.post("/dataflows", json=urban_etl(sink_topic="ann.a"), headers=_as("ann")).json()
    second = app_client.post("/dataflows", json=urban_etl(sink_topic="bob.b"), headers=_as("bob")).json()
    assert second["tasks"]["proj"] == first["tasks"]["proj"]  # one running task for both
    assert app_client.get("/stats", headers=_as("ops")).json()["running_tasks"] == 5
    # removing ann's dataflow keeps what bob's still uses
    assert app_client.delete(f"/dataflows/{first['id']}", headers=_as("ann")).status_code == 200
    assert app_client.get("/stats", headers=_as("bob")).json()["running_tasks"] == 4


def test_a_user_submits_as_themselves_and_an_admin_on_behalf_of_anyone(app_client):
    refused = app_client.post("/dataflows", json={**urban_etl("ann.x"), "owner": "bob"}, headers=_as("ann"))
    assert refused.status_code == 403 and "'bob'" in refused.json()["detail"]
    assert app_client.get("/dataflows", headers=_as("ops")).json() == {"dataflows": []}
    on_behalf = app_client.post("/dataflows", json={**urban_etl(), "owner": "bob"}, headers=_as("ops"))
    assert on_behalf.status_code == 201
    assert [flow["owner"] for flow in app_client.get("/dataflows", headers=_as("bob")).json()["dataflows"]] == ["bob"]


def test_users_write_their_namespace_and_read_what_they_are_granted(app_client):
    before = app_client.get("/stats", headers=_as("ops")).json()
    outside = app_client.post("/dataflows", json=urban_etl("alerts"), headers=_as("ann"))
    assert outside.status_code == 403 and outside.json()["code"] == "TOPIC_FORBIDDEN"
    assert outside.json()["culprit"] == {"task": "out", "field": "config.topic"}
    assert "writes topic 'alerts', outside 'ann''s namespace 'ann.'" in outside.json()["detail"]
    others = app_client.post("/dataflows", json=urban_etl("bob.alerts"), headers=_as("ann"))
    assert others.status_code == 403 and "'bob.alerts'" in others.json()["detail"]
    unreadable = urban_etl("ann.alerts")
    unreadable["tasks"][0]["config"]["topic"] = "payroll"
    refused = app_client.post("/dataflows", json=unreadable, headers=_as("ann"))
    assert refused.status_code == 403 and "reads topic 'payroll'" in refused.json()["detail"]
    assert refused.json()["culprit"] == {"task": "src", "field": "config.topic"}
    assert app_client.get("/stats", headers=_as("ops")).json() == before
    assert app_client.post("/dataflows", json=urban_etl("anywhere"), headers=_as("ops")).status_code == 201  # an admin


def test_every_owners_view_is_for_admins(app_client):
    for path in ("/running", "/costs", "/runtime/fragments", "/wan"):
        response = app_client.get(path, headers=_as("ann"))
        assert response.status_code == 403, path
        assert app_client.get(path, headers=_as("ops")).status_code != 403, path
    assert app_client.post("/runtime/defrag", headers=_as("ann")).status_code == 403
    assert app_client.get("/stats", headers=_as("ann")).status_code == 200


def test_single_user_mode_answers_everyone_as_the_admin(client):
    created = client.post("/dataflows", json={**urban_etl(), "owner": "someone"})
    assert created.status_code == 201
    assert client.get("/running").status_code == 200
    assert client.delete(f"/dataflows/{created.json()['id']}").status_code == 200


def test_cli_sends_its_token_and_makes_tokens(settings_factory, tmp_path):
    def sana(*args: str, token: str | None = None) -> subprocess.CompletedProcess:
        env = {key: value for key, value in os.environ.items() if key != "SANA_TOKEN"}
        if token:
            env["SANA_TOKEN"] = token
        return subprocess.run([sys.executable, "-m", "api.cli", "--api", url, *args], capture_output=True, text=True,
                              timeout=60, env=env)

    path = tmp_path / "flow.json"
    path.write_text(json.dumps(urban_etl("ann.alerts")))
    with ServerThread(create_app(settings_factory(tokens_file=_tokens_file(tmp_path)))) as url:
        refused = sana("submit", str(path))
        assert refused.returncode == cli.EXIT_SERVER and "401" in refused.stderr
        assert sana("--token", "ann-token", "submit", str(path)).returncode == cli.EXIT_OK
        other = sana("remove", "df-1", token="bob-token")  # the token from SANA_TOKEN
        assert other.returncode == cli.EXIT_SERVER and other.stderr == "sana: 404: no dataflow 'df-1'\n"
        assert sana("remove", "df-1", token="ann-token").returncode == cli.EXIT_OK

    made = sana("token", "new", "carol", "--role", "admin")
    lines = made.stdout.splitlines()
    token, entry = lines[1].strip(), json.loads(lines[3])
    assert entry == {"name": "carol", "role": "admin", "token_sha256": token_hash(token)}
    assert sana("token", "new", "no spaces").returncode == cli.EXIT_USAGE


def test_sana_up_without_tokens_listens_on_loopback_only(settings_factory, tmp_path):
    Launcher(settings_factory(api_host="127.0.0.1"), tmp_path).check_access(demo=False)
    with pytest.raises(LaunchError, match="single-user mode listens on loopback only, not 0.0.0.0"):
        Launcher(settings_factory(api_host="0.0.0.0"), tmp_path).check_access(demo=False)
    Launcher(settings_factory(api_host="0.0.0.0", tokens_file=_tokens_file(tmp_path)), tmp_path).check_access(demo=False)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"principals": [{"name": "x", "role": "root", "token_sha256": "0" * 64}]}))
    with pytest.raises(LaunchError, match=r"principals\[0\] \('x'\): role must be"):
        Launcher(settings_factory(tokens_file=bad), tmp_path).check_access(demo=False)
