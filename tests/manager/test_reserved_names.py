"""Column names the runtime cannot carry are refused at submit, wherever a user names the column.

Names starting with ``__`` are the runtime's (``__sana_bucket``, ``__sana_end``,
``__p_*``, ``__agg_*``, ``__l_*``...); Spark resolves names case-insensitively,
so two names of one output differing only in case are one ambiguous column;
a join's renamed right columns must not meet each other.
"""

from __future__ import annotations

import re

import pytest

from manager.exceptions import OperatorConfigRejected
from manager.validate import parse_dataflow
from tests.fixtures.dataflows import chain, source, stream, task

WINDOW = {"keys": ["sensor"], "time_column": "ts", "window": "1 minute", "watermark": "10 seconds",
          "aggregates": {"n": "count(*)"}}
RESERVED = "starts with '__', which Sana reserves for the columns its runtime adds (such as __sana_bucket)"
CASE = "differ only in case; Spark resolves column names case-insensitively, so either would be an ambiguous reference"


def sink(*tasks: dict) -> dict:
    return chain(*tasks, task("out", "sink", topic="o"))


def window(**changes) -> dict:
    return task("w", "window_aggregate", **{**WINDOW, **changes})


def join_flow(left: dict, right: dict, **config) -> dict:
    return {
        "name": "j",
        "tasks": [source("a", "ta", left), source("b", "tb", right), task("j", "join", on=["k"], **config),
                  task("out", "sink", topic="o")],
        "streams": [stream("a", "j", "left"), stream("b", "j", "right"), stream("j", "out")],
    }


def with_schema(*names: str) -> dict:
    return source(schema={**{name: "double" for name in names}, "sensor": "string", "ts": "timestamp"})


@pytest.mark.parametrize(("document", "task_id", "field", "name"), [
    (sink(with_schema("__sana_bucket")), "src", "config.schema.__sana_bucket", "__sana_bucket"),
    (sink(with_schema("__SANA_BUCKET")), "src", "config.schema.__SANA_BUCKET", "__SANA_BUCKET"),
    (sink(with_schema("__sana_ts")), "src", "config.schema.__sana_ts", "__sana_ts"),
    (sink(with_schema("__l_temp")), "src", "config.schema.__l_temp", "__l_temp"),
    (sink(source(), task("p", "select", columns={"__sana_pkey": "temp"})), "p", "config.columns.__sana_pkey", "__sana_pkey"),
    (sink(source(), task("p", "select", columns={"ok": "temp", "__p___agg_n__n": "temp"})), "p",
     "config.columns.__p___agg_n__n", "__p___agg_n__n"),
    (sink(source(), window(aggregates={"__sana_end": "count(*)"})), "w", "config.aggregates.__sana_end", "__sana_end"),
    (sink(source(), window(aggregates={"n": "count(*)", "__Sana_Start": "max(temp)"})), "w",
     "config.aggregates.__Sana_Start", "__Sana_Start"),
    (sink(source(), window(aggregates={"__agg_n__n": "count(*)"})), "w", "config.aggregates.__agg_n__n", "__agg_n__n"),
    (join_flow({"k": "string", "__r_x": "int"}, {"k": "string", "y": "int"}), "a", "config.schema.__r_x", "__r_x"),
])
def test_a_reserved_name_is_refused_where_the_user_gives_it(document, task_id, field, name):
    with pytest.raises(OperatorConfigRejected, match=re.escape(f"task {task_id!r} (")) as caught:
        parse_dataflow(document)
    assert caught.value.message.endswith(f"{field}: column name {name!r} {RESERVED}")
    assert caught.value.culprit == {"task": task_id, "field": field}
    assert caught.value.code == "OPERATOR_CONFIG_INVALID"


