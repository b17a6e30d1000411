"""``sana_kafka``: a PySpark Python Data Source reading and writing Kafka on librdkafka.

No JVM Kafka connector is needed (it cannot be downloaded here).

Reading (streaming): one source reads several topics with manual partition
assignment and yields raw records as ``(topic string, value string)``; the
fragment parses each topic's JSON with its declared schema. Offsets are
``{topic: {partition: next offset}}``: Spark keeps them in the query's
checkpoint (offset log), so a query restarted from its checkpoint resumes
exactly where its last committed batch ended. End offsets come from
:class:`runtime.broker.offsets.EndProbe` (kafka-python, once per trigger: a
fetch at the ends last found, answered by the high watermark); records are
read with librdkafka (:mod:`runtime.broker.rdkafka`) and become Arrow arrays
in bulk.

Options: ``bootstrap``; ``topics``, JSON ``{topic: {partition: start offset}}``
(the offsets a fresh query starts from: the runtime fixes them when it
creates the query, so a record produced after that is read);
``max_records_per_batch`` (optional cap, split evenly over partitions);
``origin_topics``, JSON list of the topics whose records' replay origins
(``writer|batch|seq|partition``, from the headers) are read, the other
queries' outputs: reading headers is most of a record's cost, so other topics
get a null origin (without the option every topic's are read); ``routes``,
JSON ``{topic: address}``, the topics whose records are fetched through
another address than ``bootstrap`` (a link from the site that writes them;
end offsets are still asked of ``bootstrap``); ``gather_file``, where the
runtime keeps how long the query may hold its input before a batch
(:func:`holds`: its sinks' ``max_delay``), read every trigger like the bound.

Writing (batch, and streaming): rows ``(topic string, value string)`` are
produced as they are, each with headers ``sana.writer``, ``sana.run`` and
``sana.batch`` so a consumer can recognize a replayed batch; the batch writer
(a fragment's executor writes) adds ``sana.seq``, so a record is named as
when the driver writes it.

A Python worker keeps one idempotent producer per broker for every query whose
tasks it runs, and it cannot know when a topic it wrote is deleted. So a
worker's producer is replaced once a topic it wrote has gone unwritten for
``TOPIC_IDLE_RENEW_S`` (well under the 5-minute metadata refresh): before the
next write, or by a reaper thread if the worker writes nothing more; no
client keeps asking the broker about a deleted topic.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from runtime.spark.python_workers import freeze_imports

NAME = "sana_kafka"
RAW_SCHEMA = "topic string, value string, origin string"
ORIGIN_HEADERS = ("sana.writer", "sana.batch", "sana.seq")
READ_STALL_S = 60.0
CONSUME_WAIT_S = 0.05
ARROW_CHUNK = 8192

# kafka-python clients cached per Python worker process (workers are reused).
_CONSUMERS: dict[str, object] = {}
_PRODUCERS: dict[str, "_WorkerProducer"] = {}
_PRODUCERS_LOCK = threading.Lock()
TOPIC_IDLE_RENEW_S = 60.0
WRITE_TIMEOUT_MS = 60_000
REAP_EVERY_S = 10.0


# A read over a link from another site (``routes``) fetches in small steps and keeps little ahead: what a
# consumer fetched past a slice is dropped when the next slice goes to another worker, and on a slow link
# those bytes are what the link lacks (docs/wan.md, "Emulated WAN"). The next fetch is asked for as soon as
# the last one is consumed (librdkafka waits fetch.queue.backoff.ms, a second by default, once its queue is at
# a threshold: half a slow link's time).
REMOTE_FETCH = {"fetch.max.bytes": 64 << 10, "max.partition.fetch.bytes": 64 << 10, "message.max.bytes": 64 << 10,
                "queued.min.messages": 1, "queued.max.messages.kbytes": 64, "fetch.queue.backoff.ms": 5}


# A consumer for a link's address unused this long is closed at the worker's next read (an address the runtime
# no longer reads through would otherwise be reconnected to every second for the worker's life).
REMOTE_IDLE_S = 120.0
_REMOTE_USED: dict[str, float] = {}


def _consumer(bootstrap: str, remote: bool = False):
    from runtime.broker import rdkafka

    now = time.monotonic()
    for address, used in list(_REMOTE_USED.items()):
        if now - used > REMOTE_IDLE_S and address != bootstrap:
            del _REMOTE_USED[address]
            _AHEAD.pop(address, None)
            _drop_client(_CONSUMERS, address)
    if remote:
        _REMOTE_USED[bootstrap] = now
    consumer = _CONSUMERS.get(bootstrap)
    if consumer is None:
        consumer = rdkafka.consumer(bootstrap, **(REMOTE_FETCH if remote else {}))
        _CONSUMERS[bootstrap] = consumer
    return consumer


class _WorkerProducer:
    """This worker's producer to one broker, replaced once a topic it wrote has been idle too long."""

    def __init__(self, bootstrap: str) -> None:
        from runtime.broker import rdkafka

        self.bootstrap = bootstrap
        self.lock = threading.Lock()  # held while a task writes, and while the producer is replaced
        self.sender = rdkafka.Sender(
            lambda: rdkafka.producer(bootstrap, idempotent=True, delivery_timeout_ms=WRITE_TIMEOUT_MS),
            bootstrap, WRITE_TIMEOUT_MS / 1000 + 5)
        self.last_write: dict[str, float] = {}  # topic -> when this producer last wrote it (monotonic)
        self.renewed = 0

    @property
    def producer(self):
        """The live librdkafka producer, or None."""
        return self.sender.client() if self.sender.live else None

    def renew_if_stale(self) -> None:
        """Drop the producer if a topic it wrote went unwritten too long; the caller holds :attr:`lock`."""
        if self.sender.live and self.stale(time.monotonic()):
            self.renewed += 1
            self.drop()

    def stale(self, now: float) -> bool:
        return any(now - when > TOPIC_IDLE_RENEW_S for when in self.last_write.values())

    def drop(self) -> None:
        self.sender.reset()
        self.last_write = {}

    def reap(self) -> None:
        """Drop the producer if it is stale and no task is writing through it."""
        if self.lock.acquire(blocking=False):
            try:
                self.renew_if_stale()
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


