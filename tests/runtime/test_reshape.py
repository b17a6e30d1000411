"""Reshape's controller as pure logic: loads in, routing decisions out (no Spark; the real shuffle is in test_skew.py)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.operators.keyed_options import ReshapeOptions
from runtime.spark.shuffle import BUCKETS, SLICES, default_table
from runtime.spark.reshape import BatchLoad, Controller, ReshapeSettings

WORKERS = 8


def zipf_buckets(exponent: float, keys: int = 1000, seed: int = 1) -> np.ndarray:
    """Probability of each bucket when keys are Zipf(exponent) and placed by a fixed random hash."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1) ** exponent
    return np.bincount(rng.integers(0, BUCKETS, keys), weights=weights / weights.sum(), minlength=BUCKETS)


class Simulated:
    """Routes multinomial batches the way the runtime does (table, then splits by record) and feeds a controller."""

    def __init__(self, settings: ReshapeSettings = ReshapeSettings(), seed: int = 7) -> None:
        self.controller = Controller(WORKERS, BUCKETS, settings)
        self.table = list(default_table(WORKERS))
        self.splits: list[dict] = []
        self.rng = np.random.default_rng(seed)
        self.loads: list[list[int]] = []

    def batch(self, probabilities: np.ndarray, rows: int = 20_000) -> None:
        arrivals = self.rng.multinomial(rows, probabilities)
        processed = np.zeros(WORKERS, dtype=np.int64)
        for bucket, count in enumerate(arrivals):
            processed[self.table[bucket]] += count
        for split in self.splits:
            mine = sum(arrivals[b] for b in range(BUCKETS) if self.table[b] == split["worker"])
            for helper, low, high in split["helpers"]:
                moved = self.rng.binomial(mine, (high - low) / SLICES)
                processed[split["worker"]] -= moved
                processed[helper] += moved
        self.loads.append(processed.tolist())
        decision = self.controller.observe(BatchLoad(tuple(processed.tolist()), (tuple(arrivals.tolist()),),
                                                     tuple((0,) for _ in range(WORKERS))), self.table)
        if decision is not None:
            self.splits = decision["splits"]
            for bucket, worker in decision["moves"].items():
                self.table[bucket] = worker

    def ratios(self) -> list[float]:
        return [group.ratio() for group in self.controller.groups]


def test_uniform_input_is_left_alone():
    run = Simulated()
    uniform = np.full(BUCKETS, 1 / BUCKETS)
    for _ in range(60):
        run.batch(uniform)
    assert run.controller.detections == 0 and run.splits == []


@pytest.mark.parametrize("exponent", [1.0, 1.2, 1.5])
def test_zipf_skew_is_detected_split_by_records_and_balanced(exponent):
    run = Simulated()
    skewed = zipf_buckets(exponent)
    for _ in range(30):
        run.batch(skewed)
    hot = int(np.argmax([sum(skewed[b] for b in range(BUCKETS) if b % WORKERS == w) for w in range(WORKERS)]))
    groups = run.controller.groups
    assert [group.skewed for group in groups][:1] == [hot]
    assert all(group.phase == 2 for group in groups)
    assert min(run.ratios()) >= 0.9
    before, after = max(run.loads[0]), max(run.loads[-1])
    assert after < 0.75 * before  # the largest worker load fell by a quarter or more


def test_a_shifting_distribution_starts_a_new_iteration_and_the_ratio_recovers():
    run = Simulated()
    first = zipf_buckets(1.2, seed=1)
    for _ in range(25):
        run.batch(first)
    (old,) = [group.skewed for group in run.controller.groups][:1]
    shifted = np.roll(first, 3)  # the hot bucket now belongs to another worker
    for _ in range(40):
        run.batch(shifted)
    events = [event["event"] for event in run.controller.events]
    assert "rolled back" in events
    skewed_now = [group.skewed for group in run.controller.groups]
    assert skewed_now and skewed_now[0] != old
    assert min(run.ratios()) >= 0.85


def test_split_by_keys_moves_whole_buckets_and_never_splits_records():
    run = Simulated(ReshapeSettings(split="keys"))
    for _ in range(20):
        run.batch(zipf_buckets(1.0))
    assert run.splits == [] and run.table != list(default_table(WORKERS))
    assert run.controller.detections >= 1


