"""The ``sana_kafka`` Python data source against the embedded broker (Tansu)."""

from __future__ import annotations

import json
import random

import pytest
from kafka import TopicPartition

from runtime.broker.offsets import EndProbe, probe_consumer, topic_end_offsets
from runtime.broker.topics import Topics
from runtime.spark.session import spark_session
from tests.fixtures.kafka_io import produce, read_all
from tests.runtime.conftest import SPARK_MASTER
from tests.runtime.test_failures import RestartableBroker

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = probe_consumer(bootstrap)
    try:
        return topic_end_offsets(consumer, [topic])[topic]
    finally:
        consumer.close()


def test_end_offsets_survive_the_tansu_batch_bug(kafka_bootstrap, topic_factory):
    topic = topic_factory("ends", partitions=2)
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(3000)), linger_ms=50)
    assert sum(_ends(kafka_bootstrap, topic).values()) == 3000


def test_the_readers_probe_agrees_with_the_reference_as_topics_grow(kafka_bootstrap, topic_factory):
    """EndProbe (a fetch at the end it last found) gives the full probe's answer, round after round: partitions
    growing by several batches, by one, or not at all, empty ones, and a topic that does not exist."""
    busy, quiet = topic_factory("busy", partitions=3), topic_factory("quiet", partitions=2)
    chooser = random.Random(7)
    probe = EndProbe(kafka_bootstrap)
    reference = probe_consumer(kafka_bootstrap)
    try:
        assert probe.fetches_at_the_end, "this kafka-python does not say when a fetch is in flight: the probe reads " \
                                         "the last batch every time"
        assert probe.topic_ends([busy, quiet, "no-such-topic"]) == {busy: {0: 0, 1: 0, 2: 0}, quiet: {0: 0, 1: 0}}
        for round_ in range(8):
            produce(kafka_bootstrap, busy, ({"i": i} for i in range(chooser.randint(1, 2500))), linger_ms=30)
            if round_ % 3 == 0:
                produce(kafka_bootstrap, quiet, ({"i": i} for i in range(chooser.randint(1, 40))))
            expected = topic_end_offsets(reference, [busy, quiet])
            assert probe.topic_ends([busy, quiet]) == expected, f"round {round_}"
            assert probe.topic_ends([busy, quiet]) == expected, f"round {round_}, asked again with nothing new"
        assert sum(expected[busy].values()) > 2500 and all(expected[quiet].values())
    finally:
        probe.close()
        reference.close()


def test_end_offsets_are_right_on_the_object_store_broker_whose_list_offsets_lags(tmp_path):
    """Tansu on its object store (the durable ``sana up``): ListOffsets stays put on some writes (every other one
    here), so a probe trusting "L did not move, so the end did not" misses the last batch; that probe, tried in the
    stream reader, left a window sink short of its last records in the durable restart test. The reader's end
    offsets are right after every write, and across a kill of the broker: the full probe's (the last batch read
    every time) and EndProbe's (a fetch at the end it last found, answered by the high watermark)."""
    broker = RestartableBroker(tmp_path)
    topics = Topics(broker.bootstrap)
    topics.ensure(["lagging"])
    topics.close()
    probe = probe_consumer(broker.bootstrap)
    listing = probe_consumer(broker.bootstrap)
    readers = EndProbe(broker.bootstrap)
    partition = TopicPartition("lagging", 0)
    written, stayed = 0, 0
    try:
        for round_, count in enumerate([40, 1, 1, 40, 1, 40, 40, 1]):
            listed_before = listing.end_offsets([partition])[partition]
            written += produce(broker.bootstrap, "lagging", ({"i": i} for i in range(count)), linger_ms=5)
            stayed += listing.end_offsets([partition])[partition] == listed_before
            assert topic_end_offsets(probe, ["lagging"]) == {"lagging": {0: written}}, f"round {round_}"
            assert readers.topic_ends(["lagging"]) == {"lagging": {0: written}}, f"round {round_}: EndProbe"
            if round_ == 4:
                broker.kill()
                broker.start()
                for consumer in (probe, listing, readers):
                    consumer.close()
                probe, listing = probe_consumer(broker.bootstrap), probe_consumer(broker.bootstrap)
                readers = EndProbe(broker.bootstrap)
        assert stayed, "ListOffsets moved with every write: this broker no longer shows what the test is about"
    finally:
        for consumer in (probe, listing, readers):
            consumer.close()
        broker.close()


def _run_until_caught_up(spark, bootstrap, topic, start, checkpoint, seen):
    def collect(df, batch_id):
        seen.extend(json.loads(row.value)["i"] for row in df.collect())

    query = (
        spark.readStream.format("sana_kafka").option("bootstrap", bootstrap)
        .option("topics", json.dumps({topic: start})).load()
        .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds").start()
    )
    try:
        query.processAllAvailable()
        if query.exception() is not None:
            raise query.exception()
    finally:
        query.stop()


