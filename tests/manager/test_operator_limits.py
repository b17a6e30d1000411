"""Configs that multiply records, state or Spark tasks are refused at submit, naming the task, the field and the limit.

Every member of the class goes through :func:`manager.validate.parse_dataflow`:
windows and slides (records repeated per window), windows and watermarks
(state kept), durations past the workers' 64-bit arithmetic, keyed workers
(Spark tasks per batch), Reshape's helpers and thresholds, columns per
output and union inputs.
"""

from __future__ import annotations

import copy
import dataclasses
import doctest
import importlib
import re

import pytest

from manager.exceptions import OperatorConfigRejected, PortInvalid
from manager.validate import parse_dataflow
from runtime.operators.limits import OperatorLimits, variable
from runtime.operators.window import WindowAggregateConfig
from sana.settings import Settings
from tests.fixtures.dataflows import chain, source, stream, task

WINDOW = {"keys": ["sensor"], "time_column": "ts", "window": "1 minute", "watermark": "10 seconds",
          "aggregates": {"n": "count(*)"}}
SIDE = {"k": "string", "x": "double", "ts": "timestamp"}


def window_flow(**changes) -> dict:
    return chain(source(), task("w", "window_aggregate", **{**WINDOW, **changes}), task("out", "sink", topic="o"))


def join_flow(left: dict | None = None, right: dict | None = None, **config) -> dict:
    return {
        "name": "j",
        "tasks": [source("a", "ta", left or dict(SIDE)), source("b", "tb", right or {**SIDE, "x": "double"}),
                  task("j", "join", **{"on": ["k"], "window": "10 seconds", **config}), task("out", "sink", topic="o")],
        "streams": [stream("a", "j", "left"), stream("b", "j", "right"), stream("j", "out")],
    }


def union_flow(inputs: int) -> dict:
    sources = [source(f"s{i}", f"t{i}") for i in range(inputs)]
    return {"name": "u", "tasks": [*sources, task("u", "union"), task("out", "sink", topic="o")],
            "streams": [*(stream(f"s{i}", "u") for i in range(inputs)), stream("u", "out")]}


def wide(count: int) -> dict[str, str]:
    return {f"c{i}": "int" for i in range(count)}


RAISED = OperatorLimits(max_window_s=365 * 86_400)  # windows are long enough that the slide is what refuses