def _drop_client(cache: dict, bootstrap: str) -> None:
    from runtime.broker import rdkafka

    rdkafka.close(cache.pop(bootstrap, None))


#: A query holding its input (a sink's ``max_delay``) runs a batch anyway once this many records wait: by then
#: the records' own work (about 20 us each) is as large as a micro-batch's fixed cost (0.3-0.6 CPU-seconds).
GATHER_RECORDS = 20_000


def holds(pending: int, gather_s: float, since_s: float | None, bounded: bool, cap: int = 0) -> bool:
    """Whether a trigger that found ``pending`` new records runs no batch yet, so that they go in a larger one.

    ``gather_s``: how long the query may hold them; ``since_s``: seconds since its reader last gave a batch
    records (None before its first: a query's first batch, after a start or a restart, is never held, and
    neither is the first after a quiet spell longer than ``gather_s``); ``bounded``: a cut waits for the query to
    reach its bound (a defragmentation), so nothing is held then; ``cap``: records a batch may take at most.

    >>> holds(40, 5.0, 1.0, False), holds(40, 5.0, 5.0, False), holds(40, 5.0, None, False)
    (True, False, False)
    >>> holds(0, 5.0, 1.0, False), holds(40, 0.0, 1.0, False), holds(40, 5.0, 1.0, True)
    (False, False, False)
    >>> holds(GATHER_RECORDS, 5.0, 1.0, False), holds(1_000, 5.0, 1.0, False, cap=1_000)
    (False, False)
    """
    full = min(GATHER_RECORDS, cap) if cap else GATHER_RECORDS
    return 0 < pending < full and gather_s > 0 and since_s is not None and since_s < gather_s and not bounded


