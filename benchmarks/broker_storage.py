"""The ``broker`` part of benchmarks.runtime_dataplane: the embedded broker in memory and durable, in one run.

    .venv/bin/python -m benchmarks.runtime_dataplane broker [--quick] [--records N]

``sana up`` starts Tansu on the embedded SeaweedFS S3 store (durable, its
data in a folder), ``sana up --ephemeral`` in memory. For each, one after the
other (never both at once), a broker started as ``sana up`` starts it
(:meth:`api.launcher.Launcher.start_broker`, with a data folder or without)
on a free port, in a fresh temporary folder:

- ``start_s``: from the start to the first answered metadata request (for
  durable: the object store's start and bucket check included), fresh; for
  durable also on the data it then holds, after ``kill -9`` of Tansu and
  ``weed`` together and after a clean stop;
- ``produce``: N records of about 130 bytes of JSON with the headers a
  fragment writes (``sana.writer``, ``sana.run``, ``sana.batch``,
  ``sana.seq``) through :class:`runtime.broker.producer.BatchProducer` (the
  writers' producer: idempotent, acks from all replicas), 20,000 records per
  send, each send waiting for every acknowledgement as a micro-batch's write
  does; records/s, and CPU microseconds per record of this process (the
  client: Python and librdkafka) and of the broker's processes (Tansu, and
  ``weed`` for durable), read with psutil;
- ``consume``: all of them from offset 0 through Sana's reader settings
  (:func:`runtime.broker.rdkafka.consumer`), measured the same way;
- ``fragment``: the ``throughput`` part's FragmentQuery (filter + select) over
  a backlog of its own, at most 20,000 rows per micro-batch; the CPU is the
  whole process tree's (the broker is a child of this process) and the
  broker's share of it;
- durable only, ``kill_9``: 1,000 more records, and as soon as the producer
  has their acknowledgement, ``kill -9`` of Tansu and ``weed``; after the
  restart every record of the topic is read back and counted (each name
  ``(sana.writer, sana.batch, sana.seq)`` once).

The object store runs as :class:`api.object_store.ObjectStore` starts it for
``sana up``. (The first run of this part found weed's default cap of 8
volumes, which stopped the broker's writes after 64 MB; the store now starts
with ``-volume.max=0``.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa

from api.launcher import Launcher
from api.object_store import ObjectStoreError, weed_binary
from api.processes import free_ports
from runtime.broker import rdkafka
from runtime.broker.producer import BatchProducer
from runtime.broker.topics import Topics
from runtime.costs import process_cpu_s
from sana.settings import Settings

SEND_ROWS = 20_000
FRAGMENT_BATCH_ROWS = 20_000
TAIL = 1_000
STATUS_EVERY_S = 10.0
STALL_S = 60.0


def value(i: int, sent: float) -> bytes:
    """Record ``i``: about 130 bytes of JSON (a sensor reading with its send time)."""
    return json.dumps({"sensor": f"s{i % 16}", "temp": float(i % 50), "humidity": round(40 + (i % 397) / 10, 1),
                       "site": f"district-{i % 12:02d}/b{i % 7}", "sent": sent,
                       "ts": "2024-01-01T00:00:00.000Z"}).encode()


def say(message: str) -> None:
    print(f"broker: {message}", file=sys.stderr, flush=True)


class Status:
    """While a long step runs: a status line every ``every_s`` with ``read()`` and the time so far."""

    def __init__(self, step: str, read: Callable[[], str] = lambda: "running", every_s: float = STATUS_EVERY_S) -> None:
        self.step, self.read, self.every_s = step, read, every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        began = time.monotonic()
        while not self.stop.wait(self.every_s):
            say(f"{self.step}: {self.read()} ({time.monotonic() - began:.0f} s)")

    def __enter__(self) -> "Status":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


class Broker:
    """An embedded broker started as ``sana up`` starts it, its processes' CPU, and a stop of all it started."""

    def __init__(self, mode: str, root: Path) -> None:
        self.mode, self.root = mode, root
        self.data_dir = root / "data" if mode == "durable" else None
        self.settings = Settings(embedded_kafka_port=free_ports(1)[0], kafka_bootstrap=None)
        self.bootstrap = self.settings.effective_kafka_bootstrap
        self.launcher: Launcher | None = None
        self.started: list[psutil.Process] = []  # every process started, to be sure none outlives the run
        self.starts = 0

    def start(self) -> float:
        """Start it (on its data, if it has some); the seconds until it answered."""
        self.starts += 1
        run_dir = self.root / f"run-{self.starts}"
        run_dir.mkdir(parents=True)
        self.launcher = Launcher(self.settings, run_dir)
        began = time.monotonic()
        try:
            self.launcher.start_broker(self.data_dir)
        finally:
            self.started.extend(psutil.Process(process.pid) for process in self._processes().values())
        return round(time.monotonic() - began, 2)

    def _processes(self) -> dict:
        found = {}
        if self.launcher is not None and self.launcher.broker is not None:
            found["tansu"] = self.launcher.broker.process
        if self.launcher is not None and self.launcher.objects is not None and self.launcher.objects.process is not None:
            found["weed"] = self.launcher.objects.process
        return found

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of each of the broker's processes."""
        return {name: process_cpu_s(process.pid) for name, process in self._processes().items()}

    def kill_9(self) -> None:
        """SIGKILL to Tansu and the object store at once, as a crash of the machine's processes would."""
        processes = list(self._processes().values())
        for process in processes:
            os.kill(process.pid, signal.SIGKILL)
        for process in processes:
            process.wait()
        self.launcher = None

    def stop(self) -> None:
        """A clean stop, as ``sana up`` stops them (SIGTERM to Tansu, then to the object store)."""
        if self.launcher is not None:
            self.launcher.stop()
        self.launcher = None

    def close(self) -> None:
        """Stop it, and kill whatever it started that still runs (an error half-way must leave nothing behind)."""
        try:
            self.stop()
        finally:
            for process in self.started:
                try:
                    if process.is_running():
                        process.kill()
                        process.wait(10)
                except psutil.Error:
                    pass

    def data_bytes(self) -> int | None:
        if self.data_dir is None:
            return None
        return sum(path.stat().st_size for path in self.data_dir.rglob("*") if path.is_file())


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after.get(name, 0.0) - used for name, used in before.items()}


