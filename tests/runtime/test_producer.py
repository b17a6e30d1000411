"""The driver-side batch producer: records not acknowledged are sent once more through a new producer."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from runtime.broker import producer as module
from runtime.exceptions import RuntimeFailure


class FakeMessage:
    def __init__(self, topic: str, value: bytes, headers) -> None:
        self._record = (topic, value, headers)

    def topic(self) -> str:
        return self._record[0]

    def value(self) -> bytes:
        return self._record[1]

    def headers(self):
        return self._record[2]


class FakeProducer:
    """librdkafka's producer, leaving every record unacknowledged while ``stuck``; remembers what was sent.

    As the real one configured with ``delivery.report.only.error``: a delivered record gets no report, a
    purged one gets a failure report at the next flush.
    """

    made: list["FakeProducer"] = []
    stuck_instances = 1

    def __init__(self, config) -> None:
        self.sent: list[tuple[str, bytes, dict]] = []
        self.queued: list[tuple[FakeMessage, object]] = []
        self.reports: list[tuple[FakeMessage, object]] = []
        self.stuck = len(FakeProducer.made) < FakeProducer.stuck_instances
        FakeProducer.made.append(self)

    def produce(self, topic, value, headers, on_delivery):
        self.sent.append((topic, value, dict(headers)))
        if self.stuck:
            self.queued.append((FakeMessage(topic, value, headers), on_delivery))

    def flush(self, timeout):
        from confluent_kafka import KafkaError

        for message, report in self.reports:
            report(KafkaError(KafkaError._PURGE_QUEUE), message)
        self.reports = []
        return len(self.queued)

    def purge(self, in_queue=True, in_flight=True, blocking=True):
        self.reports.extend(self.queued)
        self.queued = []


@pytest.fixture
def fake_kafka(monkeypatch):
    from runtime.broker import rdkafka

    FakeProducer.made = []
    monkeypatch.setattr(rdkafka, "Producer", FakeProducer)
    return FakeProducer


TABLE = pa.table({"topic": ["a", "b", "a"], "value": ["1", "2", "3"]})


def test_unacknowledged_records_are_resent_once_with_their_names(fake_kafka):
    fake_kafka.stuck_instances = 1
    producer = module.BatchProducer("nowhere:9092")
    assert producer.send_table(TABLE, [("sana.batch", b"7")]) == 3
    first, second = fake_kafka.made
    assert [h["sana.seq"] for _, _, h in second.sent] == [b"0", b"1", b"2"], "a resent record must keep its sana.seq"
    assert second.sent == first.sent and producer.resent == 3


def test_records_still_unacknowledged_fail_the_batch(fake_kafka):
    fake_kafka.stuck_instances = 2
    producer = module.BatchProducer("nowhere:9092")
    with pytest.raises(RuntimeFailure, match="could not write 3 of 3 record"):
        producer.send_table(TABLE, [])


def test_a_retired_topic_gives_the_next_batch_a_fresh_producer(fake_kafka):
    fake_kafka.stuck_instances = 0
    producer = module.BatchProducer("nowhere:9092")
    producer.send_table(TABLE, [])
    producer.retire({"never-written"})
    producer.send_table(TABLE, [])
    assert len(fake_kafka.made) == 1, "a topic it never wrote does not renew the producer"
    producer.retire({"b", "gone"})
    producer.send_table(pa.table({"topic": ["a"], "value": ["4"]}), [])
    assert len(fake_kafka.made) == 2 and producer.renewed == 1
    assert fake_kafka.made[1].sent == [("a", b"4", {"sana.seq": b"0"})]


@pytest.mark.kafka
def test_a_producer_does_not_spin_after_a_topic_it_wrote_is_deleted(kafka_bootstrap, monkeypatch):
    """A producer must not keep asking the broker about a topic it wrote once that topic is deleted (kafka-python
    3.0 spun a core so): a query retires the topic before it is deleted, and metadata is refreshed every 0.3 s."""
    import resource
    import time
    import uuid

    from runtime.broker.topics import Topics

    gone, stays = f"gone-{uuid.uuid4().hex[:8]}", f"stays-{uuid.uuid4().hex[:8]}"
    topics = Topics(kafka_bootstrap, 1)
    topics.ensure([gone, stays])
    producer = module.BatchProducer(kafka_bootstrap, **{"topic.metadata.refresh.interval.ms": 300})
    try:
        producer.send_table(pa.table({"topic": [gone, stays], "value": ["1", "2"]}), [])
        producer.retire({gone})
        topics.delete([gone])
        producer.send_table(pa.table({"topic": [stays], "value": ["3"]}), [])

        def cpu_s() -> float:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            return usage.ru_utime + usage.ru_stime

        before, began = cpu_s(), time.monotonic()
        for value in range(8):  # metadata refreshed ~10 times meanwhile
            producer.send_table(pa.table({"topic": [stays], "value": [str(value)]}), [])
            time.sleep(0.4)
        cores = (cpu_s() - before) / (time.monotonic() - began)
        assert cores < 0.5, f"the process used {cores:.2f} cores while sending 8 records: the producer spins"
        assert producer.renewed == 1
    finally:
        producer.close()
        topics.close()


@pytest.mark.kafka
def test_a_worker_producer_is_renewed_once_a_topic_it_wrote_goes_unwritten(kafka_bootstrap, monkeypatch):
    """The executor-side writer shares one producer per Python worker among all queries, and cannot know
    when a topic is deleted: a topic idle for TOPIC_IDLE_RENEW_S renews the producer, before the next write
    or, if the worker writes nothing more, by the reaper thread."""
    import resource
    import time
    import uuid

    from runtime.broker import rdkafka
    from runtime.broker.topics import Topics
    from runtime.spark import kafka_source

    library = rdkafka.Producer
    monkeypatch.setattr(rdkafka, "Producer", lambda config: library({**config, "topic.metadata.refresh.interval.ms": 300}))
    monkeypatch.setattr(kafka_source, "_PRODUCERS", {})
    monkeypatch.setattr(kafka_source, "TOPIC_IDLE_RENEW_S", 1.0)
    monkeypatch.setattr(kafka_source, "REAP_EVERY_S", 0.2)
    gone, stays = f"gone-{uuid.uuid4().hex[:8]}", f"stays-{uuid.uuid4().hex[:8]}"
    topics = Topics(kafka_bootstrap, 1)
    topics.ensure([gone, stays])

    def write(*names: str) -> None:
        batch = pa.RecordBatch.from_pydict({"topic": list(names), "value": ["x"] * len(names)})
        assert kafka_source.produce_rows(kafka_bootstrap, iter([batch]), [("sana.writer", b"t")], 0) == len(names)

    def cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    try:
        write(gone, stays)
        worker = kafka_source._PRODUCERS[kafka_bootstrap]
        topics.delete([gone])
        deadline = time.monotonic() + 10
        while worker.renewed == 0 and time.monotonic() < deadline:  # the writes keep `stays` fresh, not `gone`
            write(stays)
            time.sleep(0.3)
        assert worker.renewed == 1, "a producer whose topic went unwritten must be renewed"
        before, began = cpu_s(), time.monotonic()
        for _ in range(8):
            write(stays)
            time.sleep(0.3)
        cores = (cpu_s() - before) / (time.monotonic() - began)
        assert cores < 0.5, f"the process used {cores:.2f} cores while writing 8 records: the producer spins"
        assert worker.renewed == 1, "a producer whose topics are all written is kept"

        write(stays)  # now the worker goes idle: the reaper drops the producer with nothing left to write
        deadline = time.monotonic() + 10
        while worker.producer is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert worker.producer is None and worker.renewed == 2
    finally:
        worker = kafka_source._PRODUCERS.get(kafka_bootstrap)
        if worker is not None:
            with worker.lock:
                worker.drop()
        topics.close()


def test_kafka_python_checksums_record_batches_in_c():
    """Without the ``crc32c`` package kafka-python computes every batch's CRC-32C in pure Python, which doubled the
    driver's CPU per record written (benchmarks/write_path.py); the dependency must really be installed and used."""
    from kafka.record import util

    assert util.crc32c_c is not None
    assert util.calc_crc32c(memoryview(b"123456789")) == 0xE3069283  # the CRC-32C check value