def write_gather(path: Path, gather_s: float) -> None:
    """Keep ``gather_s`` where the query's reader finds it at its next trigger (0: remove it)."""
    if not gather_s:
        path.unlink(missing_ok=True)
        return
    write_json(path, {"gather_s": gather_s})


def write_json(path: Path, value: Any) -> None:
    """``value`` as JSON at ``path``, through a temporary file and a rename: a reader sees the old or the new file,
    never part of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value))
    temporary.replace(path)


def read_gather(path: str | None) -> float:
    if not path:
        return 0.0
    try:
        with open(path) as handle:
            return float(json.load(handle)["gather_s"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return 0.0


@dataclass(frozen=True)
class KafkaSlice(InputPartition):
    """Offsets ``[start, end)`` of one topic partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int
    origins: bool = True  # read each record's replay origin from its headers


@dataclass
class _Ahead:
    """Where a worker's consumer stands after a slice: assigned to ``topic[partition]``, its next fetch from
    ``fetched_to``."""

    topic: str
    partition: int
    fetched_to: int

    def continues(self, part: KafkaSlice) -> bool:
        """True when ``part`` starts where this left off: its records are what the consumer has fetched since, so
        it is read without a new assignment (which would drop what was fetched ahead)."""
        return (self.topic, self.partition, self.fetched_to) == (part.topic, part.partition, part.start)


# per worker and broker address: the position a slice left its consumer at (a worker runs one task at a time)
_AHEAD: dict[str, _Ahead] = {}

# A slice's consumer stays assigned for the next slice only when at least this many records wait past where it
# stopped (a backlog: it goes on fetching them, or its queue is full). Otherwise it is unassigned: a consumer
# assigned at the end of a partition asks the broker for more every fetch.wait.max.ms until the next batch,
# all the time a query waits for its trigger (0.009 cores of the in-memory broker's each, measured; the durable
# broker's not measured apart), and what little it would fetch ahead is fetched again. A read
# over a link is unassigned only when nothing at all waits: there what was fetched ahead is the link's bandwidth.
KEEP_AHEAD_RECORDS = 1000


def _backlog(consumer, left: _Ahead) -> int:
    """Records the broker said (in its last fetch response) lie past where the slice left the consumer; 0 when
    it said nothing yet."""
    from runtime.broker.rdkafka import KafkaException, TopicPartition

    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(left.topic, left.partition), cached=True)
    except KafkaException:  # no cached answer: as caught up (the next slice assigns afresh)
        return 0
    return max(0, high - left.fetched_to) if high is not None and high >= 0 else 0


