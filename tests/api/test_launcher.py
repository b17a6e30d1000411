"""`sana up` and the embedded broker, against the real Tansu binary and Redis."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.conftest import REDIS_URL
from tests.fixtures.services import SanaUp, free_port, kafka_bootstrap, sana_env  # noqa: F401 (fixture)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def _broker_processes(port: int) -> list[str]:
    found = subprocess.run(["pgrep", "-f", f"tcp://127.0.0.1:{port}"], capture_output=True, text=True)
    return found.stdout.split()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_embedded_broker_round_trips_keyed_records(kafka_bootstrap):
    topic = f"launcher-{time.time_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=20)
    sent = [(f"sensor-{i % 7}".encode(), f"reading-{i}".encode()) for i in range(300)]
    for key, value in sent:
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    partitions = [TopicPartition(topic, number) for number in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    received: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while len(received) < len(sent) and time.monotonic() < deadline:
        for part, records in consumer.poll(timeout_ms=500).items():
            received.extend((part.partition, record.key, record.value) for record in records)
    consumer.close()

    assert sorted((key, value) for _, key, value in received) == sorted(sent)
    partition_of: dict[bytes, set[int]] = {}
    for partition, key, _ in received:
        partition_of.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in partition_of.values()), partition_of
    assert len({partition for partition, _, _ in received}) > 1


def test_sana_up_serves_healthy_api_and_stops_its_children(tmp_path, state_prefix):
    api_port, kafka_port = free_port(), free_port()
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=REDIS_URL, SANA_EMBEDDED_KAFKA_PORT=str(kafka_port),
                   SANA_RUN_DIR=str(tmp_path / "run"))
    service = SanaUp(["--port", str(api_port)], env, tmp_path / "up.log")
    try:
        health = service.wait_healthy(f"http://127.0.0.1:{api_port}")
        assert health["status"] == "ok"
        assert {name: part["status"] for name, part in health["components"].items()} == {
            "redis": "ok", "kafka": "ok", "runtime": "ok", "manager": "ok"}
        assert health["components"]["kafka"]["bootstrap"] == f"127.0.0.1:{kafka_port}"
        assert _broker_processes(kafka_port)
    finally:
        status = service.terminate()
    assert status == 0, service.output()
    assert not _broker_processes(kafka_port), "the broker outlived sana up"
    assert not _listening(api_port)
    assert (next((tmp_path / "run").iterdir()) / "broker.log").read_text().strip()
    assert f"using Redis at {REDIS_URL}" in service.output()


def test_port_in_use_is_a_clear_error_and_leaves_no_orphan(tmp_path, state_prefix):
    kafka_port = free_port()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        api_port = blocker.getsockname()[1]
        env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=REDIS_URL, SANA_EMBEDDED_KAFKA_PORT=str(kafka_port),
                       SANA_RUN_DIR=str(tmp_path / "run"))
        service = SanaUp(["--port", str(api_port)], env, tmp_path / "up.log")
        status = service.process.wait(30)
        service.terminate()
    assert status == 1
    assert f"port 127.0.0.1:{api_port} for the API is already in use" in service.output()
    assert not _broker_processes(kafka_port)


def test_embedded_redis_when_none_answers(tmp_path, state_prefix):
    api_port, redis_port = free_port(), free_port()
    url = f"redis://127.0.0.1:{redis_port}/0"
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=url, SANA_DRY_RUN="1", SANA_RUN_DIR=str(tmp_path / "run"))
    service = SanaUp(["--port", str(api_port)], env, tmp_path / "up.log")
    try:
        health = service.wait_healthy(f"http://127.0.0.1:{api_port}")
        assert health["components"]["redis"]["status"] == "ok"
        assert f"nothing answered at {url}: started an embedded Valkey" in service.output()
        assert _listening(redis_port)
    finally:
        status = service.terminate()
    assert status == 0, service.output()
    assert not _listening(redis_port), "the embedded Valkey outlived sana up"
