"""``kill -9`` of the service while records flow: after a restart every sink's output is complete.

The service runs as ``sana up`` (a real process with its own Spark driver) on
the test's broker and Redis. Nothing is lost; a micro-batch that was in flight
at the kill is replayed and its records carry the same ``sana.batch`` with a
new ``sana.run``, which is the only place duplicates may appear.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import redis

from runtime.broker.topics import Topics, stream_topic
from tests.conftest import REDIS_URL
from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import copies_are_identical, produce, read_all, replayed_batches, wait_for, without_replays
from tests.fixtures.services import SanaUp, free_port, sana_env
from tests.fixtures.streams import URBAN, expect_a, expect_b, flow_a, flow_b, multiset, urban_records
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


class KeepProducing:
    """A thread producing URBAN readings (40 every 0.2 s) until stopped; ``count()`` is exact at the moment it is read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.produced: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                batch = urban_records(len(self.produced), 40)
                produce(self.bootstrap, self.topic, batch, linger_ms=5)
                self.produced.extend(batch)
            time.sleep(0.2)

    def start(self) -> "KeepProducing":
        self._thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.produced)

    def stop(self) -> list[dict]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.produced


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
    producer = KeepProducing(kafka_bootstrap, urban)
    service = SanaUp(["--port", str(port)], env, tmp_path / "first.log")
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
        produced = producer.stop()
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
        producer.stop()
        assert restarted.terminate() == 0, restarted.output()


def service_env(tmp_path: Path, kafka_bootstrap: str, redis_url: str, **extra: str) -> dict[str, str]:
    """`sana up` on the test's broker and Redis, Spark local[2], a 0.5 s trigger, checkpoints under ``tmp_path``."""
    return sana_env(SANA_REDIS_URL=redis_url, SANA_KAFKA_BOOTSTRAP=kafka_bootstrap, SANA_SPARK_MASTER="local[2]",
                    SANA_TRIGGER_S="0.5", SANA_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
                    SANA_RUN_DIR=str(tmp_path / "run"), **extra)


def submit_a_and_produce(url: str, bootstrap: str, urban: str, sink: str, producer: KeepProducing) -> str:
    """Submit flow A, start producing, return A's id once its sink has output."""
    made = httpx.post(f"{url}/dataflows", json=flow_a(urban, sink), timeout=180)
    assert made.status_code == 201, made.text
    producer.start()
    wait_for(lambda: len(read_all(bootstrap, sink)) > 50, 120, f"output on {sink}")
    return made.json()["id"]


def assert_sinks(bootstrap: str, checks: list[tuple[str, list[dict], list[dict]]]) -> None:
    """For each (topic, what the dataflow alone writes for everything produced, what must be there): the topic
    holds all of the latter and nothing outside the former, each record once (second copies named as such)."""
    for topic, possible, complete in checks:
        received = wait_for(lambda: (got := read_all(bootstrap, topic))
                            and not multiset(complete) - multiset(without_replays(got)) and got,
                            120, f"every record on {topic}")
        assert copies_are_identical(received), f"{topic}: two records share a name but differ"
        extra = multiset(without_replays(received)) - multiset(possible)
        assert not extra, f"{topic}: records no run of the dataflow alone produces (or twice): {extra}"


def assert_consistent(url: str, redis_client, prefix: str, bootstrap: str, checkpoints: Path) -> dict:
    """After a restart: no pending change, every query recorded and running, no orphan query, checkpoint or topic."""
    assert redis_client.get(f"{prefix}:pending") is None, "a change is still marked pending"
    dags = httpx.get(f"{url}/running", timeout=10).json()["dags"]
    tasks = {task["id"]: task for dag in dags for task in dag["tasks"]}
    queries = httpx.get(f"{url}/runtime/queries", timeout=10).json()["queries"]
    assert all(query["status"] == "running" for query in queries), queries
    hosted = [task_id for query in queries for task_id in query["tasks"]]
    assert sorted(hosted) == sorted(tasks), f"queries host {sorted(hosted)}, the state runs {sorted(tasks)}"
    recorded = {key.decode() for key in redis_client.hkeys(f"{prefix}:runtime:queries")}
    assert recorded == {query["query"] for query in queries}, f"query records {recorded} vs running {queries}"
    on_disk = {path.name for path in (checkpoints / prefix).iterdir()} if (checkpoints / prefix).is_dir() else set()
    assert on_disk <= recorded, f"checkpoints of queries that do not run: {sorted(on_disk - recorded)}"
    wanted = {stream_topic(prefix, task["signature"]) for task in tasks.values()}
    internal = {topic for topic in Topics(bootstrap).existing() if topic.startswith(f"{prefix}.stream.")}
    assert internal <= wanted, f"topics no running task writes: {sorted(internal - wanted)}"
    return tasks