def test_source_reads_every_record_once_across_a_restart(kafka_bootstrap, topic_factory, tmp_path):
    spark = spark_session(SPARK_MASTER)
    topic = topic_factory("src", partitions=2)
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(5000)), linger_ms=50)
    seen: list[int] = []
    start = {"0": 0, "1": 0}
    _run_until_caught_up(spark, kafka_bootstrap, topic, start, tmp_path / "ck", seen)
    assert sorted(seen) == list(range(5000))
    produce(kafka_bootstrap, topic, ({"i": i} for i in range(5000, 7000)), linger_ms=50)
    _run_until_caught_up(spark, kafka_bootstrap, topic, start, tmp_path / "ck", seen)
    assert sorted(seen) == list(range(7000)), "a restart from the checkpoint lost or repeated records"


def test_stream_writer_tags_records_with_batch_ids(kafka_bootstrap, topic_factory, tmp_path):
    spark = spark_session(SPARK_MASTER)
    source, sink = topic_factory("in"), topic_factory("out")
    produce(kafka_bootstrap, source, ({"i": i} for i in range(100)))
    query = (
        spark.readStream.format("sana_kafka").option("bootstrap", kafka_bootstrap)
        .option("topics", json.dumps({source: {"0": 0}})).load()
        .selectExpr(f"'{sink}' AS topic", "value")
        .writeStream.format("sana_kafka").option("bootstrap", kafka_bootstrap).option("writer", "w1")
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start()
    )
    try:
        query.processAllAvailable()
        if query.exception() is not None:
            raise query.exception()
    finally:
        query.stop()
    received = read_all(kafka_bootstrap, sink)
    assert sorted(item.value["i"] for item in received) == list(range(100))
    assert {item.headers["sana.writer"] for item in received} == {"w1"}
    assert {item.headers["sana.batch"] for item in received} == {"0"}


def test_batch_writer_names_every_record_by_partition_and_place(kafka_bootstrap, topic_factory):
    """Executor writes (cluster masters) carry sana.seq like the driver's writes: stable across a replay."""
    spark = spark_session(SPARK_MASTER)
    sink = topic_factory("out")
    rows = spark.range(0, 50, numPartitions=2).selectExpr(f"'{sink}' AS topic", "CAST(id AS STRING) AS value")
    for _ in range(2):  # the second write is a replay of batch 7: same names
        rows.write.format("sana_kafka").option("bootstrap", kafka_bootstrap).option("writer", "w2") \
            .option("batch", "7").mode("append").save()
    received = read_all(kafka_bootstrap, sink)
    names = [(item.headers["sana.batch"], int(item.headers["sana.seq"]), item.value) for item in received]
    assert len(names) == 100 and len(set(names)) == 50  # each record twice, under the same name
    assert {seq >> 32 for _, seq, _ in names} == {0, 1}


def test_an_outputs_record_names_do_not_depend_on_the_other_outputs(kafka_bootstrap, topic_factory):
    """A batch replayed under a plan with fewer outputs (a removal fenced while it was in flight) names the
    remaining outputs' records as the first run did: each output numbers its rows in its own branch."""
    from runtime.spark.live_plan import seq_slots
    from runtime.spark.sql_text import encode_sql

    spark = spark_session(SPARK_MASTER)
    spark.range(0, 30, numPartitions=3).createOrReplaceTempView("removed_rows")
    spark.range(100, 120, numPartitions=2).createOrReplaceTempView("kept_rows")
    removed, kept = topic_factory("removed"), topic_factory("kept")

    def write(outputs: list[tuple[str, str]], batch: str) -> None:
        slots = seq_slots(tuple(outputs))
        union = " UNION ALL ".join(encode_sql(f"{task}_rows", topic, slots[(task, topic)]) for task, topic in outputs)
        spark.sql(union).write.format("sana_kafka").option("bootstrap", kafka_bootstrap).option("writer", "w3") \
            .option("batch", batch).mode("append").save()

    write([("removed", removed), ("kept", kept)], "4")
    write([("kept", kept)], "4")  # the replay without the removed output
    received = read_all(kafka_bootstrap, kept)
    names = {(item.headers["sana.batch"], item.headers["sana.seq"], str(item.value)) for item in received}
    assert len(received) == 40 and len(names) == 20, "each record twice, under the same name"
    assert {int(seq) >> 55 for _, seq, _ in names} == {seq_slots((("kept", kept),))[("kept", kept)]}


def test_outputs_writing_one_topic_get_slots_that_outlive_the_others():
    from runtime.spark.live_plan import SEQ_SLOTS, seq_slots

    outputs = tuple((f"task{i}", "t") for i in range(60)) + (("task0", "u"),)
    slots = seq_slots(outputs)
    assert len({slot for (_, topic), slot in slots.items() if topic == "t"}) == 60
    assert all(0 <= slot < SEQ_SLOTS for slot in slots.values())
    # removing outputs leaves the others' slots as they were (these 60 ids do not collide on one slot)
    assert seq_slots(outputs[30:]) == {key: slot for key, slot in slots.items() if key in outputs[30:]}
    with pytest.raises(ValueError, match="more than 256 outputs of one query write topic 't'"):
        seq_slots(tuple((f"task{i}", "t") for i in range(SEQ_SLOTS + 1)))
