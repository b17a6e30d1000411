"""How the ``sana_kafka`` reader turns librdkafka's records into Arrow (pure logic: records stand in for Message)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from runtime.spark.kafka_source import _arrow, _good

SANA_HEADERS = [("sana.writer", b"q1"), ("sana.run", b"r9"), ("sana.batch", b"4"), ("sana.seq", b"17")]


class Record:
    def __init__(self, offset: int, value: bytes | None, headers=None, error: KafkaError | None = None) -> None:
        self._offset, self._value, self._headers, self._error = offset, value, headers, error

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def headers(self):
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error


def test_values_become_strings_and_origins_name_writer_batch_seq_and_partition():
    records = [Record(0, b'{"a": 1}', SANA_HEADERS), Record(1, b'{"a": 2}', list(reversed(SANA_HEADERS))),
               Record(2, b'{"a": 3}')]
    batch = _arrow("t", 3, records)
    assert batch.column("topic").to_pylist() == ["t", "t", "t"]
    assert batch.column("value").to_pylist() == ['{"a": 1}', '{"a": 2}', '{"a": 3}']
    assert batch.column("origin").to_pylist() == ["q1|4|17|3", "q1|4|17|3", None], \
        "headers in any order name the record; a record without them has no origin"


def test_origins_not_asked_are_null_and_headers_are_not_read():
    class NoHeaders(Record):
        def headers(self):
            raise AssertionError("headers read though no origin was asked")

    batch = _arrow("t", 0, [NoHeaders(0, b"1", SANA_HEADERS)], origins=False)
    assert batch.column("origin").to_pylist() == [None] and batch.column("value").to_pylist() == ["1"]


def test_incomplete_sana_headers_give_no_origin():
    partial = [("sana.writer", b"q1"), ("sana.batch", b"4")]
    batch = _arrow("t", 0, [Record(0, b"1", partial), Record(1, b"2", [("other", b"x")])])
    assert batch.column("origin").to_pylist() == [None, None]


def test_a_value_that_is_not_utf8_is_kept_with_replacement_characters_and_a_tombstone_is_dropped():
    batch = _arrow("t", 0, [Record(0, b"ok"), Record(1, b"\xff\xfebad"), Record(2, None)])
    assert batch.column("value").to_pylist() == ["ok", "\ufffd\ufffdbad"]


def test_a_transient_error_is_skipped_and_a_fatal_one_raises():
    transient = KafkaError(KafkaError._TRANSPORT, "broker went away", fatal=False, retriable=True)
    records = [Record(5, b"x"), Record(-1, None, error=transient), Record(6, b"y")]
    assert [record.offset() for record in _good(records)] == [5, 6]
    fatal = KafkaError(KafkaError._FATAL, "fenced", fatal=True)
    with pytest.raises(KafkaException):
        _good([Record(5, b"x"), Record(-1, None, error=fatal)])
