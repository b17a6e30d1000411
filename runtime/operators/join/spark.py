"""``join`` on Spark's executors: a stream-stream inner equi-join, with an optional time bound.

Both sides' new rows are routed to logical workers by the join keys and
shuffled together (worker i on Spark task i); each worker
(:class:`~runtime.operators.join.worker.JoinStep`) joins them with the rows it
keeps in the worker state store and stores them. A key's rows of both sides
meet on the worker its bucket routes to, and moving a bucket moves its rows
of both sides with it, so every matching pair is found exactly once.

With ``window`` w: a pair matches only if its time columns differ by at most
w. The watermark is min(max left time, max right time) - ``watermark``
(default w), Spark's default policy, computed on the driver from the
workers' reports after each batch; a row older than the watermark in force
is dropped as too late (by its worker: the SQL carries no watermark, so the
code Spark generates for a batch is the same from batch to batch, see
:mod:`runtime.operators.window.spark`), and state older than watermark - w (which no
acceptable future row can match) is evicted. Without ``window`` nothing is
evicted (state grows with the input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from runtime.operators.fields import duration_ms
from runtime.operators.join import RIGHT_PREFIX, JoinConfig, join_time_column
from runtime.plan import TaskSpec
from runtime.operators.join.worker import LEFT, RIGHT, JoinStep, side_column
from runtime.spark.shuffle import BUCKET, PKEY, SIDE, branch
from runtime.spark.keyed_operator import KeyedOperator
from runtime.spark.reshape import ReshapeSettings


class StreamJoin(KeyedOperator):
    """One running ``join`` task."""

    kind = "join"
    sides = 2

    def __init__(self, task: TaskSpec, input_schemas: Mapping[str, list[dict[str, str]]], workers: int | None = None,
                 reshape: ReshapeSettings | None = None):
        super().__init__(task, workers, reshape)
        self.config = JoinConfig.model_validate(task.config)
        (self.left_schema,) = input_schemas["left"]
        (self.right_schema,) = input_schemas["right"]
        self.time_column = join_time_column(self.config, self.left_schema, self.right_schema)
        self.window_us = duration_ms(self.config.window) * 1000 if self.config.window else None
        delay = self.config.watermark or self.config.window
        self.delay_us = duration_ms(delay) * 1000 if delay else None
        on = set(self.config.on)
        self.right_names = tuple(
            (name, name if name not in self.left_schema else RIGHT_PREFIX + name)
            for name in self.right_schema if name not in on
        )

    def initial_state(self) -> dict[str, Any]:
        return {**super().initial_state(), "max_left_us": None, "max_right_us": None}

    def _side(self, source: str, side: int, schema: Mapping[str, str], routing: dict[str, Any],
              columns: list[tuple[str, str]]) -> str:
        conditions = [f"`{key}` IS NOT NULL" for key in self.config.on]
        if self.window_us is not None:
            conditions.append(f"`{self.time_column}` IS NOT NULL")
        bucket, pkey = self.router.columns(self.config.on, routing, [f"`{name}`" for name in schema], side)
        values = {PKEY: pkey, BUCKET: bucket, SIDE: f"CAST({side} AS TINYINT)"}
        values.update({side_column(side, name): f"`{name}`" for name in schema})
        return branch(columns, values, f"({source}) AS i", " AND ".join(conditions))

    def _route(self, session: SparkSession, inputs: Mapping[str, list[str]], draft: dict[str, Any],
               routing: dict[str, Any], scanned: Any) -> tuple[list[str], list[tuple[str, str]], JoinStep, dict[str, str]]:
        (left,) = inputs["left"]
        (right,) = inputs["right"]
        watermark = draft["watermark_us"]
        columns = [(PKEY, "int"), (BUCKET, "int"), (SIDE, "tinyint")]
        columns += [(side_column(LEFT, name), kind) for name, kind in self.left_schema.items()]
        columns += [(side_column(RIGHT, name), kind) for name, kind in self.right_schema.items()]
        branches = [self._side(left, LEFT, self.left_schema, routing, columns),
                    self._side(right, RIGHT, self.right_schema, routing, columns)]
        step = JoinStep(tuple(self.config.on), tuple(self.left_schema), tuple(self.right_schema), self.right_names,
                        tuple(self.task.schema), self.time_column, self.window_us, watermark)
        return branches, columns, step, dict(self.task.schema)

    def _advance(self, draft: dict[str, Any], reports: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        state = dict(draft)
        if self.window_us is None:
            return state
        for side in ("left", "right"):
            seen = [report[f"max_{side}_us"] for report in reports.values() if report.get(f"max_{side}_us") is not None]
            current = state[f"max_{side}_us"]
            state[f"max_{side}_us"] = max([*seen, *([current] if current is not None else [])], default=None)
        if state["max_left_us"] is not None and state["max_right_us"] is not None:
            candidate = min(state["max_left_us"], state["max_right_us"]) - self.delay_us
            watermark = state["watermark_us"]
            state["watermark_us"] = candidate if watermark is None else max(watermark, candidate)
        return state
