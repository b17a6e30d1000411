"""What runs on the executors in every keyed shuffle: each logical worker's task, and the load it reports.

:class:`WorkerTask` is the ``mapInArrow`` function of the shuffle planned by
:mod:`runtime.spark.shuffle`: one call per Spark task, i.e. per logical worker.
It loads the worker's state, moves buckets between routings (Reshape's splits
and moves), runs the operator's step (``runtime/operators/*/worker.py``) and
writes the next state version with its report. :class:`WorkerLoad` is what
the driver keeps of those reports per operator: the signal Reshape reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.spark.python_workers import freeze_imports
from runtime.spark.shuffle import BUCKET, DEFAULT_WORKERS, EWMA_ALPHA, MARKER, PKEY, SIDE, Routing


@dataclass
class WorkerLoad:
    """Per-worker load of one keyed operator (the signal a skew controller reads)."""

    workers: int = DEFAULT_WORKERS
    last: list[int] = field(default_factory=list)
    total: list[int] = field(default_factory=list)
    ewma: list[float] = field(default_factory=list)
    state_rows: list[int] = field(default_factory=list)
    task_ms: list[float] = field(default_factory=list)
    batches: int = 0

    def __post_init__(self) -> None:
        for name in ("last", "total", "state_rows"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.workers)
        for name in ("ewma", "task_ms"):
            if not getattr(self, name):
                setattr(self, name, [0.0] * self.workers)

    def record(self, metas: Mapping[int, Mapping[str, Any]]) -> None:
        """Account one batch from the workers' reports (``rows``, ``state_rows``, ``task_ms``)."""
        self.batches += 1
        for worker in range(self.workers):
            meta = metas.get(worker) or {}
            count = int(meta.get("rows", 0))
            self.last[worker] = count
            self.total[worker] += count
            self.ewma[worker] = EWMA_ALPHA * count + (1 - EWMA_ALPHA) * self.ewma[worker]
            self.state_rows[worker] = int(meta.get("state_rows", 0))
            self.task_ms[worker] = float(meta.get("task_ms", 0.0))

    def snapshot(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "last_batch_rows": list(self.last),
            "total_rows": list(self.total),
            "ewma_rows": [round(value, 2) for value in self.ewma],
            "state_rows": list(self.state_rows),
            "task_ms": [round(value, 1) for value in self.task_ms],
        }


#: The column of a fused shuffle's output that says whose row it is: 0 the operator's, i its i-th fused operator's.
TAG = "__sana_out"


@dataclass(frozen=True)
class Fused:
    """A keyed operator that runs inside another's worker tasks on what the other's step emitted (a window's
    roll-up, docs/containment.md): its own state versions and reports, under its own id. Its state moves from the
    routing it was placed by to the other's new one, as the other's does."""

    operator: str
    step: Any
    feed: Any  # the parent step's output (with the bucket) -> this step's rows, or None
    renames: tuple[tuple[str, str], ...]  # (column of this step's output, its name in the tagged output)
    old: Routing  # the routing its state was placed by (the other's, once it has run inside it)


