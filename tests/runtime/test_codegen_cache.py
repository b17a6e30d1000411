"""Spark compiles the code of a statement it has run before only once, also past its default 100 cached pieces.

A service with a few dozen dataflows runs more distinct generated code per
batch round than Spark's default cache holds, and every batch compiled its
code again (runtime/spark/session.py, ``CODEGEN_CACHE_ENTRIES``).
"""

from __future__ import annotations

import pytest

from runtime.spark.session import spark_session

pytestmark = [pytest.mark.spark]

STATEMENTS = 250  # each with code of its own (the numbers are literals in the generated code)


def test_statements_run_again_compile_nothing_new():
    spark = spark_session("local[2]")
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics

    def compiled() -> int:
        return metrics.METRIC_COMPILATION_TIME().getCount()

    statements = [f"SELECT id * {k} + {k + 1} AS x FROM range(3) WHERE id % {k + 2} < {k + 3}" for k in range(STATEMENTS)]
    before = compiled()
    for statement in statements:
        spark.sql(statement).collect()
    first_round = compiled() - before
    assert first_round >= STATEMENTS, "each statement generates code of its own (more than the default cache holds)"
    for statement in statements:
        spark.sql(statement).collect()
    assert compiled() - before - first_round < STATEMENTS // 25, "the second round found its code in the cache"