def _rates(count: int, seconds: float, client_s: float, broker: dict[str, float]) -> dict[str, Any]:
    per = 1e6 / count
    return {"records": count, "seconds": round(seconds, 2), "records_per_s": round(count / seconds),
            "client_cpu_us_per_record": round(client_s * per, 2),
            "broker_cpu_us_per_record": round(sum(broker.values()) * per, 2),
            **{f"broker_cpu_us_per_record_{name}": round(used * per, 2) for name, used in broker.items()}}


def produce(broker: Broker, topic: str, count: int, writer: bytes = b"bench-broker") -> dict[str, Any]:
    """``count`` records into ``topic`` through the writers' producer, one acknowledged send per 20,000, named
    (``writer``, batch number, index in the batch)."""
    sent = time.time()
    tables, value_bytes = [], 0
    for start in range(0, count, SEND_ROWS):
        values = [value(i, sent) for i in range(start, min(start + SEND_ROWS, count))]
        value_bytes += sum(map(len, values))
        tables.append(pa.table({"topic": pa.array([topic] * len(values)), "value": pa.array(values, pa.binary())}))
    producer = BatchProducer(broker.bootstrap)
    done = [0]
    try:
        with Status(f"{broker.mode}: produce", lambda: f"{done[0]:,} of {count:,} records acknowledged"):
            client0, broker0, began = process_cpu_s(), broker.cpu_s(), time.monotonic()
            for batch, table in enumerate(tables):
                done[0] += producer.send_table(table, [("sana.writer", writer), ("sana.run", b"r1"),
                                                       ("sana.batch", str(batch).encode())])
            seconds, client = time.monotonic() - began, process_cpu_s() - client0
            used = _cpu_delta(broker0, broker.cpu_s())
    finally:
        producer.close()
    return {**_rates(count, seconds, client, used), "records_per_send": SEND_ROWS,
            "value_bytes_avg": round(value_bytes / count, 1)}