def read_slice(bootstrap: str, part: KafkaSlice, remote: bool = False) -> Iterator[pa.RecordBatch]:
    """Yield the records of offsets ``[start, end)`` as Arrow batches ``(topic, value, origin)``.

    A consumer fetches ahead of what it is asked for. When at least :data:`KEEP_AHEAD_RECORDS` records lie
    past a slice (a reader behind) and the next slice a worker reads continues it (the same partition, from
    where it ended: a query's next batch), the consumer keeps its assignment and what it fetched ahead is used,
    not fetched again: over a slow link (``routes``) that is most of the bandwidth a lagging reader would
    otherwise waste. A reader that has caught up is unassigned instead, so it does not poll the broker while
    its query waits for the next trigger. A slice whose consumer returned records past its end
    (offsets skipped inside it) leaves its consumer ahead of the next slice, which is then assigned afresh.
    """
    from runtime.broker.rdkafka import KafkaException, TopicPartition

    position = part.start
    last_progress = time.monotonic()
    consumer = _consumer(bootstrap, remote)
    ahead = _AHEAD.pop(bootstrap, None)
    try:
        if ahead is None or not ahead.continues(part):
            consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        fetched_to = part.start
        while position < part.end:
            # returns once it has them all, or after CONSUME_WAIT_S with what it has (skipped offsets, a slow fetch)
            messages = consumer.consume(min(ARROW_CHUNK, part.end - position), CONSUME_WAIT_S)
            if messages:
                messages = _good(messages)
            if messages:
                fetched_to = messages[-1].offset() + 1
                if messages[-1].offset() >= part.end:  # read ahead past the slice: offsets only grow
                    messages = [message for message in messages if message.offset() < part.end]
            if messages:
                position = messages[-1].offset() + 1
                last_progress = time.monotonic()
                batch = _arrow(part.topic, part.partition, messages, part.origins)
                if batch.num_rows:
                    yield batch
                continue
            # Offsets can be skipped (transaction markers, compaction): trust the fetch position.
            fetched = consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
            if fetched > position:
                position = min(fetched, part.end)
                fetched_to = max(fetched_to, fetched)
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > READ_STALL_S:
                raise TimeoutError(
                    f"{part.topic}[{part.partition}]: no progress at offset {position} of {part.end} for {READ_STALL_S:.0f} s"
                )
        left = _Ahead(part.topic, part.partition, max(fetched_to, part.end))
        if _backlog(consumer, left) >= (1 if remote else KEEP_AHEAD_RECORDS):
            _AHEAD[bootstrap] = left
        else:
            consumer.unassign()
    except KafkaException:
        _drop_client(_CONSUMERS, bootstrap)
        raise


def _good(messages: list) -> list:
    """``messages`` without the errors a consumer can go on after; raises on one it cannot."""
    from runtime.broker.rdkafka import KafkaException

    if messages[-1].error() is not None or any(message.error() is not None for message in messages):
        good = []
        for message in messages:
            error = message.error()
            if error is None:
                good.append(message)
            elif error.fatal() or not error.retriable():
                raise KafkaException(error)
        messages = good
    return messages


def origin_key(headers) -> bytes | None:
    """``writer|batch|seq`` from a record's headers, or None; fast for the order Sana writes them in."""
    if not headers:
        return None
    if len(headers) == 4:  # writer, run, batch, seq: what every fragment writes
        writer, _, batch, seq = headers
        if writer[0] == "sana.writer" and batch[0] == "sana.batch" and seq[0] == "sana.seq":
            return b"|".join((writer[1], batch[1], seq[1]))
    found = {key: value for key, value in headers if key in ORIGIN_HEADERS}
    if len(found) != len(ORIGIN_HEADERS):
        return None
    return b"|".join(found[key] for key in ORIGIN_HEADERS)


def _arrow(topic: str, partition: int, messages: list, origins: bool = True) -> pa.RecordBatch:
    """Records as one Arrow batch: values in bulk from their bytes, origins (when asked) only where headers exist."""
    values = pa.array([message.value() for message in messages], pa.binary())
    keys = None
    if origins:
        headers = [message.headers() for message in messages]
        if any(header is not None for header in headers):
            keys = pa.array([origin_key(header) for header in headers], pa.binary())
    if keys is None:
        origin = pa.nulls(len(messages), pa.string())
    else:
        origin = pc.binary_join_element_wise(_text(keys), f"{partition}", "|")
    text = _text(values)
    batch = pa.RecordBatch.from_arrays([pa.repeat(pa.scalar(topic, pa.string()), len(messages)), text, origin],
                                       names=["topic", "value", "origin"])
    if text.null_count:  # a record without a value (a tombstone) carries nothing to read
        batch = batch.filter(pc.is_valid(text))
    return batch


