"""Open by default no more: single-user mode serves this machine only; bodies are JSON (api/guard.py, `sana serve`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from api import cli
from api.app import create_app
from api.launcher import Launcher, LaunchError
from sana.auth import token_hash
from tests.api.clients import LOOPBACK_URL, local_client
from tests.conftest import REDIS_URL
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.services import ServerThread, free_port

pytestmark = pytest.mark.redis

SINGLE_USER = "single-user mode (no SANA_TOKENS_FILE)"


def _count(client: TestClient) -> int:
    return client.get("/stats").json()["submitted_dataflows"]


@pytest.mark.parametrize("address", ["10.0.0.5", "192.168.1.20", "2001:db8::7", "testclient"])
def test_single_user_mode_serves_no_client_beyond_loopback(settings_factory, address):
    app = create_app(settings_factory())
    with local_client(app) as local, TestClient(app, base_url=LOOPBACK_URL, client=(address, 40000)) as remote:
        for method, path, body in (("GET", "/dataflows", None), ("POST", "/dataflows", urban_etl()),
                                   ("GET", "/healthz", None), ("GET", "/", None), ("GET", "/openapi.json", None),
                                   ("POST", "/runtime/defrag", None)):
            refused = remote.request(method, path, json=body)
            assert refused.status_code == 403, (method, path)
            assert refused.json() == {
                "detail": f"{SINGLE_USER} serves loopback clients only, not {address}; configure tokens "
                          "(sana token new NAME) to serve others", "code": "LOOPBACK_ONLY", "culprit": {"client": address}}
        assert _count(local) == 0
        assert local.post("/dataflows", json=urban_etl()).status_code == 201


@pytest.mark.parametrize("host", ["evil.example:8000", "testserver", "0.0.0.0:8000", "10.0.0.5"])
def test_single_user_mode_answers_no_name_but_loopback_against_dns_rebinding(settings_factory, host):
    with local_client(create_app(settings_factory())) as client:
        refused = client.post("/dataflows", json=urban_etl(), headers={"host": host})
        assert refused.status_code == 403 and refused.json()["code"] == "LOOPBACK_ONLY"
        assert refused.json()["detail"] == (f"{SINGLE_USER} answers requests addressed to loopback only (127.0.0.1, "
                                            f"localhost, [::1]), not Host {host!r}")
        assert client.get("/dataflows", headers={"host": host}).status_code == 403
        for local in ("localhost:8000", "127.0.0.1", "[::1]:9000"):
            assert client.get("/stats", headers={"host": local}).status_code == 200, local
        assert _count(client) == 0


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:3000", "https://127.0.0.1",
                                    "http://localhost"])
def test_single_user_mode_refuses_pages_of_other_origins(settings_factory, origin):
    with local_client(create_app(settings_factory())) as client:
        for method, path, body in (("POST", "/dataflows", urban_etl()), ("POST", "/runtime/defrag", None),
                                   ("DELETE", "/dataflows/df-1", None), ("GET", "/dataflows", None)):
            refused = client.request(method, path, json=body, headers={"origin": origin})
            assert refused.status_code == 403, (method, path)
            assert refused.json() == {"detail": f"{SINGLE_USER} takes requests from its own pages only, not from a "
                                                f"page of {origin!r}", "code": "ORIGIN_FORBIDDEN",
                                      "culprit": {"header": "origin"}}
        assert _count(client) == 0
        same = client.post("/dataflows", json=urban_etl(), headers={"origin": LOOPBACK_URL})  # its own page
        assert same.status_code == 201, same.text


def test_state_changing_bodies_must_be_json(settings_factory):
    """A page elsewhere may send text/plain, a form or a typeless body without a CORS preflight; never JSON."""
    document = json.dumps(urban_etl())
    with local_client(create_app(settings_factory())) as client:
        for method, path, headers, what in (
                ("POST", "/dataflows", {"content-type": "text/plain"}, "of type 'text/plain'"),
                ("POST", "/dataflows", {"content-type": "text/plain;charset=UTF-8"}, "of type 'text/plain;charset=UTF-8'"),
                ("POST", "/dataflows", {"content-type": "application/x-www-form-urlencoded"},
                 "of type 'application/x-www-form-urlencoded'"),
                ("POST", "/dataflows", {}, "without a Content-Type"),
                ("PUT", "/wan", {"content-type": "text/plain"}, "of type 'text/plain'"),
                ("DELETE", "/dataflows/df-1", {"content-type": "multipart/form-data; boundary=x"},
                 "of type 'multipart/form-data; boundary=x'")):
            refused = client.request(method, path, content=document, headers=headers)
            assert refused.status_code == 415, (method, path, headers)
            assert refused.json() == {"detail": f"{method} {path} carries a body {what}; the API takes JSON bodies only "
                                                "(Content-Type: application/json)", "code": "CONTENT_TYPE_UNSUPPORTED",
                                      "culprit": {"header": "content-type"}}
        assert _count(client) == 0 and client.get("/wan").status_code == 404
        made = client.post("/dataflows", content=document, headers={"content-type": "application/json; charset=utf-8"})
        assert made.status_code == 201, made.text
        assert client.post("/runtime/defrag").status_code == 200  # no body, no type needed
        assert client.post("/runtime/defrag", headers={"content-type": "text/plain"}).status_code == 200
        assert client.delete(f"/dataflows/{made.json()['id']}").status_code == 200


def test_with_tokens_any_client_is_served_but_bodies_are_still_json(settings_factory, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"principals": [{"name": "ops", "role": "admin", "token_sha256": token_hash("t")}]}))
    app = create_app(settings_factory(tokens_file=tokens))
    with TestClient(app, client=("10.0.0.5", 40000), headers={"Authorization": "Bearer t"}) as remote:
        assert remote.get("/dataflows", headers={"origin": "https://dashboard.example"}).status_code == 200
        refused = remote.post("/dataflows", content=json.dumps(urban_etl()), headers={"content-type": "text/plain"})
        assert (refused.status_code, refused.json()["code"]) == (415, "CONTENT_TYPE_UNSUPPORTED")
        assert remote.post("/dataflows", json=urban_etl()).status_code == 201


def test_the_openapi_spec_documents_415_and_429(client):
    spec = client.get("/openapi.json").json()
    for path, method in (("/dataflows", "post"), ("/dataflows/{dataflow_id}", "delete"), ("/dataflows", "get")):
        assert {"415", "429"} <= set(spec["paths"][path][method]["responses"]), (path, method)


def test_the_cli_sends_acceptable_requests_over_a_real_server(settings_factory, tmp_path):
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(urban_etl()))
    with ServerThread(create_app(settings_factory())) as url:
        assert cli.main(["--api", url, "submit", str(flow)]) == cli.EXIT_OK
        assert cli.main(["--api", url, "defrag"]) == cli.EXIT_OK  # a bodyless POST
        assert cli.main(["--api", url, "remove", "df-1"]) == cli.EXIT_OK
        assert httpx.post(f"{url}/dataflows", content=flow.read_bytes()).status_code == 415  # typeless: refused


def test_sana_serve_checks_access_as_sana_up_does(settings_factory, tmp_path, capsys):
    with pytest.raises(LaunchError, match="single-user mode listens on loopback only, not 0.0.0.0"):
        Launcher(settings_factory(api_host="0.0.0.0"), tmp_path).check_access(demo=False)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SANA_")}
    refused = subprocess.run([sys.executable, "-m", "api.cli", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
                             capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "sana serve: error: no SANA_TOKENS_FILE: single-user mode listens on loopback only, not 0.0.0.0; configure "
        "tokens (sana token new NAME) to listen there")
    overlapping = tmp_path / "tokens.json"
    overlapping.write_text(json.dumps({"principals": [
        {"name": name, "role": "user", "token_sha256": token_hash(name)} for name in ("alice", "alice.x")]}))
    refused = subprocess.run([sys.executable, "-m", "api.cli", "serve", "--host", "0.0.0.0"], capture_output=True,
                             text=True, timeout=60, env={**env, "SANA_TOKENS_FILE": str(overlapping)})
    assert refused.returncode == 1 and "principals[1] ('alice.x'): namespace 'alice.x.' overlaps" in refused.stderr


def test_sana_serve_serves_the_api_on_loopback(state_prefix, tmp_path):
    port = free_port()
    env = {**{key: value for key, value in os.environ.items() if not key.startswith("SANA_")},
           "SANA_REDIS_URL": REDIS_URL, "SANA_STATE_PREFIX": state_prefix, "SANA_DRY_RUN": "1"}
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", str(port)], stdout=log,
                               stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        made = httpx.post(f"http://127.0.0.1:{port}/dataflows", json=urban_etl(), timeout=30)
        assert made.status_code == 201, made.text
    finally:
        process.terminate()
        process.wait(30)
        log.close()
    assert "sana serve: single-user mode (no SANA_TOKENS_FILE): anyone who can reach 127.0.0.1 is the admin 'local'" in (
        tmp_path / "serve.log").read_text()
