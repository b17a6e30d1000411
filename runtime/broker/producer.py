"""Producing a micro-batch's output from the driver: one long-lived librdkafka producer per query.

On a 2-core machine a Spark write job per batch (a Python worker per task)
costs several times more than collecting the few output rows as Arrow and
producing them here, so fragments write through this by default; the
``sana_kafka`` batch writer (on the executors) is the option for clusters.

Every record gets the batch's headers plus ``sana.seq``, its number within
its output (the table's ``seq`` column; a table without one numbers its rows
in order): (``sana.writer``, ``sana.batch``, ``sana.seq``) names a record
across retries and replays, so a consumer (and a downstream query) can drop a
second copy exactly. The producer is idempotent (acks from all replicas): a
request whose answer is lost is retried without writing its records twice.
Records not acknowledged within the delivery timeout are sent once more, with
the same names, through a new producer before the batch is declared failed
(:class:`runtime.broker.rdkafka.Sender`).

A query whose plan stops writing a topic (an internal topic is deleted after
that) retires it (:meth:`BatchProducer.retire`): once a send in progress
ends, no row for it is written any more, also from a batch planned before
(so a removal need not wait for that batch), and the next batch gets a
fresh producer, so no client keeps asking the broker about a deleted topic.
(kafka-python 3.0, the client before librdkafka, spun a whole core on such a
topic once a metadata refresh dropped it.)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from runtime.broker import rdkafka

DELIVERY_TIMEOUT_MS = 10_000
FLUSH_TIMEOUT_S = 15.0


class BatchProducer:
    """Sends a batch's output and returns once the broker acknowledged every record."""

    def __init__(self, bootstrap: str, **config) -> None:
        self.bootstrap = bootstrap
        self._sender = rdkafka.Sender(
            lambda: rdkafka.producer(bootstrap, idempotent=True, delivery_timeout_ms=DELIVERY_TIMEOUT_MS, **config),
            bootstrap, FLUSH_TIMEOUT_S)
        self._send_lock = threading.Lock()  # held for a whole send
        self._fence_lock = threading.Lock()  # held for moments: the fences and what the send in progress writes
        self._written: set[str] = set()  # topics the current producer has written
        self._retired = False
        self._fenced: set[str] = set()  # retired topics: their rows are not written
        self._sending: frozenset[str] = frozenset()  # topics the send in progress writes
        self.renewed = 0

    @property
    def resent(self) -> int:
        return self._sender.resent

    def send_table(self, table: pa.Table, headers: Sequence[tuple[str, bytes]]) -> int:
        """Produce rows ``(topic, value)``; returns how many once all are acknowledged.

        Raises :class:`RuntimeFailure` if some are still not acknowledged after one resend.
        """
        if table.num_rows == 0:
            return 0
        topics = frozenset(pc.unique(table.column("topic")).to_pylist())
        with self._send_lock:
            with self._fence_lock:
                renew, self._retired = self._retired, False
            if renew:  # a topic it wrote is no longer written (and may be deleted): start afresh
                self.renewed += 1
                self.reset()
            with self._fence_lock:
                if not self._sender.live:
                    self._written = set()
                skip = frozenset(self._fenced)
                self._sending = topics - skip
                self._written = (self._written | topics) - skip
            try:
                return self._sender.send([table], headers, seq_base=0, skip=skip)
            finally:
                with self._fence_lock:
                    self._sending = frozenset()

    def retire(self, topics: set[str]) -> None:
        """Nothing is written to ``topics`` any more: returns once a send in progress that writes any of them has
        ended (another send goes on), and later sends drop their rows for ``topics`` (until :meth:`resume`); the
        next batch uses a new producer if this one wrote any of them."""
        with self._fence_lock:
            self._fenced |= set(topics)
            if self._written & set(topics):
                self._retired = True
            carried = bool(self._sending & set(topics))
        if carried:
            with self._send_lock:
                pass

    def resume(self, topics: set[str]) -> None:
        """``topics`` are written again (a plan outputs them once more); a send in progress keeps dropping their
        rows (it was planned before)."""
        with self._fence_lock:
            self._fenced -= set(topics)

    def reset(self) -> None:
        self._sender.reset()
        self._written = set()

    def close(self) -> None:
        self.reset()
