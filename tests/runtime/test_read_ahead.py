"""The source reader's slices on the real broker: what a consumer fetched past one slice serves the next slice
(no new assignment, nothing fetched twice) while a backlog waits, a consumer that caught up is unassigned, and
any other order still reads each slice exactly."""

from __future__ import annotations

import json

import pytest

from runtime.broker import rdkafka
from runtime.spark import kafka_source
from runtime.spark.kafka_source import KafkaSlice, read_slice
from tests.fixtures.kafka_io import produce

pytestmark = [pytest.mark.kafka]


def ids(bootstrap: str, topic: str, start: int, end: int, partition: int = 0) -> list[int]:
    batches = read_slice(bootstrap, KafkaSlice(topic, partition, start, end, origins=False))
    return [json.loads(value)["i"] for batch in batches for value in batch.column("value").to_pylist()]


def test_the_next_slice_continues_from_what_was_fetched_ahead(kafka_bootstrap, topic_factory, monkeypatch):
    monkeypatch.setattr(kafka_source, "KEEP_AHEAD_RECORDS", 150)
    topic = topic_factory("ahead")
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(300)))
    assert ids(kafka_bootstrap, topic, 0, 100) == list(range(100))
    ahead = kafka_source._AHEAD[kafka_bootstrap]
    # 200 records wait past offset 100: the consumer stays assigned there, what it fetched ahead queued for the next slice
    assert (ahead.topic, ahead.partition, ahead.fetched_to) == (topic, 0, 100)
    assert ahead.continues(KafkaSlice(topic, 0, 100, 200)) and not ahead.continues(KafkaSlice(topic, 0, 50, 200))
    assert ids(kafka_bootstrap, topic, 100, 180) == list(range(100, 180))
    # 120 wait past 180, under the threshold: unassigned, and the next slice is assigned afresh
    assert kafka_bootstrap not in kafka_source._AHEAD
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(300, 350)))  # records written after the fetch ahead
    assert ids(kafka_bootstrap, topic, 180, 350) == list(range(180, 350))


def test_a_consumer_that_caught_up_is_unassigned_and_stops_asking_the_broker(kafka_bootstrap, topic_factory):
    """At a partition's end an assigned consumer would fetch every fetch.wait.max.ms until the next batch."""
    topic = topic_factory("caught-up")
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(40)))
    assert ids(kafka_bootstrap, topic, 0, 40) == list(range(40))
    assert kafka_bootstrap not in kafka_source._AHEAD
    assert kafka_source._CONSUMERS[kafka_bootstrap].assignment() == []
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(40, 60)))
    assert ids(kafka_bootstrap, topic, 40, 60) == list(range(40, 60)), "the next batch's slice, assigned afresh"


def test_a_replayed_or_interleaved_slice_is_read_from_its_own_start(kafka_bootstrap, topic_factory):
    first, second = topic_factory("first"), topic_factory("second", partitions=2)
    produce(kafka_bootstrap, first, ({"i": i} for i in range(200)))
    producer = rdkafka.producer(kafka_bootstrap)
    for i in range(40):  # twenty to each partition (a partitioner may put keyless records all in one)
        producer.produce(second, json.dumps({"i": 1000 + i}).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    rdkafka.close(producer)
    assert ids(kafka_bootstrap, first, 0, 120) == list(range(120))
    assert ids(kafka_bootstrap, first, 60, 120) == list(range(60, 120)), "a replay starts before the carry"
    assert ids(kafka_bootstrap, first, 120, 150) == list(range(120, 150))
    other = ids(kafka_bootstrap, second, 0, 10, partition=0) + ids(kafka_bootstrap, second, 0, 10, partition=1)
    assert len(other) == len(set(other)) == 20 and all(1000 <= i < 1040 for i in other)
    assert ids(kafka_bootstrap, first, 150, 200) == list(range(150, 200)), "after another partition: reassigned"
    assert ids(kafka_bootstrap, first, 190, 200) == list(range(190, 200)), "a slice already read, read again"


def test_a_link_consumer_left_unused_is_closed_at_the_next_read(kafka_bootstrap, topic_factory):
    """An address the runtime stopped reading through (a link's proxy gone) is not reconnected to forever."""
    gone = "127.0.0.1:9"  # nothing listens: librdkafka would retry it every second
    topic = topic_factory("after")
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(5)))
    kafka_source._consumer(gone, remote=True)
    assert gone in kafka_source._CONSUMERS
    kafka_source._REMOTE_USED[gone] -= kafka_source.REMOTE_IDLE_S + 1  # as if last used two minutes ago
    assert ids(kafka_bootstrap, topic, 0, 5) == list(range(5))
    assert gone not in kafka_source._CONSUMERS and gone not in kafka_source._REMOTE_USED


def test_a_read_over_a_link_keeps_what_it_fetched_ahead_until_nothing_waits(kafka_bootstrap, topic_factory):
    """Over a link what was fetched ahead is the link's bandwidth: a small backlog keeps the consumer assigned."""
    topic = topic_factory("link")
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(300)))

    def read(start: int, end: int) -> list[int]:
        batches = read_slice(kafka_bootstrap, KafkaSlice(topic, 0, start, end, origins=False), remote=True)
        return [json.loads(value)["i"] for batch in batches for value in batch.column("value").to_pylist()]

    assert read(0, 100) == list(range(100))
    assert kafka_source._AHEAD[kafka_bootstrap].fetched_to == 100  # 200 wait, under KEEP_AHEAD_RECORDS: kept
    assert read(100, 300) == list(range(100, 300))
    assert kafka_bootstrap not in kafka_source._AHEAD  # caught up: unassigned
    kafka_source._REMOTE_USED.pop(kafka_bootstrap, None)
    kafka_source._drop_client(kafka_source._CONSUMERS, kafka_bootstrap)
