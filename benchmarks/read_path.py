"""CPU per record of the read path: a range of offsets read into the Arrow batches the ``sana_kafka`` source yields.

Run:  .venv/bin/python -m benchmarks.read_path     # ~40 s: benchmarks/results/read_path.json

This is what a fragment's Spark task does per record before the JVM sees it
(runtime/spark/kafka_source.py, ``read_slice``): fetch the records, and turn
values and replay origins (from Sana's four headers) into Arrow arrays. One
topic partition holds ``--rows`` JSON records of about 130 bytes, written as a
fragment writes them (``sana.writer``, ``sana.run``, ``sana.batch``,
``sana.seq``); each variant reads them all, in its own child process, against
an embedded Tansu started here.

Variants: ``librdkafka`` is the runtime's ``read_slice`` (confluent-kafka,
values into Arrow from their bytes) reading origins, as for another query's
output; ``librdkafka-values-only`` the same without origins, as for a source
topic; ``kafka-python`` is the path it replaced, a kafka-python consumer
decoding every value and origin to a str (kept here as the baseline, with its
CRC-32C in C). ``--variants kafkarrow`` (after ``pip install kafkarrow``) reads the same records
with a Rust client that returns Arrow batches, for comparison only (issue 31's floor, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from statistics import median

from benchmarks.write_path import on_embedded_broker, record_table
from runtime.costs import process_cpu_s

VARIANTS = ("kafka-python", "librdkafka", "librdkafka-values-only")


def _kafka_python_read(bootstrap: str, topic: str, end: int):
    """The reader before librdkafka: a str per value, a str per origin, then Arrow."""
    import pyarrow as pa
    from kafka import KafkaConsumer, TopicPartition

    from runtime.spark.kafka_source import origin_key

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             max_partition_fetch_bytes=8 << 20, fetch_max_bytes=32 << 20, fetch_max_wait_ms=100)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    position, values, origins, batches = 0, [], [], 0
    while position < end:
        for item in consumer.poll(timeout_ms=200, max_records=50_000).get(tp, ()):
            values.append(item.value.decode("utf-8", "replace"))
            key = origin_key(item.headers)  # writer|batch|seq|partition, as that reader built it
            origins.append(None if key is None else f"{key.decode()}|0")
            position = item.offset + 1
        if len(values) >= 8192 or position >= end:
            pa.RecordBatch.from_arrays([pa.array([topic] * len(values), pa.string()), pa.array(values, pa.string()),
                                        pa.array(origins, pa.string())], names=["topic", "value", "origin"])
            values, origins, batches = [], [], batches + 1
    consumer.close()
    return batches


def _librdkafka_read(bootstrap: str, topic: str, end: int, origins: bool = True):
    from runtime.spark.kafka_source import KafkaSlice, read_slice

    batches = 0
    for batch in read_slice(bootstrap, KafkaSlice(topic, 0, 0, end, origins)):
        assert batch.column("origin").null_count == (0 if origins else batch.num_rows)
        batches += 1
    return batches


def _kafkarrow_read(bootstrap: str, topic: str, end: int):
    """kafkarrow (a Rust client built on librdkafka that hands records over as Arrow batches; not a dependency:
    ``pip install kafkarrow``). It starts where a policy says (here the earliest offset), not at an offset, and
    reads no headers, so it cannot serve a slice; it shows what a read costs without a Python object per message."""
    from kafkarrow import ConsumerManager, SourceTopic

    manager = ConsumerManager(config={"bootstrap.servers": bootstrap, "group.id": "sana-read-path"},
                              topics=[SourceTopic.from_earliest(topic)])
    records = batches = 0
    deadline = time.monotonic() + 120
    while records < end:
        if time.monotonic() > deadline:
            raise TimeoutError(f"kafkarrow read {records} of {end} records of {topic} in 120 s")
        batch = manager.poll(timeout_ms=200)
        records, batches = records + batch.num_rows, batches + (batch.num_rows > 0)
    return batches


def _child(variant: str, bootstrap: str, broker_pid: int, topic: str, rows: int) -> dict[str, float]:
    read = {"kafka-python": _kafka_python_read, "librdkafka": _librdkafka_read,
            "librdkafka-values-only": lambda *args: _librdkafka_read(*args, origins=False),
            "kafkarrow": _kafkarrow_read}[variant]
    read(bootstrap, topic, min(rows, 1000))  # warm up: imports, connections, metadata
    began, own, broker = time.perf_counter(), process_cpu_s(), process_cpu_s(broker_pid)
    batches = read(bootstrap, topic, rows)
    return {"records": rows, "arrow_batches": batches,
            "python_us_per_record": round(1e6 * (process_cpu_s() - own) / rows, 2),
            "broker_us_per_record": round(1e6 * (process_cpu_s(broker_pid) - broker) / rows, 2),
            "records_per_s": round(rows / (time.perf_counter() - began))}


def _fill(rows: int):
    """A topic of ``rows`` records with a fragment's headers, written through the runtime's producer."""
    def prepare(bootstrap: str) -> list[str]:
        import pyarrow as pa

        from runtime.broker.producer import BatchProducer
        from runtime.broker.topics import Topics

        topic = f"read-path-{uuid.uuid4().hex[:6]}"
        topics = Topics(bootstrap, 1)
        topics.ensure([topic])
        topics.close()
        table = record_table(rows, 1, seed=1)
        table = table.set_column(0, "topic", pa.array([topic] * rows, pa.string()))
        producer = BatchProducer(bootstrap)
        producer.send_table(table, [("sana.writer", b"q-read-path"), ("sana.run", b"r1"), ("sana.batch", b"7")])
        producer.close()
        return ["--topic", topic]
    return prepare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of {', '.join(VARIANTS)} and kafkarrow (pip install kafkarrow first)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/read_path.json"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--topic", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.bootstrap, args.broker_pid, args.topic, args.rows)))
        return 0

    runs = on_embedded_broker("benchmarks.read_path", tuple(args.variants.split(",")), args.rounds, ["--rows", str(args.rows)],
                              prepare=_fill(args.rows))
    keys = ("python_us_per_record", "broker_us_per_record", "records_per_s")
    table = {variant: {key: median(run[key] for run in results) for key in keys} for variant, results in runs.items()}
    result = {"args": {key: str(value) for key, value in vars(args).items()
                       if key not in ("child", "bootstrap", "broker_pid", "topic")},
              "variants": table, "runs": runs}
    args.out.write_text(json.dumps(result, indent=1))
    print("| client | Python CPU per record (us) | broker CPU per record (us) | records/s |\n|---|---:|---:|---:|")
    for variant, row in table.items():
        print(f"| {variant} | {row['python_us_per_record']:.1f} | {row['broker_us_per_record']:.1f} | "
              f"{row['records_per_s']:,.0f} |")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