@dataclass(frozen=True)
class WorkerTask:
    """The ``mapInArrow`` function of a keyed shuffle: one call per Spark task, i.e. per logical worker, or per
    group of workers when the shuffle packs them into ``tasks`` Spark tasks (the task runs them one after another).

    For each worker: loads its state as of the batch before ``batch_id``, changes it
    from ``old`` routing to ``new`` (:meth:`_transition`), runs ``step`` and
    writes the new version with the step's report, to which it adds the
    records of each bucket it got (replicas left out) and its state rows per
    side. ``step(state, rows) -> (state, output, report)`` works on Arrow tables.
    """

    store: Any  # WorkerStateStore
    operator: str
    batch_id: int
    pkeys: tuple[int, ...]
    old: Routing
    new: Routing
    step: Any
    output_schema: Any  # pyarrow.Schema
    sides: int = 1  # 2 for a join: rows carry SIDE
    tasks: int = 0  # Spark tasks of the shuffle; fewer than the workers: worker i runs in task i % tasks (0: one each)
    fused: tuple[Fused, ...] = ()  # run after ``step`` on its output; then every output row carries TAG

    def __call__(self, batches):
        import pyarrow as pa
        import pyarrow.compute as pc

        freeze_imports()
        received = [batch for batch in batches if batch.num_rows]
        table = pa.Table.from_batches(received) if received else None
        marker = pc.equal(table.column(BUCKET), MARKER) if table is not None else None
        markers = table.filter(marker).column(PKEY).to_pylist() if table is not None else []
        workers = self._workers_of(markers)
        rows = table.filter(pc.invert(marker))
        strangers = (pc.sum(pc.invert(pc.is_in(rows.column(PKEY), value_set=pa.array(markers, rows.column(PKEY).type)))).as_py()
                     if rows.num_rows else 0)
        if strangers:
            raise RuntimeError(f"keyed shuffle of {self.operator}: the Spark task of worker(s) {workers} got {strangers} "
                               "row(s) of other workers; Spark's hash partitioning is not what Sana expects")
        for worker in workers:  # one worker per task, or several when the shuffle is packed (``tasks``)
            own = rows if len(workers) == 1 else rows.filter(pc.equal(rows.column(PKEY), self.pkeys[worker]))
            output = self._run_step(worker, self.operator, self.old, self.step, own if own.num_rows else None)
            if self.fused:  # each fused operator on what the step emitted at this worker; every row tagged
                for tag, fused in enumerate(self.fused, 1):
                    theirs = self._run_step(worker, fused.operator, fused.old, fused.step, fused.feed(output))
                    if theirs is not None and theirs.num_rows:
                        yield from _tagged(theirs, tag, dict(fused.renames), self.output_schema).to_batches()
                output = _tagged(output.drop_columns([BUCKET]), 0, {}, self.output_schema) if output is not None else None
            if output is not None and output.num_rows:
                yield from output.cast(self.output_schema).to_batches()

    def _run_step(self, worker: int, operator: str, old: Routing, step, rows):
        """One operator's batch at ``worker``: its state as of the batch before, moved from routing ``old`` to the
        new one, ``step`` on ``rows``, the new version saved with the step's report; the step's output."""
        import time

        started = time.perf_counter()
        _, state = self.store.load_before(operator, worker, self.batch_id)
        state, moved = self._transition(worker, state, operator, old)
        arrivals = self._arrivals(worker, rows)
        state, output, report = step(state, rows)
        report.update(moved_in_rows=moved, task_ms=round(1000 * (time.perf_counter() - started), 2),
                      arrivals=arrivals, side_state_rows=self._side_counts(state),
                      state_bytes=int(state.nbytes) if state is not None else 0)
        self.store.save(operator, worker, self.batch_id, state, report)
        return output

    def _workers_of(self, markers: list[int]) -> list[int]:
        """The workers this Spark task runs, from their marker rows, checked against the partitioning planned."""
        tasks = self.tasks or len(self.pkeys)
        workers = sorted(self.pkeys.index(key) for key in markers if key in self.pkeys)
        expected = 1 if tasks >= len(self.pkeys) else None
        if (not workers or len(workers) != len(markers) or len(set(workers)) != len(workers)
                or (expected is not None and len(workers) != expected)
                or len({worker % tasks for worker in workers}) != 1):
            raise RuntimeError(f"keyed shuffle of {self.operator}: a Spark task got worker marker(s) {markers} "
                               f"({tasks} task(s) for {len(self.pkeys)} workers); Spark's hash partitioning is not "
                               "what Sana expects")
        return workers

    # -- what the worker reports ------------------------------------------------------------

    def _sides_of(self, table) -> "Any":
        import numpy as np

        if self.sides == 1 or table is None:
            return np.zeros(0 if table is None else table.num_rows, dtype=np.int64)
        return table.column(SIDE).to_numpy(zero_copy_only=False).astype(np.int64)

    def _arrivals(self, worker: int, rows) -> list[list[int]]:
        """Records of each bucket per side that this worker got and no other did (a replica is not counted)."""
        import numpy as np

        buckets = len(self.new.table)
        if rows is None:
            return [[0] * buckets for _ in range(self.sides)]
        bucket = rows.column(BUCKET).to_numpy(zero_copy_only=False).astype(np.int64)
        side = self._sides_of(rows)
        counted = np.ones(len(bucket), dtype=bool)
        owners = np.asarray(self.new.table, dtype=np.int64)[bucket]
        for split in self.new.splits:  # a replica: the other side of a split, at a worker that is not the owner
            if split.side is not None and split.worker != worker:
                counted &= ~((owners == split.worker) & (side != split.side))
        return [np.bincount(bucket[counted & (side == index) if self.sides > 1 else counted],
                            minlength=buckets).tolist() for index in range(self.sides)]

    def _side_counts(self, state) -> list[int]:
        import numpy as np

        if state is None or not state.num_rows:
            return [0] * self.sides
        if self.sides == 1:
            return [state.num_rows]
        return np.bincount(self._sides_of(state), minlength=self.sides).tolist()

    # -- state between routings ---------------------------------------------------------------

    def _transition(self, worker: int, state, operator: str | None = None, old: Routing | None = None):
        """The worker's state (of ``operator``, placed by ``old``; by default this task's operator and old routing)
        under the new routing, and the rows it took in from other workers.

        Bucket by bucket and side by side, where their holders change (:meth:`Routing.holders`):

        * rows that become copied to every member of a split (a join's
          replicated side): a member that held a complete copy keeps it, any
          other gathers them, its own share and every old holder's (a helper
          joining a split copies them from the skewed worker);
        * rows that become scattered, or kept by one owner: a share stays where
          it is if its worker is still a member, the new owner takes the shares
          of the workers that are not (a bucket moving; a helper leaving, whose
          partials of a window the next aggregation merges), and of rows that
          were copied to every member the new owner keeps or takes one copy;
        * a worker that is not a member any more drops them.

        So nothing is lost, every scattered row is on exactly one member and every member holds all the copied
        rows, whatever changes together in one batch: buckets moving into, out of and between split workers, and
        splits starting, changing side or helpers, and ending.
        """
        import numpy as np
        import pyarrow as pa

        operator, old = operator or self.operator, old or self.old
        if old == self.new:  # most batches
            return state, 0
        sides = (None,) if self.sides == 1 else tuple(range(self.sides))
        dropped = np.zeros(len(self.new.table) * len(sides), dtype=bool)  # per (bucket, side): own rows go
        takes: dict[int, list[int]] = {}  # source worker -> the (bucket, side) keys whose rows this worker takes
        for bucket in range(len(self.new.table)):
            for index, side in enumerate(sides):
                before, after = old.holders(bucket, side), self.new.holders(bucket, side)
                if before == after:
                    continue
                (old_owner, old_members, was_copied), (new_owner, new_members, copied) = before, after
                own, sources = worker in old_members, ()
                if worker not in new_members:
                    own = False
                elif copied:  # every member needs all of them
                    sources = (() if own else (old_owner,)) if was_copied else \
                        tuple(member for member in old_members if member != worker)
                elif was_copied:  # one complete copy, at the new owner (every old member held one)
                    own = worker == new_owner and worker in old_members
                    sources = (old_owner,) if worker == new_owner and not own else ()
                elif worker == new_owner:  # scattered: shares stay with members; the owner takes the others'
                    sources = tuple(member for member in old_members if member not in new_members)
                dropped[bucket * len(sides) + index] = not own
                for source in sources:
                    takes.setdefault(source, []).append(bucket * len(sides) + index)
        if not dropped.any() and not takes:
            return state, 0
        pieces = [state.filter(pa.array(~dropped[self._keys(state)])) if state is not None else None]
        moved = 0
        for source, keys in sorted(takes.items()):
            _, theirs = self.store.load_before(operator, source, self.batch_id)
            if theirs is None or not theirs.num_rows:
                continue
            wanted = np.zeros(len(dropped), dtype=bool)
            wanted[keys] = True
            piece = theirs.filter(pa.array(wanted[self._keys(theirs)]))
            moved += piece.num_rows
            pieces.append(piece)
        pieces = [piece for piece in pieces if piece is not None and piece.num_rows]
        return (pa.concat_tables(pieces) if len(pieces) > 1 else (pieces[0] if pieces else None)), moved

    def _keys(self, table):
        """Each row's ``bucket * sides + side`` (its bucket, for one side): an index into per-(bucket, side) arrays."""
        bucket = table.column(BUCKET).to_numpy(zero_copy_only=False).astype("int64")
        return bucket if self.sides == 1 else bucket * self.sides + self._sides_of(table)


def _tagged(table, tag: int, renames: Mapping[str, str], schema):
    """``table``'s rows in the fused output ``schema``: ``tag`` in TAG, each column under its name there (``renames``,
    else its own), null in the columns of the other operators."""
    import pyarrow as pa

    named = {renames.get(name, name): table.column(name) for name in table.column_names}
    columns = []
    for field_ in schema:
        if field_.name == TAG:
            columns.append(pa.array([tag] * table.num_rows, field_.type))
        elif field_.name in named:
            columns.append(named[field_.name].cast(field_.type))
        else:
            columns.append(pa.nulls(table.num_rows, field_.type))
    return pa.Table.from_arrays(columns, schema=schema)
