"""Row-level operators: ``filter``, ``select`` and ``union``."""

from __future__ import annotations

from pydantic import field_validator

from runtime.operators.base import OperatorConfig, OperatorSpec, Port, field_problem, register
from runtime.operators.fields import Identifier, SqlText
from runtime.operators.sql import SqlProblem, expression_type
from runtime.operators.types import Schema


class FilterConfig(OperatorConfig):
    """``{expr}``: keep the rows where the boolean Spark SQL ``expr`` holds."""

    expr: SqlText


class SelectConfig(OperatorConfig):
    """``{columns}``: output column -> Spark SQL expression over the input."""

    columns: dict[Identifier, SqlText]

    @field_validator("columns")
    @classmethod
    def _not_empty(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("select needs at least one output column")
        return value


class UnionConfig(OperatorConfig):
    """``{}``: interleave every input (all on port ``in``, same schema)."""


def _filter_schema(config: FilterConfig, inputs) -> Schema:
    (schema,) = inputs["in"]
    try:
        type_name = expression_type(config.expr, schema)
    except SqlProblem as problem:
        raise field_problem("expr", problem) from None
    if type_name is not None and type_name != "boolean":
        raise field_problem("expr", f"{config.expr!r} is {type_name}, a filter needs a boolean expression")
    return dict(schema)


def _select_schema(config: SelectConfig, inputs) -> Schema:
    (schema,) = inputs["in"]
    output: Schema = {}
    for name, text in config.columns.items():
        try:
            type_name = expression_type(text, schema)
        except SqlProblem as problem:
            raise field_problem(f"columns.{name}", problem) from None
        if type_name is None:
            raise field_problem(
                f"columns.{name}",
                f"cannot tell the type of {text!r}; wrap it in CAST(... AS <type>)",
            )
        output[name] = type_name
    return output


def _union_schema(config: UnionConfig, inputs) -> Schema:
    schemas = inputs["in"]
    first = schemas[0]
    for other in schemas[1:]:
        if other != first:
            raise field_problem(
                "",
                f"union inputs differ: {_describe(first)} vs {_describe(other)}",
            )
    return dict(first)


def _describe(schema: Schema) -> str:
    return "{" + ", ".join(f"{name}: {kind}" for name, kind in sorted(schema.items())) + "}"


FILTER = register(
    OperatorSpec("filter", FilterConfig, (Port("in"),), True, _filter_schema, "keeps rows where expr holds")
)
SELECT = register(
    OperatorSpec("select", SelectConfig, (Port("in"),), True, _select_schema, "computes output columns")
)
UNION = register(
    OperatorSpec(
        "union",
        UnionConfig,
        (Port("in", many=True, min_streams=2),),
        True,
        _union_schema,
        "interleaves its inputs",
    )
)
