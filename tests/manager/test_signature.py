"""Signatures: equal under representation noise, different for any semantic change."""

from __future__ import annotations

import copy
import random

from manager.validate import parse_dataflow
from tests.fixtures.dataflows import chain, source, stream, task, urban_etl


def _sig_of(document, task_id):
    return parse_dataflow(document).signatures[task_id]


def _renamed(document, prefix):
    result = copy.deepcopy(document)
    names = {item["id"]: prefix + item["id"] for item in result["tasks"]}
    for item in result["tasks"]:
        item["id"] = names[item["id"]]
    for item in result["streams"]:
        item["from"], item["to"] = names[item["from"]], names[item["to"]]
    return result, names


def test_equal_under_other_ids_shuffled_keys_and_order():
    original = urban_etl()
    renamed, names = _renamed(original, "x_")
    rng = random.Random(7)
    rng.shuffle(renamed["tasks"])
    rng.shuffle(renamed["streams"])
    for item in renamed["tasks"]:
        item["config"] = dict(reversed(list(item["config"].items())))
        if item["type"] == "select":
            item["config"]["columns"] = dict(reversed(list(item["config"]["columns"].items())))
    before = parse_dataflow(original).signatures
    after = parse_dataflow(renamed).signatures
    assert {names[task_id]: sig for task_id, sig in before.items()} == after


def test_equal_under_sql_spacing_case_and_number_spelling():
    plain = urban_etl()
    noisy = copy.deepcopy(plain)
    noisy["tasks"][1]["config"]["expr"] = "temp  >   30"
    noisy["tasks"][2]["config"]["columns"]["f"] = "TEMP*9/5+32".replace("TEMP", "temp")
    assert _sig_of(plain, "out") == _sig_of(noisy, "out")
    windowed = lambda window: chain(  # noqa: E731
        source(),
        task("w", "window_aggregate", keys=["sensor"], time_column="ts", window=window, watermark="10 seconds",
             aggregates={"n": "count(*)"}),
        task("out", "sink", topic="w"),
    )
    assert _sig_of(windowed("1 minute"), "w") == _sig_of(windowed("60 seconds"), "w")


def test_default_config_equals_explicit_default():
    implicit = chain(source(), task("u", "filter", expr="temp > 1"), task("o", "sink", topic="t"))
    explicit = copy.deepcopy(implicit)
    explicit["tasks"][0]["config"]["schema"] = {"temp": "double", "ts": "timestamp", "sensor": "string", "humidity": "double"}
    assert _sig_of(implicit, "o") == _sig_of(explicit, "o")


def test_different_parent():
    a = urban_etl()
    b = copy.deepcopy(a)
    b["tasks"][1]["config"]["expr"] = "temp > 31"
    assert _sig_of(a, "src") == _sig_of(b, "src")
    assert _sig_of(a, "proj") != _sig_of(b, "proj")


def test_different_port():
    def joined(left, right):
        return {
            "name": "j",
            "tasks": [
                source("a", "ta", {"k": "string", "x": "double"}),
                source("b", "tb", {"k": "string", "x": "double"}),
                task("j", "join", on="k"),
                task("o", "sink", topic="o"),
            ],
            "streams": [stream(left, "j", "left"), stream(right, "j", "right"), stream("j", "o")],
        }

    assert _sig_of(joined("a", "b"), "j") != _sig_of(joined("b", "a"), "j")


def test_union_input_order_does_not_matter():
    def unioned(first, second):
        return {
            "name": "u",
            "tasks": [source("a", "ta"), source("b", "tb"), task("u", "union"), task("o", "sink", topic="o")],
            "streams": [stream(first, "u"), stream(second, "u"), stream("u", "o")],
        }

    assert _sig_of(unioned("a", "b"), "u") == _sig_of(unioned("b", "a"), "u")


def test_different_source_site():
    east = urban_etl()
    west = copy.deepcopy(east)
    west["tasks"][0]["site"] = "eu-west"
    assert _sig_of(east, "src") != _sig_of(west, "src")
    assert _sig_of(east, "out") != _sig_of(west, "out")


def test_site_of_other_tasks_is_only_a_placement_wish():
    plain = urban_etl()
    placed = copy.deepcopy(plain)
    placed["tasks"][1]["site"] = "eu-west"
    assert _sig_of(plain, "out") == _sig_of(placed, "out")


def test_different_config_value():
    a = urban_etl(sink_topic="one")
    b = urban_etl(sink_topic="two")
    assert _sig_of(a, "proj") == _sig_of(b, "proj")
    assert _sig_of(a, "out") != _sig_of(b, "out")