def test_a_reserved_key_is_refused_at_the_source_that_names_it():
    with pytest.raises(OperatorConfigRejected, match=re.escape(f"task 'src' (source) config.schema.__sana_bucket: "
                                                               f"column name '__sana_bucket' {RESERVED}")):
        parse_dataflow(sink(with_schema("__sana_bucket"), window(keys=["__sana_bucket"])))
    parse_dataflow(sink(with_schema("_sana_bucket", "sana__bucket"), window(keys=["_sana_bucket"])))  # one _ is the user's


@pytest.mark.parametrize(("document", "task_id", "field", "first", "second"), [
    (sink(with_schema("Temp", "temp")), "src", "config.schema.temp", "Temp", "temp"),
    (sink(with_schema("Sensor")), "src", "config.schema.sensor", "Sensor", "sensor"),
    (sink(source(), task("p", "select", columns={"f": "temp", "F": "humidity"})), "p", "config.columns.F", "f", "F"),
    (sink(source(), window(aggregates={"N": "count(*)", "n": "max(temp)"})), "w", "config.aggregates.n", "N", "n"),
    (sink(source(), window(aggregates={"SENSOR": "count(*)"})), "w", "config.aggregates.SENSOR", "sensor", "SENSOR"),
    (sink(source(), window(aggregates={"Window_End": "max(temp)"})), "w", "config.aggregates.Window_End",
     "window_end", "Window_End"),
    (join_flow({"k": "string", "temp": "double"}, {"k": "string", "Temp": "double"}), "j", "config", "temp", "Temp"),
    (join_flow({"k": "string", "right_a": "double", "b": "int"}, {"k": "string", "b": "int", "RIGHT_B": "int"}), "j",
     "config", "right_b", "RIGHT_B"),
])
def test_names_differing_only_in_case_are_refused_naming_both(document, task_id, field, first, second):
    with pytest.raises(OperatorConfigRejected) as caught:
        parse_dataflow(document)
    assert caught.value.message.startswith(f"task {task_id!r} (")
    assert caught.value.message.endswith(f"{field}: columns {first!r} and {second!r} {CASE}: rename one")
    assert caught.value.culprit == {"task": task_id, "field": field}


@pytest.mark.parametrize("right", [
    {"k": "string", "a": "int", "right_a": "int"},
    {"k": "string", "right_a": "int", "a": "int"},
], ids=["renamed-first", "renamed-second"])
def test_two_right_columns_of_a_join_may_not_end_up_with_one_name(right):
    names = [name for name in right if name != "k"]
    with pytest.raises(OperatorConfigRejected, match=re.escape(
            f"task 'j' (join) config.on: right columns {names[0]!r} and {names[1]!r} would both be named 'right_a' "
            "(a right column the left also has is renamed right_<name>)")):
        parse_dataflow(join_flow({"k": "string", "a": "int"}, right))
    flow = parse_dataflow(join_flow({"k": "string", "a": "int"}, {"k": "string", "a": "int", "b": "int"}))
    assert flow.schemas["j"] == {"k": "string", "a": "int", "right_a": "int", "b": "int"}


def test_a_windowed_join_may_not_bound_the_gap_of_a_join_column():
    both = {"k": "string", "ts": "timestamp", "x": "int"}
    with pytest.raises(OperatorConfigRejected, match=re.escape(
            "task 'j' (join) config.time_column: time column 'ts' is also a join column ('on')")):
        parse_dataflow({**join_flow(both, dict(both), window="10 seconds"),
                        "tasks": [source("a", "ta", both), source("b", "tb", dict(both)),
                                  task("j", "join", on=["k", "ts"], window="10 seconds"), task("out", "sink", topic="o")]})
    parse_dataflow(join_flow(both, dict(both), window="10 seconds"))


def test_a_refused_name_is_found_before_anything_downstream_uses_it():
    document = sink(with_schema("__sana_side"), task("p", "select", columns={"x": "__sana_side"}))
    with pytest.raises(OperatorConfigRejected, match=r"^task 'src' \(source\) config\.schema\.__sana_side: "):
        parse_dataflow(document)
