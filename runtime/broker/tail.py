"""Reading a topic as a person watches it: from its start or from now, each record once.

Sana writes at least once, with names: every record a query writes carries
``sana.writer``, ``sana.batch`` and ``sana.seq``, and a batch replayed after a
crash (or a record sent again after a lost acknowledgement) carries the same
names. A reader keeps one record per (writer, batch, seq) and drops the later
copies; a record without the three headers (``sana produce``, a client outside
Sana) is always kept. ``raw`` keeps every copy.

The memory that takes is small: a writer writes batch b+1 only once every
record of batch b is acknowledged, so in one partition every copy of a name
follows the first while its batch is still the writer's latest there. Per
(partition, writer) a reader keeps the batch being written and the sequence
numbers seen in it (as ranges: a batch's are mostly one run); a record of
another batch starts a new memory for its writer.

A read (:func:`read`) is one pass, each with a fresh consumer (manual
assignment, no group, no commits): it returns every record up to the topic's
end at the start of the call (at most ``limit``) and, when there is none,
waits up to ``wait_s`` for new ones. Its :class:`Position` (the next offset of
every partition and the names memory) goes between calls as an opaque
``token`` (``GET /topics/{topic}/records``, ``sana tail``). End offsets are
the true ones on Tansu too (:mod:`runtime.broker.offsets`).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition as ProbePartition
from kafka.errors import KafkaError as ProbeError

from runtime.broker import rdkafka
from runtime.broker.offsets import end_offsets, probe_consumer
from runtime.exceptions import TailCursorInvalid, TopicNotFound, TopicProblem

NAME_HEADERS = ("sana.writer", "sana.batch", "sana.seq")
UNKNOWN_TOPIC = (rdkafka.KafkaError.UNKNOWN_TOPIC_OR_PART, rdkafka.KafkaError._UNKNOWN_TOPIC)
#: How long one consume waits before the loop looks at the clock and the ends again.
CONSUME_WAIT_S = 0.2
#: A read that is behind the end and gets nothing for this long fails (the broker stopped serving the topic).
READ_STALL_S = 15.0
METADATA_TIMEOUT_S = 5.0
#: Writers whose latest batch a position remembers, the most recently seen first: bounds the token's size.
MAX_WRITERS = 64
#: librdkafka prefetches per partition; a person's read needs little.
TAIL_CONSUMER = {"queued.max.messages.kbytes": 1024, "auto.offset.reset": "earliest"}

Name = tuple[str, str, int]  # (writer, batch, seq)


@dataclass(frozen=True)
class TailRecord:
    """One record as read: where it sits, its key, headers and value as the broker holds them."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON: the value parsed when it is JSON, else its text; key and headers as text.

        >>> TailRecord(0, 7, None, b'{"t": 1}', (("sana.seq", b"3"),)).to_dict()
        {'partition': 0, 'offset': 7, 'key': None, 'headers': {'sana.seq': '3'}, 'value': {'t': 1}}
        >>> TailRecord(1, 0, b"k", b"not json", ()).to_dict()["value"], TailRecord(1, 0, b"k", b"NaN", ()).to_dict()["value"]
        ('not json', 'NaN')
        """
        return {"partition": self.partition, "offset": self.offset, "key": _text(self.key),
                "headers": {name: _text(value) for name, value in self.headers}, "value": json_value(self.value)}

    @property
    def name(self) -> Name | None:
        """(writer, batch, seq) from the headers; None without all three or with a ``sana.seq`` that is no number."""
        found = {key: value for key, value in self.headers if key in NAME_HEADERS and value is not None}
        if len(found) != len(NAME_HEADERS) or not found["sana.seq"].isdigit():
            return None
        return (_text(found["sana.writer"]), _text(found["sana.batch"]), int(found["sana.seq"]))


def json_value(value: bytes | None) -> Any:
    """A record's value as JSON: parsed when it is a JSON document (NaN and Infinity are not), else its text."""
    if value is None:
        return None
    try:
        return json.loads(value, parse_constant=_not_json)
    except ValueError:
        return _text(value)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


class Seqs:
    """A set of sequence numbers as sorted, disjoint, inclusive ranges.

    >>> seqs = Seqs()
    >>> for seq in (0, 1, 2, 5, 4, 3, 9): seqs.add(seq)
    >>> seqs.ranges(), 4 in seqs, 7 in seqs
    ([[0, 5], [9, 9]], True, False)
    """

    def __init__(self, ranges: list[list[int]] | None = None) -> None:
        self._starts = [start for start, _ in ranges or ()]
        self._ends = [end for _, end in ranges or ()]

    def __contains__(self, seq: int) -> bool:
        index = bisect_right(self._starts, seq) - 1
        return index >= 0 and seq <= self._ends[index]

    def add(self, seq: int) -> None:
        index = bisect_right(self._starts, seq) - 1
        if index >= 0 and seq <= self._ends[index]:
            return
        joins_next = index + 1 < len(self._starts) and self._starts[index + 1] == seq + 1
        if index >= 0 and self._ends[index] == seq - 1:
            self._ends[index] = seq
            if joins_next:
                self._ends[index] = self._ends.pop(index + 1)
                del self._starts[index + 1]
        elif joins_next:
            self._starts[index + 1] = seq
        else:
            self._starts.insert(index + 1, seq)
            self._ends.insert(index + 1, seq)

    def ranges(self) -> list[list[int]]:
        return [[start, end] for start, end in zip(self._starts, self._ends)]


