"""Reshape: the skew controller of one keyed operator (the Reshape paper, sections 2-6; docs/skew.md).

The controller runs on the driver after every micro-batch of its operator
(:meth:`Controller.observe`), reads a few numbers per worker from the
workers' reports and may change the routing of the next batch. It never sees
a record.

Load. A worker's load is the number of rows its task processed in the
micro-batch, in units of a fair share (the operator's input of the batch over
the number of workers): 1.0 is exactly its share. Rows, not task time: the
work of a keyed task is linear in its rows, while its time also carries
Spark's fixed per-task cost and the noise of two cores shared by eight
tasks (docs/skew.md measures both). The workers also report how many records
of each bucket they got, so the controller knows each bucket's input however
it was routed: a worker's *own* load is what it would get with no split.

Skew test (paper 2.1): worker s is skewed and h is a helper candidate when
load(s) >= eta and load(s) - load(h) >= tau. The helper is the least-loaded
worker that is neither skewed nor helping; more helpers join while each one
adds to the predicted load reduction, net of the time to move state (6.2),
and no mitigation starts whose state move would take longer than the input
it could balance (6.1, read over the ``horizon_s`` of an unbounded stream as
6.3 says).

Split by records (the default, paper 3.1): a hash of each record of s's
buckets picks s or a helper, in the fractions the controller sets. Mutable
state (window partials) becomes scattered and is merged before a window is
emitted; for a join, the side being split is partitioned over s and its
helpers and the other side is replicated to all of them (its rows of s's
buckets are copied to a helper when it joins), so each matching pair still
meets on exactly one worker. Split by keys moves whole buckets instead.

Phases (3.2): phase 1 sends all of s's split-side records to the helpers
until the cumulative loads of s and its helpers (counted from ``horizon``
batches before detection, the micro-batch stand-in for a backlog) are even;
phase 2 sends the fraction that makes their predicted loads equal, from the
mean of each worker's own load since the group started (the mean model).
When the loads drift apart by tau again, a new iteration starts; when s is no
longer skewed, or a helper becomes the hot one, the split is rolled back.

Adaptive tau (4.3): at a detection whose load estimate has a standard error
above ``eps_high``, mitigation starts and tau rises for the next one; when
the test fails on tau alone and the error is already below ``eps_low``,
tau drops to the current gap and mitigation starts now. tau stays in
[tau_min, tau_max].
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from runtime.spark.shuffle import SLICES

HISTORY = 60  # batches of per-worker load kept for the inspector's chart
ROLLBACK_AT = 0.9  # a split ends when the skewed worker's own load falls under 0.9 eta (hysteresis)


@dataclass(frozen=True)
class ReshapeSettings:
    """Reshape's knobs, resolved (operator config over service settings over these defaults)."""

    enabled: bool = True
    split: str = "records"
    eta: float = 1.5
    tau_min: float = 0.1
    tau_max: float = 0.5
    max_helpers: int = 3
    eps_low: float = 0.03
    eps_high: float = 0.10
    horizon: int = 10
    min_sample: int = 2
    horizon_s: float = 60.0
    move_us_per_row: float = 2.0
    # No split starts while the skewed worker's rows above its fair share (mean of the last two batches) are fewer:
    # a keyed task costs about 15 ms plus 0.8 ms per 1,000 rows (docs/skew.md), so below a few thousand rows a
    # split saves less than the partials, replicas and state moves it adds. The service sets 2,000
    # (SANA_RESHAPE_MIN_EXCESS_ROWS); 0 here, for the algorithm as the paper gives it.
    min_excess_rows: int = 0

    def override(self, options: Any | None) -> "ReshapeSettings":
        """These settings with every field ``options`` (a :class:`ReshapeOptions`) sets."""
        if options is None:
            return self
        given = {name: value for name, value in options.model_dump().items() if value is not None}
        resolved = replace(self, **given)
        if resolved.tau_min > resolved.tau_max:
            raise ValueError(f"reshape.tau_min {resolved.tau_min} is above tau_max {resolved.tau_max}")
        return resolved


@dataclass(frozen=True)
class BatchLoad:
    """What the workers reported about one micro-batch.

    ``rows[w]``: rows worker w processed (replicas included); ``arrivals[side][b]``:
    records of bucket b on that side, counted once (replicas excluded);
    ``state_rows[w][side]``: rows of that side in w's state after the batch.
    """

    rows: tuple[int, ...]
    arrivals: tuple[tuple[int, ...], ...]
    state_rows: tuple[tuple[int, ...], ...]


