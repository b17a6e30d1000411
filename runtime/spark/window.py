"""``window_aggregate`` on Spark: keyed event-time windows with a watermark.

Per micro-batch: Spark assigns rows to windows (``window()``, tumbling or
sliding) and to logical workers, drops (row, window) pairs whose window the
watermark already closed, and computes partial aggregates per (worker, keys,
window). The partials (one row per group, small) are merged on the driver
into the operator's state, kept per logical worker. Then the watermark
advances to max(event time seen) - ``watermark`` and every window whose end
it passed is emitted once: its partials are combined across workers, so a key
whose records were split over several workers still gives one exact row.

Semantics: a (row, window) pair counts iff the window's end is after the
watermark in force when the row's batch starts (late data within the
watermark is counted; later data is dropped). Windows close in the batch that
moves the watermark past their end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.operators.fields import duration_ms
from runtime.operators.window import WindowAggregateConfig, aggregate_call
from runtime.plan import TaskSpec
from runtime.spark.frames import to_pandas, to_spark
from runtime.spark.keyed import DEFAULT_WORKERS, WORKER_COLUMN, Router, WorkerLoad, counts_by_worker

START, END = "__sana_start", "__sana_end"
ROWS, MAX_TS = "__sana_rows", "__sana_max_ts"


def _micros(value: pd.Timestamp) -> int:
    return int(value.value // 1000)


class WindowAggregate:
    """One running ``window_aggregate`` task: its router, load and state handling."""

    def __init__(self, task: TaskSpec, input_schemas: Mapping[str, list[dict[str, str]]], workers: int = DEFAULT_WORKERS):
        self.task = task
        self.config = WindowAggregateConfig.model_validate(task.config)
        self.router = Router(workers)
        self.load = WorkerLoad(workers)
        self.delay_us = duration_ms(self.config.watermark) * 1000
        self.parts: list[tuple[str, str, str | None]] = []  # (partial column, how to combine, source column)
        self.outputs: dict[str, tuple[str, list[str]]] = {}
        for out, text in self.config.aggregates.items():
            function, column = aggregate_call(text)
            if function == "count":
                self.parts.append((f"{out}__n", "sum", column))
                self.outputs[out] = ("count", [f"{out}__n"])
            elif function == "avg":
                self.parts += [(f"{out}__s", "sum", column), (f"{out}__n", "sum", column)]
                self.outputs[out] = ("avg", [f"{out}__s", f"{out}__n"])
            else:
                self.parts.append((f"{out}__{function}", function, column))
                self.outputs[out] = (function, [f"{out}__{function}"])

    # -- state ---------------------------------------------------------------

    def initial_state(self) -> dict[str, Any]:
        return {"partials": None, "max_event_us": None, "watermark_us": None}

    @staticmethod
    def state_rows(state: dict[str, Any]) -> int:
        partials = state.get("partials")
        return 0 if partials is None else len(partials)

    # -- one micro-batch -----------------------------------------------------

    def _spark_partials(self, df: DataFrame, watermark_us: int | None) -> DataFrame:
        config = self.config
        ts = F.col(f"`{config.time_column}`")
        window = F.window(ts, config.window, config.slide) if config.slide else F.window(ts, config.window)
        keys = [F.col(f"`{key}`").alias(key) for key in config.keys]
        values = {column: F.col(f"`{column}`").alias(f"__v_{column}") for _, _, column in self.parts if column}
        rows = df.where(ts.isNotNull()).select(self.router.column(config.keys), *keys, ts.alias("__ts"),
                                               *values.values(), window.alias("__w"))
        rows = rows.select("*", F.col("__w.start").alias(START), F.col("__w.end").alias(END))
        if watermark_us is not None:
            rows = rows.where(F.col(END) > F.timestamp_micros(F.lit(watermark_us)))
        aggregates = [F.count(F.lit(1)).alias(ROWS), F.max("__ts").alias(MAX_TS)]
        for name, how, column in self.parts:
            source = F.col(f"__v_{column}") if column else F.lit(1)
            if how == "sum" and name.endswith("__n"):
                aggregates.append(F.count(source).alias(name))
            else:
                aggregates.append(getattr(F, how)(source).alias(name))
        return rows.groupBy(WORKER_COLUMN, *config.keys, START, END).agg(*aggregates)

    def _merge(self, frames: list[pd.DataFrame | None], by: list[str]) -> pd.DataFrame | None:
        present = [frame for frame in frames if frame is not None and len(frame)]
        if not present:
            return None
        frame = pd.concat(present, ignore_index=True)
        grouped = frame.groupby(by, dropna=False, sort=False)
        pieces = [grouped[ROWS].sum()]
        for name, how, _ in self.parts:
            column = grouped[name]
            pieces.append(column.sum(min_count=1) if how == "sum" else getattr(column, how)())
        return pd.concat(pieces, axis=1).reset_index()

    def process(self, spark: SparkSession, batch_id: int, inputs: Mapping[str, list[DataFrame]],
                state: dict[str, Any]) -> tuple[DataFrame, dict[str, Any]]:
        (df,) = inputs["in"]
        watermark = state["watermark_us"]
        batch = to_pandas(self._spark_partials(df, watermark))
        max_event = state["max_event_us"]
        if len(batch):
            batch_max = batch[MAX_TS].max()
            if not pd.isna(batch_max):
                max_event = max(max_event or _micros(batch_max), _micros(batch_max))
            batch = batch.drop(columns=[MAX_TS])
        group = [WORKER_COLUMN, *self.config.keys, START, END]
        partials = self._merge([state["partials"], batch], group)
        if max_event is not None:
            candidate = max_event - self.delay_us
            watermark = candidate if watermark is None else max(watermark, candidate)
        emitted = None
        if partials is not None and watermark is not None:
            closed = partials[END].map(_micros) <= watermark
            emitted = self._merge([partials[closed]], [*self.config.keys, START, END])
            partials = partials[~closed].reset_index(drop=True) if (~closed).any() else None
        self.load.record(counts_by_worker(batch, weight=ROWS) if len(batch) else {}, counts_by_worker(partials))
        output = to_spark(spark, self._finish(emitted), self.task.schema)
        return output, {"partials": partials, "max_event_us": max_event, "watermark_us": watermark}

    def _finish(self, emitted: pd.DataFrame | None) -> pd.DataFrame | None:
        if emitted is None or not len(emitted):
            return None
        result = pd.DataFrame({key: emitted[key] for key in self.config.keys})
        result["window_start"] = emitted[START]
        result["window_end"] = emitted[END]
        for out, (function, columns) in self.outputs.items():
            if function == "avg":
                total, count = emitted[columns[0]], emitted[columns[1]]
                result[out] = (total.astype("float64") / count.where(count > 0)).astype("float64")
            else:
                result[out] = emitted[columns[0]]
        return result.sort_values(["window_start", *self.config.keys], kind="stable").reset_index(drop=True)

    def metrics(self, state: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "operator": "window_aggregate",
            "state_rows": self.state_rows(state or {}),
            "watermark_us": (state or {}).get("watermark_us"),
            "workers": self.load.snapshot(),
            "routing": self.router.snapshot(),
        }