def test_kill_9_between_the_steps_of_a_merge_and_of_an_unmerge(tmp_path, redis_client, state_prefix, kafka_bootstrap,
                                                                topic_factory):
    """B's submit dies after its deployment, before its commit (undone on restart); A's removal dies after its
    deployment (completed on restart). A keeps every record until its removal, B every record after its 201."""
    urban = topic_factory("urban")
    sinks = {"a": f"{urban}-a", "b": f"{urban}-b"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    checkpoints = tmp_path / "checkpoints"
    env = service_env(tmp_path, kafka_bootstrap, REDIS_URL, SANA_STATE_PREFIX=state_prefix)
    producer = KeepProducing(kafka_bootstrap, urban)

    def killed_by_its_fail_point(service: SanaUp, request) -> None:
        children = descendants(service.process.pid)
        with pytest.raises(httpx.TransportError):
            request()
        assert service.process.wait(60) == -signal.SIGKILL, service.output()
        assert "killing the process (SIGKILL)" in service.output()
        wait_for(lambda: gone(children), 60, "the killed service's Spark driver to exit")

    def sink_holds(topic: str, expected: list[dict]):
        return lambda: not (multiset(expected) - multiset(without_replays(read_all(kafka_bootstrap, topic))))

    first = SanaUp(["--port", str(port)], {**env, "SANA_FAILPOINTS": "manager.merge.deployed=kill@2"}, tmp_path / "1.log")
    try:
        first.wait_healthy(url, timeout=120)
        a = submit_a_and_produce(url, kafka_bootstrap, urban, sinks["a"], producer)
        killed_by_its_fail_point(first, lambda: httpx.post(f"{url}/dataflows", json=flow_b(urban, sinks["b"]), timeout=180))
    finally:
        first.terminate()

    second = SanaUp(["--port", str(port)], {**env, "SANA_FAILPOINTS": "manager.unmerge.deployed=kill"}, tmp_path / "2.log")
    try:
        second.wait_healthy(url, timeout=180)
        assert [d["id"] for d in httpx.get(f"{url}/dataflows", timeout=10).json()["dataflows"]] == [a]
        assert_consistent(url, redis_client, state_prefix, kafka_bootstrap, checkpoints)  # the cut-short merge undone
        made = httpx.post(f"{url}/dataflows", json=flow_b(urban, sinks["b"]), timeout=180)
        assert made.status_code == 201, made.text
        b, b_from = made.json()["id"], producer.count()
        wait_for(sink_holds(sinks["a"], expect_a(producer.produced[:b_from])), 120, "A's output through the restart")
        killed_by_its_fail_point(second, lambda: httpx.delete(f"{url}/dataflows/{a}", timeout=180))
    finally:
        second.terminate()

    third = SanaUp(["--port", str(port)], env, tmp_path / "3.log")
    try:
        third.wait_healthy(url, timeout=180)
        assert [d["id"] for d in httpx.get(f"{url}/dataflows", timeout=10).json()["dataflows"]] == [b]
        assert httpx.delete(f"{url}/dataflows/{a}", timeout=30).status_code == 404, "the cut-short removal not completed"
        tasks = assert_consistent(url, redis_client, state_prefix, kafka_bootstrap, checkpoints)
        assert all(task["dataflows"] == [b] for task in tasks.values()) and len(tasks) == 4, tasks
        time.sleep(3)
        produced = producer.stop()
        assert_sinks(kafka_bootstrap, [(sinks["a"], expect_a(produced), expect_a(produced[:b_from])),
                                       (sinks["b"], expect_b(produced), expect_b(produced[b_from:]))])
        assert first.output().count("killing the process") == 1
        assert "completing it" in third.output() and "undoing its deployment" in second.output()
    finally:
        producer.stop()
        assert third.terminate() == 0, third.output()


class PrivateRedis:
    """A redis-server of the test's own (append-only file, fsync on every write), to stop and start again."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir()
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        with open(self.workdir / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
                 "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
                stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._pings, 30, f"redis-server on port {self.port}")

    def _pings(self) -> bool:
        try:
            return redis.Redis(port=self.port, socket_connect_timeout=1).ping()
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """As an operator restarts it: SIGTERM, Redis writes what it holds and exits."""
        self.process.terminate()
        self.process.wait(30)

    def restart_empty(self) -> None:
        """Stopped, its files lost, started again: as a Redis without persistence restarts."""
        self.stop()
        for path in self.workdir.iterdir():
            if path.name != "redis.log":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        self.start()


def test_redis_restart_while_records_flow_answers_503_meanwhile_and_loses_nothing(tmp_path, kafka_bootstrap,
                                                                                  topic_factory):
    store = PrivateRedis(tmp_path / "redis")
    urban = topic_factory("urban")
    sinks = {"a": f"{urban}-a", "b": f"{urban}-b"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = service_env(tmp_path, kafka_bootstrap, store.url)
    producer = KeepProducing(kafka_bootstrap, urban)
    service = SanaUp(["--port", str(port)], env, tmp_path / "sana.log")
    try:
        service.wait_healthy(url, timeout=120)
        a = submit_a_and_produce(url, kafka_bootstrap, urban, sinks["a"], producer)

        store.stop()
        listed = httpx.get(f"{url}/dataflows", timeout=30)
        assert listed.status_code == 503 and listed.json()["code"] == "STATE_UNAVAILABLE", listed.text
        refused = httpx.post(f"{url}/dataflows", json=flow_b(urban, sinks["b"]), timeout=30)
        assert refused.status_code == 503 and refused.json()["code"] == "STATE_UNAVAILABLE", refused.text
        health = httpx.get(f"{url}/healthz", timeout=30)
        assert health.status_code == 503 and health.json()["components"]["redis"]["status"] != "ok", health.text
        before = len(read_all(kafka_bootstrap, sinks["a"]))
        wait_for(lambda: len(read_all(kafka_bootstrap, sinks["a"])) > before, 60, "records flowing while Redis is down")

        store.start()  # the same append-only file: the state comes back as it was
        back = wait_for(lambda: (r := httpx.get(f"{url}/dataflows", timeout=30)).status_code == 200 and r, 60,
                        "the API to recover by itself")
        assert [d["id"] for d in back.json()["dataflows"]] == [a]
        made = httpx.post(f"{url}/dataflows", json=flow_b(urban, sinks["b"]), timeout=180)
        assert made.status_code == 201, made.text
        b_from = producer.count()
        wait_for(lambda: httpx.get(f"{url}/healthz", timeout=30).status_code == 200, 60, "healthy again")
        time.sleep(2)
        produced = producer.stop()
        assert_sinks(kafka_bootstrap, [(sinks["a"], expect_a(produced), expect_a(produced)),
                                       (sinks["b"], expect_b(produced), expect_b(produced[b_from:]))])
    finally:
        producer.stop()
        assert service.terminate() == 0, service.output()
        store.stop()


def test_redis_restarted_empty_gets_the_state_and_the_query_records_back(tmp_path, kafka_bootstrap, topic_factory):
    """The manager writes its state back, and the runtime its queries' records, so a later restart of the
    service resumes the queries from their checkpoints instead of starting them at the topics' ends."""
    store = PrivateRedis(tmp_path / "redis")
    urban = topic_factory("urban")
    sink = f"{urban}-a"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = service_env(tmp_path, kafka_bootstrap, store.url)
    producer = KeepProducing(kafka_bootstrap, urban)
    service = SanaUp(["--port", str(port)], env, tmp_path / "first.log")
    try:
        service.wait_healthy(url, timeout=120)
        a = submit_a_and_produce(url, kafka_bootstrap, urban, sink, producer)
        (query,) = httpx.get(f"{url}/runtime/queries", timeout=10).json()["queries"]
        store.restart_empty()
        flows = wait_for(lambda: (r := httpx.get(f"{url}/dataflows", timeout=30)).status_code == 200 and r.json(), 60,
                         "the API back on the empty Redis")
        assert [d["id"] for d in flows["dataflows"]] == [a]
        records = redis.Redis(port=store.port).hkeys("sana:runtime:queries")
        assert records == [query["query"].encode()], "the query's record was not written back"
    finally:
        assert service.terminate() == 0, service.output()
    assert "wrote back the records of 1 queries" in service.output()

    restarted = SanaUp(["--port", str(port)], env, tmp_path / "second.log")
    try:
        restarted.wait_healthy(url, timeout=180)
        (again,) = httpx.get(f"{url}/runtime/queries", timeout=10).json()["queries"]
        assert again["query"] == query["query"] and again["run"] != query["run"], "not resumed from its checkpoint"
        time.sleep(2)
        produced = producer.stop()
        assert_sinks(kafka_bootstrap, [(sink, expect_a(produced), expect_a(produced))])
    finally:
        producer.stop()
        assert restarted.terminate() == 0, restarted.output()
        store.stop()
