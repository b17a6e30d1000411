"""CPU of the Spark JVM per micro-batch of an OPMW-like hosted statement, written in different shapes.

Run:  .venv/bin/python -m benchmarks.statement_shapes            # ~4 min: benchmarks/results/statement_shapes.json

A hosting query evaluates its plan once per micro-batch as one statement: the
CTEs of its tasks and a ``UNION ALL`` of its outputs (runtime/spark/fragment.py).
This builds that kind of statement over ``--rows`` JSON records of the OPMW
schema: a trunk of pi ``select``s shared by ``--branches`` branches of a
``filter`` and pi ``select``s, each branch an output. Every shape runs in a
child process with its own Spark session (``local[2]``), ``--warmup`` batches
first, then ``--batches`` measured ones; the CPU is the driver JVM's from
``/proc`` (user + system). The shapes:

- ``union``: what Sana runs, the trunk persisted once per batch (a fork);
- ``coalesced``: the same, the union coalesced to ``spark.default.parallelism``
  partitions (fewer tasks, each deserializing the stage's code once);
- ``per-output``: one job per output, the Arrow tables concatenated;
- ``recomputed``: the trunk not persisted, recomputed in every branch;
- ``interpreted``: ``union`` without whole-stage code generation and with
  interpreted expressions (``spark.sql.codegen.wholeStage=false``,
  ``spark.sql.codegen.factoryMode=NO_CODEGEN``).

Shapes are run in turns (``--rounds``) so a drift of the machine hits them all.
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

SHAPES = ("union", "coalesced", "per-output", "recomputed", "interpreted")
SCHEMA = "msgid STRING, station STRING, value DOUBLE, ts TIMESTAMP"
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def statements(branches: int, seed: int = 1) -> tuple[str, list[str], list[str]]:
    """The trunk's CTEs, each branch's CTEs (reading ``trunk``), and each output's query.

    >>> trunk, bodies, outputs = statements(2)
    >>> trunk.count(" AS ("), len(bodies), outputs[1]
    (4, 2, "SELECT 'out1' AS topic, to_json(struct(*)) AS value FROM b1_2")
    """
    from benchmarks.opmw import PI_TERMS, pi_expression

    rng = random.Random(seed)

    def select(parent: str, weight: float) -> str:
        value = pi_expression(rng.randint(*PI_TERMS), weight)
        return f"SELECT msgid, station, CAST(({value}) AS DOUBLE) AS value, ts FROM {parent}"

    trunk = [f"p AS (SELECT r.msgid AS msgid, r.station AS station, r.value AS value, r.ts AS ts "
             f"FROM (SELECT from_json(value, '{SCHEMA}') AS r FROM raw))"]
    for stage in range(3):
        trunk.append(f"t{stage} AS ({select('p' if stage == 0 else f't{stage - 1}', 0.5 + stage / 10)})")
    bodies, outputs = [], []
    for branch in range(branches):
        ctes = [f"b{branch}_0 AS ({select('trunk', 0.6 + branch / 100)})",
                f"b{branch}_1 AS (SELECT * FROM b{branch}_0 WHERE (value % 1 < {0.5 + branch / 100:g}))",
                f"b{branch}_2 AS ({select(f'b{branch}_1', 0.7 + branch / 100)})"]
        bodies.append(ctes)
        outputs.append(f"SELECT 'out{branch}' AS topic, to_json(struct(*)) AS value FROM b{branch}_2")
    return ", ".join(trunk), [", ".join(ctes) for ctes in bodies], outputs


def _child(shape: str, rows: int, branches: int, partitions: int, warmup: int, batches: int) -> dict[str, float]:
    """Run in the child process: the measured batches of one shape."""
    import pyarrow as pa

    from runtime.costs import process_cpu_s
    from runtime.spark.session import spark_session

    spark = spark_session("local[2]", "statement-shapes", conf=INTERPRETED if shape == "interpreted" else None)
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

    def jvm_cpu_s() -> float:
        return process_cpu_s(pid)

    rng = random.Random(0)
    records = [(json.dumps({"msgid": str(i), "station": f"s{i % 7}", "value": rng.uniform(0, 100),
                            "ts": "2026-01-01T00:00:00Z"}),) for i in range(rows)]
    trunk, bodies, outputs = statements(branches)
    parallelism = spark.sparkContext.defaultParallelism

    def batch() -> int:
        raw = spark.createDataFrame(records, "value string").repartition(partitions).persist()
        raw.createOrReplaceTempView("raw")
        cached = [raw]
        if shape == "recomputed":
            prefix = f"{trunk}, trunk AS (SELECT * FROM t2), "
        else:
            fork = spark.sql(f"WITH {trunk} SELECT * FROM t2").persist()
            fork.createOrReplaceTempView("trunk")
            cached.append(fork)
            prefix = ""
        try:
            if shape == "per-output":
                tables = [spark.sql(f"WITH {prefix}{body} {output}").toArrow() for body, output in zip(bodies, outputs)]
                return pa.concat_tables(tables).num_rows
            frame = spark.sql(f"WITH {prefix}{', '.join(bodies)} {' UNION ALL '.join(outputs)}")
            if shape == "coalesced":
                frame = frame.coalesce(parallelism)
            return frame.toArrow().num_rows
        finally:
            for frame in cached:
                frame.unpersist()

    for _ in range(warmup):
        batch()
    began, before = time.perf_counter(), jvm_cpu_s()
    written = 0
    for _ in range(batches):
        written = batch()
    return {"jvm_cpu_ms": round(1000 * (jvm_cpu_s() - before) / batches, 1),
            "wall_ms": round(1000 * (time.perf_counter() - began) / batches, 1), "rows_out": written}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rows", type=int, default=600, help="records per batch (a source at 10/s, trigger 60 s)")
    parser.add_argument("--branches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the raw batch")
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/statement_shapes.json"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.rows, args.branches, args.partitions, args.warmup, args.batches)))
        return 0
    shapes = args.shapes.split(",")
    runs = run_in_rounds("benchmarks.statement_shapes", shapes, args.rounds,
                         ["--rows", str(args.rows), "--branches", str(args.branches), "--partitions", str(args.partitions),
                          "--warmup", str(args.warmup), "--batches", str(args.batches)])
    table = {shape: {"jvm_cpu_ms": median(run["jvm_cpu_ms"] for run in results),
                     "runs_jvm_cpu_ms": [run["jvm_cpu_ms"] for run in results],
                     "rows_out": results[-1]["rows_out"]} for shape, results in runs.items()}
    result = {"args": {key: str(value) for key, value in vars(args).items() if key != "child"}, "shapes": table}
    args.out.write_text(json.dumps(result, indent=1))
    print("| shape | JVM CPU per batch (ms, median) | runs | rows out |\n|---|---:|---|---:|")
    for shape, row in table.items():
        print(f"| {shape} | {row['jvm_cpu_ms']:.0f} | {', '.join(f'{value:.0f}' for value in row['runs_jvm_cpu_ms'])} | "
              f"{row['rows_out']} |")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
