"""``window_aggregate`` on Spark's executors: keyed event-time windows with a watermark.

Per micro-batch:

1. A small job finds the batch's largest event time (one number to the
   driver), which gives the watermark after the batch: max(event time seen) -
   ``watermark``. The watermark in force when the batch starts closes the
   windows that end at or before it.
2. The rows (keys, event time, one input column per partial aggregate) are
   routed to logical workers and shuffled, worker i on Spark task i. Each
   worker (:class:`~runtime.spark.window_worker.WindowStep`) assigns rows to
   windows, merges their partial aggregates into its state (versioned by
   batch in the worker state store) and emits the partials of every window
   the new watermark closed.
3. The emitted partials are merged across workers by a Spark aggregation
   (a key split over several workers still gives one exact row) and turned
   into the output columns; ``avg`` is kept as a sum and a count.

Semantics: a (row, window) pair counts iff the window's end is after the
watermark in force when the row's batch starts (late data within the
watermark is counted; later data is dropped). A window is emitted once, in
the batch that moves the watermark past its end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.operators.fields import duration_ms
from runtime.operators.types import INTEGRAL
from runtime.operators.window import WindowAggregateConfig, aggregate_call
from runtime.plan import TaskSpec
from runtime.spark.frames import arrow_type
from runtime.spark.keyed import DEFAULT_WORKERS
from runtime.spark.keyed_operator import KeyedOperator
from runtime.spark.window_worker import END, START, TIMESTAMP, TS, WindowStep, part_input

_DECIMAL_SUM = "decimal(38,{scale})"


def _col(name: str) -> Column:
    return F.col(f"`{name}`")


class WindowAggregate(KeyedOperator):
    """One running ``window_aggregate`` task."""

    kind = "window_aggregate"

    def __init__(self, task: TaskSpec, input_schemas: Mapping[str, list[dict[str, str]]], workers: int = DEFAULT_WORKERS):
        super().__init__(task, workers)
        self.config = WindowAggregateConfig.model_validate(task.config)
        (self.input_schema,) = input_schemas["in"]
        self.window_us = duration_ms(self.config.window) * 1000
        self.slide_us = duration_ms(self.config.slide) * 1000 if self.config.slide else self.window_us
        self.delay_us = duration_ms(self.config.watermark) * 1000
        # (part, how it folds, its input as a Spark column, its Spark type); outputs: out -> (function, parts)
        self.parts: list[tuple[str, str, Column, str]] = []
        self.outputs: dict[str, tuple[str, list[str]]] = {}
        for out, text in self.config.aggregates.items():
            function, column = aggregate_call(text)
            kind = self.input_schema.get(column) if column else None
            if function == "count":
                parts = [(f"__agg_{out}__n", "sum", _indicator(column), "bigint")]
            elif function == "avg":
                parts = [(f"__agg_{out}__s", "sum", _col(column).cast("double"), "double"),
                         (f"__agg_{out}__n", "sum", _indicator(column), "bigint")]
            elif function == "sum":
                parts = [(f"__agg_{out}__sum", "sum", _col(column).cast(_sum_type(kind)), _sum_type(kind))]
            else:
                parts = [(f"__agg_{out}__{function}", function, _col(column), kind)]
            self.parts += parts
            self.outputs[out] = (function, [name for name, *_ in parts])

    def initial_state(self) -> dict[str, Any]:
        return {**super().initial_state(), "max_event_us": None}

    def _route(self, session: SparkSession, inputs: Mapping[str, list[DataFrame]], draft: dict[str, Any],
               table: list[int]) -> tuple[list[DataFrame], WindowStep, pa.Schema]:
        (df,) = inputs["in"]
        config = self.config
        ts = _col(config.time_column)
        rows = df.where(ts.isNotNull())
        watermark = draft["watermark_us"]
        if watermark is not None:  # no window of an older row is still open
            rows = rows.where(ts > F.timestamp_micros(F.lit(watermark - self.window_us)))
        batch_max = rows.agg(F.max(F.unix_micros(ts))).first()[0]
        max_event = draft["max_event_us"]
        if batch_max is not None:
            max_event = batch_max if max_event is None else max(max_event, batch_max)
        emit = watermark
        if max_event is not None:
            candidate = max_event - self.delay_us
            emit = candidate if watermark is None else max(watermark, candidate)
        draft.update(max_event_us=max_event, next_watermark_us=emit)
        bucket, pkey = self.router.column(config.keys, table)
        routed = rows.select(pkey, bucket, *[_col(key).alias(key) for key in config.keys], ts.alias(TS),
                             *[column.alias(part_input(name)) for name, _, column, _ in self.parts])
        parts = tuple((name, how, arrow_type(kind)) for name, how, _, kind in self.parts)
        step = WindowStep(tuple(config.keys), self.window_us, self.slide_us, parts, watermark, emit)
        output = pa.schema([*[pa.field(key, arrow_type(self.input_schema[key])) for key in config.keys],
                            pa.field(START, TIMESTAMP), pa.field(END, TIMESTAMP),
                            *[pa.field(name, kind) for name, _, kind in parts]])
        return [routed], step, output

    def _finish_plan(self, frame: DataFrame, draft: dict[str, Any]) -> DataFrame:
        """Merge the emitted partials of each (keys, window) across workers; compute the outputs."""
        keys = list(self.config.keys)
        merged = frame.groupBy(*keys, START, END).agg(*[getattr(F, how)(name).alias(name) for name, how, _, _ in self.parts])
        schema = self.task.schema
        columns = [_col(key).alias(key) for key in keys]
        columns += [F.col(START).alias("window_start"), F.col(END).alias("window_end")]
        for out, (function, parts) in self.outputs.items():
            if function == "avg":
                total, count = F.col(parts[0]), F.col(parts[1])
                value = F.when(count > 0, total / count)
            else:
                value = F.col(parts[0])
            columns.append(value.cast(schema[out]).alias(out))
        return merged.select(*columns).sortWithinPartitions("window_start", *keys)

    def _advance(self, draft: dict[str, Any], reports: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        state = dict(draft)
        state["watermark_us"] = state.pop("next_watermark_us")
        return state


def _indicator(column: str | None) -> Column:
    """1 for a row that counts (every row for ``count(*)``, a non-null value for ``count(col)``), else 0."""
    if column is None:
        return F.lit(1).cast("bigint")
    return F.when(_col(column).isNull(), F.lit(0)).otherwise(F.lit(1)).cast("bigint")


def _sum_type(kind: str | None) -> str:
    if kind in INTEGRAL:
        return "bigint"
    if kind and kind.startswith("decimal("):
        return _DECIMAL_SUM.format(scale=kind.split(",")[1].rstrip(") "))
    return "double"
