"""``sana up`` on its durable defaults keeps everything across a restart.

One ``sana up`` with the embedded broker (Tansu on the embedded object store)
and an embedded Valkey, both keeping their data in the test's data folder, runs
a stateless dataflow and a windowed one while records flow. It is stopped with
Ctrl-C, started again, killed with ``kill -9`` together with every process it
started (as a power cut would leave them), started again, and then its broker
alone is killed and comes back under the running service. After all of it the
dataflows are the same, the queries resumed from their checkpoints, and every
sink holds every record once, beyond the named replay of a batch in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from kafka.errors import KafkaError

from runtime.broker.topics import Topics
from tests.fixtures.kafka_io import copies_are_identical, produce, read_all, wait_for, without_replays
from tests.fixtures.services import SanaUp, free_port, sana_env
from tests.fixtures.streams import expect_a, flow_a, multiset, urban_records
from tests.runtime.test_crash import descendants, gone, window_flow
from tests.runtime.test_keyed import window_reference

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


class Feed:
    """Produces URBAN readings (40 every 0.2 s) while running; ``pause()`` returns once nothing is being written, so
    the broker can go down between two batches, and every batch counted was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.produced: list[dict] = []
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._running.wait(0.1):
                continue
            with self._lock:
                if not self._running.is_set():
                    continue
                batch = urban_records(len(self.produced), 40)
                produce(self.bootstrap, self.topic, batch, linger_ms=5)
                self.produced.extend(batch)
            time.sleep(0.2)

    def resume(self) -> None:
        self._running.set()

    def pause(self) -> None:
        self._running.clear()
        with self._lock:  # the batch being written, if any, is acknowledged
            pass

    def close(self) -> list[dict]:
        self.pause()
        self._stop.set()
        self._thread.join(30)
        return self.produced


def started(args: list[str], env: dict[str, str], log: Path, url: str) -> SanaUp:
    service = SanaUp(args, env, log)
    service.wait_healthy(url, timeout=180)
    return service


def queries(url: str) -> list[dict]:
    return httpx.get(f"{url}/runtime/queries", timeout=10).json()["queries"]


def dataflow_ids(url: str) -> list[str]:
    return sorted(flow["id"] for flow in httpx.get(f"{url}/dataflows", timeout=10).json()["dataflows"])


def output_grows(bootstrap: str, topic: str, beyond: int) -> int:
    """Wait until ``topic`` holds more than ``beyond`` records; how many it holds."""
    def count() -> int:
        try:
            return len(read_all(bootstrap, topic))
        except (KafkaError, AssertionError):
            return 0  # the broker is still coming back
    return wait_for(lambda: (n := count()) > beyond and n, 180, f"more than {beyond} records on {topic}")


def process_named(pids: list[int], name: str) -> int:
    for pid in pids:
        try:
            if name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return pid
        except FileNotFoundError:
            continue
    raise AssertionError(f"no process running {name!r} among {pids}")


