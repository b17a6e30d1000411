"""CPU per record of the driver's write path: a batch's output produced to Kafka by :class:`BatchProducer`.

Run:  .venv/bin/python -m benchmarks.write_path     # ~30 s: benchmarks/results/write_path.json

A fragment collects its micro-batch's output as Arrow and produces it from the
driver (runtime/broker/producer.py): the same records in both modes of the
reuse benchmark, since every dataflow's sinks write what they write whether
its tasks are shared or not. At the OPMW peak that is about 48,000 records a
minute (about 150 bytes each, four headers). This measures what one record
costs there: the Python process's CPU (the caller and the client's own
threads) and the broker's, per record, against an embedded Tansu started here.

Variants, each in its own child process: ``librdkafka`` is
:class:`BatchProducer` as the runtime uses it (confluent-kafka); ``kafka-python``
is the path it replaced, the same records and headers through an idempotent
kafka-python producer with its CRC-32C in C (the ``crc32c`` package), kept
here as the baseline.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from statistics import median

from benchmarks.rounds import run_in_rounds
from runtime.costs import process_cpu_s

VARIANTS = ("kafka-python", "librdkafka")


def record_table(rows: int, topics: int, seed: int):
    import pyarrow as pa

    rng = random.Random(seed)
    values = [json.dumps({"msgid": f"m{i}", "station": f"s{i % 7}", "value": rng.uniform(0, 100) * 3.14159,
                          "ts": "2026-01-01T00:00:00.000Z"}) for i in range(rows)]
    return pa.table({"topic": [f"write-path-{i % topics}" for i in range(rows)], "value": values})


class _KafkaPythonProducer:
    """The driver's write path before librdkafka: a future per record, the batch flushed, every future checked."""

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap, linger_ms=5, batch_size=512 << 10, acks="all", enable_idempotence=True,
            retry_backoff_ms=200, request_timeout_ms=5_000, delivery_timeout_ms=10_000, max_block_ms=20_000)

    def send_table(self, table, headers) -> int:
        rows = list(zip(table.column("topic").to_pylist(), table.column("value").to_pylist()))
        futures = [self.producer.send(topic, value=value.encode("utf-8"), headers=[*headers, ("sana.seq", str(seq).encode())])
                   for seq, (topic, value) in enumerate(rows)]
        self.producer.flush(15)
        assert all(future.is_done and not future.failed() for future in futures)
        return len(rows)

    def close(self) -> None:
        self.producer.close(timeout=1)


def _child(variant: str, bootstrap: str, broker_pid: int, rows: int, topics: int, batches: int) -> dict[str, float]:
    if variant == "kafka-python":
        import kafka.record.util as record_util

        if record_util.crc32c_c is None:
            raise SystemExit("the crc32c package is not installed: pip install crc32c")
        producer = _KafkaPythonProducer(bootstrap)
    else:
        from runtime.broker.producer import BatchProducer

        producer = BatchProducer(bootstrap)
    table = record_table(rows, topics, seed=1)
    headers = [("sana.writer", b"q-write-path"), ("sana.run", b"r1"), ("sana.batch", b"7")]
    try:
        producer.send_table(table, headers)  # warm up: connections, metadata, topics created
        began, own, broker = time.perf_counter(), process_cpu_s(), process_cpu_s(broker_pid)
        for _ in range(batches):
            producer.send_table(table, headers)
        count = rows * batches
        return {"records": count,
                "python_us_per_record": round(1e6 * (process_cpu_s() - own) / count, 2),
                "broker_us_per_record": round(1e6 * (process_cpu_s(broker_pid) - broker) / count, 2),
                "wall_us_per_record": round(1e6 * (time.perf_counter() - began) / count, 2)}
    finally:
        producer.close()


def on_embedded_broker(module: str, variants: tuple[str, ...], rounds: int, arguments: list[str],
                       prepare=None) -> dict[str, list[dict]]:
    """Start the embedded Tansu as ``sana up`` does, then run ``module``'s variants in rounds against it.

    Children get ``--bootstrap`` and ``--broker-pid``; ``prepare(bootstrap)`` runs first and returns more arguments.
    """
    import tempfile

    from api.launcher import Launcher
    from benchmarks.targets import free_port
    from sana.settings import Settings

    settings = Settings(embedded_kafka_port=free_port())
    launcher = Launcher(settings, Path(tempfile.mkdtemp(prefix=module.rsplit(".", 1)[-1] + "-")))
    launcher.start_broker()
    try:
        bootstrap = settings.effective_kafka_bootstrap
        extra = prepare(bootstrap) if prepare else []
        broker = launcher.broker.process
        return run_in_rounds(module, variants, rounds,
                             ["--bootstrap", bootstrap, "--broker-pid", str(broker.pid), *arguments, *extra])
    finally:
        launcher.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="records per batch (OPMW's largest hosted query: ~23k)")
    parser.add_argument("--topics", type=int, default=7)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/write_path.json"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = _child(args.child, args.bootstrap, args.broker_pid, args.rows, args.topics, args.batches)
        print(json.dumps(result))
        return 0

    runs = on_embedded_broker("benchmarks.write_path", VARIANTS, args.rounds,
                              ["--rows", str(args.rows), "--topics", str(args.topics), "--batches", str(args.batches)])
    keys = ("python_us_per_record", "broker_us_per_record", "wall_us_per_record")
    table = {variant: {key: median(run[key] for run in results) for key in keys} for variant, results in runs.items()}
    result = {"args": {key: str(value) for key, value in vars(args).items() if key not in ("child", "bootstrap", "broker_pid")},
              "variants": table, "runs": runs}
    args.out.write_text(json.dumps(result, indent=1))
    print("| client | Python CPU per record (us) | broker CPU per record (us) | wall per record (us) |\n|---|---:|---:|---:|")
    for variant, row in table.items():
        print(f"| {variant} | {row['python_us_per_record']:.1f} | {row['broker_us_per_record']:.1f} | "
              f"{row['wall_us_per_record']:.1f} |")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
