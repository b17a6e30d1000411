"""Producing a micro-batch's output from the driver: one long-lived kafka-python producer per query.

On a 2-core machine a Spark write job per batch (a Python worker per task)
costs several times more than collecting the few output rows as Arrow and
producing them here, so fragments write through this by default; the
``sana_kafka`` batch writer (on the executors) is the option for clusters.

Every record gets the batch's headers plus ``sana.seq``, its index in the
batch's output: (``sana.writer``, ``sana.batch``, ``sana.seq``) names a record
across retries and replays, so a consumer (and a downstream query) can drop a
second copy exactly.

Under CPU starvation kafka-python 3.0 has been seen to leave a produce batch
unsent until it expires, while a fresh producer sends the same records at
once. So records not acknowledged within the delivery timeout are sent once
more through a new producer before the batch is declared failed.

A producer must not outlive a topic it wrote. kafka-python 3.0 keeps a
(then empty) queue for every partition it ever wrote, and once a metadata
refresh (every 5 minutes) no longer lists a deleted topic, its sender thread
asks for metadata in a tight loop, a whole core per producer for as long as
the producer lives (measured: 1.0 core). A query whose plan stops writing a
topic (an internal topic is deleted after that) therefore retires it
(:meth:`BatchProducer.retire`), and the next batch gets a fresh producer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pyarrow as pa
from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from runtime.exceptions import RuntimeFailure

log = logging.getLogger("sana.runtime.producer")

DELIVERY_TIMEOUT_MS = 10_000
FLUSH_TIMEOUT_S = 15.0


class BatchProducer:
    """Sends a batch's output and returns once the broker acknowledged every record."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._producer: KafkaProducer | None = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._written: set[str] = set()  # topics the current producer has written
        self._retired = False
        self.resent = 0
        self.renewed = 0

    def _client(self) -> KafkaProducer:
        with self._lock:
            if self._producer is None:
                # Idempotent (acks=all): a request whose answer is lost is retried soon (request_timeout_ms)
                # without writing its records twice.
                self._producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap, linger_ms=5, batch_size=512 << 10, acks="all",
                    enable_idempotence=True, retry_backoff_ms=200, request_timeout_ms=5_000,
                    delivery_timeout_ms=DELIVERY_TIMEOUT_MS, max_block_ms=20_000, reconnect_backoff_max_ms=1_000,
                )
            return self._producer

    def send_table(self, table: pa.Table, headers: Sequence[tuple[str, bytes]]) -> int:
        """Produce rows ``(topic, value)``; returns how many once all are acknowledged.

        Raises :class:`RuntimeFailure` if some are still not acknowledged after one resend.
        """
        if table.num_rows == 0:
            return 0
        rows = list(zip(table.column("topic").to_pylist(), table.column("value").to_pylist()))
        headers = list(headers)
        with self._send_lock:
            if self._retired:  # a topic it wrote is no longer written (and may be deleted): start afresh
                self._retired = False
                self.renewed += 1
                self.reset()
            self._written.update(topic for topic, _ in rows)
            pending = self._send(rows, range(len(rows)), headers)
            if pending:
                log.warning("%d of %d record(s) not acknowledged; sending them again through a new producer",
                            len(pending), len(rows))
                self.reset()
                self.resent += len(pending)
                pending = self._send(rows, pending, headers)
            if pending:
                self.reset()
                raise RuntimeFailure(f"could not write {len(pending)} of {len(rows)} record(s) to Kafka at {self.bootstrap}")
        return len(rows)

    def _send(self, rows: list[tuple[str, str]], indexes, headers: list[tuple[str, bytes]]) -> list[int]:
        """Send ``rows[i]`` for ``i`` in ``indexes``; returns the indexes not acknowledged."""
        try:
            producer = self._client()
            futures = {
                seq: producer.send(rows[seq][0], value=rows[seq][1].encode("utf-8"),
                                   headers=[*headers, ("sana.seq", str(seq).encode())])
                for seq in indexes
            }
            try:
                producer.flush(FLUSH_TIMEOUT_S)
            except KafkaTimeoutError:
                pass
        except (KafkaError, OSError) as error:
            log.warning("producing to %s failed: %s", self.bootstrap, error)
            return list(indexes)
        return [seq for seq, future in futures.items() if not future.is_done or future.failed()]

    def retire(self, topics: set[str]) -> None:
        """Nothing is written to ``topics`` any more: the next batch uses a new producer if this one wrote any."""
        if self._written & set(topics):
            self._retired = True

    def reset(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
            self._written = set()
        if producer is not None:
            try:
                producer.close(timeout=1)
            except Exception:  # a broken producer is dropped whatever it says
                pass

    def close(self) -> None:
        self.reset()
