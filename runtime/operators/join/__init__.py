"""``join``: stream-stream equi-join of the ``left`` and ``right`` ports."""

from __future__ import annotations

from pydantic import field_validator

from runtime.operators.base import OperatorSpec, Port, field_problem, register
from runtime.operators.fields import Duration, Identifier, duration_ms
from runtime.operators.keyed_options import KeyedOptions
from runtime.operators.limits import OperatorLimits, check_watermark, check_window
from runtime.operators.types import Schema

RIGHT_PREFIX = "right_"


class JoinConfig(KeyedOptions):
    """``{on, window?, time_column?, watermark?, workers?, reshape?}``.

    Rows of ``left`` and ``right`` with equal ``on`` columns join. With
    ``window``, their ``time_column`` values must lie within ``window`` of each
    other, and state older than the watermark (``watermark``, by default the
    window) is dropped. ``time_column`` defaults to the one timestamp column both
    inputs have. Output: the ``on`` columns once, then the left's other columns,
    then the right's, a right column whose name the left already uses being
    renamed ``right_<name>``.
    """

    on: list[Identifier]
    window: Duration | None = None
    time_column: Identifier | None = None
    watermark: Duration | None = None

    @field_validator("on", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return [value] if isinstance(value, str) else value

    @field_validator("on")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("join needs at least one column in 'on'")
        if len(set(value)) != len(value):
            raise ValueError(f"'on' repeats a column: {value}")
        return value

    def check_limits(self, limits: OperatorLimits) -> None:
        """The time bound (state is kept for it) and the watermark."""
        super().check_limits(limits)
        if self.window is not None:
            check_window("window", duration_ms(self.window), limits)
        if self.watermark is not None:
            check_watermark("watermark", duration_ms(self.watermark), limits)


def join_time_column(config: JoinConfig, left: Schema, right: Schema) -> str | None:
    """The event-time column the window bound applies to (None without a window)."""
    if config.window is None and config.time_column is None:
        return None
    if config.time_column is not None:
        for side, schema in (("left", left), ("right", right)):
            if schema.get(config.time_column) != "timestamp":
                raise field_problem("time_column", f"{config.time_column!r} is not a timestamp column of the {side} input")
        return config.time_column
    common = sorted(name for name, kind in left.items() if kind == "timestamp" and right.get(name) == "timestamp")
    if len(common) != 1:
        raise field_problem(
            "time_column",
            f"a windowed join needs time_column: the inputs share {len(common)} timestamp columns ({', '.join(common) or 'none'})",
        )
    return common[0]


def _join_schema(config: JoinConfig, inputs) -> Schema:
    (left,) = inputs["left"]
    (right,) = inputs["right"]
    for index, column in enumerate(config.on):
        for side, schema in (("left", left), ("right", right)):
            if column not in schema:
                raise field_problem(f"on.{index}", f"join column {column!r} is not in the {side} input (columns: {', '.join(sorted(schema))})")
        if left[column] != right[column]:
            raise field_problem(f"on.{index}", f"join column {column!r} is {left[column]} on the left but {right[column]} on the right")
    if config.watermark is not None and config.window is None:
        raise field_problem("watermark", "watermark applies to a windowed join; set window too")
    time_column = join_time_column(config, left, right)
    if config.window is not None and time_column in config.on:
        raise field_problem("time_column", f"time column {time_column!r} is also a join column ('on'): the window "
                                           "bounds the gap between the two sides' times, so they must be two columns")
    output: Schema = {column: left[column] for column in config.on}
    output.update({name: kind for name, kind in left.items() if name not in output})
    named_by: dict[str, str] = {}  # output name -> the right column it holds
    for name, kind in right.items():
        if name in config.on:
            continue
        out_name = right_output_name(name, left)
        if out_name in left:
            raise field_problem("on", f"right column {name!r} would be renamed {out_name!r}, which the left already has")
        if out_name in named_by:
            raise field_problem("on", f"right columns {named_by[out_name]!r} and {name!r} would both be named "
                                      f"{out_name!r} (a right column the left also has is renamed {RIGHT_PREFIX}<name>)")
        named_by[out_name] = name
        output[out_name] = kind
    return output


def right_output_name(name: str, left: Schema) -> str:
    """The output name of a right column that is not a join column: ``right_<name>`` if the left has ``name``.

    The runtime names it the same way (:class:`runtime.operators.join.spark.StreamJoin`).

    >>> right_output_name("temp", {"k": "int", "temp": "double"}), right_output_name("hum", {"temp": "double"})
    ('right_temp', 'hum')
    """
    return RIGHT_PREFIX + name if name in left else name


JOIN = register(
    OperatorSpec(
        "join",
        JoinConfig,
        (Port("left"), Port("right")),
        True,
        _join_schema,
        "stream-stream equi-join with a time bound",
        keyed=True,
    )
)
