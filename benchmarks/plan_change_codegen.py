"""Does changing a hosted query's statement make Spark compile code again?

Run:  .venv/bin/python -m benchmarks.plan_change_codegen   # ~1 min

A hosting query evaluates its live plan as one statement: a CTE per task and
a ``UNION ALL`` of the outputs (docs/runtime.md). An unmerge drops branches
from it, a merge adds some. This runs such a statement over a small table
with three branches, then without the last, with all three again, without
the first, in another order, and one alone, and prints how many classes
Spark's code generator compiled for each run (``CodegenMetrics``'
compilation count) and how long the run took: once with Sana's session
settings and once with ``spark.sql.codegen.useIdInClassName`` at Spark's
default (``true``), in a JVM of its own each. docs/runtime.md ("What a
change costs the rest") reads it.
"""

from __future__ import annotations

import subprocess
import sys
import time

from runtime.spark.session import spark_session

BRANCHES = {
    "a": "a AS (SELECT k, count(*) AS v FROM t WHERE x > 5 GROUP BY k)",
    "b": "b AS (SELECT k, sum(x) AS v FROM t WHERE id < 900 GROUP BY k)",
    "c": "c AS (SELECT k, max(x) AS v FROM t WHERE id % 3 = 0 GROUP BY k)",
}


def statement(names: str) -> str:
    ctes = ", ".join(BRANCHES[name] for name in names)
    outputs = " UNION ALL ".join(f"SELECT '{name}' AS o, k, CAST(v AS DOUBLE) AS v FROM {name}" for name in names)
    return f"WITH {ctes} {outputs}"


RUNS = (("abc", 3), ("ab", 2), ("abc", 1), ("bc", 2), ("cab", 1), ("a", 2))


def run(id_in_class_name: str | None) -> None:
    """Print one table row per run; ``id_in_class_name`` overrides Sana's setting."""
    conf = {} if id_in_class_name is None else {"spark.sql.codegen.useIdInClassName": id_in_class_name}
    spark = spark_session("local[1]", "plan-change-codegen", conf)
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    setting = spark.conf.get("spark.sql.codegen.useIdInClassName")
    spark.range(5000).selectExpr("id", "id % 7 AS k", "CAST(id AS DOUBLE) * 1.5 AS x").createOrReplaceTempView("t")
    for names, runs in RUNS:
        for number in range(1, runs + 1):
            before, began = compiled.getCount(), time.monotonic()
            spark.sql(statement(names)).collect()
            print(f"| {setting} | {' + '.join(names)} | {number} | {compiled.getCount() - before} | "
                  f"{time.monotonic() - began:.3f} |", flush=True)


def main() -> None:
    if len(sys.argv) > 1:  # one setting, in this process's JVM
        run(None if sys.argv[1] == "sana" else sys.argv[1])
        return
    print("| useIdInClassName | statement | run | classes compiled | seconds |\n|---|---|---:|---:|---:|", flush=True)
    for setting in ("sana", "true"):
        subprocess.run([sys.executable, "-m", "benchmarks.plan_change_codegen", setting], check=True)


if __name__ == "__main__":
    main()
