"""The data plane's Kafka clients on librdkafka (confluent-kafka): reading record ranges, producing tables.

Every record Sana reads or writes goes through here; kafka-python is kept for
admin and metadata calls (topics, end offsets), which run a few times per
micro-batch and where its blocking API is simpler. librdkafka does per
record in C what kafka-python does in Python: on the embedded broker,
consuming costs about 1.7 us of CPU per record against 16, producing about 3
against 32 (docs/runtime.md, "Which Kafka client does what").

Producing keeps the guarantees of the path it replaced:

- acks from all replicas, and an idempotent producer where the caller asks:
  a request whose answer is lost is retried without writing its records twice;
- delivery reports only for failures (``delivery.report.only.error``): a
  record costs no Python call once produced, and the failed ones come back
  with their topic, value and headers, so they can be sent again as they were
  (same ``sana.seq``);
- records still queued when the flush times out are purged and reported as
  failed, never left to be sent later behind the caller's back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from runtime.exceptions import RuntimeFailure

log = logging.getLogger("sana.librdkafka")

Headers = Sequence[tuple[str, bytes]]
POLL_WHEN_FULL_S = 0.05


def consumer(bootstrap: str, **overrides) -> Consumer:
    """A consumer for manual assignment: no group membership, no commits (offsets live in Spark's checkpoint).

    librdkafka wants a ``group.id`` even so; it is never joined.
    """
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "sana-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
        "fetch.max.bytes": 32 << 20,
        "max.partition.fetch.bytes": 8 << 20,
        # A reader reads up to a known end offset: prefetch no more than one batch's worth beyond it.
        "queued.max.messages.kbytes": 32 << 10,
        "socket.timeout.ms": 20_000,
        "reconnect.backoff.max.ms": 1_000,
        "logger": log,
    }
    config.update(overrides)
    return Consumer(config)


def producer(bootstrap: str, idempotent: bool = True, delivery_timeout_ms: int = 10_000, **overrides) -> Producer:
    """A producer whose delivery reports name only failed records (see :class:`Failures`)."""
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": idempotent,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
        "message.timeout.ms": delivery_timeout_ms,
        "request.timeout.ms": min(5_000, delivery_timeout_ms),
        "retry.backoff.ms": 200,
        "reconnect.backoff.max.ms": 1_000,
        "delivery.report.only.error": True,
        "logger": log,
    }
    config.update(overrides)
    return Producer(config)


class Failures:
    """A producer's ``on_delivery`` callback keeping the records the broker did not take."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, list[tuple[str, bytes]]]] = []
        self.errors: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.records.append((message.topic(), message.value(), list(message.headers() or ())))
            self.errors.append(error)

    def take(self) -> list[tuple[str, bytes, list[tuple[str, bytes]]]]:
        records, self.records, self.errors = self.records, [], []
        return records


def produce_one(client: Producer, topic: str, value: bytes, headers, on_delivery: Failures) -> None:
    """Queue one record, waiting for room when the local queue is full."""
    while True:
        try:
            client.produce(topic, value, headers=headers, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            client.poll(POLL_WHEN_FULL_S)


def produce_table(client: Producer, table: pa.Table | pa.RecordBatch, headers: Headers, failures: Failures,
                  seq_base: int | None = 0, skip: Container[str] = ()) -> int:
    """Queue rows ``(topic, value)`` of ``table``, but those for a topic in ``skip``; returns how many.
    :func:`flush` says which failed.

    Every record gets ``headers``, and with ``seq_base`` also ``sana.seq``: the row's ``seq`` column where the
    table has one (a fragment's output names its rows per output, :func:`runtime.spark.sql_text.encode_sql`), else
    ``seq_base`` + its row index (a skipped row keeps its index: the others are named as without the skip). Values
    go to librdkafka as the bytes of the Arrow column (no str per record).
    """
    rows = table.num_rows
    if rows == 0:
        return 0
    values = pc.cast(table.column("value"), pa.binary()).to_pylist()
    topics = table.column("topic").to_pylist()
    if seq_base is not None and "seq" in table.schema.names:
        seqs: Iterable[int] = table.column("seq").to_pylist()
    else:
        seqs = range(seq_base or 0, (seq_base or 0) + rows)
    headers = list(headers)
    produce = client.produce
    queued = 0
    for seq, topic, value in zip(seqs, topics, values):
        if topic in skip:
            continue
        named = headers if seq_base is None else [*headers, ("sana.seq", b"%d" % seq)]
        try:
            produce(topic, value, headers=named, on_delivery=failures)
        except BufferError:
            produce_one(client, topic, value, named, failures)
        queued += 1
    return queued


def produce_records(client: Producer, records: Iterable[tuple[str, bytes, list[tuple[str, bytes]]]],
                    failures: Failures) -> int:
    """Queue records as they are (a resend of :meth:`Failures.take`); returns how many."""
    count = 0
    for topic, value, headers in records:
        produce_one(client, topic, value, headers, failures)
        count += 1
    return count


def flush(client: Producer, timeout_s: float) -> None:
    """Wait for every queued record's outcome; records still queued at ``timeout_s`` are purged as failed."""
    if client.flush(timeout_s) > 0:
        client.purge(in_queue=True, in_flight=True, blocking=False)
        client.flush(1.0)  # serve the purged records' failure reports


def close(client: Consumer | Producer | None) -> None:
    """Close a client, whatever state it is in (a consumer is closed; a producer is dropped after a purge)."""
    if client is None:
        return
    try:
        if isinstance(client, Consumer):
            client.close()
        else:
            client.purge(in_queue=True, in_flight=True, blocking=False)
            client.flush(0)
    except (KafkaException, RuntimeError):  # a broken or closed client is dropped whatever it says
        pass


class Sender:
    """Tables produced through one producer; records the broker did not take are sent once more through a new one.

    ``make`` builds the producer (again after a failure: a fresh client, fresh connections). The first
    producer is built on the first send.
    """

    def __init__(self, make: Callable[[], Producer], describe: str, flush_timeout_s: float) -> None:
        self._make = make
        self._client: Producer | None = None
        self._failures = Failures()
        self.describe = describe
        self.flush_timeout_s = flush_timeout_s
        self.resent = 0

    @property
    def live(self) -> bool:
        return self._client is not None

    def client(self) -> Producer:
        if self._client is None:
            self._client = self._make()
        return self._client

    def send(self, tables: Iterable[pa.Table | pa.RecordBatch], headers: Headers, seq_base: int | None = 0,
             skip: Container[str] = ()) -> int:
        """Produce every table's rows but those for a topic in ``skip``; returns how many once all are acknowledged.

        Raises :class:`RuntimeFailure` if some are still not acknowledged after one resend.
        """
        count = rows = 0
        try:
            for table in tables:
                base = None if seq_base is None else seq_base + rows
                count += produce_table(self.client(), table, headers, self._failures, base, skip)
                rows += table.num_rows
            if count == 0:
                return 0
            flush(self.client(), self.flush_timeout_s)
            failed = self._failures.take()
            if failed:
                log.warning("%d of %d record(s) not acknowledged (%s); sending them again through a new producer",
                            len(failed), count, self.describe)
                self.reset()
                self.resent += len(failed)
                produce_records(self.client(), failed, self._failures)
                flush(self.client(), self.flush_timeout_s)
                failed = self._failures.take()
        except KafkaException as error:  # the client itself gave up (a fatal error): nothing it holds is trusted
            self.reset()
            raise RuntimeFailure(f"could not write to Kafka at {self.describe}: {error}") from None
        if failed:
            self.reset()
            raise RuntimeFailure(f"could not write {len(failed)} of {count} record(s) to Kafka at {self.describe}")
        return count

    def reset(self) -> None:
        """Drop the producer (what it still holds is purged); the next send builds a new one."""
        client, self._client = self._client, None
        close(client)
        self._failures.take()


__all__ = ["Consumer", "Failures", "KafkaError", "KafkaException", "Producer", "Sender", "TopicPartition", "close", "consumer",
           "flush", "produce_one", "produce_records", "produce_table", "producer"]
