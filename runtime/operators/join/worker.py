"""What one logical worker of a ``join`` does with a micro-batch (on an executor).

Rows of both sides arrive in one table: ``side`` 0 (left) or 1 (right), the
left's columns as ``__l_<name>`` and the right's as ``__r_<name>`` (the other
side's columns null). The worker's state is the rows of both sides that may
still find a partner, in the same layout. Output of a batch:
new left x (state right + new right) + state left x new right, so each
matching pair is emitted once. With a time bound w, a pair matches only if
its times differ by at most w, and state older than (watermark in force) - w
is evicted: no row the watermark admits can match it.

New rows are sorted before they are joined and stored, so the output order
depends only on the batch's content, not on the order Spark's shuffle
delivered it in: a replayed batch names its records the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from runtime.spark.shuffle import PKEY, SIDE

LEFT, RIGHT = 0, 1
_NULLABLE = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
             pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}


def side_column(side: int, name: str) -> str:
    return f"__{'l' if side == LEFT else 'r'}_{name}"


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(name, "ascending") for name in table.column_names if name != PKEY]) if table.num_rows else table


@dataclass(frozen=True)
class JoinStep:
    """One batch of one worker of an inner equi-join.

    ``left``/``right``: the sides' column names; ``on``: the join columns;
    ``right_names``: output name of each right column that is not an ``on``
    column; ``time_column`` and ``window_us`` for a time-bounded join;
    ``watermark_us``: the watermark in force when the batch starts; a new row older than it is dropped as
    too late (a time-bounded join only).
    """

    on: tuple[str, ...]
    left: tuple[str, ...]
    right: tuple[str, ...]
    right_names: tuple[tuple[str, str], ...]
    output: tuple[str, ...]
    time_column: str | None
    window_us: int | None
    watermark_us: int | None

    def __call__(self, state: pa.Table | None, rows: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None, dict]:
        new = _sorted(rows.drop_columns([PKEY])) if rows is not None and rows.num_rows else None
        if new is not None and self.window_us is not None and self.watermark_us is not None:
            new = self._evict(new, self.watermark_us)  # too late: older than the watermark in force
        new_left, new_right = self._side(new, LEFT), self._side(new, RIGHT)
        old_left, old_right = self._side(state, LEFT), self._side(state, RIGHT)
        all_right = _concat(old_right, new_right)
        pieces = [self._pairs(new_left, all_right), self._pairs(old_left, new_right)]
        pieces = [piece for piece in pieces if piece is not None and len(piece)]
        output = pd.concat(pieces, ignore_index=True) if pieces else None
        stored = [table for table in (state, new) if table is not None and table.num_rows]
        kept = pa.concat_tables(stored) if stored else None
        if kept is not None and self.window_us is not None and self.watermark_us is not None:
            kept = self._evict(kept, self.watermark_us - self.window_us)
        report = {"rows": new.num_rows if new is not None else 0, "state_rows": kept.num_rows if kept is not None else 0,
                  "max_left_us": self._max_time(new, LEFT), "max_right_us": self._max_time(new, RIGHT)}
        table = None if output is None else pa.Table.from_pandas(output[list(self.output)], preserve_index=False)
        return kept, table, report

    def _side(self, table: pa.Table | None, side: int) -> pd.DataFrame | None:
        if table is None or not table.num_rows:
            return None
        rows = table.filter(pc.equal(table.column(SIDE), side))
        if not rows.num_rows:
            return None
        names = self.left if side == LEFT else self.right
        frame = rows.select([side_column(side, name) for name in names]).rename_columns(list(names))
        return frame.to_pandas(types_mapper=_NULLABLE.get)

    def _pairs(self, left: pd.DataFrame | None, right: pd.DataFrame | None) -> pd.DataFrame | None:
        if left is None or right is None:
            return None
        pairs = left.merge(right.rename(columns=dict(self.right_names)), on=list(self.on), how="inner")
        if self.window_us is not None and len(pairs):
            right_time = dict(self.right_names)[self.time_column]
            gap = (pairs[self.time_column] - pairs[right_time]).abs()
            pairs = pairs[gap <= pd.Timedelta(microseconds=self.window_us)]
        return pairs

    def _time(self, table: pa.Table, side: int) -> pa.ChunkedArray:
        return table.column(side_column(side, self.time_column))

    def _evict(self, table: pa.Table, horizon_us: int) -> pa.Table | None:
        horizon = pa.scalar(horizon_us, pa.timestamp("us", tz="UTC"))
        left = pc.equal(table.column(SIDE), LEFT)
        keep = pc.if_else(left, pc.greater_equal(self._time(table, LEFT), horizon),
                          pc.greater_equal(self._time(table, RIGHT), horizon))
        kept = table.filter(keep)
        return kept if kept.num_rows else None

    def _max_time(self, table: pa.Table | None, side: int) -> int | None:
        if table is None or self.time_column is None:
            return None
        times = self._time(table.filter(pc.equal(table.column(SIDE), side)), side)
        return pc.max(pc.cast(times, pa.int64())).as_py() if len(times) else None


def _concat(first: pd.DataFrame | None, second: pd.DataFrame | None) -> pd.DataFrame | None:
    frames = [frame for frame in (first, second) if frame is not None]
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
