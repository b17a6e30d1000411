"""``sana_kafka``: a PySpark Python Data Source reading and writing Kafka with kafka-python.

No JVM Kafka connector is needed (it cannot be downloaded here).

Reading (streaming): one source reads several topics with manual partition
assignment and yields raw records as ``(topic string, value string)``; the
fragment parses each topic's JSON with its declared schema. Offsets are
``{topic: {partition: next offset}}``: Spark keeps them in the query's
checkpoint (offset log), so a query restarted from its checkpoint resumes
exactly where its last committed batch ended. End offsets use the Tansu
workaround of :mod:`runtime.broker.offsets`.

Options: ``bootstrap``; ``topics``, JSON ``{topic: {partition: start offset}}``
(the offsets a fresh query starts from: the runtime fixes them when it
creates the query, so a record produced after that is read);
``max_records_per_batch`` (optional cap, split evenly over partitions).

Writing (batch, and streaming): rows ``(topic string, value string)`` are
produced as they are, each with headers ``sana.writer``, ``sana.run`` and
``sana.batch`` so a consumer can recognize a replayed batch; the batch writer
(a fragment's executor writes) adds ``sana.seq``, so a record is named as
when the driver writes it.

A Python worker keeps one producer per broker for every query whose tasks it
runs, and it cannot know when a topic it wrote is deleted. kafka-python 3.0
spins a core asking for metadata once a refresh drops a deleted topic that a
producer wrote (:mod:`runtime.broker.producer`). So a worker's producer is
replaced once a topic it wrote has gone unwritten for ``TOPIC_IDLE_RENEW_S``
(well under the 5-minute metadata refresh): before the next write, or by a
reaper thread if the worker writes nothing more.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

NAME = "sana_kafka"
RAW_SCHEMA = "topic string, value string, origin string"
ORIGIN_HEADERS = ("sana.writer", "sana.batch", "sana.seq")
READ_STALL_S = 60.0
ARROW_CHUNK = 8192

# kafka-python clients cached per Python worker process (workers are reused).
_CONSUMERS: dict[str, object] = {}
_PRODUCERS: dict[str, "_WorkerProducer"] = {}
_PRODUCERS_LOCK = threading.Lock()
TOPIC_IDLE_RENEW_S = 60.0
REAP_EVERY_S = 10.0


def _consumer(bootstrap: str):
    from kafka import KafkaConsumer

    consumer = _CONSUMERS.get(bootstrap)
    if consumer is None:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
            max_partition_fetch_bytes=8 << 20, fetch_max_bytes=32 << 20, fetch_max_wait_ms=100,
            request_timeout_ms=20_000, reconnect_backoff_max_ms=1_000,
        )
        _CONSUMERS[bootstrap] = consumer
    return consumer


class _WorkerProducer:
    """This worker's producer to one broker, replaced once a topic it wrote has been idle too long."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.lock = threading.Lock()  # held while a task writes, and while the producer is replaced
        self.producer = None
        self.last_write: dict[str, float] = {}  # topic -> when this producer last wrote it (monotonic)
        self.renewed = 0

    def client(self):
        """The producer to write with; the caller holds :attr:`lock`."""
        from kafka import KafkaProducer

        if self.producer is not None and self.stale(time.monotonic()):
            self.renewed += 1
            self.drop()
        if self.producer is None:
            self.producer = KafkaProducer(
                bootstrap_servers=self.bootstrap, linger_ms=5, batch_size=256 << 10, acks=1,
                retries=10, retry_backoff_ms=200, request_timeout_ms=20_000, max_block_ms=30_000,
                reconnect_backoff_max_ms=1_000,
            )
        return self.producer

    def stale(self, now: float) -> bool:
        return any(now - when > TOPIC_IDLE_RENEW_S for when in self.last_write.values())

    def drop(self) -> None:
        producer, self.producer, self.last_write = self.producer, None, {}
        _close_quietly(producer, timeout=1)

    def reap(self) -> None:
        """Drop the producer if it is stale and no task is writing through it."""
        if self.lock.acquire(blocking=False):
            try:
                if self.producer is not None and self.stale(time.monotonic()):
                    self.renewed += 1
                    self.drop()
            finally:
                self.lock.release()


def _reap_forever() -> None:
    while True:
        time.sleep(REAP_EVERY_S)
        for producer in list(_PRODUCERS.values()):
            producer.reap()


