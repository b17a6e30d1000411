"""Sana on a real Spark standalone cluster: a master and two workers from pyspark's distribution, separate JVMs.

The cluster is started once for the module (runtime/spark/standalone.py, as
``sana spark-cluster`` does). Each scenario runs in a child process with
``spark://`` as its master (tests/runtime/cluster_scenarios.py): a process
has one SparkContext, and this one's is local.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from runtime.spark.standalone import StandaloneCluster
from tests.runtime.cluster_scenarios import RESULT_FILE

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="1g") as running:
        yield running


def run_scenario(name: str, cluster: StandaloneCluster, kafka_bootstrap: str, tmp_path: Path, *extra: str) -> dict:
    prefix = f"test-cluster-{uuid.uuid4().hex[:8]}"
    redis_url = os.environ.get("SANA_REDIS_URL", "redis://127.0.0.1:6379/0")
    command = [sys.executable, "-m", "tests.runtime.cluster_scenarios", name, "--master", cluster.master_url,
               "--bootstrap", kafka_bootstrap, "--redis-url", redis_url, "--prefix", prefix, "--dir", str(tmp_path), *extra]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        import redis

        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(f"{prefix}:*"))
        if keys:
            client.delete(*keys)
    assert done.returncode == 0, f"scenario {name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}"
    # the scenario writes its result to a file: Spark's JVM logs to the stdout they share, once inside its line
    result = tmp_path / RESULT_FILE
    assert result.exists(), f"scenario {name} wrote no result:\n{done.stdout[-2000:]}"
    return json.loads(result.read_text())


def test_overlapping_dataflows_share_work_with_executors_in_the_workers(cluster, kafka_bootstrap, tmp_path):
    result = run_scenario("sharing", cluster, kafka_bootstrap, tmp_path)
    assert result["executors"] == 2, result
    assert result["queries"] == 2 and result["running_tasks"] == 10


def test_reshape_splits_a_skewed_window_on_the_executors_and_changes_no_result(cluster, kafka_bootstrap, tmp_path):
    result = run_scenario("reshape", cluster, kafka_bootstrap, tmp_path)
    assert result["executors"] == 2 and result["split_batches"] >= 3 and result["detections"] >= 1, result


def test_killing_a_worker_while_records_flow_loses_nothing(cluster, kafka_bootstrap, tmp_path):
    victim = cluster.worker(0)
    result = run_scenario("kill_worker", cluster, kafka_bootstrap, tmp_path, "--kill-pid", str(victim.process.pid))
    assert not victim.alive(), "the worker was killed"
    assert result["executors_left"] == 1, result
    assert result["received"] > 0 and result["killed_after"] < result["produced"], result
