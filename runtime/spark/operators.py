"""Which Spark code runs each operator type: one table, read by the fragment query.

Each operator lives in one package, ``runtime/operators/<name>/``: its
declaration and validation in ``__init__.py``, its Spark plan in ``spark.py``
and, for keyed operators, what runs on the executors in ``worker.py``. This
table is where the runtime finds the Spark side. Row-level operators become a
common table expression of the fragment's one SQL statement (a builder);
keyed operators are objects that keep state across batches and shuffle to
their workers. Sources are the query's Kafka input and have no builder. A type declared in
:mod:`runtime.operators` with neither is refused by
``tests/runtime/test_operator_registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runtime.operators.io.spark import sink_sql
from runtime.operators.join.spark import StreamJoin
from runtime.operators.relational.spark import filter_sql, select_sql, union_sql
from runtime.operators.window.spark import WindowAggregate
from runtime.plan import TaskSpec
from runtime.spark.keyed_operator import KeyedOperator

SqlBuilder = Callable[[TaskSpec, Mapping[str, list[str]]], str]

#: operator type -> the body of its CTE, given the task and the relations feeding each port
SQL: dict[str, SqlBuilder] = {"filter": filter_sql, "select": select_sql, "union": union_sql, "sink": sink_sql}

#: operator type -> the class of its keyed operator (one object per task, kept across batches)
KEYED: dict[str, type[KeyedOperator]] = {"window_aggregate": WindowAggregate, "join": StreamJoin}