REFUSED = [
    # (id, document, limits, task, field, limit variable, the message after "task 't' (type) field: ")
    ("window over 7 days", window_flow(window="8 days"), None, "w", "config.window", "SANA_MAX_WINDOW_S",
     "a window of 8 days is longer than 7 days, the longest allowed (SANA_MAX_WINDOW_S=604800)"),
    ("window in hours", window_flow(window="169 hours", slide="169 hours"), None, "w", "config.window", "SANA_MAX_WINDOW_S",
     "a window of 169 hours is longer than 7 days"),
    ("100 days sliding by 1 ms", window_flow(window="100 days", slide="1 milliseconds"), RAISED, "w", "config.slide",
     "SANA_MAX_WINDOWS_PER_RECORD", "a window of 100 days sliding by 1 millisecond puts every record in 8,640,000,000 "
     "windows; at most 100 (SANA_MAX_WINDOWS_PER_RECORD): slide by 1 day or more"),
    ("1 hour sliding by 10 s", window_flow(window="1 hour", slide="10 seconds"), None, "w", "config.slide",
     "SANA_MAX_WINDOWS_PER_RECORD", "puts every record in 360 windows; at most 100 (SANA_MAX_WINDOWS_PER_RECORD): "
     "slide by 36 seconds or more"),
    ("one window too many", window_flow(window="101 seconds", slide="1 second"), None, "w", "config.slide",
     "SANA_MAX_WINDOWS_PER_RECORD", "puts every record in 101 windows"),
    ("ceil, not floor", window_flow(window="1001 milliseconds", slide="10 ms"), None, "w", "config.slide",
     "SANA_MAX_WINDOWS_PER_RECORD", "puts every record in 101 windows; at most 100 (SANA_MAX_WINDOWS_PER_RECORD): "
     "slide by 11 milliseconds or more"),
    ("window watermark", window_flow(watermark="2 days"), None, "w", "config.watermark", "SANA_MAX_WATERMARK_S",
     "a watermark of 2 days is longer than 1 day, the longest allowed (SANA_MAX_WATERMARK_S=86400)"),
    ("join window", join_flow(window="8 days"), None, "j", "config.window", "SANA_MAX_WINDOW_S",
     "a window of 8 days is longer than 7 days"),
    ("join watermark", join_flow(watermark="1441 minutes"), None, "j", "config.watermark", "SANA_MAX_WATERMARK_S",
     "a watermark of 1441 minutes is longer than 1 day"),
    ("window workers", window_flow(workers=17), None, "w", "config.workers", "SANA_MAX_KEYED_WORKERS",
     "17 workers; at most 16 (SANA_MAX_KEYED_WORKERS)"),
    ("join workers", join_flow(workers=64), None, "j", "config.workers", "SANA_MAX_KEYED_WORKERS",
     "64 workers; at most 16 (SANA_MAX_KEYED_WORKERS)"),
    ("helpers", join_flow(reshape={"max_helpers": 8}), None, "j", "config.reshape.max_helpers",
     "SANA_MAX_RESHAPE_HELPERS", "8 helpers; at most 7 (SANA_MAX_RESHAPE_HELPERS)"),
    ("eta", window_flow(reshape={"eta": 1.05}), None, "w", "config.reshape.eta", "SANA_MIN_RESHAPE_ETA",
     "eta 1.05 is below 1.1, the lowest allowed (SANA_MIN_RESHAPE_ETA)"),
    ("tau_min", join_flow(reshape={"tau_min": 0.01, "tau_max": 0.5}), None, "j", "config.reshape.tau_min",
     "SANA_MIN_RESHAPE_TAU", "tau_min 0.01 is below 0.05, the lowest allowed (SANA_MIN_RESHAPE_TAU)"),
    ("tau_max", window_flow(reshape={"tau_max": 0.04}), None, "w", "config.reshape.tau_max", "SANA_MIN_RESHAPE_TAU",
     "tau_max 0.04 is below 0.05"),
    ("source columns", chain(source(schema=wide(257)), task("out", "sink", topic="o")), None, "src",
     "config.schema.c256", "SANA_MAX_COLUMNS", "257 columns in the output; at most 256 (SANA_MAX_COLUMNS)"),
    ("select columns", chain(source(), task("p", "select", columns={f"f{i}": "temp" for i in range(300)}),
                             task("out", "sink", topic="o")), None, "p", "config.columns.f256", "SANA_MAX_COLUMNS",
     "300 columns in the output; at most 256"),
    ("join output columns", join_flow({"k": "string", **wide(150)}, {"k": "string", **{f"d{i}": "int" for i in range(150)}},
                                      window=None), None, "j", "config", "SANA_MAX_COLUMNS",
     "301 columns in the output; at most 256"),
]


