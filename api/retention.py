"""Retention for the durable embedded broker: keep each partition's record batches few enough to read.

Tansu 0.6's object store engine keeps every record batch as an object
(``clusters/<cluster>/topics/<topic>/partitions/<partition>/records/<base
offset>.batch``) and lists all of a partition's objects on every fetch, so
reads slow down as a partition's history grows and stop answering past a few
thousand batches (docs/reliability.md). Tansu has no retention of its own and
no DeleteRecords. Sana therefore deletes the oldest batch objects itself,
through the object store, once a partition holds more than ``keep`` of them:

- never a batch a Sana query may still read: the runtime says, per partition,
  the lowest offset any of its queries may ask for again (the start of its
  last completed micro-batch); a topic read by a query whose position is not
  known (starting, failed, stopped with a checkpoint) is left alone;
- only whole batches, oldest first: a batch goes when the next one starts at
  or below the guard (all its records are below it).

What goes is gone for every reader, as with Kafka's own retention: a reader
asking for an offset below the oldest batch kept gets the records from there
(``sana tail --from-beginning`` shows the last ``keep`` batches of a topic).
The broker's high watermark and offsets are untouched.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from xml.etree import ElementTree
from xml.sax.saxutils import escape


#: Batches a partition keeps at least. Reads at the end of a partition answered within 0.1 s at 1,000 batches
#: and stopped answering past 3,000-4,000 (benchmarks.broker_batches).
KEEP_BATCHES = 1000

#: Seconds between rounds.
EVERY_S = 30.0

#: A topic some query reads from a position the runtime does not know: nothing of it is deleted.
HOLD = None

Positions = Mapping[str, Mapping[int, int] | None]
"""topic -> partition -> the lowest offset a reader may still ask for, or :data:`HOLD` for the whole topic.
A topic not listed has no Sana reader."""


@dataclass(frozen=True)
class BatchObject:
    key: str
    topic: str
    partition: int
    offset: int


def parse_key(key: str) -> BatchObject | None:
    """A record batch's object key, or None for anything else (topic metadata, watermarks, offsets).

    >>> parse_key("clusters/tansu/topics/urban/partitions/0000000001/records/00000000000000000042.batch")
    BatchObject(key='clusters/tansu/topics/urban/partitions/0000000001/records/00000000000000000042.batch', topic='urban', partition=1, offset=42)
    >>> parse_key("clusters/tansu/topics/urban/partitions/0000000001/watermark.json") is None
    True
    """
    parts = key.split("/")
    if len(parts) != 8 or parts[0] != "clusters" or parts[2] != "topics" or parts[4] != "partitions" \
            or parts[6] != "records" or not parts[7].endswith(".batch"):
        return None
    try:
        return BatchObject(key, parts[3], int(parts[5]), int(parts[7][:-len(".batch")]))
    except ValueError:
        return None


def deletable(batches: Iterable[BatchObject], positions: Positions, keep: int = KEEP_BATCHES) -> list[BatchObject]:
    """The batches to delete: per partition holding more than ``keep``, the oldest beyond ``keep``, each only if
    the batch after it starts at or below the partition's guard (``positions``; none for a held topic).

    >>> batch = lambda offset, topic="t": BatchObject(f"k{offset}", topic, 0, offset)
    >>> [b.offset for b in deletable([batch(o) for o in range(0, 10, 2)], {}, keep=2)]   # no reader: the 3 oldest
    [0, 2, 4]
    >>> [b.offset for b in deletable([batch(o) for o in range(0, 10, 2)], {"t": {0: 4}}, keep=2)]   # a reader at 4
    [0, 2]
    >>> deletable([batch(o) for o in range(0, 10, 2)], {"t": HOLD}, keep=2)
    []
    """
    by_partition: dict[tuple[str, int], list[BatchObject]] = {}
    for batch in batches:
        by_partition.setdefault((batch.topic, batch.partition), []).append(batch)
    doomed: list[BatchObject] = []
    for (topic, partition), found in sorted(by_partition.items()):
        if len(found) <= keep:
            continue
        if topic in positions and positions[topic] is HOLD:
            continue
        guard = (positions.get(topic) or {}).get(partition)
        found.sort(key=lambda batch: batch.offset)
        for batch, following in zip(found[:len(found) - keep], found[1:]):
            if guard is not None and following.offset > guard:
                break
            doomed.append(batch)
    return doomed


class StoreError(OSError):
    """The object store answered a retention call with an error."""


class ObjectStoreClient:
    """The S3 calls retention needs, on the embedded store's gateway (it takes unsigned requests). Plain urllib: a
    round every 30 s should not add a log line per request to the service's output, as httpx's client does."""

    def __init__(self, endpoint: str, bucket: str, timeout_s: float = 30.0) -> None:
        self.base = f"{endpoint.rstrip('/')}/{bucket}"
        self.timeout_s = timeout_s

    def _call(self, url: str, data: bytes | None = None, headers: Mapping[str, str] | None = None) -> bytes:
        request = urllib.request.Request(url, data=data, headers=dict(headers or {}), method="POST" if data else "GET")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return answer.read()
        except urllib.error.HTTPError as error:
            raise StoreError(f"{request.method} {url}: HTTP {error.code} {error.read()[:300]!r}") from None

    def keys(self, prefix: str) -> list[str]:
        found: list[str] = []
        token = None
        while True:
            params = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            if token:
                params["continuation-token"] = token
            tree = ElementTree.fromstring(self._call(f"{self.base}?{urllib.parse.urlencode(params)}"))
            namespace = tree.tag[:tree.tag.index("}") + 1] if tree.tag.startswith("{") else ""
            found += [element.text or "" for element in tree.iter(f"{namespace}Key")]
            if (tree.findtext(f"{namespace}IsTruncated") or "").lower() != "true":
                return found
            token = tree.findtext(f"{namespace}NextContinuationToken")

    def delete(self, keys: list[str]) -> None:
        """Delete ``keys``, a thousand to a request (S3's DeleteObjects; one DELETE each took 80 ms here)."""
        for start in range(0, len(keys), 1000):
            body = "".join(f"<Object><Key>{escape(key)}</Key></Object>" for key in keys[start:start + 1000])
            payload = f'<?xml version="1.0" encoding="UTF-8"?><Delete><Quiet>true</Quiet>{body}</Delete>'.encode()
            digest = base64.b64encode(hashlib.md5(payload).digest()).decode()  # S3 asks for it on this call
            answer = self._call(f"{self.base}?delete=", payload, {"Content-MD5": digest, "Content-Type": "application/xml"})
            if b"<Error>" in answer:
                raise StoreError(f"the object store did not delete every batch: {answer[:300]!r}")


@dataclass
class RoundReport:
    batches: int = 0
    deleted: int = 0
    held_topics: int = 0


def retain(store: ObjectStoreClient, positions: Positions, keep: int = KEEP_BATCHES) -> RoundReport:
    """One round: list every batch object, delete what :func:`deletable` gives, oldest first."""
    batches = [batch for key in store.keys("clusters/") if (batch := parse_key(key)) is not None]
    doomed = deletable(batches, positions, keep)
    store.delete([batch.key for batch in doomed])
    return RoundReport(len(batches), len(doomed), sum(1 for value in positions.values() if value is HOLD))


class Retention:
    """Rounds of :func:`retain` every ``every_s`` on a thread, until :meth:`stop`; ``positions`` asks the runtime."""

    def __init__(self, store: ObjectStoreClient, positions: Callable[[], Positions], keep: int = KEEP_BATCHES,
                 every_s: float = EVERY_S, say: Callable[[str], None] = print) -> None:
        self.store, self.positions, self.keep, self.every_s, self.say = store, positions, keep, every_s, say
        self.stopping = threading.Event()
        self.last: RoundReport | None = None
        self.last_at: float | None = None
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name="broker-retention", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.wait(self.every_s):
            try:
                self.last, self.last_at, self.error = retain(self.store, self.positions(), self.keep), time.time(), None
            except Exception as error:  # the store, Redis (the positions) or anything else: this round only
                self.error = str(error) or type(error).__name__
                self.say(f"broker retention: this round failed ({self.error}); the next one tries again")

    def summary(self) -> dict[str, object]:
        """What ``/healthz`` shows under the broker: the batches a partition keeps, the last round, the last error."""
        last = None if self.last is None else {"at": self.last_at, "batches": self.last.batches,
                                               "deleted": self.last.deleted, "held_topics": self.last.held_topics}
        return {"keep_batches": self.keep, "every_s": self.every_s, "last_round": last, "error": self.error}

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(5)
