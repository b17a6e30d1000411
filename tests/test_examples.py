"""The examples in examples/ (what the demo submits, what the README tries) say what they are: each is valid,
named as its file, and writes sink topics of its own that start with its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from manager.validate import parse_dataflow
from wan.topology import parse_wan_config
from wan_sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
DATAFLOWS = sorted((ROOT / "examples").glob("*.json"))
SCENARIOS = sorted(path for path in (ROOT / "examples" / "wan").glob("*.json") if path.name != "wan-config.json")


def test_there_are_examples():
    assert len(DATAFLOWS) >= 10 and len(SCENARIOS) >= 3


@pytest.mark.parametrize("path", DATAFLOWS, ids=lambda path: path.name)
def test_each_dataflow_is_valid_and_named_as_its_file_and_its_sink_topics_start_with_its_name(path):
    flow = parse_dataflow(path.read_bytes())
    assert flow.name == path.stem
    for sink in flow.sinks:
        assert flow.tasks[sink].config["topic"].startswith(flow.name), (sink, flow.tasks[sink].config["topic"])


def test_no_two_examples_write_the_same_topic():
    writers: dict[str, list[str]] = {}
    for path in DATAFLOWS:
        flow = parse_dataflow(path.read_bytes())
        for topic in {flow.tasks[sink].config["topic"] for sink in flow.sinks}:
            writers.setdefault(topic, []).append(path.name)
    assert {topic: names for topic, names in writers.items() if len(names) > 1} == {}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: path.name)
def test_each_wan_scenario_is_valid_and_named_as_its_file(path):
    assert load_scenario(path).name == path.stem


def test_the_wan_configuration_places_a_sink_topic_an_example_writes():
    config = json.loads((ROOT / "examples" / "wan" / "wan-config.json").read_text())
    parse_wan_config(config)
    flows = [parse_dataflow(path.read_bytes()) for path in DATAFLOWS]
    written = {flow.tasks[sink].config["topic"] for flow in flows for sink in flow.sinks}
    assert set(config["sinks"]) <= written