def consume(broker: Broker, topic: str, expected: int, check: bool = False) -> dict[str, Any]:
    """Read ``topic`` from offset 0: until ``expected`` records (timed), or with ``check`` to its end, counting each
    record's name ``(sana.writer, sana.batch, sana.seq)`` once."""
    consumer = rdkafka.consumer(broker.bootstrap, **{"enable.partition.eof": True})
    consumer.assign([rdkafka.TopicPartition(topic, 0, 0)])
    count, names, at_end = [0], set(), False
    try:
        with Status(f"{broker.mode}: {'read back' if check else 'consume'}", lambda: f"{count[0]:,} records"):
            client0, broker0, began = process_cpu_s(), broker.cpu_s(), time.monotonic()
            progressed = began
            while (count[0] < expected and not check) or (check and not at_end):
                messages = consumer.consume(10_000, 0.5)
                now = time.monotonic()
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() == rdkafka.KafkaError._PARTITION_EOF:
                            at_end = True
                            continue
                        raise rdkafka.KafkaException(error)
                    count[0] += 1
                    if check:
                        headers = dict(message.headers() or ())
                        names.add((headers.get("sana.writer"), headers.get("sana.batch"), headers.get("sana.seq")))
                if messages:
                    progressed = now
                elif now - progressed > STALL_S:
                    raise RuntimeError(f"no record from {topic} for {STALL_S:.0f} s after {count[0]:,} records")
            seconds, client = time.monotonic() - began, process_cpu_s() - client0
            used = _cpu_delta(broker0, broker.cpu_s())
    finally:
        consumer.close()
    if check:
        return {"expected": expected, "read": count[0], "distinct": len(names), "end_offset": end_offset(broker, topic),
                "all_there": count[0] == len(names) == expected, "read_s": round(seconds, 2)}
    return _rates(count[0], seconds, client, used)


