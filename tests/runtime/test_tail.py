"""Reading a topic as ``sana tail`` does (runtime/broker/tail.py), on the embedded broker: copies dropped by name."""

from __future__ import annotations

import doctest
import threading

import pytest

from runtime.broker import tail
from runtime.exceptions import TailCursorInvalid, TopicNotFound
from tests.fixtures.tail_io import batch, produce

pytestmark = pytest.mark.kafka


def values(records: list[tail.TailRecord]) -> list:
    return [record.to_dict()["value"] for record in records]


def test_docstring_examples():
    result = doctest.testmod(tail)
    assert result.attempted > 0 and result.failed == 0


def test_a_replayed_batch_is_read_once_and_records_without_names_always(kafka_bootstrap, topic_factory):
    topic = topic_factory("tail")
    first_run = batch("q-1", 7, [{"n": 0}, {"n": 1}, {"n": 2}], run="r1")  # cut short by a crash
    replay = batch("q-1", 7, [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}], run="r2")
    plain = [({"plain": 1}, None), ({"plain": 1}, None)]  # sana produce: no names, both kept
    produce(kafka_bootstrap, topic, first_run + plain + replay + batch("q-1", 8, [{"n": 4}], run="r2"))

    position = tail.start(kafka_bootstrap, topic, from_start=True)
    assert values(tail.read(kafka_bootstrap, position, limit=100)) == [
        {"n": 0}, {"n": 1}, {"n": 2}, {"plain": 1}, {"plain": 1}, {"n": 3}, {"n": 4}]
    assert position.offsets == {0: 10}

    raw = tail.start(kafka_bootstrap, topic, from_start=True, raw=True)
    assert len(tail.read(kafka_bootstrap, raw, limit=100)) == 10


def test_a_cursor_continues_after_what_was_read_and_remembers_the_names(kafka_bootstrap, topic_factory):
    topic = topic_factory("tail")
    produce(kafka_bootstrap, topic, batch("q-1", 3, [{"n": n} for n in range(5)]))
    position = tail.start(kafka_bootstrap, topic, from_start=True)
    assert values(tail.read(kafka_bootstrap, position, limit=3)) == [{"n": 0}, {"n": 1}, {"n": 2}]

    produce(kafka_bootstrap, topic, batch("q-1", 3, [{"n": n} for n in range(5)], run="r2"))  # batch 3 replayed
    resumed = tail.Position.from_token(topic, position.token())
    assert values(tail.read(kafka_bootstrap, resumed, limit=100)) == [{"n": 3}, {"n": 4}]
    assert tail.read(kafka_bootstrap, resumed, limit=100) == []
    assert resumed.offsets == {0: 10}


def test_from_now_reads_only_what_comes_after(kafka_bootstrap, topic_factory):
    topic = topic_factory("tail", partitions=2)
    produce(kafka_bootstrap, topic, [({"old": 0}, None)], partition=0)
    produce(kafka_bootstrap, topic, [({"old": 1}, None)], partition=1)
    position = tail.start(kafka_bootstrap, topic, from_start=False)
    assert position.offsets == {0: 1, 1: 1}
    assert tail.read(kafka_bootstrap, position, limit=10) == []

    produce(kafka_bootstrap, topic, [({"new": 1}, None)], partition=1)
    found = tail.read(kafka_bootstrap, position, limit=10)
    assert [(record.partition, record.offset, record.to_dict()["value"]) for record in found] == [(1, 1, {"new": 1})]


def test_a_waiting_read_answers_with_the_records_that_arrive(kafka_bootstrap, topic_factory):
    topic = topic_factory("tail")
    position = tail.start(kafka_bootstrap, topic, from_start=False)
    answer: list = []
    reader = threading.Thread(target=lambda: answer.extend(tail.read(kafka_bootstrap, position, limit=10, wait_s=60)))
    reader.start()
    produce(kafka_bootstrap, topic, batch("q-2", 0, [{"late": 1}]))
    reader.join(90)
    assert not reader.is_alive()
    assert values(answer) == [{"late": 1}]


def test_a_missing_topic_and_a_foreign_cursor_are_refused(kafka_bootstrap, topic_factory):
    with pytest.raises(TopicNotFound, match="no topic 'no-such-topic'"):
        tail.start(kafka_bootstrap, "no-such-topic", from_start=True)
    topic, other = topic_factory("tail"), topic_factory("tail")
    token = tail.start(kafka_bootstrap, topic, from_start=True).token()
    with pytest.raises(TailCursorInvalid, match=f"cursor is for topic '{topic}', not '{other}'"):
        tail.Position.from_token(other, token)
    for bad in ("", "not base64!", "e30", token[:-4]):
        with pytest.raises(TailCursorInvalid):
            tail.Position.from_token(topic, bad)


@pytest.mark.parametrize("names", [
    [[0, "q-1", "3", [[5, 2]]]],           # a range backwards
    [[0, "q-1", "3", [[0, 2], [3, 4]]]],   # ranges that touch (one run is one range)
    [[0, "q-1", 3, [[0, 2]]]],             # a batch that is no string
    [[-1, "q-1", "3", [[0, 2]]]],          # a negative partition
])
def test_names_memory_that_no_read_writes_is_refused(names):
    with pytest.raises(ValueError):
        tail.Names.from_json(names)
