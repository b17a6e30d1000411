"""Shared fixtures: a real Redis under an isolated prefix, the app over it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from sana.settings import Settings

REDIS_URL = os.environ.get("SANA_REDIS_URL", "redis://127.0.0.1:6379/0")


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