def _worker_producer(bootstrap: str) -> _WorkerProducer:
    with _PRODUCERS_LOCK:
        if not _PRODUCERS:
            threading.Thread(target=_reap_forever, name="sana-producer-reaper", daemon=True).start()
        return _PRODUCERS.setdefault(bootstrap, _WorkerProducer(bootstrap))


def _close_quietly(client, **options) -> None:
    if client is not None:
        try:
            client.close(**options)
        except Exception:  # a broken client is dropped whatever it says
            pass


def _drop_client(cache: dict, bootstrap: str) -> None:
    _close_quietly(cache.pop(bootstrap, None))


@dataclass(frozen=True)
class KafkaSlice(InputPartition):
    """Offsets ``[start, end)`` of one topic partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


def read_slice(bootstrap: str, part: KafkaSlice) -> Iterator[pa.RecordBatch]:
    """Yield the values of offsets ``[start, end)`` as Arrow batches ``(topic, value)``."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    tp = TopicPartition(part.topic, part.partition)
    values: list[str] = []
    origins: list[str | None] = []
    position = part.start
    last_progress = time.monotonic()
    consumer = _consumer(bootstrap)
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        while position < part.end:
            batches = consumer.poll(timeout_ms=200, max_records=50_000)
            progressed = False
            for record in batches.get(tp, ()):
                if record.offset >= part.end:
                    break
                if record.offset >= position:
                    if record.value is not None:
                        values.append(record.value.decode("utf-8", "replace"))
                        origins.append(_origin(record.headers, part.partition))
                    position = record.offset + 1
                    progressed = True
            # Offsets can be skipped (transaction markers, compaction): trust the fetch position.
            fetched = consumer.position(tp)
            if fetched is not None and fetched > position:
                position = min(fetched, part.end)
                progressed = True
            if progressed:
                last_progress = time.monotonic()
                if len(values) >= ARROW_CHUNK:
                    yield _arrow(part.topic, values, origins)
                    values, origins = [], []
            elif time.monotonic() - last_progress > READ_STALL_S:
                raise TimeoutError(
                    f"{part.topic}[{part.partition}]: no progress at offset {position} of {part.end} for {READ_STALL_S:.0f} s"
                )
    except (KafkaError, OSError):
        _drop_client(_CONSUMERS, bootstrap)
        raise
    if values:
        yield _arrow(part.topic, values, origins)


def _origin(headers, partition: int) -> str | None:
    """``writer|batch|seq|partition`` for a record a Sana fragment wrote (its replay key), else None."""
    if not headers:
        return None
    found = {key: value for key, value in headers if key in ORIGIN_HEADERS}
    if len(found) != len(ORIGIN_HEADERS):
        return None
    return "|".join(found[key].decode() for key in ORIGIN_HEADERS) + f"|{partition}"


