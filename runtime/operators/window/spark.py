"""``window_aggregate`` on Spark's executors: keyed event-time windows with a watermark.

Per micro-batch:

1. A small job finds the batch's largest event time (one number to the
   driver; one job for all the windows of a fragment in one layer: those
   that read no keyed output, those that read one, and so on,
   :meth:`WindowAggregate.scan_sql`), which gives the watermark
   after the batch: max(event time seen) - ``watermark``. The watermark in
   force when the batch starts closes the windows that end at or before it.
2. The rows (keys, event time, one input column per partial aggregate) are
   routed to logical workers and shuffled, worker i on Spark task i. Each
   worker (:class:`~runtime.operators.window.worker.WindowStep`) assigns rows to
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

The workers drop what the watermark closed; the SQL of a batch carries no
watermark. Spark writes a timestamp literal into the code it generates, so
a filter on the moving watermark made every batch generate and compile
that stage's code anew; without it the code is the same from batch to batch
and comes from Spark's code cache (15 RIoT apps alone: 11-13 classes loaded
per second before, 5-7 after; docs/reuse.md, "Code generated every batch").
A row too late for every window is still shipped to its worker, which drops
it; the scan's largest event time is the same with or without it (a late
row is older than the watermark, which is older than the largest time
seen).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from runtime.exceptions import QueryFailed
from runtime.operators.fields import duration_ms
from runtime.operators.types import INTEGRAL
from runtime.operators.window import WINDOW_COLUMNS, WindowAggregateConfig, aggregate_call
from runtime.plan import TaskSpec
from runtime.spark.frames import arrow_type
from runtime.spark.shuffle import BUCKET, PKEY, Routing, branch
from runtime.spark.sql_text import PARTITION_SHIFT, SEQ_SLOT_SHIFT, json_sql, literal
from runtime.spark.keyed_operator import FUSED, NOT_SCANNED, KeyedOperator, TaggedOutput
from runtime.spark.reshape import ReshapeSettings
from runtime.operators.window.worker import END, START, TS, WindowStep, part_input, rollup_rows
from runtime.spark.worker_task import TAG, Fused

_DECIMAL_SUM = "decimal(38,{scale})"
WINDOW_START = WINDOW_COLUMNS[0]
#: A roll-up's aggregate -> the aggregates of the small window it folds as they are (a sum of counts is a count).
_ROLLS_UP = {"sum": ("count", "sum"), "min": ("min",), "max": ("max",)}
#: In a combined merge (:meth:`WindowAggregate.combined_output_sql`): the partition a row's own merge would put it in.
_PLACE = "__sana_place"


def _col(name: str) -> str:
    return f"`{name}`"


class WindowAggregate(KeyedOperator):
    """One running ``window_aggregate`` task."""

    kind = "window_aggregate"

    def __init__(self, task: TaskSpec, input_schemas: Mapping[str, list[dict[str, str]]], workers: int | None = None,
                 reshape: ReshapeSettings | None = None):
        super().__init__(task, workers, reshape)
        self.config = WindowAggregateConfig.model_validate(task.config)
        (self.input_schema,) = input_schemas["in"]
        self.window_us = duration_ms(self.config.window) * 1000
        self.slide_us = duration_ms(self.config.slide) * 1000 if self.config.slide else self.window_us
        self.delay_us = duration_ms(self.config.watermark) * 1000
        # (part, how it folds, its input as Spark SQL, its Spark type); outputs: out -> (function, parts)
        self.parts: list[tuple[str, str, str, str]] = []
        self.outputs: dict[str, tuple[str, list[str]]] = {}
        self.columns: dict[str, str | None] = {}  # out -> the column it aggregates (None for count(*))
        for out, text in self.config.aggregates.items():
            function, column = aggregate_call(text)
            self.columns[out] = column
            kind = self.input_schema.get(column) if column else None
            if function == "count":
                parts = [(f"__agg_{out}__n", "sum", _indicator(column), "bigint")]
            elif function == "avg":
                parts = [(f"__agg_{out}__s", "sum", f"CAST({_col(column)} AS DOUBLE)", "double"),
                         (f"__agg_{out}__n", "sum", _indicator(column), "bigint")]
            elif function == "sum":
                parts = [(f"__agg_{out}__sum", "sum", f"CAST({_col(column)} AS {_sum_type(kind)})", _sum_type(kind))]
            else:
                parts = [(f"__agg_{out}__{function}", function, _col(column), kind)]
            self.parts += parts
            self.outputs[out] = (function, [name for name, *_ in parts])

    def initial_state(self) -> dict[str, Any]:
        return {**super().initial_state(), "max_event_us": None}

    def _condition(self) -> str:
        """The rows a batch takes: those with a time (the workers drop the windows the watermark closed)."""
        return f"{_col(self.config.time_column)} IS NOT NULL"

    def scan_sql(self, inputs: Mapping[str, list[str]], state: Mapping[str, Any]) -> str:
        """The event times (microseconds) of the rows the batch takes: their max moves the watermark."""
        (source,) = inputs["in"]
        return f"SELECT unix_micros({_col(self.config.time_column)}) AS v FROM ({source}) AS i WHERE {self._condition()}"

    def idle(self, scanned: Any) -> bool:
        """No row with a time in the batch: the watermark stays, so no window closes and nothing is taken."""
        return scanned is None

    def _route(self, session: SparkSession, inputs: Mapping[str, list[str]], draft: dict[str, Any],
               routing: dict[str, Any], scanned: Any) -> tuple[list[str], list[tuple[str, str]], WindowStep, dict[str, str]]:
        (source,) = inputs["in"]
        config = self.config
        ts = _col(config.time_column)
        watermark = draft["watermark_us"]
        condition = self._condition()
        batch_max = scanned
        if scanned is NOT_SCANNED:  # a job of its own (the fragment answers the scans it can in one job)
            batch_max = session.sql(f"SELECT max(v) FROM ({self.scan_sql(inputs, draft)})").first()[0]
        max_event = draft["max_event_us"]
        if batch_max is not None:
            max_event = batch_max if max_event is None else max(max_event, batch_max)
        emit = watermark
        if max_event is not None:
            candidate = max_event - self.delay_us
            emit = candidate if watermark is None else max(watermark, candidate)
        draft.update(max_event_us=max_event, next_watermark_us=emit)
        record = [*(_col(key) for key in config.keys), ts, *(column for _, _, column, _ in self.parts)]
        bucket, pkey = self.router.columns(config.keys, routing, record)
        columns = [(PKEY, "int"), (BUCKET, "int"), *[(key, self.input_schema[key]) for key in config.keys],
                   (TS, "timestamp"), *[(part_input(name), kind) for name, _, _, kind in self.parts]]
        values = {PKEY: pkey, BUCKET: bucket, TS: ts, **{key: _col(key) for key in config.keys}}
        values.update({part_input(name): column for name, _, column, _ in self.parts})
        routed = branch(columns, values, f"({source}) AS i", condition)
        parts = tuple((name, how, arrow_type(kind)) for name, how, _, kind in self.parts)
        step = WindowStep(tuple(config.keys), self.window_us, self.slide_us, parts, watermark, emit)
        output = {**{key: self.input_schema[key] for key in config.keys}, START: "timestamp", END: "timestamp",
                  **{name: kind for name, _, _, kind in self.parts}}
        return [routed], columns, step, output

    def _finish_plan(self, session: SparkSession, frame: DataFrame, draft: dict[str, Any]) -> DataFrame:
        """Merge the emitted partials of each (keys, window) across workers; compute the outputs."""
        view = "sana_emitted_" + re.sub(r"\W", "_", self.task.id)
        frame.createOrReplaceTempView(view)  # one per operator, replaced every batch
        return session.sql(self.output_sql(view))

    def tagged_output_sql(self, view: str, tag: int, renames: Mapping[str, str]) -> str:
        return self.output_sql(view, f"{TAG} = {tag}", renames)

    def output_sql(self, view: str, where: str | None = None, renames: Mapping[str, str] = {}) -> str:
        """The outputs from the emitted partials in ``view`` (those ``where`` holds; a part in column
        ``renames.get(part, part)``), merged across workers: a key Reshape splits has partials at several.

        The merge's shuffle also names the output: its partitions depend on the keys alone, so a replayed batch
        writes each row at the place it had, whatever routing the replay runs (a pending move is not kept)."""
        keys = [_col(key) for key in self.config.keys]
        merged = {name: f"{how}({_col(renames.get(name, name))})" for name, how, _, _ in self.parts}
        columns = [f"{value} AS {_col(name)}" for name, value in self._output_columns(merged, START, END)]
        filtered = "" if where is None else f" WHERE {where}"
        return (f"SELECT {', '.join(columns)} FROM {view}{filtered} GROUP BY {', '.join([*keys, START, END])} "
                f"SORT BY window_start{''.join(f', {key}' for key in keys)}")

    def _output_columns(self, merged: Mapping[str, str], start: str, end: str) -> list[tuple[str, str]]:
        """The output's columns in order, each ``(name, SQL value)``, given each part's merged value (``merged``)
        and the window's start and end columns."""
        schema = self.task.schema
        columns = [*((key, _col(key)) for key in self.config.keys), ("window_start", start), ("window_end", end)]
        for out, (function, parts) in self.outputs.items():
            values = [merged[name] for name, _, _, _ in self.parts if name in parts]
            value = f"CASE WHEN {values[1]} > 0 THEN {values[0]} / {values[1]} END" if function == "avg" else values[0]
            columns.append((out, f"CAST({value} AS {schema[out]})"))
        return columns

    def combined_output_sql(self, view: str, outputs: Sequence[TaggedOutput], partitions: int) -> str:
        """The encoded rows (``topic, value, seq``, as :func:`~runtime.spark.sql_text.encode_sql` gives them) of
        several outputs of a fused shuffle's output ``view``, this window's and its roll-ups', from one merge.

        Each output alone is merged by a shuffle of its own (:meth:`output_sql`) and named by where that shuffle
        puts its rows: a row's partition is the hash of its keys and window modulo the shuffle's ``partitions``,
        its place there its rank by window start and keys. Here one shuffle merges them all: it computes that
        partition as a column, distributes by it, and ranks each output's rows within it, so every row gets the
        very name it gets alone, whatever other outputs share the merge (a replay after a removal names them
        alike). ``partitions`` is 1 when the fused shuffle ran in one Spark task: its output is one partition,
        which each merge keeps (no shuffle of its own). Needs every roll-up's keys to be this window's
        (:meth:`rollup_sources`)."""
        keys = [_col(key) for key in self.config.keys]
        parts: dict[tuple[str, str], str] = {}  # (column in view, how it merges) -> its merged column
        for output in outputs:
            for name, how, _, _ in output.operator.parts:
                column = output.renames.get(name, name)
                parts.setdefault((column, how), f"__m{len(parts)}")
        tags = sorted({output.tag for output in outputs})
        # One partition: the shuffle's output is one already (it ran in one task), and so is each merge's.
        place = f"pmod(hash({', '.join([*keys, START, END])}), {partitions})" if partitions > 1 else "0"
        distributed = (f"SELECT {TAG}, {place} AS {_PLACE}, {', '.join([*keys, START, END])}, "
                       f"{', '.join(_col(column) for column in dict.fromkeys(column for column, _ in parts))} "
                       f"FROM {view} WHERE {TAG} IN ({', '.join(map(str, tags))})"
                       + (f" DISTRIBUTE BY {_PLACE}" if partitions > 1 else ""))
        group = [TAG, _PLACE, *keys, START, END]
        aggregates = ", ".join(f"{how}({_col(column)}) AS {name}" for (column, how), name in parts.items())
        merged_sql = f"SELECT {', '.join(group)}, {aggregates} FROM ({distributed}) GROUP BY {', '.join(group)}"
        topics, values, slots = [], [], []
        for output in outputs:
            merged = {name: parts[(output.renames.get(name, name), how)] for name, how, _, _ in output.operator.parts}
            columns = output.operator._output_columns(merged, START, END)
            if output.casts is not None:  # a sink: its columns in its order, cast to its types
                by_name = dict(columns)
                columns = [(name, f"CAST({by_name[name]} AS {kind})") for name, kind in output.casts.items()]
            topics.append(f"WHEN {output.tag} THEN {literal(output.topic)}")
            values.append(f"WHEN {output.tag} THEN {json_sql(columns)}")
            slots.append(f"WHEN {output.tag} THEN {output.slot << SEQ_SLOT_SHIFT}")
        rank = f"row_number() OVER (PARTITION BY {TAG}, {_PLACE} ORDER BY {', '.join([START, *keys])})"
        return (f"SELECT CASE {TAG} {' '.join(topics)} END AS topic, CASE {TAG} {' '.join(values)} END AS value, "
                f"CASE {TAG} {' '.join(slots)} END + shiftleft(CAST({_PLACE} AS BIGINT), {PARTITION_SHIFT}) + {rank} - 1 "
                f"AS seq FROM ({merged_sql})")

    # -- a roll-up in the window's own worker tasks ------------------------------------------

    def rollup_sources(self, parent: KeyedOperator) -> tuple[tuple[str, str, str], ...] | None:
        """Per part of this window, ``(part, parent's part, Spark type)`` when this window rolls ``parent`` up:
        ``parent`` tumbles; this window reads its output on ``window_start`` with the same keys (in order) and
        workers, a window and slide that are multiples of ``parent``'s, and each aggregate a ``sum`` of a
        ``count`` or ``sum``, a ``min`` of a ``min`` or a ``max`` of a ``max`` of ``parent``'s, of one type
        throughout (so each of its partial inputs *is* one of ``parent``'s partials). Else None."""
        if not isinstance(parent, WindowAggregate) or parent.slide_us != parent.window_us:
            return None
        config, theirs = self.config, parent.config
        if (config.time_column != WINDOW_START or list(config.keys) != list(theirs.keys) or self.workers != parent.workers
                or self.window_us % parent.window_us or self.slide_us % parent.window_us):
            return None
        sources = []
        for out, (function, parts) in self.outputs.items():
            column = self.columns[out]
            their_function, their_parts = parent.outputs.get(column or "", ("", []))
            if len(parts) != 1 or len(their_parts) != 1 or their_function not in _ROLLS_UP.get(function, ()):
                return None
            kind = self._part_kind(parts[0])
            if not kind == parent._part_kind(their_parts[0]) == parent.task.schema.get(column):
                return None
            sources.append((parts[0], their_parts[0], kind))
        return tuple(sources)

    def fuses_into(self, parent: KeyedOperator) -> bool:
        return self.rollup_sources(parent) is not None

    def fused_run(self, parent: KeyedOperator, state: Mapping[str, Any], parent_draft: Mapping[str, Any],
                  tag: int) -> tuple[Fused, dict[str, Any], dict[str, str]]:
        """What ``parent``'s tasks run for this roll-up, its draft and the columns it adds (see the base class).

        Fused, a roll-up closes its windows when ``parent``'s watermark passes their end, as a window over the
        records would: every small window inside one has left by then (in this batch or before). Running apart, it
        closes them later, once a small window past their end reaches it (and its own watermark delay is past):
        the same rows, emitted later (docs/containment.md)."""
        sources = self.rollup_sources(parent)
        if sources is None:
            raise QueryFailed(f"keyed operator {self.task.id} does not roll {parent.task.id} up: it cannot run in its tasks")
        watermark = state["watermark_us"]
        emit = max((value for value in (watermark, parent_draft.get("next_watermark_us")) if value is not None), default=None)
        parts = tuple((name, how, arrow_type(kind)) for name, how, _, kind in self.parts)
        step = WindowStep(tuple(self.config.keys), self.window_us, self.slide_us, parts, watermark, emit)
        feed = partial(rollup_rows, keys=tuple(self.config.keys),
                       sources=tuple((part, source, arrow_type(kind)) for part, source, kind in sources))
        prefix = f"__r{tag}"
        renames = tuple((name, f"{prefix}{name}") for name, _, _, _ in self.parts)
        draft = {**state, "routing": parent_draft["routing"], "next_watermark_us": emit, FUSED: parent.task.id}
        self.fused_in = parent.task.id  # from now on: a move asked of it is refused
        run = Fused(self.task.id, step, feed, renames, Routing.of(state["routing"]))
        return run, draft, {renamed: self._part_kind(name) for name, renamed in renames}

    def _fusing(self, step: WindowStep) -> WindowStep:
        return replace(step, keep_bucket=True)

    def _part_kind(self, part: str) -> str:
        return next(kind for name, _, _, kind in self.parts if name == part)

    def _advance(self, draft: dict[str, Any], reports: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        state = dict(draft)
        state["watermark_us"] = state.pop("next_watermark_us")
        return state


def _indicator(column: str | None) -> str:
    """1 for a row that counts (every row for ``count(*)``, a non-null value for ``count(col)``), else 0."""
    if column is None:
        return "CAST(1 AS BIGINT)"
    return f"CAST(CASE WHEN {_col(column)} IS NULL THEN 0 ELSE 1 END AS BIGINT)"


def _sum_type(kind: str | None) -> str:
    if kind in INTEGRAL:
        return "bigint"
    if kind and kind.startswith("decimal("):
        return _DECIMAL_SUM.format(scale=kind.split(",")[1].rstrip(") "))
    return "double"