def _one_side(rows: list[int]) -> BatchLoad:
    """A batch where each worker got ``rows[w]`` records, all of its own buckets (one bucket per worker)."""
    return BatchLoad(tuple(rows), (tuple(rows),), tuple((0,) for _ in rows))


def test_tau_rises_when_a_detection_rests_on_a_noisy_estimate():
    controller = Controller(2, 2, ReshapeSettings(tau_min=0.2, tau_max=0.6))
    before = controller.tau
    controller.observe(_one_side([1900, 100]), [0, 1])
    assert controller.observe(_one_side([1500, 500]), [0, 1]) is not None  # detected on two very different batches
    assert controller.tau == pytest.approx(min(0.6, before * 1.5))
    assert controller.events[0]["event"] == "tau" and "standard error" in controller.events[0]["why"]


def test_tau_drops_to_the_gap_and_mitigation_starts_when_the_estimate_is_already_good():
    controller = Controller(4, 4, ReshapeSettings(eta=1.05, tau_min=0.1, tau_max=0.5))
    steady = _one_side([1100, 1000, 950, 950])  # a gap of 0.15, under tau (0.25), from a steady sample
    controller.observe(steady, [0, 1, 2, 3])
    decision = controller.observe(steady, [0, 1, 2, 3])
    assert controller.tau == pytest.approx(0.15)
    assert decision is not None and decision["splits"][0]["worker"] == 0


def test_no_mitigation_when_moving_state_takes_longer_than_the_horizon():
    settings = ReshapeSettings(horizon_s=1.0, move_us_per_row=1000.0)  # 1 ms per row, 1 s to pay it back
    controller = Controller(2, 4, settings, sides=2)
    table = [0, 1, 0, 1]
    heavy = BatchLoad((9000, 1000), ((4500, 500, 4500, 0), (0, 500, 0, 0)), ((0, 50_000), (0, 0)))
    for _ in range(5):
        assert controller.observe(heavy, table) is None
    assert controller.detections == 0
    assert any(event["event"] == "not started" for event in controller.events)


def test_no_split_while_the_skewed_workers_excess_rows_are_too_few_to_pay():
    """The demo's keyed operators hold a few dozen rows a batch: a 5x skew of that is noise, not work to share."""
    settings = ReshapeSettings(min_excess_rows=2000)
    quiet = Controller(4, 4, settings)
    small = _one_side([500, 100, 100, 100])  # 2.5x its fair share, but 300 rows above it
    for _ in range(6):
        assert quiet.observe(small, [0, 1, 2, 3]) is None
    assert quiet.detections == 0

    busy = Controller(4, 4, settings)
    large = _one_side([9000, 1000, 1000, 1000])  # 3,000 rows a worker, 6,000 above it
    busy.observe(large, [0, 1, 2, 3])
    decision = busy.observe(large, [0, 1, 2, 3])
    assert decision is not None and decision["splits"][0]["worker"] == 0
    paper = Controller(4, 4, ReshapeSettings())  # min_excess_rows 0: the same small skew is split
    paper.observe(small, [0, 1, 2, 3])
    assert paper.observe(small, [0, 1, 2, 3]) is not None


def test_reshape_options_override_the_settings_and_reject_a_reversed_tau_range():
    resolved = ReshapeSettings().override(ReshapeOptions(eta=2.0, max_helpers=1))
    assert (resolved.eta, resolved.max_helpers, resolved.tau_max) == (2.0, 1, 0.5)
    with pytest.raises(ValueError, match="tau_min 2.0 is above tau_max 0.5"):
        ReshapeSettings().override(ReshapeOptions(tau_min=2.0))
    with pytest.raises(ValueError, match="tau_min 0.9 is above tau_max 0.5"):
        ReshapeOptions(tau_min=0.9, tau_max=0.5)


def test_settings_name_the_variables_of_a_reversed_tau_range(monkeypatch):
    from pydantic import ValidationError

    from sana.settings import Settings

    monkeypatch.setenv("SANA_RESHAPE_TAU_MIN", "0.8")
    monkeypatch.setenv("SANA_RESHAPE_TAU_MAX", "0.4")
    with pytest.raises(ValidationError, match="SANA_RESHAPE_TAU_MIN=0.8 is above SANA_RESHAPE_TAU_MAX=0.4"):
        Settings()
