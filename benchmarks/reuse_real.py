"""The reuse evaluation's real-service target: ``sana up`` on Spark and Kafka, sources producing at a fixed rate.

:class:`RealService` starts ``sana up`` (its embedded broker on a free port,
local Spark, the real Redis under a fresh prefix, sharing on or off) as a
child process, feeds every source topic at a fixed rate from producer
threads, and measures each step of a trace:

- ``cores``: CPU of the service's whole process tree (the API, the Spark JVM
  and its Python workers, the embedded broker) from ``/proc``, over a
  measurement window that starts ``settle_s`` after the change returned;
- ``queries`` (``GET /runtime/queries``), ``running_tasks`` and the sharing
  histogram (``GET /stats``);
- ``kafka_bytes_per_s`` written by sinks and taps and the per-dataflow cost
  split (``GET /costs``).

At the end :meth:`RealService.check_sinks` reads every sink topic written
during the run and counts records whose Sana name (writer, batch, seq)
repeats: replays the runtime must name (none are expected without faults).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from benchmarks.targets import delete_prefix, free_port, redis_client
from runtime.costs import process_tree_cpu_s

START_TIMEOUT_S = 180.0


class RealService:
    """``sana up`` with Spark and its embedded broker, fed at ``rate`` records/s per source topic."""

    def __init__(self, run_dir: Path, *, sharing: bool, redis_url: str, records: Callable[[str, int], Callable],
                 master: str = "local[2]", rate: float = 10.0, settle_s: float = 5.0, measure_s: float = 20.0) -> None:
        """``records(topic, seed)`` gives ``make(i, at)``, the ``i``-th input record of a source topic."""
        self.run_dir = run_dir
        self.records = records
        self.sharing = sharing
        self.redis_url = redis_url
        self.rate = rate
        self.settle_s = settle_s
        self.measure_s = measure_s
        self.prefix = f"bench-reuse-{uuid.uuid4().hex[:8]}-{'reuse' if sharing else 'alone'}"
        self.port = free_port()
        self.broker_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.broker_port}"
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {key: value for key, value in os.environ.items() if not key.startswith("SANA_")}
        env.update(SANA_STATE_PREFIX=self.prefix, SANA_REDIS_URL=redis_url, SANA_SHARING="1" if sharing else "0",
                   SANA_SPARK_MASTER=master, SANA_EMBEDDED_KAFKA_PORT=str(self.broker_port),
                   SANA_CHECKPOINT_DIR=str(run_dir / "checkpoints"), SANA_RUN_DIR=str(run_dir / "run"))
        self.log_path = run_dir / "sana-up.log"
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "api.cli", "up", "--port", str(self.port)], env=env,
                                        stdout=self._log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=600)
        self._stop = threading.Event()
        self._producers: dict[str, threading.Thread] = {}
        self.produced: Counter[str] = Counter()
        self.sinks: set[str] = set()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sana up exited with {self.process.returncode}; see {self.log_path}")
            try:
                if self.client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"sana up did not become healthy within {START_TIMEOUT_S:.0f} s; see {self.log_path}")

    # -- sources -------------------------------------------------------------------------

    def feed(self, topics: list[str]) -> None:
        """Produce into every topic of ``topics`` not yet fed, at the fixed rate (model topics at a tenth of it)."""
        from runtime.broker.topics import Topics

        new = [topic for topic in topics if topic not in self._producers]
        if not new:
            return
        admin = Topics(self.bootstrap, 1)
        try:
            admin.ensure(new)
        finally:
            admin.close()
        for number, topic in enumerate(new, start=len(self._producers)):
            rate = self.rate / 10 if "model" in topic else self.rate
            thread = threading.Thread(target=self._produce, args=(topic, self.records(topic, number + 1), rate),
                                      daemon=True, name=f"produce-{topic}")
            self._producers[topic] = thread
            thread.start()

    def _produce(self, topic: str, make: Callable[[int, datetime], dict[str, Any]], rate: float) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=20)
        began, i = time.monotonic(), 0
        try:
            while not self._stop.is_set():
                due = began + i / rate
                if due > time.monotonic():
                    self._stop.wait(due - time.monotonic())
                    continue
                producer.send(topic, json.dumps(make(i, datetime.now(timezone.utc))).encode())
                i += 1
                self.produced[topic] += 1
            producer.flush(30)
        finally:
            producer.close()

    # -- the target interface ------------------------------------------------------------

    def submit(self, document: dict[str, Any]) -> str:
        self.feed(sorted({task["config"]["topic"] for task in document["tasks"] if task["type"] == "source"}))
        self.sinks.update(task["config"]["topic"] for task in document["tasks"] if task["type"] == "sink")
        response = self.client.post("/dataflows", json=document)
        if response.status_code != 201:
            raise RuntimeError(f"POST /dataflows {document['name']}: {response.status_code} {response.text[:500]}")
        return response.json()["id"]

    def remove(self, dataflow_id: str) -> None:
        response = self.client.delete(f"/dataflows/{dataflow_id}")
        if response.status_code != 200:
            raise RuntimeError(f"DELETE /dataflows/{dataflow_id}: {response.status_code} {response.text[:500]}")

    def measure_step(self) -> dict[str, Any]:
        time.sleep(self.settle_s)
        began, cpu_before = time.monotonic(), process_tree_cpu_s(self.process.pid)
        time.sleep(self.measure_s)
        seconds = time.monotonic() - began
        cores = (process_tree_cpu_s(self.process.pid) - cpu_before) / seconds
        stats = self.client.get("/stats").raise_for_status().json()
        queries = self.client.get("/runtime/queries").raise_for_status().json()["queries"]
        costs = self.client.get("/costs").raise_for_status().json()
        return {
            "cores": round(cores, 4),
            "measured_s": round(seconds, 2),
            "queries": len(queries),
            "degraded_queries": sum(1 for query in queries if query["status"] != "running"),
            "running_tasks": stats["running_tasks"],
            "submitted_tasks": stats["submitted_tasks"],
            "fragments": stats["fragments"],
            "sharing_histogram": stats["sharing_histogram"],
            "kafka_bytes_per_s": costs["total"]["kafka_bytes_per_s"],
            "dataflow_costs": {flow_id: {"cost": flow["cost"], "alone": flow["alone"]}
                               for flow_id, flow in costs["dataflows"].items()},
        }

    # -- the end -------------------------------------------------------------------------

    def check_sinks(self) -> dict[str, Any]:
        """Records and repeated Sana names (writer, batch, seq) on every sink topic of the run."""
        from kafka import KafkaConsumer, TopicPartition

        from runtime.broker.offsets import probe_consumer, topic_end_offsets

        probe = probe_consumer(self.bootstrap)
        try:
            ends = topic_end_offsets(probe, sorted(self.sinks))
        finally:
            probe.close()
        result = {}
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False)
        try:
            for topic in sorted(self.sinks):
                names: Counter[tuple[str, ...]] = Counter()
                partitions = {TopicPartition(topic, p): end for p, end in ends.get(topic, {}).items() if end > 0}
                if partitions:
                    consumer.assign(list(partitions))
                    consumer.seek_to_beginning(*partitions)
                    remaining = dict(partitions)
                    deadline = time.monotonic() + 60
                    while remaining and time.monotonic() < deadline:
                        for part, records in consumer.poll(timeout_ms=1000).items():
                            for record in records:
                                headers = {key: value.decode() for key, value in record.headers or []}
                                names[(headers.get("sana.writer", ""), headers.get("sana.batch", ""),
                                       headers.get("sana.seq", ""))] += 1
                                if record.offset + 1 >= remaining.get(part, 0):
                                    remaining.pop(part, None)
                result[topic] = {"records": sum(names.values()),
                                 "repeated": sum(count - 1 for count in names.values() if count > 1)}
        finally:
            consumer.close()
        return result

    def close(self) -> None:
        self._stop.set()
        for thread in self._producers.values():
            thread.join(timeout=30)
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._log.close()
        client = redis_client(self.redis_url)
        try:
            delete_prefix(client, self.prefix)
        finally:
            client.close()
