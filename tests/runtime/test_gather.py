"""A sink's ``max_delay``: the query computing it holds its input for fewer, larger micro-batches, and stops
holding as soon as an output that allows no delay joins it."""

from __future__ import annotations

import json
import time

import pytest

from runtime.spark.kafka_source import KafkaStreamReader, write_gather
from tests.fixtures.kafka_io import produce, read_all, values
from tests.fixtures.sharing import wait_sink
from tests.fixtures.streams import expect_a, expect_b, flow_a, flow_b, multiset, urban_records


def delayed(flow: dict, delay: str) -> dict:
    for task in flow["tasks"]:
        if task["type"] == "sink":
            task["config"]["max_delay"] = delay
    return flow


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.slow
def test_a_query_holds_its_input_for_its_sinks_delay_until_an_output_without_one_joins(manager_factory,
                                                                                        kafka_bootstrap, topic_factory):
    manager = manager_factory(trigger_s=0.5)
    runtime = manager.runtime
    urban = topic_factory("urban")
    manager.submit(delayed(flow_a(urban, f"{urban}-a"), "30 seconds"))
    (query,) = runtime.queries.values()
    assert query.metrics()["gather_s"] == 30.0 and query.gather_file.exists()

    # the first records after a quiet spell go at once (nothing to gather them with yet)
    early = urban_records(0, 200)
    produce(kafka_bootstrap, urban, early)
    wait_sink(manager, kafka_bootstrap, f"{urban}-a", expect_a(early))

    # the next ones wait: at a 0.5 s trigger, 4 s is eight triggers without a batch
    batches = query.batches_done
    later = urban_records(200, 200)
    produce(kafka_bootstrap, urban, later)
    time.sleep(4)
    assert query.batches_done == batches, "a batch ran while the sink allowed 30 s of delay"
    assert multiset(values(read_all(kafka_bootstrap, f"{urban}-a"))) == multiset(expect_a(early))

    # a dataflow whose sink allows no delay joins the query: it holds nothing from its next trigger on
    b = manager.submit(flow_b(urban, f"{urban}-b"))
    assert list(runtime.queries.values()) == [query], "B is hosted by A's query"
    assert query.metrics()["gather_s"] == 0.0 and not query.gather_file.exists()
    wait_sink(manager, kafka_bootstrap, f"{urban}-a", expect_a(early + later))
    more = urban_records(400, 100)
    produce(kafka_bootstrap, urban, more)
    wait_sink(manager, kafka_bootstrap, f"{urban}-b", expect_b(later + more))  # the held ones ran B's plan too

    # and holds again once it leaves
    manager.remove(b.id)
    assert query.metrics()["gather_s"] == 30.0 and query.gather_file.exists()


class Reader(KafkaStreamReader):
    """The ``sana_kafka`` reader with the broker's end offsets given by the test."""

    def __init__(self, options: dict[str, str], ends: dict[str, dict[str, int]]) -> None:
        super().__init__(options)
        self.ends = ends

    def _ends(self) -> dict[str, dict[str, int]]:
        return {topic: {str(p): o for p, o in parts.items()} for topic, parts in self.ends.items()}


def test_the_reader_holds_between_batches_but_not_its_first_nor_while_a_cut_bounds_it(tmp_path):
    gather, bound = tmp_path / "gather.json", tmp_path / "bound.json"
    options = {"bootstrap": "unused:9092", "topics": json.dumps({"t": {"0": 0}}), "gather_file": str(gather),
               "bound_file": str(bound)}
    reader = Reader(options, {"t": {0: 10}})
    write_gather(gather, 30.0)
    first = reader.latestOffset(None)
    assert first == {"t": {"0": 10}}, "a reader's first batch is never held"
    reader.ends = {"t": {0: 25}}
    assert reader.latestOffset(first) == {"t": {"0": 10}}, "the next records wait for the delay"
    bound.write_text("{}")  # a cut over queries reading only taps: an empty bound still bounds the query
    assert reader.latestOffset(first) == {"t": {"0": 25}}
    bound.unlink()
    reader.ends = {"t": {0: 40}}
    assert reader.latestOffset({"t": {"0": 25}}) == {"t": {"0": 25}}
    write_gather(gather, 0.0)
    assert not gather.exists() and reader.latestOffset({"t": {"0": 25}}) == {"t": {"0": 40}}