@pytest.mark.parametrize(("document", "limits", "task_id", "field", "limit", "message"),
                         [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_config_over_a_limit_is_refused_naming_task_field_and_limit(document, limits, task_id, field, limit, message):
    with pytest.raises(OperatorConfigRejected, match=re.escape(message)) as caught:
        parse_dataflow(document, limits=limits)
    assert caught.value.code == "OPERATOR_CONFIG_INVALID"
    assert caught.value.culprit == {"task": task_id, "field": field, "limit": limit}
    assert caught.value.message.startswith(f"task {task_id!r} (")
    assert f") {field}: " in caught.value.message


def test_a_union_over_its_inputs_limit_is_refused():
    parse_dataflow(union_flow(16))
    with pytest.raises(PortInvalid, match=re.escape(
            "task 'u' (union) takes 17 streams on port 'in'; at most 16 (SANA_MAX_UNION_INPUTS)")) as caught:
        parse_dataflow(union_flow(17))
    assert caught.value.culprit == {"task": "u", "field": "port", "limit": "SANA_MAX_UNION_INPUTS"}


@pytest.mark.parametrize(("duration", "field"), [
    ("9000000000000000 days", "window"),
    ("3651 days", "window"),
    ("87625 hours", "watermark"),
    ("315360000001 ms", "watermark"),
    ("9" * 5000 + " seconds", "window"),  # past Python's 4,300 digits: refused by length, not by a crash
])
def test_a_duration_past_the_workers_arithmetic_is_refused_whatever_the_limits(duration, field):
    unbounded = OperatorLimits(max_window_s=315_360_000, max_watermark_s=315_360_000)
    config = {"window": duration, "slide": duration} if field == "window" else {field: duration}
    with pytest.raises(OperatorConfigRejected, match=r"task 'w' \(window_aggregate\) config\.\w+: Value error, '.*' is "
                                                     r"longer than 3650 days, the longest duration a config may give"):
        parse_dataflow(window_flow(**config), limits=unbounded)


def test_every_limit_takes_its_bound_itself():
    parse_dataflow(window_flow(window="7 days", watermark="1 day", workers=16,
                               reshape={"max_helpers": 7, "eta": 1.1, "tau_min": 0.05, "tau_max": 0.05}))
    parse_dataflow(window_flow(window="100 seconds", slide="1 second"))
    parse_dataflow(join_flow(window="7 days", watermark="24 hours"))
    parse_dataflow(chain(source(schema=wide(256)), task("out", "sink", topic="o")))
    with pytest.raises(OperatorConfigRejected, match="puts every record in 101 windows"):
        parse_dataflow(window_flow(window="101 seconds", slide="1 second"))


def test_the_service_limits_decide_and_the_runtime_runs_what_was_accepted():
    month = window_flow(window="30 days", slide="1 day", watermark="2 days", workers=32)
    with pytest.raises(OperatorConfigRejected, match=re.escape("config.workers: 32 workers; at most 16 (SANA_MAX_KEYED_WORKERS)")):
        parse_dataflow(month)
    with pytest.raises(OperatorConfigRejected, match=re.escape("config.window: a window of 30 days is longer than 7 days")):
        parse_dataflow(month, limits=OperatorLimits(max_keyed_workers=32))
    raised = OperatorLimits(max_window_s=30 * 86_400, max_watermark_s=2 * 86_400, max_keyed_workers=32)
    flow = parse_dataflow(month, limits=raised)
    # the runtime validates the stored config again with the model alone: a limit lowered since must not stop it
    assert WindowAggregateConfig.model_validate(flow.tasks["w"].config).window == "2592000 seconds"


def test_the_limits_are_the_settings(monkeypatch):
    for item in dataclasses.fields(OperatorLimits):
        monkeypatch.delenv(variable(item.name), raising=False)
    assert OperatorLimits.from_settings(Settings()) == OperatorLimits()
    monkeypatch.setenv("SANA_MAX_WINDOW_S", "2592000")
    monkeypatch.setenv("SANA_MAX_WINDOWS_PER_RECORD", "30")
    monkeypatch.setenv("SANA_MIN_RESHAPE_ETA", "1.3")
    limits = OperatorLimits.from_settings(Settings())
    assert (limits.max_window_s, limits.max_windows_per_record, limits.min_reshape_eta) == (2_592_000, 30, 1.3)
    parse_dataflow(window_flow(window="30 days", slide="1 day"), limits=limits)
    with pytest.raises(OperatorConfigRejected, match=r"32 windows; at most 30 \(SANA_MAX_WINDOWS_PER_RECORD\)"):
        parse_dataflow(window_flow(window="30 days", slide="23 hours"), limits=limits)


@pytest.mark.parametrize(("name", "value"), [("max_window_s", 315_360_001), ("max_keyed_workers", 65),
                                             ("min_reshape_eta", 1.0), ("max_union_inputs", 1)])
def test_a_limit_past_what_the_runtime_can_take_is_a_bad_setting(name, value):
    with pytest.raises(ValueError, match=name):
        Settings(**{name: value})


@pytest.mark.parametrize("name", ["runtime.operators.limits", "runtime.operators.names", "runtime.operators.fields",
                                  "runtime.operators.join"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.redis
def test_a_dataflow_accepted_under_raised_limits_is_still_planned_again(redis_client, state_prefix):
    """Re-placement parses the stored documents again: the limits of their submit held, not today's defaults."""
    from manager.service import Manager
    from tests.manager.test_wan_sharing import THREE_SITES, MeasuringRuntime, hot

    raised = OperatorLimits(max_columns=300)
    wide_urban = {"sensor": "string", "temp": "double", "humidity": "double", "ts": "timestamp", **wide(253)}

    def document(sink_topic: str, home: str, name: str) -> dict:
        made = hot(sink_topic, home, name)
        made["tasks"][0]["config"]["schema"] = dict(wide_urban)  # 257 columns: over the default 256
        return made

    runtime = MeasuringRuntime(redis_client, state_prefix)
    manager = Manager(redis_client, state_prefix, runtime)
    manager.start()
    manager.set_wan(copy.deepcopy(THREE_SITES))
    first_document = document("a", "H3", "one")
    first_document["tasks"][1]["site"] = "P"
    first = manager.submit_validated(parse_dataflow(first_document, limits=raised))
    runtime.written = {first.tasks["hot"]: 250_000.0}  # 2 Mbps: the filter at P is shared towards H2
    second = manager.submit_validated(parse_dataflow(document("b", "H2", "two"), limits=raised))
    assert second.tasks["hot"] == first.tasks["hot"]
    runtime.written = {first.tasks["hot"]: 750_000.0}  # 6 Mbps over P -> H2's 5: re-place the second
    (entry,) = manager.replacement(0.95)["dataflows"]
    assert entry["dataflow"] == second.id and "error" not in entry, entry.get("error")
    assert [move["task"] for move in entry["moves"]] == ["hot"]