def end_offset(broker: Broker, topic: str) -> int:
    """The topic's true end offset (Tansu's ListOffsets answer lags the last batch: runtime/broker/offsets.py)."""
    from kafka import TopicPartition

    from runtime.broker.offsets import end_offsets, probe_consumer

    probe = probe_consumer(broker.bootstrap)
    try:
        return end_offsets(probe, [TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    finally:
        probe.close()


def fragment(bench, broker: Broker, rows: int) -> dict[str, Any]:
    """The ``throughput`` part's FragmentQuery on this broker (a backlog of ``rows`` of its own; ``bench`` is
    runtime_dataplane's Bench, handed in so that this module does not import it back)."""
    topics = Topics(broker.bootstrap)
    try:
        topic, sink = f"frag-in-{broker.mode}", f"frag-out-{broker.mode}"
        topics.ensure([topic, sink])
    finally:
        topics.close()
    with Status(f"{broker.mode}: fragment backlog of {rows:,} rows"):
        bench.write_backlog(broker.bootstrap, topic, rows)
    with Status(f"{broker.mode}: fragment, at most {FRAGMENT_BATCH_ROWS:,} rows per batch"):
        return bench.kafka_fragment(broker.bootstrap, topic, sink, rows, FRAGMENT_BATCH_ROWS,
                                    broker_cpu=lambda: sum(broker.cpu_s().values()))


def measure(bench, mode: str, records: int, fragment_rows: int, root: Path) -> dict[str, Any]:
    broker = Broker(mode, root / mode)
    result: dict[str, Any] = {"start_s": {}}
    try:
        result["start_s"]["fresh"] = broker.start()
        say(f"{mode}: started in {result['start_s']['fresh']} s on {broker.bootstrap}")
        topic = "records"
        topics = Topics(broker.bootstrap)
        try:
            topics.ensure([topic])
        finally:
            topics.close()
        result["produce"] = produce(broker, topic, records)
        say(f"{mode}: produce {result['produce']}")
        result["consume"] = consume(broker, topic, records)
        say(f"{mode}: consume {result['consume']}")
        result["fragment"] = fragment(bench, broker, fragment_rows)
        say(f"{mode}: fragment {result['fragment']}")
        if mode == "durable":
            produce(broker, topic, TAIL, writer=b"bench-broker-tail")  # acknowledged, and straight away:
            broker.kill_9()
            result["data_bytes"] = broker.data_bytes()
            result["start_s"]["after_kill_9"] = broker.start()
            say(f"{mode}: killed -9 right after {TAIL:,} more records were acknowledged; "
                f"restarted in {result['start_s']['after_kill_9']} s; reading everything back")
            result["kill_9"] = {"tail_records": TAIL, **consume(broker, topic, records + TAIL, check=True)}
            say(f"{mode}: after kill -9: {result['kill_9']}")
            broker.stop()
            result["start_s"]["after_clean_stop"] = broker.start()
            say(f"{mode}: restarted after a clean stop in {result['start_s']['after_clean_stop']} s")
    finally:
        broker.close()
    left = [process.pid for process in broker.started if process.is_running()]
    if left:
        raise RuntimeError(f"processes still running after the {mode} broker's stop: {left}")
    return result


def compare(bench, records: int, fragment_rows: int) -> dict[str, Any]:
    """Both brokers, one after the other; a summary table printed to stderr and kept in the result."""
    try:
        weed_binary()
    except ObjectStoreError as error:
        raise SystemExit(str(error)) from None
    root = Path(tempfile.mkdtemp(prefix="sana-bench-broker-"))
    try:
        results = {mode: measure(bench, mode, records, fragment_rows, root) for mode in ("memory", "durable")}
    except BaseException:
        say(f"failed: the brokers' logs and data are kept in {root}")
        raise
    shutil.rmtree(root, ignore_errors=True)
    table = summary(results)
    print("\n".join(table), file=sys.stderr, flush=True)
    return {"records": records, "fragment_rows": fragment_rows, **results, "table": table}


def summary(results: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown rows: memory beside durable."""
    memory, durable = results["memory"], results["durable"]

    def row(label: str, read: Callable[[dict[str, Any]], Any]) -> str:
        cells = []
        for result in (memory, durable):
            try:
                found = read(result)
            except KeyError:
                found = None
            cells.append("" if found is None else f"{found:,}" if isinstance(found, int) else str(found))
        return f"| {label} | {cells[0]} | {cells[1]} |"

    return [
        "| | memory | durable |", "|---|---:|---:|",
        row("start-up, fresh (s)", lambda r: r["start_s"]["fresh"]),
        row("start-up after kill -9 of broker and store, on the data (s)", lambda r: r["start_s"]["after_kill_9"]),
        row("start-up after a clean stop, on the data (s)", lambda r: r["start_s"]["after_clean_stop"]),
        row("produce: records/s", lambda r: r["produce"]["records_per_s"]),
        row("produce: client CPU us/record", lambda r: r["produce"]["client_cpu_us_per_record"]),
        row("produce: broker CPU us/record (Tansu + weed)", lambda r: r["produce"]["broker_cpu_us_per_record"]),
        row("consume: records/s", lambda r: r["consume"]["records_per_s"]),
        row("consume: client CPU us/record", lambda r: r["consume"]["client_cpu_us_per_record"]),
        row("consume: broker CPU us/record (Tansu + weed)", lambda r: r["consume"]["broker_cpu_us_per_record"]),
        row("fragment (filter + select, 20,000/batch): rows/s busy", lambda r: r["fragment"]["rows_per_s_busy"]),
        row("fragment: CPU s per million rows (all)", lambda r: r["fragment"]["cpu_s_per_million_rows"]),
        row("fragment: of which broker", lambda r: r["fragment"]["broker_cpu_s_per_million_rows"]),
        row("after kill -9: records read back / expected",
            lambda r: f"{r['kill_9']['read']:,} / {r['kill_9']['expected']:,} ({r['kill_9']['distinct']:,} distinct)"),
    ]
