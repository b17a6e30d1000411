"""Spark SQL expressions in operator configs, parsed by sqlglot's Spark dialect.

An expression is parsed once (cached by its text), checked against the columns
its input has, and typed with sqlglot's type annotator so output schemas can be
derived without Spark. Its canonical text (sqlglot's Spark rendering) is what
signatures hash, so whitespace and keyword case do not break sharing.
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types

from runtime.operators.types import Schema, canonical_type

DIALECT = "spark"
_TABLE = "_input"

# Nodes that make an expression more than a row-level expression.
_FORBIDDEN = (exp.Query, exp.Subquery, exp.Command, exp.DDL, exp.DML, exp.Block, exp.Window, exp.Star)


class SqlProblem(ValueError):
    """An expression does not parse, or uses something the context forbids."""


@lru_cache(maxsize=4096)
def _parse(text: str) -> exp.Expression:
    if not text.strip():
        raise SqlProblem("empty expression")
    try:
        expressions = sqlglot.parse(text, dialect=DIALECT)
    except SqlglotError as error:
        first_line = str(error).splitlines()[0]
        raise SqlProblem(f"{text!r} does not parse: {first_line}") from None
    if len(expressions) != 1 or expressions[0] is None:
        raise SqlProblem(f"{text!r} must be a single expression")
    return expressions[0]


def parse_expression(text: str, *, aggregate: bool = False) -> exp.Expression:
    """Parse a row-level Spark SQL expression and return a private copy of its tree.

    With ``aggregate=True`` the expression must be one aggregate call instead.

    Raises :class:`SqlProblem` naming the text when it does not parse, is a
    statement or subquery, calls a function sqlglot does not know, or (for a
    row-level expression) contains an aggregate.

    >>> parse_expression("temp  >  30").sql("spark")
    'temp > 30'
    """
    tree = _parse(text)
    for node in tree.walk():
        if isinstance(node, exp.Star) and aggregate and isinstance(node.parent, exp.Count):
            continue
        if isinstance(node, _FORBIDDEN):
            raise SqlProblem(f"{text!r}: only a plain expression is allowed here, not {node.sql(DIALECT)!r}")
        if isinstance(node, exp.Anonymous):
            raise SqlProblem(f"{text!r}: unknown function {node.name!r}")
        if isinstance(node, exp.Column) and node.table:
            raise SqlProblem(f"{text!r}: qualified column {node.sql(DIALECT)!r}; name the column alone")
        if not aggregate and isinstance(node, exp.AggFunc):
            raise SqlProblem(f"{text!r}: aggregate {node.sql(DIALECT)!r} is not allowed here")
    return tree.copy()


def canonical_sql(text: str) -> str:
    """The canonical rendering of an expression (what signatures hash)."""
    return _parse(text).sql(DIALECT)


def referenced_columns(tree: exp.Expression) -> list[str]:
    """Column names the expression reads, in order of first use."""
    seen: dict[str, None] = {}
    for column in tree.find_all(exp.Column):
        seen.setdefault(column.name, None)
    return list(seen)


def check_columns(text: str, tree: exp.Expression, schema: Schema) -> None:
    """Raise :class:`SqlProblem` if the expression reads a column ``schema`` lacks."""
    for name in referenced_columns(tree):
        if name not in schema:
            have = ", ".join(sorted(schema)) or "none"
            raise SqlProblem(f"{text!r}: column {name!r} is not in the input (columns: {have})")


def infer_type(text: str, tree: exp.Expression, schema: Schema) -> str | None:
    """The canonical Spark type of the expression over ``schema``, or None if unknown.

    ``tree`` is unused (the cache keys on the text). Cached by the text and the
    input columns: type annotation is most of the
    cost of validating a dataflow, and the same expressions over the same
    inputs come back with every dataflow that shares a prefix.
    """
    return _infer_type(text, tuple(sorted(schema.items())))


@lru_cache(maxsize=8192)
def _infer_type(text: str, columns: tuple[tuple[str, str], ...]) -> str | None:
    tree = parse_expression(text, aggregate=True)
    column_types = dict(columns)
    select = exp.select(tree.copy()).from_(_TABLE)
    for column in select.find_all(exp.Column):
        column.set("table", exp.to_identifier(_TABLE))
    try:
        typed = annotate_types(select, schema={_TABLE: column_types}, dialect=DIALECT)
    except SqlglotError:
        return None
    data_type = typed.expressions[0].type
    if data_type is None or data_type.this == exp.DataType.Type.UNKNOWN:
        return None
    try:
        return canonical_type(data_type.sql(DIALECT))
    except ValueError:
        return None


def typed_expression(text: str, schema: Schema, *, aggregate: bool = False) -> tuple[exp.Expression, str | None]:
    """Parse, check columns and infer the type: the common path of the operators."""
    tree = parse_expression(text, aggregate=aggregate)
    check_columns(text, tree, schema)
    return tree, infer_type(text, tree, schema)
