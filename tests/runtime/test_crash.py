"""``kill -9`` of the service while records flow: after a restart every sink's output is complete.

The service runs as ``sana up`` (a real process with its own Spark driver) on
the test's broker and Redis. Nothing is lost; a micro-batch that was in flight
at the kill is replayed and its records carry the same ``sana.batch`` with a
new ``sana.run``, which is the only place duplicates may appear.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import httpx
import pytest

from tests.conftest import REDIS_URL
from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import copies_are_identical, produce, read_all, replayed_batches, wait_for, without_replays
from tests.fixtures.services import SanaUp, free_port, sana_env
from tests.fixtures.streams import URBAN, expect_a, flow_a, multiset, urban_records
from tests.runtime.test_keyed import window_reference

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def window_flow(topic: str, sink: str) -> dict:
    return {
        "name": "windows",
        "tasks": [
            source("src", topic, dict(URBAN)),
            task("per_sensor", "window_aggregate", keys=["sensor"], time_column="ts", window="20 seconds",
                 watermark="5 seconds", aggregates={"n": "count(*)", "total": "sum(temp)", "hi": "max(temp)"}),
            task("out", "sink", topic=sink),
        ],
        "streams": [stream("src", "per_sensor"), stream("per_sensor", "out")],
    }


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        result = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True)
        children = [int(line) for line in result.stdout.split()]
        found += children
        frontier += children
    return found


def gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_kill_9_and_restart_loses_nothing(tmp_path, state_prefix, kafka_bootstrap, topic_factory):
    urban = topic_factory("urban")
    sinks = {"a": f"{urban}-a", "w": f"{urban}-w"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=REDIS_URL, SANA_KAFKA_BOOTSTRAP=kafka_bootstrap,
                   SANA_CHECKPOINT_DIR=str(tmp_path / "checkpoints"), SANA_SPARK_MASTER="local[2]",
                   SANA_RUN_DIR=str(tmp_path / "run"))
    produced: list[dict] = []
    stop = threading.Event()

    def keep_producing() -> None:
        while not stop.is_set():
            batch = urban_records(len(produced), 40)
            produce(kafka_bootstrap, urban, batch, linger_ms=5)
            produced.extend(batch)
            time.sleep(0.2)

    service = SanaUp(["--port", str(port)], env, tmp_path / "first.log")
    producer = threading.Thread(target=keep_producing, daemon=True)
    try:
        service.wait_healthy(url, timeout=120)
        for document in (flow_a(urban, sinks["a"]), window_flow(urban, sinks["w"])):
            response = httpx.post(f"{url}/dataflows", json=document, timeout=180)
            assert response.status_code == 201, response.text
        (query,) = httpx.get(f"{url}/runtime/queries", timeout=10).json()["queries"]
        producer.start()
        wait_for(lambda: len(read_all(kafka_bootstrap, sinks["a"])) > 100, 120, "output before the kill")
        children = descendants(service.process.pid)
        service.process.send_signal(signal.SIGKILL)
        service.process.wait(10)
        wait_for(lambda: gone(children), 60, "the killed service's Spark driver to exit")
    finally:
        service.terminate()

    restarted = SanaUp(["--port", str(port)], env, tmp_path / "second.log")
    try:
        restarted.wait_healthy(url, timeout=180)
        (again,) = wait_for(lambda: httpx.get(f"{url}/runtime/queries", timeout=10).json()["queries"], 120,
                            "queries back after restart")
        assert again["query"] == query["query"] and again["run"] != query["run"], "not restarted from its checkpoint"
        time.sleep(3)
        stop.set()
        producer.join()
        last = int(produced[-1]["humidity"])
        closing = [{"sensor": "s0", "temp": 0.0, "humidity": float(last + 100), "ts": urban_records(last + 100, 1)[0]["ts"]}]
        produce(kafka_bootstrap, urban, closing)
        everything = produced + closing
        expected = {"a": expect_a(everything),
                    "w": window_reference([everything], 20, None, 5, {"n": len, "total": sum, "hi": max})}
        for name, topic in sinks.items():
            received = wait_for(lambda: (got := read_all(kafka_bootstrap, topic)) and len(without_replays(got)) >= len(expected[name]) and got,
                                120, f"every record on {topic}")
            assert multiset(without_replays(received)) == multiset(expected[name]), f"{topic}: records lost or changed"
            # Every second copy is named as such by its headers: same (writer, batch, seq), same content
            # (a batch replayed after the kill, under a new sana.run, or a record resent after a lost ack).
            assert copies_are_identical(received), f"{topic}: two records share a (writer, batch, seq) name but differ"
            replays = replayed_batches(received)
            unnamed = multiset(item.value for item in received if item.batch[:2] not in replays) - multiset(expected[name])
            assert not unnamed or len(received) > len(without_replays(received)), f"{topic}: unnamed duplicates {unnamed}"
        health = httpx.get(f"{url}/healthz", timeout=10).json()
        assert health["components"]["runtime"]["status"] == "ok", health
        fragments = httpx.get(f"{url}/runtime/fragments", timeout=10).json()["fragments"]
        assert len(fragments) == 2 and {f["query"] for f in fragments} == {query["query"]}, "W is not hosted by A's query"
        windowed = next(f for f in fragments if f["keyed_operators"])
        assert windowed["status"] == "running" and windowed["source_lag"] is not None
        (operator,) = windowed["keyed_operators"].values()
        assert sum(operator["workers"]["total_rows"]) > 0
        one = httpx.get(f"{url}/runtime/fragments/{windowed['fragment']}", timeout=10)
        assert one.status_code == 200 and one.json()["tasks"] == windowed["tasks"]
        assert httpx.get(f"{url}/runtime/fragments/frag-nope", timeout=10).status_code == 404
    finally:
        stop.set()
        assert restarted.terminate() == 0, restarted.output()
