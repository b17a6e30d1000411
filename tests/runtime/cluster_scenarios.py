"""Scenarios run against a Spark standalone cluster, each in a process of its own (see test_standalone_cluster.py).

A process has one SparkContext, and the test session's is local; so each
scenario runs here, in a child started with the cluster's master URL, and
exits 0 only if everything it checks holds (an AssertionError otherwise). It
writes a JSON summary to DIR/scenario-result.json (and prints it), which the
test checks too.

    python -m tests.runtime.cluster_scenarios NAME --master spark://... --bootstrap HOST:PORT \\
        --redis-url redis://... --prefix PREFIX --dir DIR [--kill-pid PID]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis
from kafka import KafkaAdminClient


def _manager(args: argparse.Namespace):
    from manager.service import Manager
    from runtime.spark.runtime import SparkRuntime

    runtime = SparkRuntime(redis.Redis.from_url(args.redis_url), args.prefix, args.bootstrap, args.master,
                           args.dir / "checkpoints", warm=False, trigger_s=0.5)
    assert runtime.executor_writes, "on a cluster master the executors write the output, not the driver"
    manager = Manager(redis.Redis.from_url(args.redis_url), args.prefix, runtime)
    manager.start()
    return manager


def _topic_factory(bootstrap: str):
    from tests.fixtures.kafka_io import topic_maker

    return topic_maker(KafkaAdminClient(bootstrap_servers=bootstrap))


def _executors(manager) -> int:
    """Executors registered with the driver (the driver itself is not one)."""
    status = manager.runtime.spark().sparkContext._jsc.sc().getExecutorMemoryStatus()
    return status.size() - 1


def sharing(args: argparse.Namespace) -> dict[str, Any]:
    """Three overlapping dataflows give what each gives alone, with executors in the workers' JVMs."""
    from tests.fixtures.sharing import three_overlapping

    manager = _manager(args)
    try:
        _, _, _, flows = three_overlapping(manager, args.bootstrap, _topic_factory(args.bootstrap))
        assert flows["b"].reused == ["src", "hot"] and flows["c"].reused == ["src", "hot"]
        return {"executors": _executors(manager), "queries": len(manager.runtime.queries),
                "running_tasks": manager.stats()["running_tasks"]}
    finally:
        manager.close()


def reshape(args: argparse.Namespace) -> dict[str, Any]:
    """A skewed window aggregate split by Reshape on the cluster gives exactly what it gives unsplit."""
    from runtime.spark.session import spark_session
    from tests.runtime.test_skew import OFF, ON, exact, window_driver, zipf_batch

    spark = spark_session(args.master)
    mitigated, plain = window_driver(spark, args.dir / "on", ON), window_driver(spark, args.dir / "off", OFF)
    split_batches = emitted = 0
    for batch in range(10):
        inputs = {"in": zipf_batch(batch, 2500, 1.2, keys=200)}
        with_reshape, without = mitigated.run(inputs), plain.run(inputs)
        assert exact(with_reshape) == exact(without), f"batch {batch}: Reshape changed the result"
        emitted += len(without)
        split_batches += bool(mitigated.state["routing"]["splits"])
    assert emitted > 0 and split_batches >= 3, (emitted, split_batches)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    return {"executors": executors, "emitted": emitted, "split_batches": split_batches,
            "detections": mitigated.operator.controller.detections}


def kill_worker(args: argparse.Namespace) -> dict[str, Any]:
    """A worker (its JVM and its executor's) is killed while records flow: the sink misses nothing."""
    from tests.fixtures.kafka_io import produce, read_all, without_replays
    from tests.fixtures.sharing import raise_dead_queries
    from tests.fixtures.kafka_io import wait_for
    from tests.fixtures.streams import expect_a, flow_a, multiset, urban_records

    manager = _manager(args)
    urban = _topic_factory(args.bootstrap)("urban", partitions=2)
    sink = f"{urban}-a"
    produced: list[dict] = []
    stop = threading.Event()

    def keep_producing() -> None:
        start = 0
        while not stop.is_set():
            batch = urban_records(start, 40)
            produce(args.bootstrap, urban, batch, linger_ms=5)
            produced.extend(batch)
            start += 40
            time.sleep(0.1)

    try:
        manager.submit(flow_a(urban, sink))
        (query,) = manager.runtime.queries.values()
        producer = threading.Thread(target=keep_producing, daemon=True)
        producer.start()
        try:
            wait_for(lambda: len(read_all(args.bootstrap, sink)) > 40, 120, "the first output",
                     lambda: raise_dead_queries(manager))
            os.killpg(args.kill_pid, signal.SIGKILL)  # the worker and the executor it runs
            killed_at = len(produced)
            time.sleep(6)  # records keep flowing while Spark finds the executor lost
        finally:
            stop.set()
            producer.join()
        expected = multiset(expect_a(produced))
        received = wait_for(
            lambda: (got := without_replays(read_all(args.bootstrap, sink))) and multiset(got) == expected and got,
            180, f"all {sum(expected.values())} expected records on {sink}", lambda: raise_dead_queries(manager))
        copies = len(read_all(args.bootstrap, sink)) - len(received)
        return {"produced": len(produced), "killed_after": killed_at, "received": len(received),
                "replayed_copies_dropped_by_name": copies, "restarts": query.restarts,
                "executors_left": _executors(manager)}
    finally:
        manager.close()


RESULT_FILE = "scenario-result.json"  # in --dir: what run_scenario reads

SCENARIOS = {"sharing": sharing, "reshape": reshape, "kill_worker": kill_worker}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--master", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--kill-pid", type=int, default=0)
    args = parser.parse_args(argv)
    result = SCENARIOS[args.scenario](args)
    # in a file of its own: Spark's JVM logs to the same stdout while it stops, even inside a printed line
    (args.dir / RESULT_FILE).write_text(json.dumps(result))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
