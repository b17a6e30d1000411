"""``window_aggregate``: keyed event-time windows (tumbling, or sliding with ``slide``)."""

from __future__ import annotations

from pydantic import field_validator, model_validator
from sqlglot import exp

from runtime.operators.base import OperatorSpec, Port, field_problem, register
from runtime.operators.fields import Duration, Identifier, SqlText, duration_ms
from runtime.operators.keyed_options import KeyedOptions
from runtime.operators.limits import OperatorLimits, check_slide, check_watermark, check_window
from runtime.operators.sql import SqlProblem, parse_expression, referenced_columns
from runtime.operators.types import INTEGRAL, Schema, is_numeric

WINDOW_COLUMNS = ("window_start", "window_end")
AGGREGATES = ("count", "sum", "avg", "min", "max")


class WindowAggregateConfig(KeyedOptions):
    """``{keys, time_column, window, slide?, aggregates, watermark, workers?, reshape?}``.

    Rows are grouped by ``keys`` and the event-time window of ``time_column``;
    each window's row carries ``window_start``, ``window_end``, the keys and the
    aggregates, and is emitted once the watermark (max event time seen minus
    ``watermark``) passes the window's end.
    """

    keys: list[Identifier] = []
    time_column: Identifier
    window: Duration
    slide: Duration | None = None
    aggregates: dict[Identifier, SqlText]
    watermark: Duration

    @field_validator("aggregates")
    @classmethod
    def _not_empty(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("window_aggregate needs at least one aggregate")
        return value

    @field_validator("keys")
    @classmethod
    def _distinct_keys(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"keys repeat a column: {value}")
        return value

    @model_validator(mode="after")
    def _slide_fits(self) -> "WindowAggregateConfig":
        if self.slide is not None and duration_ms(self.slide) > duration_ms(self.window):
            raise ValueError(f"slide {self.slide!r} is longer than window {self.window!r}")
        return self

    def check_limits(self, limits: OperatorLimits) -> None:
        """The window, the watermark and the windows each record is repeated in (ceil(window / slide))."""
        super().check_limits(limits)
        window = duration_ms(self.window)
        check_window("window", window, limits)
        if self.slide is not None:
            check_slide("slide", window, duration_ms(self.slide), limits)
        check_watermark("watermark", duration_ms(self.watermark), limits)


def aggregate_call(text: str) -> tuple[str, str | None]:
    """Split ``"sum(temp)"`` into ``("sum", "temp")``; ``count(*)`` gives ``("count", None)``.

    Raises :class:`SqlProblem` for anything but one of count/sum/avg/min/max over
    a single column (or ``*`` for count).
    """
    tree = parse_expression(text, aggregate=True)
    name = tree.key if isinstance(tree, exp.AggFunc) else ""
    if name not in AGGREGATES:
        raise SqlProblem(f"{text!r}: expected one of {', '.join(f'{a}(col)' for a in AGGREGATES)} or count(*)")
    argument = tree.this
    if isinstance(argument, exp.Star):
        if name != "count":
            raise SqlProblem(f"{text!r}: only count takes *")
        return name, None
    if not isinstance(argument, exp.Column) or tree.args.get("expressions") or referenced_columns(argument) != [argument.name]:
        raise SqlProblem(f"{text!r}: aggregate a single column, e.g. {name}(temp)")
    return name, argument.name


def _aggregate_type(name: str, column_type: str | None) -> str:
    if name == "count":
        return "bigint"
    if name == "avg":
        return "double"
    if name == "sum":
        return "bigint" if column_type in INTEGRAL else column_type or "double"
    return column_type or "double"


def _window_schema(config: WindowAggregateConfig, inputs) -> Schema:
    (schema,) = inputs["in"]
    for index, key in enumerate(config.keys):
        if key not in schema:
            raise field_problem(f"keys.{index}", f"key column {key!r} is not in the input (columns: {', '.join(sorted(schema))})")
    time_type = schema.get(config.time_column)
    if time_type != "timestamp":
        found = "missing" if time_type is None else time_type
        raise field_problem("time_column", f"time column {config.time_column!r} must be a timestamp column (it is {found})")
    output: Schema = {key: schema[key] for key in config.keys}
    output.update({name: "timestamp" for name in WINDOW_COLUMNS})
    for out_name, text in config.aggregates.items():
        if out_name in output:
            raise field_problem(f"aggregates.{out_name}", f"output column {out_name!r} collides with a key or window column")
        try:
            function, column = aggregate_call(text)
        except SqlProblem as problem:
            raise field_problem(f"aggregates.{out_name}", problem) from None
        if column is not None and column not in schema:
            raise field_problem(f"aggregates.{out_name}", f"{text!r}: column {column!r} is not in the input (columns: {', '.join(sorted(schema))})")
        column_type = schema.get(column) if column else None
        if function in ("sum", "avg") and not is_numeric(column_type or ""):
            raise field_problem(f"aggregates.{out_name}", f"{text!r}: {function} needs a numeric column, {column!r} is {column_type}")
        output[out_name] = _aggregate_type(function, column_type)
    return output


WINDOW_AGGREGATE = register(
    OperatorSpec(
        "window_aggregate",
        WindowAggregateConfig,
        (Port("in"),),
        True,
        _window_schema,
        "keyed event-time window aggregates",
        keyed=True,
    )
)
