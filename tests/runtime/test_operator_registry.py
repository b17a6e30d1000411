"""Every declared operator type has exactly one way to run on Spark (runtime/spark/operators.py)."""

from __future__ import annotations

from runtime.operators import get_operator, operator_types
from runtime.spark import operators as spark_operators


def test_every_declared_type_runs_one_way():
    declared = set(operator_types())
    sources = {name for name in declared if get_operator(name).is_source}
    assert sources, "a source type is declared"
    assert set(spark_operators.SQL).isdisjoint(spark_operators.KEYED)
    assert set(spark_operators.SQL) | set(spark_operators.KEYED) == declared - sources


def test_keyed_classes_run_the_keyed_declarations():
    assert {name for name in operator_types() if get_operator(name).keyed} == set(spark_operators.KEYED)
