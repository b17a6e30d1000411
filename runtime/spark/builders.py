"""Spark builders of the row-level operators, attached to their declarations.

A fragment evaluates its row-level tasks as ONE Spark SQL statement per
micro-batch: each task is a common table expression over its inputs' CTEs,
and every output (sink or tap) a branch of a final ``UNION ALL``. Building a
DataFrame per task instead costs a py4j round trip and an eager analysis per
call (3 s per batch for 30 small dataflows, against a few tens of ms for the
statement), so the builders here produce SQL text.

A builder gets the task and, per port, the names of the relations feeding it,
and returns the body of the task's CTE. Expressions come from configs the
validator parsed with sqlglot's Spark dialect (single expressions, no
subqueries) and rendered canonically; they are parenthesized. Every output
column is cast to the type the declaration derived, so what validation
promised is what runs. Keyed operators (``window_aggregate``, ``join``) keep
state across batches and live in :mod:`runtime.spark.window` and
:mod:`runtime.spark.join` (``builder["spark_keyed"]``).

``attach()`` stores each SQL builder under ``OperatorSpec.builder["spark_sql"]``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from runtime.operators import get_operator
from runtime.operators.types import Schema
from runtime.plan import TaskSpec


def quote(name: str) -> str:
    return f"`{name}`"


def ddl(schema: Schema) -> str:
    """A Spark DDL string for a Sana schema, in column order.

    >>> ddl({"sensor": "string", "ts": "timestamp"})
    '`sensor` string, `ts` timestamp'
    """
    return ", ".join(f"{quote(name)} {kind}" for name, kind in schema.items())


def literal(text: str) -> str:
    """A Spark SQL string literal.

    >>> literal("it's")
    "'it\\\\'s'"
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cast_columns(schema: Schema, source: str = "") -> str:
    prefix = f"{source}." if source else ""
    return ", ".join(f"CAST({prefix}{quote(name)} AS {kind}) AS {quote(name)}" for name, kind in schema.items())


def parse_sql(raw: str, topic: str, schema: Schema) -> str:
    """The records of ``topic`` in the raw micro-batch view ``raw``, parsed as JSON with ``schema``."""
    columns = ", ".join(f"r.{quote(name)} AS {quote(name)}" for name in schema)
    return f"SELECT {columns} FROM (SELECT from_json(value, {literal(ddl(schema))}) AS r FROM {raw} WHERE topic = {literal(topic)})"


def encode_sql(relation: str, topic: str) -> str:
    """Rows of ``relation`` as ``(topic, value)``, ``value`` the row as JSON (timestamps ISO-8601 UTC)."""
    return f"SELECT {literal(topic)} AS topic, to_json(struct(*)) AS value FROM {relation}"


def filter_sql(task: TaskSpec, inputs: Mapping[str, list[str]]) -> str:
    (source,) = inputs["in"]
    return f"SELECT * FROM {source} WHERE ({task.config['expr']})"


def select_sql(task: TaskSpec, inputs: Mapping[str, list[str]]) -> str:
    (source,) = inputs["in"]
    columns = ", ".join(
        f"CAST(({text}) AS {task.schema[name]}) AS {quote(name)}" for name, text in task.config["columns"].items()
    )
    return f"SELECT {columns} FROM {source}"


def union_sql(task: TaskSpec, inputs: Mapping[str, list[str]]) -> str:
    columns = cast_columns(task.schema)
    return " UNION ALL ".join(f"SELECT {columns} FROM {source}" for source in inputs["in"])


def sink_sql(task: TaskSpec, inputs: Mapping[str, list[str]]) -> str:
    (source,) = inputs["in"]
    return f"SELECT {cast_columns(task.schema)} FROM {source}"


SQL_BUILDERS = {"filter": filter_sql, "select": select_sql, "union": union_sql, "sink": sink_sql}


# DataFrame helpers for code outside fragments (benchmarks, tools).

def parse_records(raw: DataFrame, topic: str, schema: Schema) -> DataFrame:
    """The records of ``topic`` in a raw micro-batch ``(topic, value)``, parsed as JSON with ``schema``."""
    parsed = raw.where(F.col("topic") == F.lit(topic)).select(F.from_json("value", ddl(schema)).alias("r"))
    return parsed.select(*[F.col("r").getField(name).alias(name) for name in schema])


def encode_records(df: DataFrame, topic: str) -> DataFrame:
    """Rows as ``(topic, value)`` with ``value`` the row as JSON."""
    return df.select(F.lit(topic).alias("topic"), F.to_json(F.struct(*[F.col(quote(c)) for c in df.columns])).alias("value"))


def attach() -> None:
    """Attach the Spark builders to the operator declarations (idempotent)."""
    from runtime.spark import join, window

    for type_name, builder in SQL_BUILDERS.items():
        get_operator(type_name).builder.setdefault("spark_sql", builder)
    get_operator("window_aggregate").builder.setdefault("spark_keyed", window.WindowAggregate)
    get_operator("join").builder.setdefault("spark_keyed", join.StreamJoin)
