"""What a read costs as a partition's record batches add up, in memory and durable.

Run:  .venv/bin/python -m benchmarks.broker_batches [--levels 1000,2000,3000,4000,5000] [--timeout 20] [--retention 1000]  # ~9 min

For each storage of the embedded broker, started as ``sana up`` starts it
(``Launcher.start_broker``: in memory, and durable on the embedded object
store), one-record batches are written into one partition, each acknowledged
before the next (as a slow source or a micro-batch writer writes). At each
level a fresh consumer with the readers' settings (``runtime.broker.rdkafka``)
is assigned an offset, and the time until that record arrives is taken, or
"no answer" after ``--timeout`` seconds: at the first offset (``sana tail
-b``), the middle (a reader half a partition behind, as a query resuming from
its checkpoint) and the last (a reader keeping up). Writes
``benchmarks/results/broker_batches.json`` and prints a table.

A stream makes batches all the time (the demo's sources one per record at 20
records/s, every query one per output topic per micro-batch), so this is how
long a broker can serve a stream's readers. With ``--retention KEEP`` (default 1000) the durable broker is
measured a second time with a retention round before each level's reads (``api.retention``, as the service runs
it every 30 s): the reads are then at the oldest kept batch, the middle of the kept ones and the last.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from api.launcher import Launcher
from api.object_store import BUCKET as OBJECT_BUCKET
from api.retention import ObjectStoreClient, retain
from benchmarks.measure import Progress
from runtime.broker import rdkafka
from runtime.broker.topics import Topics
from sana.settings import Settings

RESULTS = Path(__file__).parent / "results" / "broker_batches.json"


PROGRESS = Progress(out=sys.stderr)  # stdout carries the table


def read_at(bootstrap: str, topic: str, offset: int, timeout_s: float) -> float | None:
    """Seconds until the record at ``offset`` arrives at a fresh consumer, or None after ``timeout_s``."""
    consumer = rdkafka.consumer(bootstrap)
    try:
        began = time.monotonic()
        consumer.assign([rdkafka.TopicPartition(topic, 0, offset)])
        while time.monotonic() - began < timeout_s:
            if any(message.error() is None for message in consumer.consume(1, 0.05)):
                return time.monotonic() - began
        return None
    finally:
        consumer.close()


def _shown(seconds: float | None, timeout_s: float) -> str:
    return "no answer in %.0f s" % timeout_s if seconds is None else "%.2f s" % seconds


def measure(storage: str, levels: list[int], timeout_s: float, port: int, keep: int | None = None) -> list[dict]:
    """Rows of one storage; with ``keep`` (durable only), a retention round (:func:`api.retention.retain`, no reader)
    before each level's reads: the partition keeps its newest ``keep`` batches."""
    settings = Settings(embedded_kafka_port=port)
    root = Path(tempfile.mkdtemp(prefix=f"broker-batches-{storage}-"))
    (root / "run").mkdir()
    launcher = Launcher(settings, root / "run")
    launcher.start_broker(root / "data" if storage == "durable" else None)
    rows = []
    try:
        bootstrap = settings.effective_kafka_bootstrap
        topics = Topics(bootstrap)
        topics.ensure(["t"])
        topics.close()
        producer, failures = rdkafka.producer(bootstrap, **{"linger.ms": 0}), rdkafka.Failures()
        written, began = 0, time.monotonic()
        for level in levels:
            while written < level:
                rdkafka.produce_one(producer, "t", json.dumps({"i": written}).encode(), None, failures)
                rdkafka.flush(producer, 30)
                written += 1
            if failures.records:
                raise SystemExit(f"{storage}: the broker did not take {len(failures.records)} record(s)")
            row = {"storage": storage, "batches": level, "write_s_per_batch": round((time.monotonic() - began) / written, 5)}
            first = 0
            if keep is not None:
                store = ObjectStoreClient(launcher.objects.endpoint, OBJECT_BUCKET)
                cleared = time.monotonic()
                report = retain(store, {}, keep)
                row.update(storage="durable, retention", kept=report.batches - report.deleted, deleted=report.deleted,
                           retention_round_s=round(time.monotonic() - cleared, 3))
                first = level - row["kept"]
            for where, offset in (("first", first), ("middle", (first + level) // 2), ("last", level - 1)):
                seconds = read_at(bootstrap, "t", offset, timeout_s)
                row[f"read_{where}_s"] = None if seconds is None else round(seconds, 3)
            rows.append(row)
            PROGRESS.say(f"{storage}: {level} batches, read at first / middle / last: "
                         + " / ".join(_shown(row[f"read_{where}_s"], timeout_s) for where in ("first", "middle", "last")),
                         force=True)
    finally:
        launcher.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1000,2000,3000,4000,5000", help="batch counts at which reads are timed")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for a record")
    parser.add_argument("--port", type=int, default=29097, help="the embedded broker's port")
    parser.add_argument("--retention", type=int, metavar="KEEP", default=1000,
                        help="also run durable with retention keeping KEEP batches (0: not)")
    args = parser.parse_args(argv)
    levels = sorted(int(level) for level in args.levels.split(","))
    runs = [("memory", None), ("durable", None)] + ([("durable", args.retention)] if args.retention else [])
    rows = [row for storage, keep in runs for row in measure(storage, levels, args.timeout, args.port, keep)]
    print("| storage | one-record batches in the partition | read the first | the middle | the last | write, per batch |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        reads = " | ".join(_shown(row[f"read_{where}_s"], args.timeout) for where in ("first", "middle", "last"))
        print(f"| {row['storage']} | {row['batches']:,} | {reads} | {1000 * row['write_s_per_batch']:.1f} ms |")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"command": " ".join(["python -m benchmarks.broker_batches", *(argv or sys.argv[1:])]),
                                   "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   "timeout_s": args.timeout, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
