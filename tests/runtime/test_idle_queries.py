"""A query whose last task left stays running for a while; the next change reading its topics takes it.

The first test drives the real stack (Manager -> SparkRuntime -> local Spark,
the embedded broker, Redis); the rest are unit tests of the bookkeeping
(:class:`runtime.spark.idle.IdleQueries`) with a stand-in for a query.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from runtime.spark.idle import IdleQueries
from runtime.spark.retiring import Retiring
from tests.fixtures.kafka_io import produce, topic_exists, wait_for
from tests.fixtures.sharing import wait_sink
from tests.fixtures.streams import as_written, expect_a, expect_c, flow_a, flow_c, urban_records


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.slow
def test_a_new_query_reading_what_an_idle_one_reads_is_that_query(manager_factory, kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5, keep_idle_s=20)
    runtime = manager.runtime
    urban, humid, other = topic_factory("urban"), topic_factory("humid"), topic_factory("other")
    manager.submit(flow_a(urban, f"{urban}-a"))
    first = manager.submit(flow_c(urban, humid, f"{urban}-c1"))
    (c_id,) = [query_id for query_id, plan in runtime.plans.items() if humid in plan.source_topics]
    c_query, c_run = runtime.queries[c_id], runtime.queries[c_id].query.runId
    (tap,) = runtime.plans[c_id].reads.values()
    early_urban, early_humid = urban_records(0, 200), urban_records(1000, 100, seed=3)
    produce(kafka_bootstrap, urban, early_urban)
    produce(kafka_bootstrap, humid, early_humid)
    wait_sink(manager, kafka_bootstrap, f"{urban}-c1", as_written(expect_c(early_urban, early_humid)))

    (c1_sink,) = [task_id for task_id, topic in runtime.plans[c_id].outputs if topic == f"{urban}-c1"]
    assert c_query.written_records.get(c1_sink), "the first sink's writes are counted"
    manager.remove(first.id)
    assert list(runtime.queries) != [] and c_id not in runtime.queries, "C's query no longer runs a task"
    assert c_id in runtime.idle and c_query.alive(), "C's query is kept running, idle"
    assert runtime.runs(runtime.tasks), "the records in Redis name only queries that run tasks"
    assert topic_exists(kafka_bootstrap, tap), "the tap the idle query reads is kept"
    assert (runtime.checkpoint_root / c_id).is_dir()

    again = manager.submit(flow_c(urban, humid, f"{urban}-c2"))
    assert c_id in runtime.queries and c_id not in runtime.idle, "the change took the idle query"
    assert runtime.queries[c_id] is c_query and c_query.query.runId == c_run, "... without restarting it"
    assert c1_sink not in c_query.written_records, "its cost counters start again, as a new query's"
    assert runtime.runs(runtime.tasks)
    later_urban, later_humid = urban_records(200, 200), urban_records(2000, 100, seed=4)
    produce(kafka_bootstrap, urban, later_urban)
    produce(kafka_bootstrap, humid, later_humid)
    wait_sink(manager, kafka_bootstrap, f"{urban}-c2", as_written(expect_c(later_urban, later_humid)))
    wait_sink(manager, kafka_bootstrap, f"{urban}-a", expect_a(early_urban + later_urban))

    # a query reading other topics is started as before; the idle one is not taken for it
    manager.remove(again.id)
    assert c_id in runtime.idle
    manager.submit(flow_c(urban, other, f"{urban}-c3"))
    assert c_id in runtime.idle and c_id not in runtime.queries and len(runtime.queries) == 2

    # after its keep time the idle query stops (in the background): its checkpoint and the tap it alone read go
    wait_for(lambda: c_id not in runtime.idle and not len(runtime.retiring), 60, "the idle query to stop")
    assert not c_query.alive() and not (runtime.checkpoint_root / c_id).exists()
    assert topic_exists(kafka_bootstrap, tap), "the third dataflow's query reads the same tap"


@dataclass(eq=False)
class StandIn:
    """What IdleQueries reads of a query: its id and whether it runs."""

    id: str
    running: bool = True
    inputs: dict = field(default_factory=dict)
    stop_fails: bool = False
    drained_for: float | None = None

    def alive(self) -> bool:
        return self.running

    def drain(self, timeout_s: float) -> bool:
        self.drained_for = timeout_s
        return True

    def discard(self) -> None:
        if self.stop_fails:
            raise RuntimeError("the JVM went away")
        self.running = False


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(query_id: str, site: str | None = None, *topics: str) -> dict:
    return {"id": query_id, "site": site, "inputs": {topic: {"0": 0} for topic in topics or ("t",)}}


def test_an_idle_query_is_taken_only_for_the_same_topics_at_the_same_site():
    idle = IdleQueries(keep_s=30, clock=Clock())
    query = StandIn("q1")
    assert idle.keep(query, record("q1", "eu", "a", "b")) == []
    assert idle.take({"a"}, "eu") is None, "reads fewer topics"
    assert idle.take({"a", "b", "c"}, "eu") is None, "reads more topics"
    assert idle.take({"a", "b"}, "us") is None, "another site"
    assert idle.take({"a", "b"}, "eu", lambda candidate: False) is None, "read over other links (routes differ)"
    taken = idle.take({"a", "b"}, "eu")
    assert taken is not None and taken.query is query and taken.record["id"] == "q1"
    assert "q1" not in idle and idle.take({"a", "b"}, "eu") is None, "taken once"


def test_the_query_idle_the_shortest_is_taken_and_dead_ones_are_not():
    clock = Clock()
    idle = IdleQueries(keep_s=30, clock=clock)
    older, newer, dead = StandIn("q1"), StandIn("q2"), StandIn("q3")
    idle.keep(older, record("q1", None, "a"))
    clock.now += 5
    idle.keep(newer, record("q2", None, "a"))
    clock.now += 5
    idle.keep(dead, record("q3", None, "a"))
    dead.running = False
    assert idle.take({"a"}, None).query is newer
    assert idle.take({"a"}, None).query is older
    assert idle.take({"a"}, None) is None
    assert idle.expired() == [dead], "a query that died is dropped"


def test_idle_queries_expire_after_their_keep_time_and_beyond_the_limit():
    clock = Clock()
    idle = IdleQueries(keep_s=30, limit=2, clock=clock)
    first, second, third = StandIn("q1"), StandIn("q2"), StandIn("q3")
    assert idle.keep(first, record("q1")) == []
    clock.now += 10
    assert idle.keep(second, record("q2")) == []
    clock.now += 10
    assert idle.keep(third, record("q3")) == [first], "over the limit the one idle longest stops"
    assert idle.topics() == {"t"} and len(idle) == 2
    clock.now += 19  # second: idle 29 s, third: 19 s
    assert idle.expired() == []
    clock.now += 1
    assert idle.expired() == [second]
    clock.now += 10
    assert idle.expired() == [third] and len(idle) == 0 and idle.topics() == set()


def test_without_a_keep_time_or_a_record_a_query_stops_at_once():
    assert IdleQueries(keep_s=0).keep(query := StandIn("q1"), record("q1")) == [query]
    assert IdleQueries(keep_s=30).keep(query := StandIn("q2"), None) == [query]
    assert IdleQueries(keep_s=30).keep(query := StandIn("q3", running=False), record("q3")) == [query]


def test_retiring_queries_keep_their_topics_until_stopped_even_when_a_stop_fails():
    retiring = Retiring()
    calm = StandIn("q1", inputs={"a": {"0": 5}, "b": {"0": 0}})
    broken = StandIn("q2", inputs={"c": {"0": 1}}, stop_fails=True)
    retiring.add(calm)
    retiring.add(broken)
    assert retiring.topics() == {"a", "b", "c"} and len(retiring) == 2
    assert retiring.stop_all(drain_s=5) == ["q1", "q2"]
    assert not calm.alive() and calm.drained_for == 5, "drained (at most 5 s), then stopped"
    assert broken.alive() and broken.drained_for == 5
    assert len(retiring) == 0 and retiring.topics() == set(), "a query whose stop failed is forgotten all the same"
    assert retiring.stop_all(drain_s=5) == []
