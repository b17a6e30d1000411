"""End offsets that are right on Tansu as well as on Apache Kafka.

Tansu answers ListOffsets(LATEST) with the base offset of the last record
batch + 1 instead of the high watermark (measured on the embedded Tansu:
``tests/runtime/test_kafka_source.py``), so a reader that trusts ``end_offsets()`` silently skips the tail
of the last batch. The workaround: take L from ListOffsets; when L > 0 fetch
the record at L-1 with a 1-byte fetch limit (the broker still returns the
whole batch holding it) and use max(L, last offset seen + 1, the fetch
response's high watermark). On a correct broker this returns L.

A stream reader asks every trigger; its :class:`EndProbe` fetches at the end
it last found (at L the first time), answered by the fetch response's high
watermark. It does not
trust ListOffsets to move with the log: a probe that read the last batch only
where L had moved was withdrawn, because on Tansu's object-store engine (the
durable ``sana up``) ListOffsets can stay put while a batch is appended (it
moved on every other write in ``tests/runtime/test_kafka_source.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from kafka import KafkaConsumer, TopicPartition

PROBE_TIMEOUT_S = 5.0


def probe_consumer(bootstrap: str, **overrides) -> KafkaConsumer:
    """A consumer without a group, fetching as little as the broker allows."""
    options = dict(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        fetch_max_bytes=1,
        max_partition_fetch_bytes=1,
        fetch_max_wait_ms=50,
        request_timeout_ms=10_000,
        reconnect_backoff_max_ms=1_000,
    )
    options.update(overrides)
    return KafkaConsumer(**options)


def partitions_of(consumer: KafkaConsumer, topic: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[int]:
    """The partition ids of ``topic`` (waits for metadata; [] if it does not exist)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = consumer.partitions_for_topic(topic)
        if found or time.monotonic() >= deadline:
            return sorted(found or ())
        time.sleep(0.05)


def end_offsets(consumer: KafkaConsumer, partitions: Iterable[TopicPartition],
                timeout_s: float = PROBE_TIMEOUT_S) -> dict[TopicPartition, int]:
    """The true end offset (next offset to be written) of every partition.

    ``consumer`` should come from :func:`probe_consumer`; its assignment is
    replaced. Raises ``kafka.errors.KafkaError`` when the broker does not answer.
    """
    partitions = list(partitions)
    if not partitions:
        return {}
    listed = consumer.end_offsets(partitions, timeout_ms=int(timeout_s * 1000))
    return _past_last_batch(consumer, {tp: int(offset) for tp, offset in listed.items()}, timeout_s)