def test_stop_kill_and_broker_crash_lose_nothing(tmp_path, state_prefix):
    api, kafka = free_port(), free_port()
    url, bootstrap = f"http://127.0.0.1:{api}", f"127.0.0.1:{kafka}"
    data = tmp_path / "data"
    # nothing answers at this Redis URL: sana up starts the embedded Valkey there, its file in the data folder
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
                   SANA_EMBEDDED_KAFKA_PORT=str(kafka), SANA_SPARK_MASTER="local[2]", SANA_TRIGGER_S="0.5",
                   SANA_RUN_DIR=str(tmp_path / "run"), SANA_DATA_DIR=str(data))
    args = ["--port", str(api)]
    urban, sinks = "durable-urban", {"a": "durable-a", "w": "durable-w"}

    service = started(args, env, tmp_path / "1.log", url)
    assert f"data kept across runs in {data}" in service.output()
    topics = Topics(bootstrap)
    topics.ensure([urban])
    topics.close()
    feed = Feed(bootstrap, urban)
    try:
        for document in (flow_a(urban, sinks["a"]), window_flow(urban, sinks["w"])):
            made = httpx.post(f"{url}/dataflows", json=document, timeout=180)
            assert made.status_code == 201, made.text
        flows = dataflow_ids(url)
        (query,) = queries(url)
        feed.resume()
        seen = output_grows(bootstrap, sinks["a"], 100)

        # 1. Ctrl-C while the query still has records to read
        feed.pause()
        service.process.send_signal(signal.SIGINT)
        assert service.process.wait(60) == 0, service.output()
        service.terminate()
        service = started(args, env, tmp_path / "2.log", url)
        assert "bringing back 2 submitted dataflow(s)" in service.output()
        assert "started an embedded Valkey there (its data in" in service.output()
        assert dataflow_ids(url) == flows
        (again,) = wait_for(lambda: queries(url), 120, "the query back after Ctrl-C")
        assert again["query"] == query["query"] and again["run"] != query["run"], "not resumed from its checkpoint"
        feed.resume()
        seen = output_grows(bootstrap, sinks["a"], seen)

        # 2. kill -9 of sana up and of everything it started, at once
        feed.pause()
        children = descendants(service.process.pid)
        for pid in [service.process.pid, *children]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # a short-lived child (a Python worker) that ended meanwhile
        service.process.wait(10)
        wait_for(lambda: gone(children), 60, "every process of the killed sana up to exit")
        service.terminate()
        service = started(args, env, tmp_path / "3.log", url)
        assert dataflow_ids(url) == flows, "the state store lost dataflows at the kill"
        wait_for(lambda: queries(url), 120, "the query back after kill -9")
        feed.resume()
        seen = output_grows(bootstrap, sinks["a"], seen)

        # 3. kill -9 of the broker alone: sana up restarts it on its data
        feed.pause()
        os.kill(process_named(descendants(service.process.pid), "tansu"), signal.SIGKILL)
        wait_for(lambda: "restarting it on its data" in service.output(), 60, "sana up to restart its broker")
        feed.resume()
        output_grows(bootstrap, sinks["a"], seen)
        time.sleep(2)
        produced = feed.close()

        last = int(produced[-1]["humidity"])
        closing = [{"sensor": "s0", "temp": 0.0, "humidity": float(last + 100),
                    "ts": urban_records(last + 100, 1)[0]["ts"]}]
        produce(bootstrap, urban, closing)
        everything_produced = produced + closing
        expected = {"a": expect_a(everything_produced),
                    "w": window_reference([everything_produced], 20, None, 5, {"n": len, "total": sum, "hi": max})}
        for name, topic in sinks.items():
            received = wait_for(lambda: (got := read_all(bootstrap, topic))
                                and len(without_replays(got)) >= len(expected[name]) and got, 180, f"every record on {topic}")
            assert multiset(without_replays(received)) == multiset(expected[name]), f"{topic}: records lost or changed"
            assert copies_are_identical(received), f"{topic}: two records share a (writer, batch, seq) name but differ"
        assert all(q["status"] == "running" for q in queries(url))
    finally:
        feed.close()
        assert service.terminate() == 0, service.output()


def test_ephemeral_keeps_nothing_and_reset_starts_clean(tmp_path, state_prefix):
    """``--ephemeral`` writes nothing to the data folder; ``sana reset`` deletes a kept one and refuses while in use."""
    api = free_port()
    url = f"http://127.0.0.1:{api}"
    data = tmp_path / "data"
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
                   SANA_EMBEDDED_KAFKA_PORT=str(free_port()), SANA_RUN_DIR=str(tmp_path / "run"), SANA_DATA_DIR=str(data))
    service = started(["--port", str(api), "--ephemeral"], env, tmp_path / "ephemeral.log", url)
    try:
        assert "in memory (lost when it stops)" in service.output()
        assert "its data is lost when sana up stops" in service.output()
        assert not data.exists()
    finally:
        assert service.terminate() == 0, service.output()

    service = started(["--port", str(api)], env, tmp_path / "durable.log", url)
    try:
        assert (data / "objects").is_dir() and (data / "valkey").is_dir()
        busy = _sana(["reset", "--yes"], env)
        assert busy.returncode == 1 and f"is using {data}" in busy.stderr
        assert (data / "objects").is_dir(), "reset deleted a folder in use"
    finally:
        assert service.terminate() == 0, service.output()
    done = _sana(["reset", "--yes"], env)
    assert done.returncode == 0, done.stderr
    assert f"deleted {data}" in done.stdout and not data.exists()
    refused = _sana(["reset"], env)
    assert refused.returncode == 2 and "--yes" in refused.stderr


def _sana(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", *args], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
