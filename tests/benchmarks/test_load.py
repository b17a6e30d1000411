"""The load runner at a small scale in CI: concurrent submits and removals, no failure, invariants hold."""

from __future__ import annotations

import doctest

import pytest

from benchmarks import load
from tests.conftest import REDIS_URL

pytestmark = pytest.mark.redis


def test_docstring_examples():
    assert doctest.testmod(load).failed == 0


def test_concurrent_clients_leave_a_consistent_service(tmp_path):
    result = load.run(clients=20, seconds=8, apps=30, redis_url=REDIS_URL, run_dir=tmp_path / "run",
                      timeout_s=60)
    assert result["statuses"]["submit"].get("201", 0) >= 20  # every client got work done
    assert set(result["statuses"]["submit"]) == {"201"} and set(result["statuses"]["remove"]) == {"200"}
    assert result["failures"] == [] and result["invariant_problems"] == []
    assert result["final_running_tasks"] == 0


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
def test_concurrent_clients_against_the_real_runtime_leave_queries_hosting_exactly_the_running_tasks(tmp_path):
    result = load.run(clients=4, seconds=15, apps=10, redis_url=REDIS_URL, run_dir=tmp_path / "run", timeout_s=300,
                      real=True)
    assert result["target"] == "real" and result["statuses"]["submit"].get("201", 0) >= 4
    assert set(result["statuses"]["submit"]) == {"201"} and set(result["statuses"]["remove"]) <= {"200"}
    assert result["failures"] == [] and result["invariant_problems"] == []
    assert result["final_running_tasks"] == 0
