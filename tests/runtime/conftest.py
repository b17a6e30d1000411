"""Fixtures for the Spark runtime tests: the embedded broker, topics, managers over a real SparkRuntime."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaAdminClient

from manager.service import Manager
from runtime.spark.runtime import SparkRuntime
from tests.fixtures.kafka_io import topic_maker
from tests.fixtures.services import kafka_bootstrap  # noqa: F401 (fixture)

SPARK_MASTER = "local[2]"


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> Callable[..., str]:  # noqa: F811
    """Make a fresh topic with ``partitions`` partitions; returns its name."""
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    yield topic_maker(admin)
    admin.close()


@pytest.fixture
def runtime_factory(redis_client, state_prefix, kafka_bootstrap, tmp_path) -> Iterator[Callable[..., SparkRuntime]]:  # noqa: F811
    """SparkRuntimes over the test's Redis prefix and a temporary checkpoint directory; closed afterwards."""
    made: list[SparkRuntime] = []

    def make(**options) -> SparkRuntime:
        runtime = SparkRuntime(redis_client, state_prefix, kafka_bootstrap, SPARK_MASTER, tmp_path / "checkpoints",
                               warm=False, **options)
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        runtime.close()


@pytest.fixture
def manager_factory(redis_client, state_prefix, runtime_factory) -> Callable[..., Manager]:
    """A started Manager driving a real SparkRuntime (several share the prefix: a restarted manager)."""

    def make(**options) -> Manager:
        manager = Manager(redis_client, state_prefix, runtime_factory(**options))
        manager.start()
        return manager

    return make
