"""Wiring: build the manager, its runtime and the probes from the settings."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from api.health import KafkaProbe
from api.object_store import BUCKET as OBJECT_BUCKET
from api.retention import ObjectStoreClient, Retention
from manager.service import Limits, Manager
from runtime.dryrun import DryRunRuntime
from sana import failpoints
from sana.auth import Principals
from sana.settings import Settings

log = logging.getLogger("sana.api")


@dataclass
class Services:
    settings: Settings
    redis: redis.Redis
    manager: Manager
    kafka: KafkaProbe | None
    runtime_note: str | None
    principals: Principals
    retention: Retention | None = None

    def close(self) -> None:
        if self.retention is not None:
            self.retention.stop()
        self.manager.close()
        self.redis.close()


def build_services(settings: Settings) -> Services:
    principals = Principals.load(settings.tokens_file)  # a bad tokens file stops the start, naming the entry
    failpoints.configure(settings.failpoints)  # an unknown fail point stops the start too
    if principals.enabled:
        log.info("%d principals from %s; every request needs a bearer token", len(principals), principals.source)
    else:
        log.warning("single-user mode: no SANA_TOKENS_FILE, every caller is the admin 'local'")
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=10)
    note = None
    if settings.dry_run:
        runtime = DryRunRuntime(client, settings.state_prefix)
    else:
        from runtime.spark.reshape import ReshapeSettings
        from runtime.spark.runtime import SparkRuntime  # imports pyspark: only when Spark runs

        reshape = ReshapeSettings(
            enabled=settings.reshape_enabled, split=settings.reshape_split, eta=settings.reshape_eta,
            tau_min=settings.reshape_tau_min, tau_max=settings.reshape_tau_max, max_helpers=settings.reshape_max_helpers,
            min_excess_rows=settings.reshape_min_excess_rows,
        )
        runtime = SparkRuntime(client, settings.state_prefix, settings.effective_kafka_bootstrap,
                               settings.spark_master, settings.checkpoint_dir, trigger_s=settings.trigger_s,
                               keep_idle_s=settings.keep_idle_queries_s,
                               keyed_workers=settings.keyed_workers, reshape=reshape, ansi_sql=settings.ansi_sql)
    manager = Manager(client, settings.state_prefix, runtime, wan_config=settings.wan_config, sharing=settings.sharing,
                      containment=settings.containment,
                      defrag_after_removals=settings.defrag_after_removals,
                      limits=Limits(settings.max_tasks_per_dataflow, settings.max_dataflows_per_owner,
                                    settings.max_running_tasks, settings.max_queries))
    kafka = None if settings.dry_run else KafkaProbe(settings.effective_kafka_bootstrap)
    retention = None
    if settings.broker_object_store and settings.broker_retention_batches and not settings.dry_run:
        retention = Retention(ObjectStoreClient(settings.broker_object_store, OBJECT_BUCKET), runtime.read_positions,
                              keep=settings.broker_retention_batches, say=log.warning)
        retention.start()
    return Services(settings, client, manager, kafka, note, principals, retention)
