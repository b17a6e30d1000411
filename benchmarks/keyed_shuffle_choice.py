"""Which Spark mechanism carries the keyed shuffle: three candidates on the same rows (issue 10).

    .venv/bin/python -m benchmarks.keyed_shuffle_choice [--rows 200000] [--workers 8] [--repeats 7]

Each candidate sends rows ``(pkey, sensor, temp)`` to 8 logical workers and
runs one Python function per worker that counts its rows, in local mode:

- ``repartition + mapInArrow`` (what the runtime uses): ``REPARTITION(n, pkey)``
  with Sana's partition keys, then ``mapInArrow``;
- ``groupBy + applyInPandas``: ``groupBy(worker).applyInPandas`` with
  ``spark.sql.shuffle.partitions = n``, and the same grouped by Sana's
  partition key (identity partitioning through the session-wide setting);
- ``RDD partitionBy``: ``rdd.map(row -> (worker, row)).partitionBy(n, identity)``
  then ``mapPartitions``.

Reports the median time of a batch and how many workers shared a Spark task
(hash collisions). Writes ``benchmarks/results/keyed_shuffle_choice.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.keyed_shuffle_choice")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    import pandas as pd
    import pyarrow as pa
    from pyspark import TaskContext

    from runtime.spark.shuffle import partition_keys
    from runtime.spark.session import spark_session

    spark = spark_session("local[2]")
    n = args.workers
    pkeys = partition_keys(n)
    listed = ",".join(str(key) for key in pkeys)
    rows = spark.range(args.rows).selectExpr(
        f"CAST(id % {n} AS INT) AS worker",
        f"CAST(element_at(split('{listed}', ','), CAST(id % {n} AS INT) + 1) AS INT) AS pkey",
        "concat('s', CAST(id % 1000 AS STRING)) AS sensor", "rand(7) AS temp").persist()
    rows.count()

    def arrow_count(batches):
        workers, count = set(), 0
        for batch in batches:
            workers |= set(batch.column("worker").to_pylist())
            count += batch.num_rows
        yield pa.RecordBatch.from_pydict({"task": pa.array([TaskContext.get().partitionId()], pa.int32()),
                                          "workers": pa.array([len(workers)], pa.int32()),
                                          "rows": pa.array([count], pa.int64())})

    def pandas_count(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"task": [TaskContext.get().partitionId()], "workers": [frame["worker"].nunique()],
                             "rows": [len(frame)]})

    def rdd_count(index, pairs):
        items = list(pairs)
        yield (index, len({worker for worker, _ in items}), len(items))

    schema = "task int, workers int, rows long"
    candidates = {
        "repartition + mapInArrow": lambda: spark.sql(
            f"SELECT /*+ REPARTITION({n}, pkey) */ * FROM sana_choice").mapInArrow(arrow_count, schema).collect(),
        "groupBy(worker) + applyInPandas": lambda: rows.groupBy("worker").applyInPandas(pandas_count, schema).collect(),
        "groupBy(pkey) + applyInPandas": lambda: rows.groupBy("pkey").applyInPandas(pandas_count, schema).collect(),
        "RDD partitionBy": lambda: rows.rdd.map(lambda row: (row.worker, row)).partitionBy(n, lambda worker: worker)
        .mapPartitionsWithIndex(rdd_count).collect(),
    }
    rows.createOrReplaceTempView("sana_choice")
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    result = {"rows": args.rows, "workers": n, "candidates": {}}
    for name, run in candidates.items():
        run()  # warm-up: Python workers, code paths
        times, shares = [], None
        for _ in range(args.repeats):
            began = time.perf_counter()
            out = run()
            times.append(1000 * (time.perf_counter() - began))
            tasks: dict[int, int] = {}
            for task, workers, count in out:
                tasks[task] = tasks.get(task, 0) + workers
            shares = max(tasks.values())
        result["candidates"][name] = {"median_ms": round(statistics.median(times), 1),
                                      "min_ms": round(min(times), 1), "most_workers_in_one_task": shares}
        print(f"{name}: median {statistics.median(times):.0f} ms, most workers in one task {shares}",
              file=sys.stderr, flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "keyed_shuffle_choice.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
