"""Which query runs which fragment, and what queries read and write (pure functions, no Spark)."""

from __future__ import annotations

import itertools

from runtime.broker.topics import stream_topic
from runtime.plan import TaskSpec
from runtime.spark.layout import assign_hosts, layouts, parents_first

SCHEMA = {"x": "int"}


def spec(task_id: str, task_type: str, fragment: str, *parents: str, site: str | None = None, topic: str | None = None) -> TaskSpec:
    config = {"topic": topic or f"{task_id}-topic"} if task_type in ("source", "sink") else {}
    return TaskSpec(task_id, f"sig-{task_id}", task_type, config, site, tuple(("in", p) for p in parents), fragment, SCHEMA)


def counter():
    numbers = itertools.count(1)
    return lambda fragment: f"q{next(numbers)}-{fragment}"


RUNNING = {
    "src": spec("src", "source", "f1"), "hot": spec("hot", "filter", "f1", "src"), "out": spec("out", "sink", "f1", "hot"),
}


def test_a_fragment_without_a_source_joins_the_query_it_reads():
    tasks = {**RUNNING, "sel": spec("sel", "select", "f2", "hot"), "out2": spec("out2", "sink", "f2", "sel")}
    host = assign_hosts(tasks, {"f1": "q0"}, {"q0": None}, counter())
    assert host == {"f1": "q0", "f2": "q0"}
    (plan,) = layouts(tasks, host, "ns").values()
    assert [t.id for t in plan.tasks] == ["src", "hot", "out", "sel", "out2"]
    assert plan.outputs == [("out", "out-topic"), ("out2", "out2-topic")] and not plan.reads


def test_a_fragment_with_its_own_source_gets_a_query_and_taps_the_running_one():
    tasks = {**RUNNING, "src2": spec("src2", "source", "f2"), "both": spec("both", "union", "f2", "hot", "src2"),
             "out2": spec("out2", "sink", "f2", "both")}
    host = assign_hosts(tasks, {"f1": "q0"}, {"q0": None}, counter())
    assert host == {"f1": "q0", "f2": "q1-f2"}
    plans = layouts(tasks, host, "ns")
    tap = stream_topic("ns", "sig-hot")
    assert ("hot", tap) in plans["q0"].outputs, "the running query must write hot to a tap"
    assert plans["q1-f2"].reads == {"hot": tap}
    assert plans["q1-f2"].input_topics == {"src2-topic", tap}
    assert plans["q0"].internal_topics == {tap} == plans["q1-f2"].internal_topics


def test_other_sites_and_hosting_off_get_queries_of_their_own():
    tasks = {**RUNNING, "sel": spec("sel", "select", "f2", "hot", site="eu"), "out2": spec("out2", "sink", "f2", "sel", site="eu")}
    assert assign_hosts(tasks, {"f1": "q0"}, {"q0": None}, counter())["f2"] == "q1-f2"
    same_site = {**RUNNING, "sel": spec("sel", "select", "f2", "hot"), "out2": spec("out2", "sink", "f2", "sel")}
    assert assign_hosts(same_site, {"f1": "q0"}, {"q0": None}, counter(), hosting=False)["f2"] == "q1-f2"


def test_fragments_reading_two_queries_get_their_own():
    tasks = {
        "a": spec("a", "source", "f1"), "b": spec("b", "source", "f2"),
        "j": spec("j", "union", "f3", "a", "b"), "o": spec("o", "sink", "f3", "j"),
    }
    host = assign_hosts(tasks, {"f1": "q0", "f2": "q9"}, {"q0": None, "q9": None}, counter())
    assert host["f3"] == "q1-f3"
    assert set(layouts(tasks, host, "ns")["q1-f3"].reads) == {"a", "b"}


def test_parents_come_first():
    order = [t.id for t in parents_first({**RUNNING, "z": spec("z", "select", "f1", "src")})]
    assert order.index("src") < order.index("hot") < order.index("out") and order.index("src") < order.index("z")
