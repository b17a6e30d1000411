"""``join`` on Spark: a stream-stream inner equi-join, with an optional time bound.

Each side's new rows of a micro-batch are routed to logical workers by the
join keys and collected on the driver; the state holds, per side, the rows
that may still find a partner. Output of a batch = new left x (state right +
new right) + state left x new right, so every matching pair is emitted once.

With ``window`` w: a pair matches only if its time columns differ by at most
w. The watermark is min(max left time, max right time) - ``watermark``
(default w), Spark's default policy; a row older than the watermark is
dropped as too late, and state rows older than watermark - w (which no
acceptable future row can match) are evicted. Without ``window`` nothing is
evicted (state grows with the input).

Probing ignores workers (all workers' state of a key is searched), so moving
keys or splitting a key's records between workers never changes results.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.operators.fields import duration_ms
from runtime.operators.join import RIGHT_PREFIX, JoinConfig, join_time_column
from runtime.plan import TaskSpec
from runtime.spark.frames import to_pandas, to_spark
from runtime.spark.keyed import DEFAULT_WORKERS, WORKER_COLUMN, Router, WorkerLoad, counts_by_worker

_RIGHT_WORKER = "__sana_right_worker"


def _micros(value) -> int:
    return int(pd.Timestamp(value).value // 1000)


class StreamJoin:
    """One running ``join`` task."""

    def __init__(self, task: TaskSpec, input_schemas: Mapping[str, list[dict[str, str]]], workers: int = DEFAULT_WORKERS):
        self.task = task
        self.config = JoinConfig.model_validate(task.config)
        (self.left_schema,) = input_schemas["left"]
        (self.right_schema,) = input_schemas["right"]
        self.time_column = join_time_column(self.config, self.left_schema, self.right_schema)
        self.window_us = duration_ms(self.config.window) * 1000 if self.config.window else None
        delay = self.config.watermark or self.config.window
        self.delay_us = duration_ms(delay) * 1000 if delay else None
        self.router = Router(workers)
        self.load = WorkerLoad(workers)
        on = set(self.config.on)
        self.right_names = {}
        for name in self.right_schema:
            if name in on:
                continue
            self.right_names[name] = name if name not in self.left_schema else RIGHT_PREFIX + name

    def initial_state(self) -> dict[str, Any]:
        return {"left": None, "right": None, "max_left_us": None, "max_right_us": None, "watermark_us": None}

    @staticmethod
    def state_rows(state: dict[str, Any]) -> int:
        return sum(0 if state.get(side) is None else len(state[side]) for side in ("left", "right"))

    def _collect(self, df: DataFrame, schema: dict[str, str], watermark_us: int | None) -> pd.DataFrame:
        rows = df.select(self.router.column(self.config.on), *[F.col(f"`{c}`") for c in schema])
        for key in self.config.on:
            rows = rows.where(F.col(f"`{key}`").isNotNull())
        if self.window_us is not None:
            ts = F.col(f"`{self.time_column}`")
            rows = rows.where(ts.isNotNull())
            if watermark_us is not None:
                rows = rows.where(ts >= F.timestamp_micros(F.lit(watermark_us)))
        return to_pandas(rows)

    def _pairs(self, left: pd.DataFrame | None, right: pd.DataFrame | None) -> pd.DataFrame | None:
        if left is None or right is None or not len(left) or not len(right):
            return None
        renamed = right.rename(columns={**self.right_names, WORKER_COLUMN: _RIGHT_WORKER})
        pairs = left.merge(renamed, on=list(self.config.on), how="inner")
        if self.window_us is not None and len(pairs):
            right_time = self.right_names[self.time_column]
            gap = (pairs[self.time_column] - pairs[right_time]).abs()
            pairs = pairs[gap <= pd.Timedelta(microseconds=self.window_us)]
        return pairs

    def process(self, spark: SparkSession, batch_id: int, inputs: Mapping[str, list[DataFrame]],
                state: dict[str, Any]) -> tuple[DataFrame, dict[str, Any]]:
        (left_df,) = inputs["left"]
        (right_df,) = inputs["right"]
        watermark = state["watermark_us"]
        new_left = self._collect(left_df, self.left_schema, watermark)
        new_right = self._collect(right_df, self.right_schema, watermark)
        old_left, old_right = state["left"], state["right"]
        all_right = _concat(old_right, new_right)
        pieces = [self._pairs(new_left, all_right), self._pairs(old_left, new_right)]
        pieces = [piece for piece in pieces if piece is not None and len(piece)]
        output = pd.concat(pieces, ignore_index=True) if pieces else None
        left, right = _concat(old_left, new_left), all_right
        max_left, max_right = state["max_left_us"], state["max_right_us"]
        if self.window_us is not None:
            max_left = _max_time(new_left, self.time_column, max_left)
            max_right = _max_time(new_right, self.time_column, max_right)
            if max_left is not None and max_right is not None:
                candidate = min(max_left, max_right) - self.delay_us
                watermark = candidate if watermark is None else max(watermark, candidate)
                horizon = pd.Timestamp(watermark - self.window_us, unit="us", tz="UTC")
                left = _keep(left, self.time_column, horizon)
                right = _keep(right, self.time_column, horizon)
        self.load.record(
            _add(counts_by_worker(new_left), counts_by_worker(new_right)),
            _add(counts_by_worker(left), counts_by_worker(right)),
        )
        new_state = {"left": left, "right": right, "max_left_us": max_left, "max_right_us": max_right, "watermark_us": watermark}
        return to_spark(spark, output, self.task.schema), new_state

    def metrics(self, state: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "operator": "join",
            "state_rows": self.state_rows(state or {}),
            "watermark_us": (state or {}).get("watermark_us"),
            "workers": self.load.snapshot(),
            "routing": self.router.snapshot(),
        }


def _concat(first: pd.DataFrame | None, second: pd.DataFrame | None) -> pd.DataFrame | None:
    frames = [frame for frame in (first, second) if frame is not None and len(frame)]
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def _max_time(frame: pd.DataFrame | None, column: str, current: int | None) -> int | None:
    if frame is None or not len(frame):
        return current
    value = frame[column].max()
    if pd.isna(value):
        return current
    return _micros(value) if current is None else max(current, _micros(value))


def _keep(frame: pd.DataFrame | None, column: str, horizon: pd.Timestamp) -> pd.DataFrame | None:
    if frame is None:
        return None
    kept = frame[frame[column] >= horizon]
    return kept.reset_index(drop=True) if len(kept) else None


def _add(first: Mapping[int, int], second: Mapping[int, int]) -> dict[int, int]:
    return {worker: first.get(worker, 0) + second.get(worker, 0) for worker in set(first) | set(second)}
