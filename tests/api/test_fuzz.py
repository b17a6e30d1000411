"""Bad input at scale: requests generated from the OpenAPI spec (schemathesis), a fixed budget per operation.

Schemathesis generates requests that fit each operation's schema and requests
that break it (both modes, a fixed budget each). Every request must get an
answer below 500, within the deadline, and a request the API rejects (4xx)
must change nothing: the dataflows, the counts and
the WAN configuration read the same before and after it. The app is the whole
service on the dry-run runtime and the real Redis.
"""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from api.app import create_app
from tests.api.clients import LOOPBACK_CLIENT, local_client
from tests.fixtures.dataflows import urban_etl

pytestmark = pytest.mark.redis

EXAMPLES_PER_OPERATION = 30


@pytest.fixture
def fuzzed_app(settings_factory):
    """The app with its services started (lifespan entered) and one dataflow running, so ids can hit."""
    app = create_app(settings_factory())
    with local_client(app) as client:
        assert client.post("/dataflows", json=urban_etl()).status_code == 201
        app.state.observer = client
        yield app


def _local(app):
    """``app`` as this machine's callers reach it: schemathesis's ASGI client reports the client ``testclient``
    and the host ``testserver``, which single-user mode refuses (api/guard.py)."""
    async def from_loopback(scope, receive, send):
        if scope["type"] == "http":
            headers = [(name, value) for name, value in scope["headers"] if name != b"host"] + [(b"host", b"127.0.0.1")]
            scope = {**scope, "client": LOOPBACK_CLIENT, "headers": headers}
        await app(scope, receive, send)

    return from_loopback


def _state(client: TestClient) -> dict[str, Any]:
    wan = client.get("/wan")
    return {"dataflows": client.get("/dataflows").json(), "stats": client.get("/stats").json(),
            "wan": (wan.status_code, wan.json())}


def test_generated_requests_get_no_5xx_and_rejections_change_nothing(fuzzed_app):
    observer: TestClient = fuzzed_app.state.observer
    schema = schemathesis.openapi.from_asgi("/openapi.json", _local(fuzzed_app))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    calls: list[int] = []

    for operation, mode in itertools.product(operations, GenerationMode):
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=timedelta(seconds=10),
                  suppress_health_check=list(HealthCheck), derandomize=True, database=None)
        @given(case=operation.as_strategy(mode))
        def check(case) -> None:
            before = _state(observer)
            response = case.call()
            calls.append(response.status_code)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}")
            if response.status_code >= 400:
                after = _state(observer)
                assert after == before, (
                    f"{case.method} {case.formatted_path} was rejected ({response.status_code}) but changed the state: "
                    f"{json.dumps(before)[:300]} -> {json.dumps(after)[:300]}")

        try:
            check()
        except Unsatisfiable:  # a negative case of an operation that takes nothing to break (GET /stats)
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert len(calls) >= len(operations) * 10  # the budget was spent, not skipped
    assert 422 in calls and 404 in calls  # bad documents and unknown ids were turned away
