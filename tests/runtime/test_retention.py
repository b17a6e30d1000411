"""Retention on the durable embedded broker (api/retention.py), against the real Tansu on the real object store."""

from __future__ import annotations

import json
import time

import pytest

from api.launcher import Launcher
from api.object_store import BUCKET
from api.retention import ObjectStoreClient, Retention, parse_key, retain
from runtime.broker import rdkafka
from runtime.broker.topics import Topics
from sana.settings import Settings
from tests.fixtures.services import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def write(bootstrap: str, topic: str, numbers: range) -> None:
    """One record per batch, each acknowledged before the next (as a slow source or a micro-batch writer)."""
    producer, failures = rdkafka.producer(bootstrap, **{"linger.ms": 0}), rdkafka.Failures()
    for number in numbers:
        rdkafka.produce_one(producer, topic, json.dumps({"n": number}).encode(), None, failures)
        rdkafka.flush(producer, 30)
    assert not failures.records


def read_from(bootstrap: str, topic: str, offset: int, expect: int, timeout_s: float = 60.0) -> list[tuple[int, int]]:
    """(offset, n) of the records from ``offset`` on, once ``expect`` of them have arrived."""
    consumer = rdkafka.consumer(bootstrap)
    got: list[tuple[int, int]] = []
    try:
        consumer.assign([rdkafka.TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout_s
        while len(got) < expect and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.2):
                if message.error() is None:
                    got.append((message.offset(), json.loads(message.value())["n"]))
        return got
    finally:
        consumer.close()


def batches(store: ObjectStoreClient, topic: str) -> list[int]:
    return sorted(batch.offset for key in store.keys("clusters/") if (batch := parse_key(key)) and batch.topic == topic)


def test_retention_keeps_the_newest_batches_and_everything_a_reader_still_needs(tmp_path):
    settings = Settings(embedded_kafka_port=free_port())
    (tmp_path / "run").mkdir()
    launcher = Launcher(settings, tmp_path / "run")
    launcher.start_broker(tmp_path / "data")
    store = ObjectStoreClient(launcher.objects.endpoint, BUCKET)
    try:
        bootstrap = settings.effective_kafka_bootstrap
        topics = Topics(bootstrap)
        topics.ensure(["read", "unread"])
        topics.close()
        for topic in ("read", "unread"):
            write(bootstrap, topic, range(300))
        assert batches(store, "read") == batches(store, "unread") == list(range(300))

        # "read" has a reader at 120 (it may ask for 120 again), "unread" none; keep 100 batches per partition
        report = retain(store, {"read": {0: 120}}, keep=100)
        assert batches(store, "unread") == list(range(200, 300))  # the newest 100
        assert batches(store, "read") == list(range(120, 300))  # nothing at or past the reader's position
        assert (report.batches, report.deleted) == (600, 200 + 120)
        assert retain(store, {"read": {0: 120}}, keep=100).deleted == 0  # the same round again deletes nothing

        # what was kept reads as before, from the reader's position and from the start
        assert read_from(bootstrap, "read", 120, 180) == [(n, n) for n in range(120, 300)]
        assert read_from(bootstrap, "unread", 0, 100) == [(n, n) for n in range(200, 300)]
        # the broker goes on: offsets continue, the end of a partition answers
        write(bootstrap, "unread", range(300, 310))
        assert read_from(bootstrap, "unread", 305, 5) == [(n, n) for n in range(305, 310)]
        # a topic held (a reader whose position is unknown) keeps everything
        assert retain(store, {"read": None, "unread": {0: 0}}, keep=10).deleted == 0
        # the service's thread: rounds on their own, what /healthz shows of them
        retention = Retention(ObjectStoreClient(launcher.objects.endpoint, BUCKET), lambda: {"read": {0: 300}},
                              keep=50, every_s=0.2)
        retention.start()
        try:
            deadline = time.monotonic() + 30
            while retention.last is None and time.monotonic() < deadline:
                time.sleep(0.1)
            summary = retention.summary()
        finally:
            retention.stop()
        assert summary["last_round"]["deleted"] == (310 - 200 - 50) + (300 - 120 - 50) and summary["error"] is None
        assert (batches(store, "read"), batches(store, "unread")) == (list(range(250, 300)), list(range(260, 310)))
    finally:
        launcher.stop()