@dataclass
class Group:
    """A skewed worker, its helpers and the fraction of its split-side records each helper gets."""

    skewed: int
    helpers: list[int]
    fractions: list[float]
    side: int | None  # the join side being split (the other is replicated); None for a window
    started: int  # batch number of the detection
    phase: int = 1
    iteration: int = 1
    phase_batches: int = 0
    sample_from: int = 0  # the mean model's sample starts at this batch
    phase2_from: int = 0
    cumulative: dict[int, float] = field(default_factory=dict)
    ratios: deque = field(default_factory=lambda: deque(maxlen=HISTORY))

    @property
    def members(self) -> list[int]:
        return [self.skewed, *self.helpers]

    def ratio(self) -> float:
        loads = [self.cumulative.get(worker, 0.0) for worker in self.members]
        return min(loads) / max(loads) if max(loads) > 0 else 1.0

    def snapshot(self) -> dict[str, Any]:
        return {
            "skewed": self.skewed,
            "helpers": [{"worker": helper, "fraction": round(fraction, 4)}
                        for helper, fraction in zip(self.helpers, self.fractions)],
            "split_side": self.side,
            "phase": self.phase,
            "iteration": self.iteration,
            "since_batch": self.started,
            "balance_ratio": round(self.ratio(), 4),
            "ratio_history": [round(value, 4) for value in self.ratios],
        }


@dataclass(frozen=True)
class Sample:
    """One batch as the controller remembers it (loads in fair shares)."""

    batch: int
    processed: tuple[float, ...]
    own: tuple[tuple[float, ...], ...]  # per side, per worker
    buckets: tuple[float, ...]  # per bucket, both sides
    fair_rows: float


