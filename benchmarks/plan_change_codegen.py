"""Does changing a hosted query's statement make Spark compile code again?

Run:  .venv/bin/python -m benchmarks.plan_change_codegen   # ~30 s

A hosting query evaluates its live plan as one statement: a CTE per task and
a ``UNION ALL`` of the outputs (docs/runtime.md). An unmerge drops branches
from it, a merge adds some. This runs such a statement over a small table
with three branches, then without one, then with all three again, then one
alone, and prints how many classes Spark's code generator compiled for each
run (``CodegenMetrics``' compilation count) and how long the run took.
docs/reuse.md ("The drain") reads it.
"""

from __future__ import annotations

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


def main() -> None:
    spark = spark_session("local[1]", "plan-change-codegen")
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    spark.range(5000).selectExpr("id", "id % 7 AS k", "CAST(id AS DOUBLE) * 1.5 AS x").createOrReplaceTempView("t")
    print("| statement | run | classes compiled | seconds |\n|---|---:|---:|---:|")
    for names, runs in (("abc", 3), ("ab", 3), ("abc", 1), ("a", 2)):
        for run in range(1, runs + 1):
            before, began = compiled.getCount(), time.monotonic()
            spark.sql(statement(names)).collect()
            print(f"| {' + '.join(names)} | {run} | {compiled.getCount() - before} | {time.monotonic() - began:.3f} |")


if __name__ == "__main__":
    main()