class Names:
    """The names a reader has passed, enough to know every later copy: per (partition, writer), its latest batch.

    >>> names = Names()
    >>> [names.first(0, ("q1", "4", seq)) for seq in (0, 1, 0, 2)]
    [True, True, False, True]
    >>> names.first(1, ("q1", "4", 0)), names.first(0, ("q1", "5", 0)), names.first(0, ("q1", "4", 0))
    (True, True, True)
    """

    def __init__(self) -> None:
        self._latest: dict[tuple[int, str], tuple[str, Seqs]] = {}

    def first(self, partition: int, name: Name) -> bool:
        """Whether ``name`` is read for the first time in ``partition`` (and remember it)."""
        writer, batch, seq = name
        key = (partition, writer)
        latest = self._latest.pop(key, None)  # re-inserted last: the dict's order is the order writers were seen
        if latest is None or latest[0] != batch:
            latest = (batch, Seqs())
        self._latest[key] = latest
        if seq in latest[1]:
            return False
        latest[1].add(seq)
        return True

    def keep_partitions(self, partitions: set[int]) -> None:
        self._latest = {key: latest for key, latest in self._latest.items() if key[0] in partitions}

    def to_json(self) -> list[list[Any]]:
        """``[[partition, writer, batch, seq ranges], ...]``, the :data:`MAX_WRITERS` writers seen last."""
        entries = list(self._latest.items())[-MAX_WRITERS:]
        return [[partition, writer, batch, seqs.ranges()] for (partition, writer), (batch, seqs) in entries]

    @classmethod
    def from_json(cls, data: Any) -> "Names":
        """The memory :meth:`to_json` wrote; raises ``ValueError`` on anything else."""
        names = cls()
        _require(isinstance(data, list) and len(data) <= MAX_WRITERS, "names")
        for entry in data:
            _require(isinstance(entry, list) and len(entry) == 4, "a names entry")
            partition, writer, batch, ranges = entry
            _require(_offset(partition) and isinstance(writer, str) and isinstance(batch, str), "a names entry")
            _require(isinstance(ranges, list) and all(isinstance(pair, list) and len(pair) == 2
                                                      and all(_offset(n) for n in pair) for pair in ranges), "seq ranges")
            flat = [n for pair in ranges for n in pair]
            _require(all(a <= b for a, b in zip(flat, flat[1:])) and all(a < b - 1 for a, b in zip(flat[1::2], flat[2::2])),
                     "seq ranges (sorted and disjoint)")
            names._latest[(partition, writer)] = (batch, Seqs(ranges))
        return names


def _offset(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"bad {what}")


@dataclass
class Position:
    """Where a reader of ``topic`` is: the next offset of each partition and, unless raw, the names it passed."""

    topic: str
    offsets: dict[int, int]
    names: Names | None = field(default_factory=Names)

    def behind(self, ends: dict[int, int]) -> bool:
        return any(self.offsets.get(partition, 0) < end for partition, end in ends.items())

    def token(self) -> str:
        """The position as an opaque URL-safe string, to continue from with :meth:`from_token`."""
        data = {"topic": self.topic, "offsets": sorted([p, o] for p, o in self.offsets.items()),
                "names": None if self.names is None else self.names.to_json()}
        return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")

    @classmethod
    def from_token(cls, topic: str, token: str) -> "Position":
        """The position a read of ``topic`` handed out; raises :class:`TailCursorInvalid` for anything else."""
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            _require(isinstance(data, dict) and set(data) == {"topic", "offsets", "names"}, "cursor")
            offsets = data["offsets"]
            _require(isinstance(offsets, list) and all(isinstance(pair, list) and len(pair) == 2
                                                       and all(_offset(n) for n in pair) for pair in offsets), "offsets")
            names = None if data["names"] is None else Names.from_json(data["names"])
        except (ValueError, binascii.Error) as error:
            raise TailCursorInvalid(f"cursor for topic {topic!r} is not one a read gave ({error})",
                                    culprit={"cursor": token[:80]}) from None
        if data["topic"] != topic:
            raise TailCursorInvalid(f"cursor is for topic {data['topic']!r}, not {topic!r}", culprit={"cursor": token[:80]})
        return cls(topic, {partition: offset for partition, offset in offsets}, names)


