"""Reshape on the real Spark shuffle: exact results, balance on Zipf keys, a shifting distribution, no false alarm.

Each test drives keyed operators batch by batch the way a fragment does
(``tests/fixtures/keyed.py``): one with Reshape, and for the result tests an
unmitigated twin fed the very same batches. The last test runs a skewed
window aggregate through the whole runtime (Kafka in and out).
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from runtime.operators.join.spark import StreamJoin
from runtime.spark.reshape import ReshapeSettings
from runtime.spark.session import spark_session
from runtime.operators.window.spark import WindowAggregate
from tests.fixtures.keyed import KeyedDriver, keyed_task

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = {"key": "string", "v": "double", "ts": "timestamp"}
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW = {"keys": ["key"], "time_column": "ts", "window": "4 seconds", "watermark": "1 second",
          "aggregates": {"n": "count(*)", "total": "sum(v)", "hi": "max(v)", "mean": "avg(v)"}}
JOIN = {"on": ["key"], "window": "2 seconds"}
OFF = ReshapeSettings(enabled=False)
ON = ReshapeSettings()
WORKERS = 8


@pytest.fixture(scope="module")
def spark():
    return spark_session("local[2]")


def zipf_batch(batch: int, rows: int, exponent: float, keys: int = 1000, seed: int = 0, rotate: int = 0) -> list[dict]:
    """``rows`` records of Zipf(``exponent``) keys (exponent 0: uniform), two seconds of event time per batch.

    ``rotate`` renames the ranks, so that another key is the hot one (a shifted distribution).
    """
    rng = np.random.default_rng(seed * 10_007 + batch)
    weights = np.ones(keys) if exponent == 0 else 1.0 / np.arange(1, keys + 1) ** exponent
    ranks = rng.choice(keys, size=rows, p=weights / weights.sum())
    offsets = rng.uniform(0, 2, rows)
    values = rng.integers(0, 1000, rows) / 10
    return [{"key": f"k{(rank + rotate) % keys}", "v": float(value), "ts": EPOCH + timedelta(seconds=batch * 2 + offset)}
            for rank, value, offset in zip(ranks, values, offsets)]


def window_driver(spark, root, reshape: ReshapeSettings) -> KeyedDriver:
    task = keyed_task("window_aggregate", WINDOW, {"in": [SCHEMA]}, "w")
    return KeyedDriver(spark, WindowAggregate(task, {"in": [SCHEMA]}, WORKERS, reshape), {"in": SCHEMA}, root)


def join_driver(spark, root, reshape: ReshapeSettings) -> KeyedDriver:
    task = keyed_task("join", JOIN, {"left": [SCHEMA], "right": [SCHEMA]}, "j")
    return KeyedDriver(spark, StreamJoin(task, {"left": [SCHEMA], "right": [SCHEMA]}, WORKERS, reshape),
                       {"left": SCHEMA, "right": SCHEMA}, root)


def exact(output: list[dict]) -> Counter:
    """The rows as a multiset, doubles to 12 significant digits (partials of one window added in another order)."""
    def value(item):
        return float(f"{item:.12g}") if isinstance(item, float) and math.isfinite(item) else item
    return Counter(tuple(sorted((name, value(item)) for name, item in row.items())) for row in output)


def ratios(driver: KeyedDriver) -> list[float]:
    return [group["balance_ratio"] for group in driver.operator.controller.snapshot()["groups"]]


CASES = [(window_driver, 1.2, 2500), (window_driver, 0.0, 2500), (join_driver, 1.2, 800), (join_driver, 0.0, 800)]


@pytest.mark.parametrize("make,exponent,rows", CASES,
                         ids=["window-zipf1.2", "window-uniform", "join-zipf1.2", "join-uniform"])
def test_results_with_mitigation_equal_results_without(spark, tmp_path, make, exponent, rows):
    mitigated, plain = make(spark, tmp_path / "on", ON), make(spark, tmp_path / "off", OFF)
    split_batches = 0
    emitted = 0
    for batch in range(10):
        inputs = {port: zipf_batch(batch, rows, exponent, keys=200, seed=index)
                  for index, port in enumerate(sorted(plain.schemas))}
        with_reshape, without = mitigated.run(inputs), plain.run(inputs)
        assert exact(with_reshape) == exact(without), f"batch {batch}"
        emitted += len(without)
        split_batches += bool(mitigated.state["routing"]["splits"])
    assert emitted > 0
    # scattered window partials and replicated join rows: a split keeps more state rows, never fewer
    assert mitigated.state["state_rows"] >= plain.state["state_rows"]
    if exponent:
        assert split_batches >= 3  # the skew was mitigated while the results stayed equal
    else:
        assert split_batches == 0 and mitigated.operator.controller.detections == 0


def test_zipf_keys_over_8_workers_are_balanced(spark, tmp_path):
    driver = window_driver(spark, tmp_path, ON)
    for batch in range(14):
        driver.run({"in": zipf_batch(batch, 8000, 1.2)})
    snapshot = driver.operator.controller.snapshot()
    assert snapshot["detections"] >= 1 and snapshot["groups"]
    assert all(group["phase"] == 2 for group in snapshot["groups"])
    assert min(ratios(driver)) >= 0.85, snapshot["groups"]
    history = snapshot["load_history"]
    assert max(history[-1]) < 0.75 * max(history[0])  # the hottest worker's rows fell by a quarter or more


def test_a_shifting_distribution_starts_a_new_iteration_and_the_ratio_recovers(spark, tmp_path):
    driver = window_driver(spark, tmp_path, ON)
    for batch in range(10):
        driver.run({"in": zipf_batch(batch, 8000, 1.2)})
    before = {group["skewed"] for group in driver.operator.controller.snapshot()["groups"]}
    assert before
    for batch in range(10, 24):  # the hot key cools and another heats
        driver.run({"in": zipf_batch(batch, 8000, 1.2, rotate=3)})
    snapshot = driver.operator.controller.snapshot()
    kinds = [event["event"] for event in snapshot["events"]]
    assert "rolled back" in kinds or "iteration" in kinds
    assert snapshot["iterations"] > snapshot["detections"] - snapshot["rollbacks"] or "rolled back" in kinds
    assert {group["skewed"] for group in snapshot["groups"]} != before
    assert min(ratios(driver)) >= 0.85, snapshot["groups"]


def test_uniform_keys_are_never_mitigated(spark, tmp_path):
    driver = window_driver(spark, tmp_path, ON)
    for batch in range(12):
        driver.run({"in": zipf_batch(batch, 8000, 0.0)})
    snapshot = driver.operator.controller.snapshot()
    assert snapshot["detections"] == 0 and not driver.state["routing"]["splits"]
    assert len(snapshot["load_history"]) == 12
