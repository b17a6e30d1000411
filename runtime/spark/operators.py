"""Which Spark code runs each operator type: one table, read by the fragment query.

Row-level operators become a common table expression of the fragment's one
SQL statement (a builder of :mod:`runtime.spark.builders`); keyed operators
are objects that keep state across batches and shuffle to their workers
(:mod:`runtime.spark.window`, :mod:`runtime.spark.join`). Sources are the
query's Kafka input and have no builder. A type declared in
:mod:`runtime.operators` with neither is refused by
``tests/runtime/test_operator_registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runtime.plan import TaskSpec
from runtime.spark.builders import filter_sql, select_sql, sink_sql, union_sql
from runtime.spark.join import StreamJoin
from runtime.spark.keyed_operator import KeyedOperator
from runtime.spark.window import WindowAggregate

SqlBuilder = Callable[[TaskSpec, Mapping[str, list[str]]], str]

#: operator type -> the body of its CTE, given the task and the relations feeding each port
SQL: dict[str, SqlBuilder] = {"filter": filter_sql, "select": select_sql, "union": union_sql, "sink": sink_sql}

#: operator type -> the class of its keyed operator (one object per task, kept across batches)
KEYED: dict[str, type[KeyedOperator]] = {"window_aggregate": WindowAggregate, "join": StreamJoin}
