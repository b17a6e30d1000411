"""``source`` and ``sink`` on Spark.

A source is the fragment query's Kafka input (:mod:`runtime.spark.kafka_source`),
parsed by the query's statement; it has no builder. A sink is the body of a
common table expression like the row-level operators (see
:mod:`runtime.operators.relational.spark`): its input with every column cast to
the declared type, which the query then encodes as JSON and writes to the
sink's topic.
"""

from __future__ import annotations

from collections.abc import Mapping

from runtime.plan import TaskSpec
from runtime.spark.sql_text import cast_columns


def sink_sql(task: TaskSpec, inputs: Mapping[str, list[str]]) -> str:
    (source,) = inputs["in"]
    return f"SELECT {cast_columns(task.schema)} FROM {source}"