def test_a_retired_topics_rows_are_not_written_and_the_others_keep_their_names(fake_kafka):
    fake_kafka.stuck_instances = 0
    producer = module.BatchProducer("nowhere:9092")
    producer.retire({"b"})
    assert producer.send_table(TABLE, []) == 2, "a batch planned before still computes b's rows: they are dropped"
    assert [(topic, h["sana.seq"]) for topic, _, h in fake_kafka.made[0].sent] == [("a", b"0"), ("a", b"2")]
    producer.resume({"b"})
    assert producer.send_table(TABLE, []) == 3
    assert [topic for topic, _, _ in fake_kafka.made[-1].sent][-3:] == ["a", "b", "a"]


@pytest.fixture
def held_flush(fake_kafka, monkeypatch):
    """A send's flush waits until ``release`` is set; ``flushing`` is set once a send is in it."""
    fake_kafka.stuck_instances = 0
    flushing, release = threading.Event(), threading.Event()
    flush = FakeProducer.flush

    def slow_flush(self, timeout):
        flushing.set()
        release.wait(5)
        return flush(self, timeout)

    monkeypatch.setattr(FakeProducer, "flush", slow_flush)
    yield flushing, release
    release.set()


def test_retiring_a_topic_waits_for_the_send_in_progress(fake_kafka, held_flush):
    """What a send in progress writes is written before retire() returns; nothing after it."""
    flushing, release = held_flush
    producer = module.BatchProducer("nowhere:9092")
    sender = threading.Thread(target=producer.send_table, args=(TABLE, []))
    sender.start()
    assert flushing.wait(5)
    retired = threading.Thread(target=producer.retire, args=({"b"},))
    retired.start()
    retired.join(0.3)
    assert retired.is_alive(), "retire() returned while a send was in progress"
    release.set()
    sender.join(5)
    retired.join(5)
    assert not retired.is_alive()
    assert [topic for topic, _, _ in fake_kafka.made[0].sent] == ["a", "b", "a"]


