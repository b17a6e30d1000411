"""The shuffle of every keyed operator: records to logical workers, worker i on Spark task i.

Every keyed operator (``window_aggregate``, ``join``) routes each record to one
of a fixed number of logical workers: ``bucket = pmod(xxhash64(keys), BUCKETS)``
and a routing table ``bucket -> worker`` that the runtime owns and may change
between micro-batches (Reshape moves buckets; :meth:`Router.request`).

The shuffle is Spark's own: ``REPARTITION(workers, pkey)`` followed by
``mapInArrow`` (:func:`shuffle_sql`). Spark's hash partitioning sends a row to partition
``pmod(murmur3(pkey, 42), n)``; the partition key of worker i is an integer
chosen so that this is exactly i (:func:`partition_keys`). So logical worker i
is processed by Spark task i of the shuffle stage and no two workers ever
share a task by hash collision: a balanced routing table means balanced
tasks. Each task checks that it got only its own worker's rows.

The driver plans the shuffle and keeps only O(workers + buckets) per operator
(watermarks, the routing table, per-worker load). Records and state never
cross it: each task loads its worker's state from the
:class:`~runtime.spark.worker_state.WorkerStateStore`, processes its records
and writes the next state version there.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


DEFAULT_WORKERS = 8
BUCKETS = 64
PKEY = "__sana_pkey"
BUCKET = "__sana_bucket"
MARKER = -1  # the bucket of the one marker row each worker gets in every shuffle
SIDE = "__sana_side"
TASK_KEY = "__sana_task"  # the partition key of a packed shuffle (several workers per Spark task)
# A keyed task costs about 15 ms whatever it holds plus 0.8 ms per 1,000 rows (docs/skew.md): below about 10,000
# rows a worker's own work is smaller than its task's fixed cost, so light operators pack their workers into fewer
# Spark tasks (:func:`packed_tasks`). The logical workers, their state and their routing stay as they are.
ROWS_PER_TASK = 10_000
EWMA_ALPHA = 0.3
HASH_SEED = 42  # Spark's HashPartitioning hashes with Murmur3Hash(seed 42)
SLICES = 10_000  # a split record's slice: pmod(xxhash64(record, SLICE_SEED), SLICES)
SLICE_SEED = 7919  # hashed with the record so that its slice does not follow its bucket

_M32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _M32


def murmur3_int(value: int, seed: int = HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt(value, seed)``: ``hash(CAST(value AS INT))`` in Spark SQL.

    >>> murmur3_int(0), murmur3_int(1)
    (933211791, -559580957)
    """
    k1 = _rotl((value & _M32) * 0xCC9E2D51 & _M32, 15) * 0x1B873593 & _M32
    h1 = (_rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _M32
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_keys(workers: int) -> tuple[int, ...]:
    """For each worker i, the smallest int whose Spark hash partition among ``workers`` is i.

    >>> partition_keys(4)
    (12, 6, 2, 0)
    >>> [murmur3_int(key) % 4 for key in partition_keys(4)]
    [0, 1, 2, 3]
    """
    found: dict[int, int] = {}
    candidate = 0
    while len(found) < workers:
        found.setdefault(murmur3_int(candidate) % workers, candidate)
        candidate += 1
    return tuple(found[worker] for worker in range(workers))


def default_table(workers: int, buckets: int = BUCKETS) -> tuple[int, ...]:
    """Buckets dealt round-robin over the workers.

    >>> default_table(3, 7)
    (0, 1, 2, 0, 1, 2, 0)
    """
    return tuple(bucket % workers for bucket in range(buckets))


@dataclass(frozen=True)
class Split:
    """Worker ``worker``'s records (of ``side``, or all for a window) split by record slice over its helpers.

    ``helpers``: ``(helper, first slice, end slice)``; a record of the skewed
    worker's buckets whose slice ``pmod(xxhash64(record), SLICES)`` falls in a
    helper's range goes to that helper, any other stays. For a join, the
    other side's records of those buckets go to the worker and every helper.
    """

    worker: int
    side: int | None
    helpers: tuple[tuple[int, int, int], ...]

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> "Split":
        return cls(int(value["worker"]), None if value.get("side") is None else int(value["side"]),
                   tuple((int(h), int(lo), int(hi)) for h, lo, hi in value["helpers"]))

    @property
    def helper_workers(self) -> tuple[int, ...]:
        return tuple(helper for helper, _, _ in self.helpers)


@dataclass(frozen=True)
class Routing:
    """The routing of one batch: the table ``bucket -> worker`` and the splits in force."""

    table: tuple[int, ...]
    splits: tuple[Split, ...] = ()

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> "Routing":
        return cls(tuple(int(worker) for worker in value["table"]), tuple(Split.of(split) for split in value.get("splits") or ()))

    def helping(self, helper: int) -> dict[int, int | None]:
        """``{skewed worker: split side}`` of every split ``helper`` helps in."""
        return {split.worker: split.side for split in self.splits if helper in split.helper_workers}

    def split_of(self, worker: int) -> Split | None:
        return next((split for split in self.splits if split.worker == worker), None)

    def holders(self, bucket: int, side: int | None = None) -> tuple[int, tuple[int, ...], bool]:
        """Where the state rows of ``bucket`` (of a join's ``side``; None: a window's) are kept: ``(owner, members,
        replicated)``. Unsplit, the owner keeps them all. Split, the members are the owner and its helpers, and
        the rows are either scattered over them, each on one member (the split side; a window's rows), or each
        copied to every member (``replicated``: a join's other side).

        >>> routing = Routing((0, 1), (Split(0, 1, ((1, 0, 5000),)),))
        >>> routing.holders(0, 1), routing.holders(0, 0), routing.holders(1, 0)
        ((0, (0, 1), False), (0, (0, 1), True), (1, (1,), False))
        """
        owner = self.table[bucket]
        split = self.split_of(owner)
        if split is None:
            return owner, (owner,), False
        return owner, (owner, *split.helper_workers), split.side is not None and side != split.side

    def involved(self) -> set[int]:
        """Workers that are split or help one."""
        return {worker for split in self.splits for worker in (split.worker, *split.helper_workers)}


@dataclass
class Router:
    """The routing of one keyed operator and the changes requested for the next micro-batch.

    The routing in force is part of the operator's versioned state (a
    replayed batch routes as it did the first time); bucket moves (manual, or
    Reshape splitting by keys) and splits (Reshape splitting by records)
    requested between batches are applied by the next batch, which moves the
    state with them.
    """

    workers: int = DEFAULT_WORKERS
    buckets: int = BUCKETS
    _pending: dict[int, int] = field(default_factory=dict, repr=False)
    _splits: list[dict[str, Any]] | None = field(default=None, repr=False)
    _requested: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def initial(self) -> dict[str, Any]:
        return {"table": list(default_table(self.workers, self.buckets)), "version": 0, "requested": 0, "splits": [],
                "workers": self.workers}

    def request(self, moves: Mapping[int, int]) -> int:
        """Ask for ``{bucket: worker}`` from the next micro-batch on; returns the request number."""
        for bucket, worker in moves.items():
            if not 0 <= int(bucket) < self.buckets:
                raise ValueError(f"bucket {bucket} is not in 0..{self.buckets - 1}")
            if not 0 <= int(worker) < self.workers:
                raise ValueError(f"worker {worker} is not in 0..{self.workers - 1}")
        with self._lock:
            self._pending.update({int(bucket): int(worker) for bucket, worker in moves.items()})
            self._requested += 1
            return self._requested

    def request_splits(self, splits: list[dict[str, Any]]) -> None:
        """Make ``splits`` the ones in force from the next micro-batch on."""
        with self._lock:
            self._splits = [dict(split) for split in splits]

    def next_table(self, routing: Mapping[str, Any]) -> dict[str, Any]:
        """The routing for the batch about to run: the saved one with the pending requests applied."""
        with self._lock:
            pending, requested, splits = dict(self._pending), self._requested, self._splits
            self._pending.clear()
            self._splits = None
        table = list(routing["table"])
        for bucket, worker in pending.items():
            table[bucket] = worker
        old_splits = list(routing.get("splits") or [])
        new_splits = old_splits if splits is None else splits
        changed = table != list(routing["table"]) or new_splits != old_splits
        # "requested": the newest request (of this process) the batch includes, for wait_moved
        return {"table": table, "version": routing["version"] + (1 if changed else 0), "requested": requested,
                "splits": new_splits, "workers": routing.get("workers", self.workers)}

    def columns(self, keys: Sequence[str], routing: Mapping[str, Any], record: Sequence[str] = (),
                side: int | None = None) -> tuple[str, str]:
        """``(bucket, partition key)`` of each row as Spark SQL expressions (evaluated on the executors).

        SQL text, not Column objects: a 64-entry table built literal by literal
        costs a py4j round trip per literal, hundreds per batch. The table is
        one string literal, which Spark's optimizer folds into a constant.
        ``record``: SQL of the columns whose hash picks a split record's
        worker; ``side``: the join side the rows are (None for a window).
        With a split whose other side this is, the partition key is an
        ``explode`` (the row goes to the skewed worker and every helper).
        """
        pkeys = partition_keys(self.workers)
        hashed = f"xxhash64({', '.join(f'`{key}`' for key in keys)})" if keys else "0"
        bucket = f"CAST(pmod({hashed}, {self.buckets}) AS INT)"
        listed = ",".join(str(pkeys[worker]) for worker in routing["table"])  # one literal: an array of 64 analyzes 3x slower
        owner = f"CAST(element_at(split('{listed}', ','), {bucket} + 1) AS INT)"
        splits = [Split.of(split) for split in routing.get("splits") or []]
        if not splits:
            return bucket, owner
        slice_ = f"pmod(xxhash64({', '.join([*record, str(SLICE_SEED)])}), {SLICES})"
        split_cases, copy_cases = [], []
        for split in splits:
            skewed = pkeys[split.worker]
            if split.side is None or split.side == side:
                ranges = " ".join(f"WHEN {slice_} >= {lo} AND {slice_} < {hi} THEN {pkeys[helper]}"
                                  for helper, lo, hi in split.helpers if hi > lo)
                if ranges:
                    split_cases.append((skewed, f"CASE {ranges} ELSE {skewed} END"))
            else:
                copy_cases.append((skewed, ", ".join(str(pkeys[worker]) for worker in (split.worker, *split.helper_workers))))
        if copy_cases:  # one generator per SELECT: every case gives an array
            cases = [f"WHEN {owner} = {skewed} THEN array({targets})" for skewed, targets in copy_cases]
            cases += [f"WHEN {owner} = {skewed} THEN array({choice})" for skewed, choice in split_cases]
            return bucket, f"explode(CASE {' '.join(cases)} ELSE array({owner}) END)"
        if split_cases:
            cases = [f"WHEN {owner} = {skewed} THEN {choice}" for skewed, choice in split_cases]
            return bucket, f"CASE {' '.join(cases)} ELSE {owner} END"
        return bucket, owner


def branch(columns: Sequence[tuple[str, str]], values: Mapping[str, str], source: str, where: str = "") -> str:
    """``SELECT`` of every column of the shuffle's input from ``source``: ``values[name]`` or a typed NULL."""
    exprs = [f"{values[name]} AS `{name}`" if name in values else f"CAST(NULL AS {kind}) AS `{name}`"
             for name, kind in columns]
    return f"SELECT {', '.join(exprs)} FROM {source}" + (f" WHERE {where}" if where else "")


def shuffle_sql(branches: Sequence[str], columns: Sequence[tuple[str, str]], pkeys: Sequence[int],
                tasks: int | None = None) -> str:
    """One statement: the routed ``branches`` and a marker row per worker, shuffled so that worker i is one partition.

    Every worker gets one marker row (bucket -1) carrying its partition key:
    its task then knows which worker it is even when no record was routed to
    it (a Spark task's partition id is not the worker's when the shuffle's
    output feeds a union), and runs, so windows still close and state
    versions are still written. One SQL statement is analyzed once; the same
    plan built with DataFrame calls costs an eager analysis per call.

    With ``tasks`` below the number of workers the workers are packed: worker i
    goes to Spark task ``i % tasks`` (a second key, :data:`TASK_KEY`, of the
    identity partitioning for ``tasks`` partitions, dropped after the shuffle),
    and that task runs each of its workers in turn (:class:`~runtime.spark.worker_task.WorkerTask`).
    """
    keys = ", ".join(f"({key})" for key in pkeys)
    markers = branch(columns, {PKEY: "CAST(pk AS INT)", BUCKET: str(MARKER)}, f"VALUES {keys} AS m(pk)")
    routed = " UNION ALL ".join([*branches, markers])
    if tasks is None or tasks >= len(pkeys):
        return f"SELECT /*+ REPARTITION({len(pkeys)}, `{PKEY}`) */ * FROM ({routed})"
    task_keys = partition_keys(tasks)
    pairs = ", ".join(f"{key}, {task_keys[worker % tasks]}" for worker, key in enumerate(pkeys))
    names = ", ".join(f"`{name}`" for name, _ in columns)
    return (f"SELECT {names} FROM (SELECT /*+ REPARTITION({tasks}, `{TASK_KEY}`) */ * FROM "
            f"(SELECT *, element_at(map({pairs}), `{PKEY}`) AS `{TASK_KEY}` FROM ({routed})))")


def packed_tasks(rows: int, workers: int, rows_per_task: int = ROWS_PER_TASK) -> int:
    """How many Spark tasks a keyed shuffle of ``rows`` rows runs its ``workers`` in: one per ``rows_per_task``.

    >>> packed_tasks(40, 8), packed_tasks(25_000, 8), packed_tasks(10**6, 8)
    (1, 3, 8)
    """
    return max(1, min(workers, -(-rows // rows_per_task)))