class Controller:
    """The skew controller of one keyed operator with ``workers`` logical workers.

    :meth:`observe` takes each batch's :class:`BatchLoad` and the routing
    table it ran with, and returns the splits (and, splitting by keys, the
    bucket moves) of the next batch when they change, else None. Worker 0
    below gets 90% of the records: after two batches (the sample the skew
    test needs) phase 1 sends all of its records to worker 1.

    >>> controller = Controller(workers=2, buckets=2, settings=ReshapeSettings())
    >>> batch = BatchLoad(rows=(900, 100), arrivals=((900, 100),), state_rows=((0,), (0,)))
    >>> controller.observe(batch, [0, 1]) is None
    True
    >>> controller.observe(batch, [0, 1])["splits"]
    [{'worker': 0, 'side': None, 'helpers': [[1, 0, 10000]]}]
    """

    def __init__(self, workers: int, buckets: int, settings: ReshapeSettings, sides: int = 1) -> None:
        self.workers = workers
        self.buckets = buckets
        self.settings = settings
        self.sides = sides
        self.tau = min(max(0.25, settings.tau_min), settings.tau_max)
        self.groups: list[Group] = []
        self.samples: deque[Sample] = deque(maxlen=max(settings.horizon, settings.min_sample, 2))
        self.history: deque[list[int]] = deque(maxlen=HISTORY)
        self.events: deque[dict[str, Any]] = deque(maxlen=20)
        self.batch = 0
        self.iterations = 0
        self.detections = 0
        self.rollbacks = 0
        self._adopted = False
        self._lock = threading.Lock()  # observe() runs in the query's thread, snapshot() in the API's

    # -- the loop ---------------------------------------------------------------------

    def adopt(self, routing: Mapping[str, Any]) -> None:
        """Take over the splits a routing saved by an earlier run holds (once, before the first batch)."""
        if self._adopted:
            return
        self._adopted = True
        for split in routing.get("splits") or []:
            helpers = [int(h) for h, _, _ in split["helpers"]]
            fractions = [(hi - lo) / SLICES for _, lo, hi in split["helpers"]]
            self.groups.append(Group(int(split["worker"]), helpers, fractions, split.get("side"), self.batch, phase=2))

    def observe(self, load: BatchLoad, table: Sequence[int]) -> dict[str, Any] | None:
        """Account one batch; returns the next batch's ``{"splits", "moves"}`` if the routing must change."""
        with self._lock:
            return self._observe(load, table)

    def _observe(self, load: BatchLoad, table: Sequence[int]) -> dict[str, Any] | None:
        self._adopted = True
        self.batch += 1
        self.history.append(list(load.rows))
        total = sum(sum(side) for side in load.arrivals)
        if total == 0:
            return None
        fair = total / self.workers
        own = tuple(tuple(sum(count for bucket, count in enumerate(side) if table[bucket] == worker) / fair
                          for worker in range(self.workers)) for side in load.arrivals)
        buckets = tuple(sum(side[bucket] for side in load.arrivals) / fair for bucket in range(self.buckets))
        sample = Sample(self.batch, tuple(rows / fair for rows in load.rows), own, buckets, fair)
        self.samples.append(sample)
        for group in self.groups:
            for worker in group.members:
                group.cumulative[worker] = group.cumulative.get(worker, 0.0) + sample.processed[worker]
            group.ratios.append(group.ratio())
        if not self.settings.enabled:
            return None
        moves: dict[int, int] = {}
        changed = False
        for group in list(self.groups):
            changed |= self._manage(group, load, table, moves)
        changed |= self._detect(load, table, moves)
        return {"splits": self.splits(), "moves": moves} if changed or moves else None

    def splits(self) -> list[dict[str, Any]]:
        """The routing's split list for the groups in force (split by records only)."""
        result = []
        for group in self.groups:
            if self.settings.split != "records" or not group.helpers:
                continue
            ranges, start = [], 0
            for helper, fraction in zip(group.helpers, group.fractions):
                end = min(SLICES, start + round(fraction * SLICES))
                ranges.append([helper, start, end])
                start = end
            result.append({"worker": group.skewed, "side": group.side, "helpers": ranges})
        return result

    # -- estimates ----------------------------------------------------------------------

    def _recent(self, worker: int, batches: int = 2) -> float:
        """The worker's load now: the mean of its last ``batches`` processed loads."""
        recent = list(self.samples)[-batches:]
        return sum(sample.processed[worker] for sample in recent) / len(recent)

    def _recent_fair_rows(self, batches: int = 2) -> float:
        """A worker's fair share of a batch now, in rows: the mean over the last ``batches``."""
        recent = list(self.samples)[-batches:]
        return sum(sample.fair_rows for sample in recent) / len(recent)

    def _since(self, first: int) -> list[Sample]:
        chosen = [sample for sample in self.samples if sample.batch >= first]
        return chosen or list(self.samples)[-1:]

    def _own(self, worker: int, first: int, side: int | None = None) -> float:
        """Mean own load of ``worker`` (one side, or all) over the sample from batch ``first`` on."""
        chosen = self._since(first)
        sides = range(self.sides) if side is None else [side]
        return sum(sum(sample.own[s][worker] for s in sides) for sample in chosen) / len(chosen)

    def _standard_error(self, worker: int) -> float:
        """Standard error of the mean-model estimate of the worker's own load (4.3.2): s / sqrt(n)."""
        values = [sum(sample.own[side][worker] for side in range(self.sides)) for sample in self.samples]
        if len(values) < 2:
            return math.inf
        mean = sum(values) / len(values)
        deviation = math.sqrt(sum((value - mean) ** 2 for value in values) / (len(values) - 1))
        return deviation / math.sqrt(len(values))

    # -- detection (2.1, 4.3.2, 6.1, 6.2) ----------------------------------------------------

    def _busy(self) -> set[int]:
        return {worker for group in self.groups for worker in group.members}

    def _detect(self, load: BatchLoad, table: Sequence[int], moves: dict[int, int]) -> bool:
        settings = self.settings
        if len(self.samples) < settings.min_sample:
            return False
        started = False
        for skewed in sorted(range(self.workers), key=lambda worker: -self._recent(worker)):
            busy = self._busy()
            if skewed in busy:
                continue
            current = self._recent(skewed)
            if current < settings.eta or (current - 1.0) * self._recent_fair_rows() < settings.min_excess_rows:
                break
            free = sorted((worker for worker in range(self.workers) if worker not in busy and worker != skewed),
                          key=self._recent)
            if not free:
                break
            gap = current - self._recent(free[0])
            error = self._standard_error(skewed)
            if gap >= self.tau:
                if error > settings.eps_high:  # started on a thin sample: ask for a bigger one next time
                    self._set_tau(self.tau * 1.5, f"standard error {error:.3f} > {settings.eps_high} at detection")
            elif error < settings.eps_low and gap > 0:
                self._set_tau(gap, f"standard error {error:.3f} < {settings.eps_low}: start at gap {gap:.2f}")
            else:
                continue
            started |= self._start(skewed, free, load, table, moves)
        return started

    def _set_tau(self, value: float, why: str) -> None:
        value = min(max(value, self.settings.tau_min), self.settings.tau_max)
        if abs(value - self.tau) > 1e-9:
            self._event("tau", tau=round(value, 4), why=why)
        self.tau = value

    def _start(self, skewed: int, free: list[int], load: BatchLoad, table: Sequence[int], moves: dict[int, int]) -> bool:
        # the detection's sample: the batches the skew test just read. The mean model starts with them (older
        # batches may hold another distribution) and their loads stand in for the backlog phase 1 evens out.
        first = self.batch - self.settings.min_sample + 1
        side = None if self.sides == 1 else max(range(self.sides), key=lambda side: self._own(skewed, first, side))
        helpers = self._choose_helpers(skewed, free, side, load, first)
        if not helpers:
            return False
        group = Group(skewed, helpers, [], side, self.batch, sample_from=first)
        for worker in group.members:
            group.cumulative[worker] = sum(sample.processed[worker] for sample in self._since(first))
        self.groups.append(group)
        self.detections += 1
        self.iterations += 1
        if self.settings.split == "keys":
            group.phase = 2
            self._move_keys(group, table, moves)
        else:
            self._phase1_fractions(group)
        self._event("detected", skewed=skewed, helpers=helpers, load=round(self._recent(skewed), 3), tau=round(self.tau, 4))
        return True

    def _equal_load(self, skewed: int, helpers: Sequence[int], side: int | None, first: int) -> float:
        """Predicted load of s and each helper once s's split side is shared so that they are equal."""
        split, other = self._sides_of(skewed, side, first)
        k = len(helpers)
        return (split + other * (k + 1) + sum(self._own(helper, first) for helper in helpers)) / (k + 1)

    def _sides_of(self, skewed: int, side: int | None, first: int) -> tuple[float, float]:
        total = self._own(skewed, first)
        split = total if side is None else self._own(skewed, first, side)
        return split, total - split

    def _choose_helpers(self, skewed: int, free: list[int], side: int | None, load: BatchLoad, first: int) -> list[int]:
        """Helpers in increasing load order while each adds to the reduction net of state moving (6.1, 6.2)."""
        settings = self.settings
        own = self._own(skewed, first)
        fair_rows = self.samples[-1].fair_rows
        batch_s = max(1e-3, settings.horizon_s / max(1, settings.horizon))
        replicated = 0 if side is None else load.state_rows[skewed][1 - side]
        if settings.split == "keys":
            replicated = sum(load.state_rows[skewed])  # moving buckets moves their rows
        chosen: list[int] = []
        best = 0.0
        for helper in free[:settings.max_helpers]:
            trial = [*chosen, helper]
            reduction = own - self._equal_load(skewed, trial, side, first)
            move_s = len(trial) * replicated * settings.move_us_per_row / 1e6
            if settings.split == "keys":
                move_s = replicated * settings.move_us_per_row / 1e6
            # the paper's reduction after migration, per second of the horizon: rows saved per batch x batches left
            benefit = reduction * fair_rows / batch_s * max(0.0, settings.horizon_s - move_s)
            if reduction <= 0 or benefit <= best:
                if not chosen and move_s >= settings.horizon_s:
                    self._event("not started", skewed=skewed,
                                why=f"moving state takes ~{move_s:.1f} s, more than the {settings.horizon_s:.0f} s horizon")
                break
            chosen, best = trial, benefit
        return chosen

    # -- a group's life (3.2, 4.3.1) -----------------------------------------------------------

    def _manage(self, group: Group, load: BatchLoad, table: Sequence[int], moves: dict[int, int]) -> bool:
        settings = self.settings
        hot_helper = next((helper for helper in group.helpers if self._own(helper, self.batch - 1) >= settings.eta), None)
        skewed_own = self._own(group.skewed, self.batch - 1)
        if hot_helper is not None:
            return self._rollback(group, f"helper {hot_helper} became hot (own load {self._own(hot_helper, self.batch - 1):.2f})")
        if skewed_own < ROLLBACK_AT * settings.eta:
            return self._rollback(group, f"worker {group.skewed} is no longer skewed (own load {skewed_own:.2f})")
        if settings.split == "keys":
            drift = self._recent(group.skewed) - sum(self._recent(h) for h in group.helpers) / len(group.helpers)
            if drift < self.tau or self.batch - group.started < 2:
                return False
            group.sample_from = group.started = self.batch
            before = len(moves)
            self._move_keys(group, table, moves)
            if len(moves) == before:  # no whole bucket fits: split by keys can do no better
                return False
            group.iteration += 1
            self.iterations += 1
            self._event("iteration", skewed=group.skewed, iteration=group.iteration, drift=round(drift, 3),
                        moved_buckets=len(moves) - before)
            return True
        if group.phase == 1:
            group.phase_batches += 1
            helpers_mean = sum(group.cumulative[h] for h in group.helpers) / len(group.helpers)
            if group.cumulative[group.skewed] <= helpers_mean or group.phase_batches >= max(1, settings.horizon // 2):
                group.phase, group.phase2_from = 2, self.batch + 1
                group.sample_from = group.started  # own loads do not depend on routing: phase 1 batches count
                self._phase2_fractions(group)
                self._event("phase 2", skewed=group.skewed, fractions=[round(f, 4) for f in group.fractions])
                return True
            return False
        if self.batch - group.phase2_from < 1:
            return False
        drift = self._recent(group.skewed) - sum(self._recent(h) for h in group.helpers) / len(group.helpers)
        if abs(drift) < self.tau:
            return False
        group.iteration += 1
        self.iterations += 1
        # a new iteration: the sample and the cumulative loads start again from the batches that drifted
        group.sample_from = self.batch - self.settings.min_sample + 1
        group.started = group.sample_from
        group.cumulative = {worker: sum(sample.processed[worker] for sample in self._since(group.sample_from))
                            for worker in group.members}
        helpers_mean = sum(group.cumulative[h] for h in group.helpers) / len(group.helpers)
        if drift > 0 and group.cumulative[group.skewed] > helpers_mean:
            group.phase, group.phase_batches = 1, 0
            self._phase1_fractions(group)
        else:
            group.phase2_from = self.batch + 1
            self._phase2_fractions(group)
        self._event("iteration", skewed=group.skewed, iteration=group.iteration, drift=round(drift, 3), phase=group.phase)
        return True

    def _phase1_fractions(self, group: Group) -> None:
        """All of s's split side to the helpers, shared so that the helpers' loads are equal."""
        split, other = self._sides_of(group.skewed, group.side, group.sample_from)
        owns = [self._own(helper, group.sample_from) + other for helper in group.helpers]
        target = (split + sum(owns)) / len(owns)
        group.fractions = _normalized([max(0.0, target - own) for own in owns], total=1.0)

    def _phase2_fractions(self, group: Group) -> None:
        """The fractions of s's split side that make the predicted loads of s and its helpers equal."""
        split, other = self._sides_of(group.skewed, group.side, group.sample_from)
        level = self._equal_load(group.skewed, group.helpers, group.side, group.sample_from)
        if split <= 0:
            group.fractions = [0.0] * len(group.helpers)
            return
        raw = [max(0.0, (level - other - self._own(helper, group.sample_from)) / split) for helper in group.helpers]
        group.fractions = _normalized(raw, total=min(1.0, sum(raw)))

    def _rollback(self, group: Group, why: str) -> bool:
        self.groups.remove(group)
        self.rollbacks += 1
        self._event("rolled back", skewed=group.skewed, helpers=group.helpers, why=why)
        return self.settings.split == "records"

    # -- split by keys ----------------------------------------------------------------------

    def _move_keys(self, group: Group, table: Sequence[int], moves: dict[int, int]) -> None:
        """Move whole buckets of s to its helpers, hottest first, while a move lowers the larger load."""
        first = group.sample_from
        chosen = self._since(first)
        heat = {bucket: sum(sample.buckets[bucket] for sample in chosen) / len(chosen)
                for bucket, worker in enumerate(table) if worker == group.skewed}
        loads = {worker: self._own(worker, first) for worker in group.members}
        for bucket in sorted(heat, key=lambda bucket: -heat[bucket]):
            target = min(group.helpers, key=loads.__getitem__)
            if loads[target] + heat[bucket] < loads[group.skewed]:
                moves[bucket] = target
                loads[group.skewed] -= heat[bucket]
                loads[target] += heat[bucket]
        group.fractions = [0.0] * len(group.helpers)

    # -- reads ------------------------------------------------------------------------------

    def _event(self, kind: str, **details: Any) -> None:
        self.events.append({"batch": self.batch, "event": kind, **details})

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "enabled": settings.enabled,
            "split": settings.split,
            "eta": settings.eta,
            "tau": round(self.tau, 4),
            "tau_range": [settings.tau_min, settings.tau_max],
            "max_helpers": settings.max_helpers,
            "groups": [group.snapshot() for group in self.groups],
            "detections": self.detections,
            "iterations": self.iterations,
            "rollbacks": self.rollbacks,
            "events": list(self.events),
            "load_history": [list(rows) for rows in self.history],
        }


def _normalized(values: list[float], total: float) -> list[float]:
    """``values`` scaled to sum to ``total`` (equal shares if they are all zero)."""
    if not values:
        return []
    current = sum(values)
    if current <= 0:
        return [total / len(values)] * len(values)
    return [value * total / current for value in values]