def test_retiring_or_resuming_a_topic_the_send_in_progress_does_not_write_returns_at_once(fake_kafka, held_flush):
    """A change need not wait for a batch's write unless that write carries a topic it retires; rows of a topic
    resumed meanwhile are still dropped by that send (it was planned before)."""
    flushing, release = held_flush
    producer = module.BatchProducer("nowhere:9092")
    producer.retire({"b"})
    sender = threading.Thread(target=producer.send_table, args=(TABLE, []))
    sender.start()
    assert flushing.wait(5)
    try:
        for call, topics in ((producer.retire, {"c"}), (producer.resume, {"b"}), (producer.retire, {"b"})):
            done = threading.Thread(target=call, args=(topics,))
            done.start()
            done.join(2)
            assert not done.is_alive(), f"{call.__name__}({topics}) waited for a send that does not write them"
    finally:
        release.set()
    sender.join(5)
    assert [topic for topic, _, _ in fake_kafka.made[0].sent] == ["a", "a"]
    assert producer.send_table(TABLE, []) == 2, "c and b are retired now"


def test_a_tables_seq_column_names_its_records(fake_kafka):
    """A fragment's output names each row within its own output (its seq column), not by its place in the batch."""
    fake_kafka.stuck_instances = 0
    producer = module.BatchProducer("nowhere:9092")
    table = pa.table({"topic": ["a", "b", "a"], "value": ["1", "2", "3"], "seq": [7, 1 << 55, 8]})
    producer.retire({"b"})
    assert producer.send_table(table, []) == 2
    assert [(topic, h["sana.seq"]) for topic, _, h in fake_kafka.made[0].sent] == [("a", b"7"), ("a", b"8")]