def start(bootstrap: str, topic: str, from_start: bool, raw: bool = False) -> Position:
    """A position at the start of ``topic``, or at its end now; raises :class:`TopicNotFound` if it does not exist."""
    consumer = rdkafka.consumer(bootstrap, **TAIL_CONSUMER)
    try:
        partitions = partitions_of(consumer, topic)
    finally:
        rdkafka.close(consumer)
    offsets = {partition: 0 for partition in partitions} if from_start else true_ends(bootstrap, topic, partitions)
    return Position(topic, offsets, None if raw else Names())


def read(bootstrap: str, position: Position, limit: int, wait_s: float = 0.0) -> list[TailRecord]:
    """The records after ``position``, which moves past them.

    Every record up to the topic's end at the call (at most ``limit``); with
    none there, the first to arrive within ``wait_s`` (and those right behind
    them). Copies of a record already read are left out unless the position
    is raw. A partition added since the position was made is read from its
    start. Raises :class:`TopicNotFound` if the topic is gone, and
    :class:`TopicProblem` if the broker cannot serve it.
    """
    consumer = rdkafka.consumer(bootstrap, **TAIL_CONSUMER)
    try:
        partitions = partitions_of(consumer, position.topic)
        position.offsets = {partition: position.offsets.get(partition, 0) for partition in partitions}
        if position.names is not None:
            position.names.keep_partitions(set(partitions))
        ends = true_ends(bootstrap, position.topic, partitions)
        consumer.assign([rdkafka.TopicPartition(position.topic, p, offset) for p, offset in position.offsets.items()])
        return _collect(consumer, position, ends, limit, time.monotonic() + wait_s)
    except rdkafka.KafkaException as error:
        raise TopicProblem(f"cannot read topic {position.topic!r} at {bootstrap}: {error}") from None
    finally:
        rdkafka.close(consumer)


def partitions_of(consumer: rdkafka.Consumer, topic: str) -> list[int]:
    """The partition ids of ``topic``; raises :class:`TopicNotFound` when the broker does not know it."""
    try:
        metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
    except rdkafka.KafkaException as error:
        raise TopicProblem(f"cannot read the metadata of topic {topic!r}: {error}") from None
    if metadata is None or (metadata.error is not None and metadata.error.code() in UNKNOWN_TOPIC):
        raise TopicNotFound(f"no topic {topic!r}", culprit={"topic": topic})
    if metadata.error is not None:
        raise TopicProblem(f"cannot read the metadata of topic {topic!r}: {metadata.error.str()}")
    return sorted(metadata.partitions)


def true_ends(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """The end offset (next offset written) of each partition, right on Tansu too."""
    probe = probe_consumer(bootstrap)
    try:
        ends = end_offsets(probe, [ProbePartition(topic, partition) for partition in partitions])
    except (ProbeError, OSError) as error:
        raise TopicProblem(f"cannot read the end offsets of topic {topic!r}: {error}") from None
    finally:
        probe.close()
    return {tp.partition: offset for tp, offset in ends.items()}


def _collect(consumer: rdkafka.Consumer, position: Position, ends: dict[int, int], limit: int,
             deadline: float) -> list[TailRecord]:
    """Consume until ``limit`` records, or caught up with ``ends`` holding some, or caught up at ``deadline``."""
    records: list[TailRecord] = []
    progress = time.monotonic()
    while len(records) < limit:
        behind, now = position.behind(ends), time.monotonic()
        if not behind and (records or now >= deadline):
            break
        messages = consumer.consume(limit - len(records), CONSUME_WAIT_S if behind else min(CONSUME_WAIT_S, deadline - now))
        for message in messages:
            record = _record(message, position.topic)
            if record is None:
                continue
            progress = time.monotonic()
            position.offsets[record.partition] = record.offset + 1
            name = record.name if position.names is not None else None
            if name is None or position.names.first(record.partition, name):
                records.append(record)
        if behind and not messages and _skip_gaps(consumer, position, ends):
            progress = time.monotonic()
        if behind and time.monotonic() - progress > READ_STALL_S:
            raise TopicProblem(f"topic {position.topic!r}: no record read for {READ_STALL_S:.0f} s "
                               f"at offsets {position.offsets} of {ends}")
    return records


def _skip_gaps(consumer: rdkafka.Consumer, position: Position, ends: dict[int, int]) -> bool:
    """Move past offsets that hold no record (transaction markers, compaction) as the consumer did; whether any moved."""
    behind = [rdkafka.TopicPartition(position.topic, p) for p, end in ends.items() if position.offsets[p] < end]
    moved = False
    for tp in consumer.position(behind):
        if tp.offset > position.offsets[tp.partition]:
            position.offsets[tp.partition] = min(tp.offset, ends[tp.partition])
            moved = True
    return moved


def _record(message: Any, topic: str) -> TailRecord | None:
    """The record ``message`` holds; None for an error worth waiting out, :class:`TopicProblem` for another."""
    error = message.error()
    if error is not None:
        if error.fatal() or not error.retriable():
            raise TopicProblem(f"cannot read topic {topic!r}: {error.str()}")
        return None
    return TailRecord(message.partition(), message.offset(), message.key(), message.value(),
                      tuple(message.headers() or ()))