def _arrow(topic: str, values: list[str], origins: list[str | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([topic] * len(values), pa.string()), pa.array(values, pa.string()), pa.array(origins, pa.string())],
        names=["topic", "value", "origin"],
    )


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap = options["bootstrap"]
        self.start_offsets: dict[str, dict[str, int]] = {
            topic: {str(partition): int(offset) for partition, offset in parts.items()}
            for topic, parts in json.loads(options["topics"]).items()
        }
        self.max_records = int(options.get("max_records_per_batch", "0") or 0)
        self.bound_file = options.get("bound_file") or None
        self._probe = None
        self._latest: dict[str, dict[str, int]] | None = None

    def initialOffset(self) -> dict:
        return {topic: dict(parts) for topic, parts in self.start_offsets.items()}

    def _ends(self) -> dict[str, dict[str, int]]:
        from kafka.errors import KafkaError

        from runtime.broker.offsets import probe_consumer, topic_end_offsets

        try:
            if self._probe is None:
                self._probe = probe_consumer(self.bootstrap)
            ends = topic_end_offsets(self._probe, list(self.start_offsets))
        except (KafkaError, OSError):
            if self._probe is not None:
                self._probe.close()
            self._probe = None
            raise
        return {topic: {str(partition): offset for partition, offset in parts.items()} for topic, parts in ends.items()}

    def _bound(self) -> dict[str, dict[str, int]]:
        """Offsets not to read past, per topic and partition, while the bound file exists (a defrag's cut)."""
        if not self.bound_file:
            return {}
        try:
            with open(self.bound_file) as handle:
                return json.load(handle)
        except FileNotFoundError:
            return {}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        ends = self._ends()
        bound = self._bound()
        begin = start or self.initialOffset()
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else 0
        partition_count = max(1, sum(len(parts) for parts in ends.values()))
        per_partition = max(1, cap // partition_count) if cap else 0
        result: dict[str, dict[str, int]] = {}
        for topic in self.start_offsets:
            known = begin.get(topic, {})
            result[topic] = {}
            for partition, end in ends.get(topic, {}).items():
                first = int(known.get(partition, self.start_offsets[topic].get(partition, 0)))
                last = max(first, end)
                if per_partition:
                    last = min(last, first + per_partition)
                if partition in bound.get(topic, {}):
                    last = max(first, min(last, int(bound[topic][partition])))
                result[topic][partition] = last
            for partition, offset in known.items():  # a partition the broker forgot: keep our position
                result[topic].setdefault(partition, int(offset))
        self._latest = ends
        return result

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> list[KafkaSlice]:
        slices: list[KafkaSlice] = []
        for topic, parts in end.items():
            begin = start.get(topic, {}) if start else {}
            for partition, last in sorted(parts.items(), key=lambda item: int(item[0])):
                first = int(begin.get(partition, self.start_offsets.get(topic, {}).get(partition, 0)))
                if int(last) > first:
                    slices.append(KafkaSlice(topic, int(partition), first, int(last)))
        return slices

    def read(self, partition: KafkaSlice) -> Iterator[pa.RecordBatch]:
        return read_slice(self.bootstrap, partition)

    def commit(self, end: dict) -> None:
        return None

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None


@dataclass
class Written(WriterCommitMessage):
    records: int


def produce_rows(bootstrap: str, batches: Iterator[pa.RecordBatch], headers: list[tuple[str, bytes]],
                 seq_base: int | None = None) -> int:
    """Produce ``(topic, value)`` rows; returns how many. Raises if the broker does not take them.

    With ``seq_base`` every record also carries ``sana.seq`` = ``seq_base`` + its index here.
    """
    from kafka.errors import KafkaError

    worker = _worker_producer(bootstrap)
    count = 0
    with worker.lock:
        try:
            producer = worker.client()
            futures = []
            written: set[str] = set()
            for batch in batches:
                topics = batch.column("topic").to_pylist()
                values = batch.column("value").to_pylist()
                for topic, value in zip(topics, values):
                    named = headers if seq_base is None else [*headers, ("sana.seq", str(seq_base + count).encode())]
                    futures.append(producer.send(topic, value=value.encode("utf-8"), headers=named))
                    written.add(topic)
                    count += 1
            producer.flush(timeout=60)
            for future in futures:
                future.get(timeout=60)
        except (KafkaError, OSError):
            worker.drop()
            raise
        now = time.monotonic()
        worker.last_write.update((topic, now) for topic in written)
    return count


def _headers(options: dict[str, str], batch: str | None) -> list[tuple[str, bytes]]:
    headers = [("sana.writer", options.get("writer", "").encode())]
    if options.get("run"):
        headers.append(("sana.run", options["run"].encode()))
    if batch is not None:
        headers.append(("sana.batch", batch.encode()))
    return headers


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sana_kafka")``: used once per micro-batch by a fragment."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        from pyspark import TaskContext

        # A record's name (writer, batch, seq) must be the same when the batch is replayed: the
        # output partition's index and the record's place in it are (the fragment's output is
        # deterministic), so seq = partition << 32 | index.
        context = TaskContext.get()
        seq_base = (context.partitionId() << 32) if context else 0
        return Written(produce_rows(self.options["bootstrap"], iterator, _headers(self.options, self.options.get("batch")),
                                    seq_base))


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("sana_kafka")``: the batch id comes from Spark."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        return Written(produce_rows(self.options["bootstrap"], iterator, _headers(self.options, batch)))

    def commit(self, messages, batchId) -> None:
        return None

    def abort(self, messages, batchId) -> None:
        return None


class SanaKafka(DataSource):
    """Registered as ``sana_kafka`` on the runtime's SparkSession."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return RAW_SCHEMA

    def streamReader(self, schema) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)

    def writer(self, schema, overwrite: bool) -> KafkaBatchWriter:
        return KafkaBatchWriter(self.options)

    def streamWriter(self, schema, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(self.options)
