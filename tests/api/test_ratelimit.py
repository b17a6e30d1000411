"""Per-principal request budgets (api/ratelimit.py): 429 RATE_LIMITED with Retry-After, others unaffected."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.exceptions import RateLimited
from api.ratelimit import Budget, RateLimiter
from sana.auth import Principal
from tests.api.clients import bearer, local_client, write_tokens
from tests.fixtures.dataflows import urban_etl

TOKENS = {"ann": ("user", "ann-token"), "bob": ("user", "bob-token"), "ops": ("admin", "ops-token")}


def _tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path, TOKENS)


def _as(name: str) -> dict[str, str]:
    return bearer(TOKENS, name)


@pytest.mark.redis
def test_a_principal_over_its_write_budget_gets_429_with_retry_after_and_no_one_else_does(settings_factory, tmp_path):
    settings = settings_factory(tokens_file=_tokens_file(tmp_path), rate_limit_write_burst=3, rate_limit_writes_per_s=0.5)
    with TestClient(create_app(settings)) as client:
        for number in range(3):
            made = client.post("/dataflows", json=urban_etl(f"bob.out{number}"), headers=_as("bob"))
            assert made.status_code == 201, made.text
        before = client.get("/stats", headers=_as("ops")).json()
        refused = client.post("/dataflows", json=urban_etl("bob.out3"), headers=_as("bob"))
        assert refused.status_code == 429 and refused.headers["retry-after"] == "2"  # one token at 0.5 a second
        assert refused.json() == {
            "detail": "'bob' spent their budget of state-changing requests (3 at once, then 0.5 a second: "
                      "SANA_RATE_LIMIT_WRITES_PER_S, SANA_RATE_LIMIT_WRITE_BURST); the next one passes in 2 s",
            "code": "RATE_LIMITED", "culprit": {"limit": "SANA_RATE_LIMIT_WRITES_PER_S"}}
        assert client.delete("/dataflows/df-1", headers=_as("bob")).status_code == 429  # a removal spends too
        assert client.get("/stats", headers=_as("ops")).json() == before  # refused: nothing changed
        assert client.get("/dataflows", headers=_as("bob")).status_code == 200  # reads have their own budget
        assert client.post("/dataflows", json=urban_etl("ann.out"), headers=_as("ann")).status_code == 201  # another user
        for number in range(5):  # admins are not limited by default
            assert client.post("/dataflows", json=urban_etl(f"ops.{number}"), headers=_as("ops")).status_code == 201


@pytest.mark.redis
def test_the_next_request_passes_once_retry_after_has_passed(settings_factory, tmp_path):
    settings = settings_factory(tokens_file=_tokens_file(tmp_path), rate_limit_read_burst=2, rate_limit_reads_per_s=1)
    with TestClient(create_app(settings)) as client:
        assert [client.get("/stats", headers=_as("ann")).status_code for _ in range(2)] == [200, 200]
        refused = client.get("/dataflows", headers=_as("ann"))
        assert (refused.status_code, refused.json()["culprit"]) == (429, {"limit": "SANA_RATE_LIMIT_READS_PER_S"})
        assert client.get("/stats", headers=_as("bob")).status_code == 200
        time.sleep(int(refused.headers["retry-after"]))
        assert client.get("/dataflows", headers=_as("ann")).status_code == 200


@pytest.mark.redis
def test_admins_are_limited_when_the_setting_says_so_single_user_mode_included(settings_factory):
    with local_client(create_app(settings_factory(rate_limit_admins=True, rate_limit_write_burst=2))) as client:
        assert [client.post("/dataflows", json=urban_etl(f"out{n}")).status_code for n in range(3)] == [201, 201, 429]
        assert client.get("/stats").json()["submitted_dataflows"] == 2


def test_the_buckets_are_thread_safe():
    now = [0.0]
    limiter = RateLimiter(Budget(0.001, 50, "state-changing requests", "W"), Budget(0, 1, "reads", "R"),
                          clock=lambda: now[0])
    ann, passed, start = Principal("ann", "user"), [], threading.Barrier(8)

    def spend() -> None:
        start.wait()
        for _ in range(100):
            try:
                limiter.charge(ann, "POST")
                passed.append(1)
            except RateLimited as refused:
                assert refused.retry_after_s == 1000  # one token at 0.001 a second

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(passed) == 50  # exactly the burst, of 800 tries from 8 threads
