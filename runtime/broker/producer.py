"""Producing a micro-batch's output from the driver: one long-lived kafka-python producer.

On a 2-core machine a Spark write job per batch (a Python worker per task)
costs several times more than collecting the few output rows as Arrow and
producing them here, so fragments write through this by default; the
``sana_kafka`` batch writer (on the executors) is the option for clusters.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyarrow as pa
from kafka import KafkaProducer
from kafka.errors import KafkaError

from runtime.exceptions import RuntimeFailure

SEND_TIMEOUT_S = 30.0


class BatchProducer:
    """One per fragment query (kafka-python 3.0 flushes from several threads can stall)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._producer: KafkaProducer | None = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()

    def _client(self) -> KafkaProducer:
        with self._lock:
            if self._producer is None:
                # Idempotent (acks=all): a request whose answer is lost is retried soon (request_timeout_ms)
                # without writing its records twice.
                self._producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap, linger_ms=5, batch_size=512 << 10, acks="all",
                    enable_idempotence=True, retry_backoff_ms=200, request_timeout_ms=5_000, delivery_timeout_ms=25_000,
                    max_block_ms=20_000, reconnect_backoff_max_ms=1_000,
                )
            return self._producer

    def send_table(self, table: pa.Table, headers: Sequence[tuple[str, bytes]]) -> int:
        """Produce rows ``(topic, value)``; returns how many once the broker acknowledged all of them."""
        if table.num_rows == 0:
            return 0
        producer = self._client()
        headers = list(headers)
        with self._send_lock:
            return self._send(producer, table, headers)

    def _send(self, producer: KafkaProducer, table: pa.Table, headers: list[tuple[str, bytes]]) -> int:
        try:
            futures = [
                producer.send(topic, value=value.encode("utf-8"), headers=headers)
                for topic, value in zip(table.column("topic").to_pylist(), table.column("value").to_pylist())
            ]
            producer.flush(SEND_TIMEOUT_S)
            for future in futures:
                future.get(timeout=SEND_TIMEOUT_S)
        except (KafkaError, OSError) as error:
            self.reset()
            raise RuntimeFailure(f"could not write {table.num_rows} record(s) to Kafka at {self.bootstrap}: {error}") from error
        return table.num_rows

    def reset(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=1)
            except Exception:  # a broken producer is dropped whatever it says
                pass

    def close(self) -> None:
        self.reset()
