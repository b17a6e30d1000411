"""Creating and deleting topics against the embedded broker, and the listing a change trusts for a while."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from runtime.broker.topics import Topics

pytestmark = [pytest.mark.kafka]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def names(count: int) -> list[str]:
    stem = uuid.uuid4().hex[:8]
    return [f"topics-{stem}-{index}" for index in range(count)]


def test_a_change_whose_topics_are_known_lists_nothing_and_a_stale_listing_is_refreshed(kafka_bootstrap):
    clock = Clock()
    topics = Topics(kafka_bootstrap, fresh_s=30.0, clock=clock)
    first, second = names(2)
    try:
        assert topics.ensure([first]) == [first]
        listed = topics.listings
        assert topics.ensure([first]) == [], "a topic it made is not made again"
        assert topics.listings == listed, "... and costs no listing"
        assert topics.ensure([first, second]) == [second], "a topic it does not know is looked for and made"
        listed = topics.listings
        clock.now += 31.0
        assert topics.ensure([first, second]) == []
        assert topics.listings == listed + 1, "a listing older than fresh_s is made again"
    finally:
        topics.delete([first, second])
        topics.close()


def test_a_topic_made_by_another_client_is_found_before_it_is_made(kafka_bootstrap):
    topics = Topics(kafka_bootstrap)
    (name,) = names(1)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        topics.existing()  # a fresh listing that does not hold it
        admin.create_topics([NewTopic(name, 1, 1)])
        assert topics.ensure([name]) == [], "it exists: listed again, not created"
    finally:
        topics.delete([name])
        admin.close()
        topics.close()


def test_deleted_topics_leave_the_listing_and_are_made_again_when_wanted(kafka_bootstrap):
    topics = Topics(kafka_bootstrap)
    kept, gone = names(2)
    try:
        topics.ensure([kept, gone])
        topics.delete([gone])
        assert gone not in topics.existing(fresh=False) and kept in topics.existing(fresh=False)
        assert gone not in topics.existing(), "the broker agrees"
        assert topics.ensure([gone]) == [gone]
    finally:
        topics.delete([kept, gone])
        topics.close()


def test_deleting_a_topic_someone_else_deleted_raises_nothing_and_it_can_be_made_again(kafka_bootstrap):
    topics = Topics(kafka_bootstrap)
    (name,) = names(1)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        topics.ensure([name])
        admin.delete_topics([name])
        topics.delete([name])  # known to the listing, gone at the broker
        assert name not in topics.existing(fresh=False)
        assert topics.ensure([name]) == [name]
    finally:
        topics.delete([name])
        admin.close()
        topics.close()
