"""Which query runs which fragment, and what queries read and write (pure functions, no Spark)."""

from __future__ import annotations

import itertools

from runtime.broker.topics import stream_topic, tap_topic
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
    tap = tap_topic("ns", "hot", "sig-hot")
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


def test_a_stream_from_another_site_crosses_once_whatever_its_consumers_there():
    """The router of IN sharing: a fragment at "hub" reading only what a hub query already reads from "edge" is
    hosted by that query; the edge's tap is read over the link once."""
    edge = {"src": spec("src", "source", "f1", site="edge")}
    first = {"keep1": spec("keep1", "filter", "f2", "src", site="hub"), "out1": spec("out1", "sink", "f2", "keep1", site="hub")}
    second = {"keep2": spec("keep2", "filter", "f3", "src", site="hub"), "out2": spec("out2", "sink", "f3", "keep2", site="hub")}
    tasks = {**edge, **first, **second}
    running = {"f1": "q0", "f2": "q1"}
    host = assign_hosts(tasks, running, {"q0": "edge", "q1": "hub"}, counter())
    assert host == {"f1": "q0", "f2": "q1", "f3": "q1"}
    plans = layouts(tasks, host, "ns")
    assert plans["q1"].reads == {"src": tap_topic("ns", "src", "sig-src")} and set(plans) == {"q0", "q1"}
    # both new in one change: the second joins the query made for the first
    both = assign_hosts(tasks, {"f1": "q0"}, {"q0": "edge"}, counter())
    assert both["f2"] == both["f3"] == "q1-f2"
    # elsewhere, with hosting off, or reading something the hub's query does not read: a query of its own
    west = {**tasks, "keep2": spec("keep2", "filter", "f3", "src", site="west"), "out2": spec("out2", "sink", "f3", "keep2", site="west")}
    assert assign_hosts(west, running, {"q0": "edge", "q1": "hub"}, counter())["f3"] == "q1-f3"
    assert assign_hosts(tasks, running, {"q0": "edge", "q1": "hub"}, counter(), hosting=False)["f3"] == "q1-f3"
    more = {**tasks, "src9": spec("src9", "source", "f9", site="edge"),
            "both": spec("both", "union", "f3", "src", "src9", site="hub"), "out2": spec("out2", "sink", "f3", "both", site="hub")}
    del more["keep2"]
    assert assign_hosts(more, {**running, "f9": "q9"}, {"q0": "edge", "q1": "hub", "q9": "edge"}, counter())["f3"] == "q1-f3"


def test_two_instances_of_one_signature_write_topics_of_their_own():
    """A refused share or a private plan runs a signature twice (ids as the manager makes them): each instance's
    tap is its own, or both would write into one topic and every reader would read each record twice."""
    signature = "ab" * 32
    first, copy = "source-" + signature[:16], "source-" + signature[:16] + "-west"

    def instance(task_id: str, fragment: str, site: str) -> TaskSpec:
        return TaskSpec(task_id, signature, "source", {"topic": "raw"}, site, (), fragment, SCHEMA)

    tasks = {first: instance(first, "f1", "edge"), copy: instance(copy, "f2", "edge"),
             "k1": spec("k1", "sink", "f3", first, site="east"), "k2": spec("k2", "sink", "f4", copy, site="west")}
    plans = layouts(tasks, {"f1": "q1", "f2": "q2", "f3": "q3", "f4": "q4"}, "ns")
    assert plans["q1"].outputs == [(first, stream_topic("ns", signature))]
    (written,) = plans["q2"].outputs
    assert written[0] == copy and written[1] != stream_topic("ns", signature)
    assert plans["q3"].reads == {first: stream_topic("ns", signature)} and plans["q4"].reads == {copy: written[1]}
