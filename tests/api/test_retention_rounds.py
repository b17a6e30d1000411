"""The retention thread (api/retention.py): a round that fails, wherever it fails, costs that round only."""

from __future__ import annotations

import time

import redis

from api.retention import ObjectStoreClient, Retention
from tests.fixtures.services import free_port


def test_a_failing_round_is_reported_and_the_next_one_runs():
    calls: list[float] = []
    said: list[str] = []

    def positions():  # as the runtime's would while Redis is down
        calls.append(time.monotonic())
        raise redis.exceptions.ConnectionError("Redis is down")  # not an OSError

    retention = Retention(ObjectStoreClient(f"http://127.0.0.1:{free_port()}", "tansu"), positions, every_s=0.05,
                          say=said.append)
    retention.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(calls) >= 3 and retention.thread.is_alive()
    finally:
        retention.stop()
    summary = retention.summary()
    assert summary["error"] == "Redis is down" and summary["last_round"] is None
    assert said and "the next one tries again" in said[0]