def _past_last_batch(consumer: KafkaConsumer, listed: Mapping[TopicPartition, int], timeout_s: float,
                     answered: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
    """True ends, from ListOffsets' ``listed`` L: the batch holding L-1 is read where L > 0.

    ``answered`` (when given) receives the partitions whose end is known for sure: no batch, or it was read."""
    result = dict(listed)
    answered = set() if answered is None else answered
    answered.update(tp for tp, offset in result.items() if offset <= 0)
    probe = [tp for tp, offset in result.items() if offset > 0]
    if not probe:
        return result
    consumer.assign(probe)
    for tp in probe:
        consumer.seek(tp, result[tp] - 1)
    deadline = time.monotonic() + timeout_s
    while not answered.issuperset(probe) and time.monotonic() < deadline:
        batches = consumer.poll(timeout_ms=100, max_records=100_000)
        for tp, records in batches.items():
            if records:
                result[tp] = max(result[tp], records[-1].offset + 1)
                answered.add(tp)
        for tp in probe:
            high = consumer.highwater(tp)
            if high is not None:
                result[tp] = max(result[tp], int(high))
                answered.add(tp)
    consumer.assign([])
    return result


def topic_end_offsets(consumer: KafkaConsumer, topics: Iterable[str]) -> dict[str, dict[int, int]]:
    """``{topic: {partition: end offset}}`` for whole topics (missing topics are left out)."""
    return _by_topic(end_offsets(consumer, _whole_topics(consumer, topics, PROBE_TIMEOUT_S)))


def _whole_topics(consumer: KafkaConsumer, topics: Iterable[str], timeout_s: float) -> list[TopicPartition]:
    return [TopicPartition(topic, partition) for topic in topics for partition in partitions_of(consumer, topic, timeout_s)]


def _by_topic(ends: Mapping[TopicPartition, int]) -> dict[str, dict[int, int]]:
    result: dict[str, dict[int, int]] = {}
    for tp, offset in ends.items():
        result.setdefault(tp.topic, {})[tp.partition] = offset
    return result


class EndProbe:
    """End offsets of whole topics, asked again and again (a stream reader's every trigger).

    The probe fetches at the end it last found (at ListOffsets' L the first time) and answers with the fetch
    response's high watermark: one fetch request for all partitions, no ListOffsets after the first, and no
    batch read again (:func:`end_offsets` reads the last batch every time, thousands of
    records for a backlog written with linger); only a batch written since the last answer is parsed. The
    high watermark is the end on Apache Kafka and on both of Tansu's engines.

    The answer must come from a fetch sent during the call: kafka-python's consumer sends the next fetch as
    it takes a response, and that fetch's response, taken by the broker before a later write, would be
    accepted by the next call at the same offset and answer an old end. So each call first pauses the
    partitions, waits for the fetch in flight and drops its response (:meth:`_settle`). That needs the
    consumer's record of nodes with a fetch in flight, which kafka-python keeps privately; without it the
    probe answers with :func:`end_offsets` every time (right, and slower).
    A partition whose fetch does not answer within the timeout keeps its last end: a short end only delays
    records to a later micro-batch. A probe lives as long as its reader (one run of a query).
    Raises ``kafka.errors.KafkaError`` when the broker does not answer (the caller makes a new probe).
    """

    #: How long the broker holds a fetch at the end of an idle partition; every trigger waits for it.
    FETCH_WAIT_MS = 5

    def __init__(self, bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._consumer = probe_consumer(bootstrap, fetch_max_wait_ms=self.FETCH_WAIT_MS)
        self._ends: dict[TopicPartition, int] = {}  # partition -> the end last found
        self.fetches_at_the_end = self._in_flight() is not None

    def topic_ends(self, topics: Iterable[str]) -> dict[str, dict[int, int]]:
        wanted = _whole_topics(self._consumer, topics, self.timeout_s)
        if not wanted:
            return {}
        if not self.fetches_at_the_end:
            return _by_topic(end_offsets(self._consumer, wanted, self.timeout_s))
        deadline = time.monotonic() + self.timeout_s
        self._settle(deadline)
        first = [tp for tp in wanted if tp not in self._ends]
        if first:  # ListOffsets' L is at most the end and an offset the partition holds: a place to fetch at
            listed = self._consumer.end_offsets(first, timeout_ms=int(self.timeout_s * 1000))
            self._ends.update((tp, int(offset)) for tp, offset in listed.items())
        ends = {tp: self._ends[tp] for tp in wanted}
        self._consumer.assign(wanted)
        for tp in wanted:
            self._consumer.seek(tp, ends[tp])
        pending = set(wanted)
        while pending and time.monotonic() < deadline:
            self._consumer.poll(timeout_ms=self.FETCH_WAIT_MS, max_records=100_000)  # records: a new batch at most
            for tp in list(pending):
                high = self._consumer.highwater(tp)
                if high is not None:
                    ends[tp] = int(high)
                    pending.discard(tp)
        self._ends.update(ends)
        return _by_topic(ends)

    def _settle(self, deadline: float) -> None:
        """No fetch in flight and no response left over: pause what is assigned, wait for the fetch in flight,
        then drop every partition so that its response is discarded unread."""
        assigned = list(self._consumer.assignment())
        if assigned:
            self._consumer.pause(*assigned)
        while self._in_flight() and time.monotonic() < deadline:
            self._consumer.poll(timeout_ms=1)
        self._consumer.assign([])
        self._consumer.poll(timeout_ms=0)  # a parked response of a partition no longer assigned is dropped

    def _in_flight(self) -> bool | None:
        """Whether a fetch request is in flight (None: this kafka-python does not say)."""
        pending = getattr(getattr(self._consumer, "_fetcher", None), "_nodes_with_pending_fetch_requests", None)
        return None if pending is None else bool(pending)

    def close(self) -> None:
        self._consumer.close()


def lag(latest: Mapping[str, Mapping[int, int]], done: Mapping[str, Mapping[int, int]]) -> dict[str, dict[int, int]]:
    """Records not yet processed, per topic and partition.

    >>> lag({"t": {0: 10, 1: 4}}, {"t": {0: 7}})
    {'t': {0: 3, 1: 4}}
    """
    return {
        topic: {partition: max(0, end - done.get(topic, {}).get(partition, 0)) for partition, end in sorted(ends.items())}
        for topic, ends in latest.items()
    }
