"""The driver-side batch producer: records not acknowledged are sent once more through a new producer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from runtime.broker import producer as module
from runtime.exceptions import RuntimeFailure


class FakeFuture:
    def __init__(self, done: bool) -> None:
        self.is_done = done

    def failed(self) -> bool:
        return False


class FakeProducer:
    """Leaves every record unacknowledged while ``stuck``; remembers what was sent."""

    made: list["FakeProducer"] = []
    stuck_instances = 1

    def __init__(self, **config) -> None:
        self.sent: list[tuple[str, bytes, dict]] = []
        self.stuck = len(FakeProducer.made) < FakeProducer.stuck_instances
        FakeProducer.made.append(self)

    def send(self, topic, value, headers):
        self.sent.append((topic, value, dict(headers)))
        return FakeFuture(not self.stuck)

    def flush(self, timeout):
        return None

    def close(self, timeout=None):
        return None


@pytest.fixture
def fake_kafka(monkeypatch):
    FakeProducer.made = []
    monkeypatch.setattr(module, "KafkaProducer", FakeProducer)
    return FakeProducer


TABLE = pa.table({"topic": ["a", "b", "a"], "value": ["1", "2", "3"]})


def test_unacknowledged_records_are_resent_once_with_their_names(fake_kafka):
    fake_kafka.stuck_instances = 1
    producer = module.BatchProducer("nowhere:9092")
    assert producer.send_table(TABLE, [("sana.batch", b"7")]) == 3
    first, second = fake_kafka.made
    assert [h["sana.seq"] for _, _, h in second.sent] == [b"0", b"1", b"2"], "a resent record must keep its sana.seq"
    assert second.sent == first.sent and producer.resent == 3


def test_records_still_unacknowledged_fail_the_batch(fake_kafka):
    fake_kafka.stuck_instances = 2
    producer = module.BatchProducer("nowhere:9092")
    with pytest.raises(RuntimeFailure, match="could not write 3 of 3 record"):
        producer.send_table(TABLE, [])
