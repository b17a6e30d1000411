"""Spark SQL text: quoted names, DDL, literals, and the statements that parse and encode records.

A leaf: the row-level builders (``runtime/operators/*/spark.py``), the fragment
query and the keyed operators all write SQL with these.
"""

from __future__ import annotations

from runtime.operators.types import Schema


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


#: Where an output's slot starts in ``seq``: below it, Spark's ``monotonically_increasing_id`` (partition << 33 | row).
SEQ_SLOT_SHIFT = 55
#: Where the partition starts in ``monotonically_increasing_id`` (below it, the row's place in its partition).
PARTITION_SHIFT = 33


def encode_sql(relation: str, topic: str, slot: int = 0) -> str:
    """Rows of ``relation`` as ``(topic, value, seq)``, ``value`` the row as JSON (timestamps ISO-8601 UTC).

    ``seq`` names the row within this branch of the output: ``slot << 55`` plus the row's partition and place in
    it, computed before the branches are put together, so it does not depend on the other branches.
    """
    return f"SELECT {literal(topic)} AS topic, to_json(struct(*)) AS value, " \
           f"{slot << SEQ_SLOT_SHIFT} + monotonically_increasing_id() AS seq FROM {relation}"


def json_sql(columns: list[tuple[str, str]]) -> str:
    """A row's JSON, as ``to_json(struct(*))`` writes a relation of these ``(name, SQL value)`` columns.

    >>> json_sql([("a", "x + 1"), ("b", "y")])
    "to_json(named_struct('a', x + 1, 'b', y))"
    """
    return f"to_json(named_struct({', '.join(f'{literal(name)}, {value}' for name, value in columns)}))"
