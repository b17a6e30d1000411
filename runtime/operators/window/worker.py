"""What one logical worker of a ``window_aggregate`` does with a micro-batch (on an executor, in Arrow).

Rows arrive routed to this worker with their bucket, keys, event time and one
input column per partial aggregate (already cast to its accumulation type).
The worker assigns each row to its windows (tumbling, or every window of
size ``window`` starting at a multiple of ``slide`` that contains it), drops
(row, window) pairs whose window the watermark in force had already closed,
aggregates per (bucket, keys, window), merges the result into its state and
emits every partial whose window ends at or before the new watermark. The
partials of one window may come from several workers (a key split over
workers); the operator merges them before computing the final values.

Every partial is a sum, a min or a max over its own input column: ``count``
is a sum of 0/1, ``avg`` a sum and a count. Sums skip nulls and are null when
every value was null, as in SQL.

A roll-up (a longer window over this window's output, docs/containment.md)
that runs in the same query is fed here, in the same task, from the partials
this worker emits (:func:`rollup_rows`): a row per emitted small window, its
start as the event time, each of the roll-up's partial inputs one of this
window's partials. Sums of sums and counts, mins of mins and maxes of maxes
fold the same values as when the roll-up reads the merged output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runtime.spark.shuffle import BUCKET

TS = "__sana_ts"
START, END = "__sana_start", "__sana_end"
TIMESTAMP = pa.timestamp("us", tz="UTC")


def part_input(name: str) -> str:
    return f"__p_{name}"


def window_starts(ts_us: np.ndarray, window_us: int, slide_us: int) -> tuple[np.ndarray, np.ndarray]:
    """``(row index, window start)`` for every window ``[start, start + window)`` holding each time.

    Starts are multiples of ``slide_us`` (Spark's ``window()`` with start time 0).

    >>> rows, starts = window_starts(np.array([7, 12]), 10, 5)
    >>> rows.tolist(), starts.tolist()
    ([0, 0, 1, 1], [5, 0, 10, 5])
    """
    overlapping = -(-window_us // slide_us)
    last = ts_us - np.mod(ts_us, slide_us)
    rows = np.repeat(np.arange(len(ts_us)), overlapping)
    starts = np.repeat(last, overlapping) - np.tile(np.arange(overlapping, dtype=np.int64) * slide_us, len(ts_us))
    keep = starts + window_us > ts_us[rows]
    return rows[keep], starts[keep]


@dataclass(frozen=True)
class WindowStep:
    """One batch of one worker; ``parts`` are ``(name, "sum"|"min"|"max", Arrow type)``."""

    keys: tuple[str, ...]
    window_us: int
    slide_us: int
    parts: tuple[tuple[str, str, pa.DataType], ...]
    watermark_us: int | None  # in force when the batch starts: older windows are closed
    emit_us: int | None  # after the batch: windows ending at or before it are emitted
    keep_bucket: bool = False  # emitted partials keep their bucket (a roll-up in the task reads them)

    @property
    def group(self) -> list[str]:
        return [BUCKET, *self.keys, START, END]

    def __call__(self, state: pa.Table | None, rows: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None, dict]:
        partials = self._partials(rows) if rows is not None and rows.num_rows else None
        present = [table for table in (state, partials) if table is not None and table.num_rows]
        merged = self._aggregate(pa.concat_tables(present), {name: name for name, _, _ in self.parts}) if present else None
        emitted = None
        if merged is not None and self.emit_us is not None:
            closed = pc.less_equal(merged.column(END), pa.scalar(self.emit_us, TIMESTAMP))
            emitted = merged.filter(closed)
            emitted = emitted if self.keep_bucket else emitted.drop_columns([BUCKET])
            merged = merged.filter(pc.invert(closed))
        report = {"rows": rows.num_rows if rows is not None else 0, "state_rows": merged.num_rows if merged is not None else 0}
        return merged, emitted, report

    def _partials(self, rows: pa.Table) -> pa.Table | None:
        # Spark's shuffle delivers rows in no fixed order; floating-point sums depend on it. Sorted,
        # a replayed batch sums in the same order and emits the very same values.
        rows = rows.sort_by([(name, "ascending") for name in rows.column_names])
        ts = pc.cast(rows.column(TS), pa.int64()).to_numpy(zero_copy_only=False)
        index, starts = window_starts(ts, self.window_us, self.slide_us)
        if self.watermark_us is not None:
            open_ = starts + self.window_us > self.watermark_us
            index, starts = index[open_], starts[open_]
        if not len(index):
            return None
        table = rows.select([BUCKET, *self.keys, *[part_input(name) for name, _, _ in self.parts]]).take(pa.array(index))
        table = table.append_column(START, pa.array(starts).cast(TIMESTAMP))
        table = table.append_column(END, pa.array(starts + self.window_us).cast(TIMESTAMP))
        return self._aggregate(table, {part_input(name): name for name, _, _ in self.parts})

    def _aggregate(self, table: pa.Table, sources: dict[str, str]) -> pa.Table:
        """Group by (bucket, keys, window) and fold each partial with its function; ``sources``: input -> part."""
        hows = {name: (how, kind) for name, how, kind in self.parts}
        grouped = table.group_by(self.group, use_threads=False).aggregate(
            [(source, hows[part][0]) for source, part in sources.items()])
        columns = [grouped.column(name) for name in self.group]
        for source, part in sources.items():
            how, kind = hows[part]
            columns.append(grouped.column(f"{source}_{how}").cast(kind))
        return pa.Table.from_arrays(columns, names=[*self.group, *sources.values()])


def rollup_rows(emitted: pa.Table | None, keys: tuple[str, ...],
                sources: tuple[tuple[str, str, pa.DataType], ...]) -> pa.Table | None:
    """A roll-up's input rows from the partials a worker emitted (with their bucket): the bucket, the keys, the
    small window's start as the event time and, per ``(roll-up part, emitted part, type)``, the emitted partial as
    the roll-up part's input.

    >>> emitted = pa.table({BUCKET: pa.array([3], pa.int32()), "k": ["a"], START: pa.array([10], TIMESTAMP),
    ...                     END: pa.array([20], TIMESTAMP), "__agg_c__n": pa.array([4], pa.int64())})
    >>> rollup_rows(emitted, ("k",), (("__agg_n__sum", "__agg_c__n", pa.int64()),)).to_pylist()[0]["__p___agg_n__sum"]
    4
    """
    if emitted is None or not emitted.num_rows:
        return None
    columns = [emitted.column(BUCKET), *(emitted.column(key) for key in keys), emitted.column(START)]
    names = [BUCKET, *keys, TS]
    for part, source, kind in sources:
        columns.append(emitted.column(source).cast(kind))
        names.append(part_input(part))
    return pa.Table.from_arrays(columns, names=names)
