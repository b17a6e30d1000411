"""Creating and deleting topics against the embedded broker, and the listing a change trusts for a while."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient

from runtime.broker.topics import Topics

pytestmark = [pytest.mark.kafka]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def topics(kafka_bootstrap, clock) -> Iterator[Topics]:
    """Topics over the session's broker whose listing ages by ``clock`` (fresh for 30 s)."""
    made = Topics(kafka_bootstrap, fresh_s=30.0, clock=clock)
    yield made
    made.close()


def names(count: int) -> list[str]:
    """Names of topics that do not exist yet (topics left on the session's broker are harmless, as elsewhere)."""
    stem = uuid.uuid4().hex[:8]
    return [f"topics-{stem}-{index}" for index in range(count)]


def test_a_change_whose_topics_are_known_lists_nothing_and_a_stale_listing_is_refreshed(topics, clock):
    first, second = names(2)
    assert topics.ensure([first]) == [first]
    listed = topics.listings
    assert topics.ensure([first]) == [], "a topic it made is not made again"
    assert topics.listings == listed, "... and costs no listing"
    assert topics.ensure([first, second]) == [second], "a topic it does not know is looked for and made"
    listed = topics.listings
    clock.now += 31.0
    assert topics.ensure([first, second]) == []
    assert topics.listings == listed + 1, "a listing older than fresh_s is made again"


def test_a_topic_made_by_another_client_is_found_before_it_is_made(topics, topic_factory):
    topics.existing()  # a fresh listing that does not hold it
    name = topic_factory("topics")
    assert topics.ensure([name]) == [], "it exists: listed again, not created"


def test_deleted_topics_leave_the_listing_and_are_made_again_when_wanted(topics):
    kept, gone = names(2)
    topics.ensure([kept, gone])
    topics.delete([gone])
    assert gone not in topics.existing(fresh=False) and kept in topics.existing(fresh=False)
    assert gone not in topics.existing(), "the broker agrees"
    assert topics.ensure([gone]) == [gone]


def test_deleting_a_topic_someone_else_deleted_raises_nothing_and_it_can_be_made_again(topics, kafka_bootstrap):
    (name,) = names(1)
    topics.ensure([name])
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.delete_topics([name])
    admin.close()
    topics.delete([name])  # known to the listing, gone at the broker
    assert name not in topics.existing(fresh=False)
    assert topics.ensure([name]) == [name]
