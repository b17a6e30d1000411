"""Overlapping dataflows on the Spark runtime: equal outputs, taps without restarts, exact removal.

Every test drives the real stack in-process (Manager -> SparkRuntime -> local
Spark, the embedded broker, Redis) to a known point by waiting for the sink
contents it expects, re-raising a dead query's exception on the way.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.fixtures.kafka_io import produce, read_all, topic_exists, values, wait_for
from tests.fixtures.sharing import raise_dead_queries, three_overlapping, wait_sink
from tests.fixtures.streams import as_written, expect_a, expect_b, expect_c, flow_a, flow_b, flow_c, multiset, urban_records

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def test_overlapping_dataflows_give_what_each_gives_alone(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    _, _, _, flows = three_overlapping(manager, kafka_bootstrap, topic_factory)
    assert flows["b"].reused == ["src", "hot"] and flows["c"].reused == ["src", "hot"]
    assert manager.stats()["running_tasks"] == 4 + 2 + 4


def test_tap_in_the_middle_of_a_running_fragment_keeps_its_run(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    urban, humid = topic_factory("urban"), topic_factory("humid")
    sink_a, sink_c = f"{urban}-a", f"{urban}-c"
    manager.submit(flow_a(urban, sink_a))
    (query,) = manager.runtime.queries.values()
    run_id = query.query.runId
    produced: list[dict] = []
    submitted_at = {}
    stop = threading.Event()

    def keep_producing() -> None:
        start = 0
        while not stop.is_set():
            batch = urban_records(start, 50)
            produce(kafka_bootstrap, urban, batch, linger_ms=5)
            produced.extend(batch)
            start += 50
            time.sleep(0.1)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        wait_for(lambda: len(read_all(kafka_bootstrap, sink_a)) > 50, 90, "A's first output", lambda: raise_dead_queries(manager))
        manager.submit(flow_c(urban, humid, sink_c))
        submitted_at["count"] = len(produced)
        time.sleep(3)
    finally:
        stop.set()
        producer.join()
    assert query.alive() and query.query.runId == run_id, "A's query was restarted by the merge"
    wait_sink(manager, kafka_bootstrap, sink_a, expect_a(produced))
    assert {item.headers["sana.run"] for item in read_all(kafka_bootstrap, sink_a)} == {query.run}
    after_post = multiset(as_written(expect_c(produced[submitted_at["count"]:], [])))
    tapped = wait_for(lambda: (got := values(read_all(kafka_bootstrap, sink_c))) and not after_post - multiset(got) and got,
                      90, "every hot record produced after POST returned, on C's sink", lambda: raise_dead_queries(manager))
    seen = multiset(tapped)
    assert all(seen[key] == 1 for key in seen), "a tapped record arrived twice"
    numbers = sorted(record["humidity"] for record in tapped)
    hot = [r["humidity"] for r in produced if r["temp"] > 30]
    assert numbers == hot[hot.index(numbers[0]):], "the tap has a gap"


def test_removing_one_of_three_stops_only_its_unshared_work(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    urban, humid, sinks, flows = three_overlapping(manager, kafka_bootstrap, topic_factory)
    c_query = next(q for q in manager.runtime.queries.values() if any(t.type == "union" for t in q.plan.tasks))
    tap_topic = manager.runtime.plans[c_query.id].reads
    (tap,) = tap_topic.values()
    a_query = next(q for q in manager.runtime.queries.values() if q is not c_query)
    a_run = a_query.query.runId

    removed = manager.remove(flows["c"].id)

    c_only = {flows["c"].tasks[t] for t in ("src2", "cold", "both", "out")}
    assert set(removed.terminated) == c_only
    assert not c_query.alive() and list(manager.runtime.queries) == [a_query.id]
    assert a_query.query.runId == a_run
    assert not topic_exists(kafka_bootstrap, tap), "the tap topic outlived its last reader"
    before = len(read_all(kafka_bootstrap, sinks["c"]))
    more = urban_records(1200, 300)
    produce(kafka_bootstrap, urban, more)
    produce(kafka_bootstrap, humid, urban_records(6000, 100, seed=3))
    everything = urban_records(0, 400) + urban_records(400, 400) + urban_records(800, 400) + more
    wait_sink(manager, kafka_bootstrap, sinks["a"], expect_a(everything))
    wait_sink(manager, kafka_bootstrap, sinks["b"], expect_b(everything[400:]))
    assert len(read_all(kafka_bootstrap, sinks["c"])) == before, "the removed dataflow's sink still receives records"

    # B's work is hosted by A's query: removing it changes that query's live plan, without a restart.
    removed = manager.remove(flows["b"].id)
    assert set(removed.terminated) == {flows["b"].tasks["wet"], flows["b"].tasks["out"]}
    assert a_query.query.runId == a_run and [t.id for t in a_query.plan.tasks] == [
        flows["a"].tasks[name] for name in ("src", "hot", "proj", "out")]
    b_before = len(read_all(kafka_bootstrap, sinks["b"]))
    last = urban_records(1500, 200)
    produce(kafka_bootstrap, urban, last)
    wait_sink(manager, kafka_bootstrap, sinks["a"], expect_a(everything + last))
    assert len(read_all(kafka_bootstrap, sinks["b"])) == b_before, "B's sink still receives records after DELETE"


def test_two_dataflows_of_one_owner_write_one_topic_and_removal_stops_only_its_writes(manager_factory, kafka_bootstrap,
                                                                                        topic_factory):
    """A normal Kafka pattern: several writers into one topic. A's and B's records both arrive; after A is removed,
    only B's do, and none of A's records is lost or repeated."""
    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban", partitions=2)
    shared = f"{urban}-shared"
    first = manager.submit({**flow_a(urban, shared), "owner": "ann"})
    second = manager.submit({**flow_b(urban, shared), "owner": "ann"})
    before_removal = urban_records(0, 400)
    produce(kafka_bootstrap, urban, before_removal)
    wait_sink(manager, kafka_bootstrap, shared, expect_a(before_removal) + expect_b(before_removal))

    removed = manager.remove(first.id)
    assert first.tasks["out"] in removed.terminated and second.tasks["out"] not in removed.terminated
    after_removal = urban_records(400, 400)
    produce(kafka_bootstrap, urban, after_removal)
    wait_sink(manager, kafka_bootstrap, shared,
              expect_a(before_removal) + expect_b(before_removal) + expect_b(after_removal))


def test_a_removal_does_not_wait_for_the_batch_in_flight_and_that_batch_writes_nothing_for_it(
        manager_factory, kafka_bootstrap, topic_factory, monkeypatch):
    """Where the driver writes, a removal fences its outputs instead of waiting for the batch in flight: DELETE
    answers while that batch (planned with the old plan) is held before its write, and once let go it writes the
    other dataflows' rows and none of the removed one's."""
    from runtime.broker.producer import BatchProducer

    manager = manager_factory(trigger_s=0.5)
    urban = topic_factory("urban")
    sink_a, sink_b = f"{urban}-a", f"{urban}-b"
    manager.submit(flow_a(urban, sink_a))
    b = manager.submit(flow_b(urban, sink_b))
    (query,) = manager.runtime.queries.values()
    before, during = urban_records(0, 200), urban_records(200, 200)
    produce(kafka_bootstrap, urban, before)
    wait_sink(manager, kafka_bootstrap, sink_a, expect_a(before))
    wait_sink(manager, kafka_bootstrap, sink_b, expect_b(before))

    held, release = threading.Event(), threading.Event()
    send = BatchProducer.send_table

    def held_send(self, table, headers):
        if not release.is_set() and table.num_rows:
            held.set()
            release.wait(120)
        return send(self, table, headers)

    monkeypatch.setattr(BatchProducer, "send_table", held_send)
    produce(kafka_bootstrap, urban, during)
    wait_for(held.is_set, 90, "a batch with the new records held before its write", lambda: raise_dead_queries(manager))
    remover = threading.Thread(target=manager.remove, args=(b.id,))
    remover.start()
    remover.join(60)
    released_late = remover.is_alive()
    release.set()
    remover.join(120)
    assert not released_late, "the removal waited for the batch in flight"
    assert query.alive()
    wait_sink(manager, kafka_bootstrap, sink_a, expect_a(before + during))
    # B's rows of the held batch would have been in the one write that brought A's last rows
    assert multiset(values(read_all(kafka_bootstrap, sink_b))) == multiset(expect_b(before)), \
        "the batch held across the removal wrote the removed dataflow's rows"
