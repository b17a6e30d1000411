"""Component checks behind ``GET /healthz``."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

KAFKA_CACHE_S = 5.0


def check_redis(client: redis.Redis) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        client.ping()
    except redis.RedisError as error:
        return {"status": "down", "error": str(error)}
    return {"status": "ok", "latency_ms": round(1000 * (time.perf_counter() - started), 2)}


class KafkaProbe:
    """Asks the broker for its API versions; the answer is cached for a few seconds."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._lock = threading.Lock()
        self._at = 0.0
        self._last: dict[str, Any] = {}

    def check(self) -> dict[str, Any]:
        with self._lock:
            if time.monotonic() - self._at < KAFKA_CACHE_S:
                return self._last
            self._last = self._probe()
            self._at = time.monotonic()
            return self._last

    def _probe(self) -> dict[str, Any]:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        started = time.perf_counter()
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=2000)
            try:
                topics = len(admin.list_topics())
            finally:
                admin.close()
        except (KafkaError, OSError, ValueError) as error:
            return {"status": "down", "bootstrap": self.bootstrap, "error": str(error) or type(error).__name__}
        return {
            "status": "ok",
            "bootstrap": self.bootstrap,
            "topics": topics,
            "latency_ms": round(1000 * (time.perf_counter() - started), 2),
        }
