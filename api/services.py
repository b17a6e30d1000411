"""Wiring: build the manager, its runtime and the probes from the settings."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from api.health import KafkaProbe
from manager.service import Manager
from runtime.dryrun import DryRunRuntime
from sana.settings import Settings

log = logging.getLogger("sana.api")

SPARK_RUNTIME_MISSING = (
    "the Spark runtime is not built yet (issue 4): deployments are planned and recorded "
    "as in --dry-run, nothing runs on Spark"
)


@dataclass
class Services:
    settings: Settings
    redis: redis.Redis
    manager: Manager
    kafka: KafkaProbe | None
    runtime_note: str | None

    def close(self) -> None:
        self.manager.close()
        self.redis.close()


def build_services(settings: Settings) -> Services:
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=10)
    runtime = DryRunRuntime(client, settings.state_prefix)
    note = None
    if not settings.dry_run:
        note = SPARK_RUNTIME_MISSING
        log.warning(note)
    manager = Manager(client, settings.state_prefix, runtime)
    kafka = None if settings.dry_run else KafkaProbe(settings.effective_kafka_bootstrap)
    return Services(settings, client, manager, kafka, note)
