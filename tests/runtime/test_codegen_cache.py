"""Spark compiles the code of a statement it has run before only once, also past its default 100 cached pieces.

A service with a few dozen dataflows runs more distinct generated code per
batch round than Spark's default cache holds, and every batch compiled its
code again (runtime/spark/session.py, ``CODEGEN_CACHE_ENTRIES``). And a
change to a hosting query's statement (a branch added or removed) compiles
only the branches it adds, not those it leaves alone
(``CODEGEN_ID_IN_CLASS_NAME``).
"""

from __future__ import annotations

import uuid

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


def hosting_statement(branches: dict[str, str], names: str) -> str:
    """A hosting query's statement shape: a CTE per task, a ``UNION ALL`` of the outputs."""
    ctes = ", ".join(f"{name} AS ({branches[name]})" for name in names)
    outputs = " UNION ALL ".join(f"SELECT '{name}' AS o, k, CAST(v AS DOUBLE) AS v FROM {name}" for name in names)
    return f"WITH {ctes} {outputs}"


def test_a_changed_statement_compiles_only_the_branches_it_adds():
    spark = spark_session("local[2]")
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics

    def compiled(names: str) -> int:
        before = metrics.METRIC_COMPILATION_TIME().getCount()
        spark.sql(hosting_statement(branches, names)).collect()
        return metrics.METRIC_COMPILATION_TIME().getCount() - before

    seed = uuid.uuid4().int % 1_000_000  # literals in the generated code: nothing of this test is in the cache yet
    branches = {
        "a": f"SELECT id % 7 AS k, count(*) AS v FROM range(1000) WHERE id > {seed} % 5 GROUP BY id % 7",
        "b": f"SELECT id % 5 AS k, sum(id) AS v FROM range(1000) WHERE id < {seed + 900} GROUP BY id % 5",
        "c": f"SELECT id % 3 AS k, max(id) AS v FROM range(1000) WHERE id % 3 = {seed} % 3 GROUP BY id % 3",
        "d": f"SELECT id % 2 AS k, min(id) AS v FROM range(1000) WHERE id > {seed + 7} % 11 GROUP BY id % 2",
    }
    assert compiled("abc") > 0, "a statement never run compiles its code"
    # Removing the first branch renumbers every stage after it; reordering renumbers them all.
    assert compiled("bc") == 0
    assert compiled("cab") == 0
    # Adding a branch in front compiles that branch's code, and only that: the others are found again.
    added = compiled("dabc")
    assert added > 0
    assert compiled("dc") == 0
    assert compiled("abcd") == 0
