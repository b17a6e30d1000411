"""Shared fixtures: a real Redis under an isolated prefix, the app over it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from sana.settings import Settings

REDIS_URL = os.environ.get("SANA_REDIS_URL", "redis://127.0.0.1:6379/0")

#: Tests that start Spark, the embedded broker, `sana up` or a browser. Under pytest-xdist (scripts/test.sh runs
#: two workers) they all run on one worker, one after another, as without xdist: two Spark JVMs or brokers
#: side by side on two cores would slow each other past their waits. The rest is spread over both workers.
SERVICE_MARKERS = ("spark", "kafka", "browser")
SERVICE_DIRECTORIES = ("runtime", "browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        directory = item.path.parent.name
        if directory in SERVICE_DIRECTORIES or any(item.get_closest_marker(name) for name in SERVICE_MARKERS):
            item.add_marker(pytest.mark.xdist_group("services"))


def delete_prefix(client: redis.Redis, prefix: str) -> None:
    """Delete every key under ``prefix`` (hypothesis tests cannot use the fixture below)."""
    keys = list(client.scan_iter(f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="session")
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()
    yield client
    client.close()


@pytest.fixture
def state_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A fresh SANA_STATE_PREFIX; every key under it is deleted afterwards."""
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    yield prefix
    delete_prefix(redis_client, prefix)


@pytest.fixture
def settings_factory(state_prefix: str) -> Callable[..., Settings]:
    def make(**overrides) -> Settings:
        values = {"redis_url": REDIS_URL, "state_prefix": state_prefix, "dry_run": True}
        values.update(overrides)
        return Settings(**values)

    return make