def _text(values: pa.Array) -> pa.Array:
    """Binary values as strings; what is not UTF-8 is decoded with replacement characters (the parser refuses it)."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if value is None else value.decode("utf-8", "replace") for value in values.to_pylist()],
                        pa.string())


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap = options["bootstrap"]
        self.start_offsets: dict[str, dict[str, int]] = {
            topic: {str(partition): int(offset) for partition, offset in parts.items()}
            for topic, parts in json.loads(options["topics"]).items()
        }
        self.max_records = int(options.get("max_records_per_batch", "0") or 0)
        # the topics whose records' replay origins are read (other queries' outputs); absent: all
        listed = options.get("origin_topics")
        self.origin_topics = None if listed is None else set(json.loads(listed))
        self.bound_file = options.get("bound_file") or None
        self.routes: dict[str, str] = json.loads(options.get("routes") or "{}")
        self.gather_file = options.get("gather_file") or None
        self._gave_at: float | None = None  # when a batch last got records from this reader
        self._probe = None
        self._latest: dict[str, dict[str, int]] | None = None

    def initialOffset(self) -> dict:
        return {topic: dict(parts) for topic, parts in self.start_offsets.items()}

    def _ends(self) -> dict[str, dict[str, int]]:
        from kafka.errors import KafkaError

        from runtime.broker.offsets import EndProbe

        try:
            if self._probe is None:
                self._probe = EndProbe(self.bootstrap)
            ends = self._probe.topic_ends(list(self.start_offsets))
        except (KafkaError, OSError):
            if self._probe is not None:
                self._probe.close()
            self._probe = None
            raise
        return {topic: {str(partition): offset for partition, offset in parts.items()} for topic, parts in ends.items()}

    def _bound(self) -> dict[str, dict[str, int]] | None:
        """Offsets not to read past, per topic and partition, while the bound file exists (a defrag's cut; a
        query of the cut reading only its taps gets an empty one); None without it."""
        if not self.bound_file:
            return None
        try:
            with open(self.bound_file) as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        ends = self._ends()
        bound = self._bound()
        begin = start or self.initialOffset()
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else 0
        partition_count = max(1, sum(len(parts) for parts in ends.values()))
        per_partition = max(1, cap // partition_count) if cap else 0
        result: dict[str, dict[str, int]] = {}
        here: dict[str, dict[str, int]] = {}
        pending = 0
        for topic in self.start_offsets:
            known = begin.get(topic, {})
            result[topic], here[topic] = {}, {}
            for partition, end in ends.get(topic, {}).items():
                first = int(known.get(partition, self.start_offsets[topic].get(partition, 0)))
                last = max(first, end)
                if per_partition:
                    last = min(last, first + per_partition)
                if bound is not None and partition in bound.get(topic, {}):
                    last = max(first, min(last, int(bound[topic][partition])))
                result[topic][partition], here[topic][partition] = last, first
                pending += last - first
            for partition, offset in known.items():  # a partition the broker forgot: keep our position
                result[topic].setdefault(partition, int(offset))
                here[topic].setdefault(partition, int(offset))
        self._latest = ends
        now = time.monotonic()
        since = None if self._gave_at is None else now - self._gave_at
        if holds(pending, read_gather(self.gather_file), since, bound is not None, cap):
            return here
        if pending:
            self._gave_at = now
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
                    origins = self.origin_topics is None or topic in self.origin_topics
                    slices.append(KafkaSlice(topic, int(partition), first, int(last), origins))
        return slices

    def read(self, partition: KafkaSlice) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        route = self.routes.get(partition.topic)
        return read_slice(route or self.bootstrap, partition, remote=route is not None)

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

    With ``seq_base`` every record also carries ``sana.seq``: its row's ``seq`` column, or without one
    ``seq_base`` + its index here.
    """
    worker = _worker_producer(bootstrap)
    written: set[str] = set()

    def noting(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            written.update(pc.unique(batch.column("topic")).to_pylist())
            yield batch

    with worker.lock:
        worker.renew_if_stale()
        count = worker.sender.send(noting(batches), headers, seq_base)
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

        freeze_imports()
        # A record's name (writer, batch, seq) must be the same when the batch is replayed, also under a plan with
        # fewer outputs: a fragment's output carries each row's seq, numbered within its own output
        # (runtime.spark.sql_text.encode_sql). Rows without one are named by partition << 32 | place in it.
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

        freeze_imports()
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
