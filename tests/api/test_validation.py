"""Every rejection rule of the dataflow document, through the API: status and culprit."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.fixtures.dataflows import chain, source, stream, task, urban_etl

pytestmark = pytest.mark.redis


def _bad(**replace):
    document = urban_etl()
    document.update(replace)
    return document


def _tasks_with(index: int, **changes):
    document = urban_etl()
    document["tasks"][index].update(changes)
    return document


CASES = [
    # (rule, body, status, code, text the message must contain)
    ("not JSON", b'{"name": "x", "tasks": [', 422, "NOT_JSON", "not JSON"),
    ("not an object", b"[1, 2]", 422, "DOCUMENT_INVALID", "JSON object"),
    ("nested thousands deep", b'{"name": "x", "tasks": ' + b"[" * 5000 + b"]" * 5000 + b"}", 422, "DOCUMENT_INVALID", "nests deeper"),
    ("nested deeper than a dataflow needs", b'{"name": "x", "tasks": [{"id": "a", "config": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}]}",
     422, "DOCUMENT_INVALID", "nests deeper than 32 levels at tasks[0].config.a.a"),
    ("missing name", {k: v for k, v in urban_etl().items() if k != "name"}, 422, "DOCUMENT_INVALID", "name"),
    ("missing tasks", {"name": "x", "streams": []}, 422, "DOCUMENT_INVALID", "tasks"),
    ("task missing type", {"name": "x", "tasks": [{"id": "lonely", "config": {}}], "streams": []}, 422, "DOCUMENT_INVALID", "task 'lonely'"),
    ("bad task id", _tasks_with(1, id="has space"), 422, "DOCUMENT_INVALID", "tasks[1]"),
    ("name too long", _bad(name="n" * 129), 422, "DOCUMENT_INVALID", "name"),
    ("duplicate ids", _tasks_with(2, id="hot"), 422, "TASK_ID_DUPLICATE", "'hot'"),
    ("stream to unknown task", _bad(streams=urban_etl()["streams"] + [stream("proj", "ghost")]), 422, "STREAM_UNKNOWN_TASK", "'ghost'"),
    ("stream from unknown task", _bad(streams=urban_etl()["streams"] + [stream("nowhere", "out")]), 422, "STREAM_UNKNOWN_TASK", "'nowhere'"),
    ("duplicate stream", _bad(streams=urban_etl()["streams"] + [stream("src", "hot")]), 422, "STREAM_DUPLICATE", "'src' -> 'hot'"),
    (
        "cycle",
        {"name": "loop", "tasks": [source(), task("u", "union"), task("f", "filter", expr="temp > 1"), task("out", "sink", topic="o")],
         "streams": [stream("src", "u"), stream("f", "u"), stream("u", "f"), stream("f", "out")]},
        422, "DAG_CYCLE", "'f' -> 'u' -> 'f'",
    ),
    ("source with inputs", _bad(streams=urban_etl()["streams"] + [stream("hot", "src")]), 422, "SOURCE_HAS_INPUTS", "'src'"),
    (
        "sink with outputs",
        _bad(tasks=urban_etl()["tasks"] + [task("after", "sink", topic="x")], streams=urban_etl()["streams"] + [stream("out", "after")]),
        422, "SINK_HAS_OUTPUTS", "'out'",
    ),
    (
        "task reaching no sink",
        _bad(tasks=urban_etl()["tasks"] + [task("dangling", "filter", expr="temp < 0")], streams=urban_etl()["streams"] + [stream("src", "dangling")]),
        422, "TASK_REACHES_NO_SINK", "'dangling'",
    ),
    ("unknown type", _tasks_with(1, type="mapreduce"), 422, "OPERATOR_UNKNOWN", "task 'hot'"),
    ("unknown config key", _tasks_with(1, config={"expr": "temp > 1", "where": "x"}), 422, "OPERATOR_CONFIG_INVALID", "task 'hot' (filter) config.where"),
    ("missing config key", _tasks_with(1, config={}), 422, "OPERATOR_CONFIG_INVALID", "task 'hot' (filter) config.expr"),
    ("SQL that does not parse", _tasks_with(1, config={"expr": "temp >"}), 422, "OPERATOR_CONFIG_INVALID", "task 'hot' (filter) config.expr"),
    ("column the input lacks", _tasks_with(2, config={"columns": {"f": "tmp * 2"}}), 422, "OPERATOR_CONFIG_INVALID", "'tmp' is not in the input"),
    ("filter that is not boolean", _tasks_with(1, config={"expr": "temp + 1"}), 422, "OPERATOR_CONFIG_INVALID", "needs a boolean"),
    ("port the operator lacks", _bad(streams=[stream("src", "hot", "left"), stream("hot", "proj"), stream("proj", "out")]), 422, "PORT_INVALID", "task 'hot'"),
    ("unknown column type", _tasks_with(0, config={"topic": "urban", "schema": {"temp": "quaternion"}}), 422, "OPERATOR_CONFIG_INVALID", "task 'src'"),
    # expressions are data: allow-listed functions only, deterministic, bounded output (runtime/operators/sql.py)
    ("nondeterministic filter", _tasks_with(1, config={"expr": "rand() > 0.5"}), 422, "OPERATOR_CONFIG_INVALID", "'rand() > 0.5': rand() is nondeterministic"),
    ("uuid in a filter", _tasks_with(1, config={"expr": "uuid() IS NOT NULL"}), 422, "OPERATOR_CONFIG_INVALID", "uuid() is nondeterministic"),
    ("unbounded repeat", _tasks_with(1, config={"expr": "length(repeat('a', 2000000000)) > 0"}), 422, "OPERATOR_CONFIG_INVALID", "repeat() makes its output as big as its size argument"),
    ("reflect", _tasks_with(1, config={"expr": "reflect('java.lang.System', 'exit', 0) IS NULL"}), 422, "OPERATOR_CONFIG_INVALID", "function reflect() is not allowed"),
    ("java_method in a projection", _tasks_with(2, config={"columns": {"f": "java_method('java.lang.Math', 'random')"}}), 422, "OPERATOR_CONFIG_INVALID", "function java_method() is not allowed"),
    ("current time in a projection", _tasks_with(2, config={"columns": {"f": "current_timestamp()"}}), 422, "OPERATOR_CONFIG_INVALID", "task 'proj' (select) config.columns.f"),
    # names the runtime uses itself, and names Spark cannot tell apart (runtime/operators/names.py)
    ("reserved source column", _tasks_with(0, config={"topic": "urban", "schema": {"__sana_bucket": "int", "temp": "double"}}),
     422, "OPERATOR_CONFIG_INVALID", "task 'src' (source) config.schema.__sana_bucket: column name '__sana_bucket' starts with '__'"),
    ("reserved output column", _tasks_with(2, config={"columns": {"sensor": "sensor", "__SANA_END": "temp"}}), 422,
     "OPERATOR_CONFIG_INVALID", "task 'proj' (select) config.columns.__SANA_END: column name '__SANA_END' starts with '__'"),
    ("columns differing in case", _tasks_with(2, config={"columns": {"F": "temp", "f": "temp * 9 / 5 + 32"}}), 422,
     "OPERATOR_CONFIG_INVALID", "task 'proj' (select) config.columns.f: columns 'F' and 'f' differ only in case"),
]


def _keyed(kind: str, **config) -> dict:
    """src -> a window_aggregate or a join (of src with another source) -> sink, with ``config`` changed."""
    if kind == "window_aggregate":
        base = {"keys": ["sensor"], "time_column": "ts", "window": "1 minute", "watermark": "10 seconds",
                "aggregates": {"n": "count(*)"}}
        return chain(source(), task("k", "window_aggregate", **{**base, **config}), task("out", "sink", topic="t"))
    document = _keyed_flow({}, "t")
    document["tasks"][2]["config"].update(config)
    document["tasks"][2]["id"] = "k"
    document["streams"] = [stream("a", "k", "left"), stream("b", "k", "right"), stream("k", "out")]
    return document


LIMITED = [
    # (kind, config, field, limit variable, text of the message)
    ("window_aggregate", {"window": "30 days"}, "config.window", "SANA_MAX_WINDOW_S", "a window of 30 days is longer than 7 days"),
    ("window_aggregate", {"window": "1 hour", "slide": "1 second"}, "config.slide", "SANA_MAX_WINDOWS_PER_RECORD",
     "puts every record in 3,600 windows; at most 100"),
    ("window_aggregate", {"watermark": "3 days"}, "config.watermark", "SANA_MAX_WATERMARK_S", "a watermark of 3 days"),
    ("window_aggregate", {"workers": 32}, "config.workers", "SANA_MAX_KEYED_WORKERS", "32 workers; at most 16"),
    ("join", {"window": "14 days"}, "config.window", "SANA_MAX_WINDOW_S", "a window of 14 days is longer than 7 days"),
    ("join", {"reshape": {"max_helpers": 20}}, "config.reshape.max_helpers", "SANA_MAX_RESHAPE_HELPERS", "20 helpers; at most 7"),
    ("join", {"reshape": {"eta": 1.01}}, "config.reshape.eta", "SANA_MIN_RESHAPE_ETA", "eta 1.01 is below 1.1"),
]


@pytest.mark.parametrize(("kind", "config", "field", "limit", "text"), LIMITED,
                         ids=[f"{case[0]}-{case[2]}" for case in LIMITED])
def test_a_config_over_a_limit_gets_422_naming_task_field_and_limit(client, kind, config, field, limit, text):
    before = client.get("/stats").json()
    response = client.post("/dataflows", json=_keyed(kind, **config))
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["code"] == "OPERATOR_CONFIG_INVALID"
    assert answer["culprit"] == {"task": "k", "field": field, "limit": limit}
    assert answer["detail"].startswith(f"task 'k' ({kind}) {field}: ") and text in answer["detail"] and limit in answer["detail"]
    assert client.get("/stats").json() == before


def test_the_api_enforces_the_limits_of_its_settings(settings_factory):
    month = _keyed("window_aggregate", window="30 days", slide="1 day")
    app = create_app(settings_factory(max_window_s=30 * 86_400, max_windows_per_record=10))
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as client:  # a local caller
        refused = client.post("/dataflows", json=month)
        assert refused.status_code == 422
        assert refused.json()["culprit"] == {"task": "k", "field": "config.slide", "limit": "SANA_MAX_WINDOWS_PER_RECORD"}
        assert "30 windows; at most 10 (SANA_MAX_WINDOWS_PER_RECORD): slide by 3 days or more" in refused.json()["detail"]
        assert client.post("/dataflows", json=_keyed("window_aggregate", window="30 days", slide="3 days")).status_code == 201


@pytest.mark.parametrize(("rule", "body", "status", "code", "named"), CASES, ids=[case[0] for case in CASES])
def test_rejection_names_the_culprit(client, rule, body, status, code, named):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post("/dataflows", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    answer = response.json()
    assert answer["code"] == code
    assert named in answer["detail"]


def test_rejection_changes_nothing(client):
    before = client.get("/stats").json()
    response = client.post("/dataflows", json=_tasks_with(1, type="mapreduce"))
    assert response.status_code == 422
    assert client.get("/stats").json() == before
    assert client.get("/dataflows").json() == {"dataflows": []}


def test_body_over_one_mebibyte_is_413(client):
    document = urban_etl(name="big")
    document["description"] = "x" * (1 << 20)
    response = client.post("/dataflows", json=document)
    assert response.status_code == 413
    assert "1 MiB" in response.json()["detail"]


def test_body_streamed_without_length_over_limit_is_413(client):
    def chunks():
        yield b'{"name": "x", "description": "'
        for _ in range(17):
            yield b"y" * 65536
        yield b'"}'

    response = client.post("/dataflows", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_join_ports_and_window_aggregate_are_checked(client):
    join = {
        "name": "join",
        "tasks": [
            source("a", "left-topic", {"k": "string", "x": "double", "ts": "timestamp"}),
            source("b", "right-topic", {"k": "string", "y": "double", "ts": "timestamp"}),
            task("j", "join", on=["k"], window="10 seconds"),
            task("agg", "window_aggregate", keys=["k"], time_column="ts", window="1 minute", watermark="10 seconds",
                 aggregates={"n": "count(*)", "mean_x": "avg(x)"}),
            task("out", "sink", topic="joined"),
        ],
        "streams": [stream("a", "j", "left"), stream("b", "j", "right"), stream("j", "agg"), stream("agg", "out")],
    }
    assert client.post("/dataflows", json=join).status_code == 201
    one_sided = json.loads(json.dumps(join))
    one_sided["streams"][1]["port"] = "left"
    response = client.post("/dataflows", json=one_sided)
    assert response.status_code == 422
    assert response.json()["code"] == "PORT_INVALID"
    assert "task 'j' (join) needs exactly one stream(s) on port 'left', got 2" in response.json()["detail"]


def test_two_sinks_writing_one_topic_differently(client):
    document = chain(source(), task("hot", "filter", expr="temp > 3"), task("out", "sink", topic="t"))
    document["tasks"].append(task("out2", "sink", topic="t"))
    document["streams"].append(stream("src", "out2"))
    response = client.post("/dataflows", json=document)
    assert response.status_code == 422
    assert "'out' and 'out2' both write topic 't'" in response.json()["detail"]


@pytest.mark.parametrize(("delay", "text"), [
    ("1 minute", "'1 minute' is longer than 30 seconds, the longest a sink's records may wait for a micro-batch"),
    ("soon", "'soon' is not a duration like '10 seconds'"),
    (5, "config.max_delay"),
])
def test_a_sinks_max_delay_is_checked_and_names_the_field(client, delay, text):
    document = chain(source(), task("hot", "filter", expr="temp > 3"), task("out", "sink", topic="t", max_delay=delay))
    response = client.post("/dataflows", json=document)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["code"] == "OPERATOR_CONFIG_INVALID" and answer["culprit"] == {"task": "out", "field": "config.max_delay"}
    assert answer["detail"].startswith("task 'out' (sink) config.max_delay: ") and text in answer["detail"]
    assert client.get("/stats").json()["running_tasks"] == 0


def test_a_sinks_max_delay_tunes_how_it_runs_not_what_it_writes(client):
    plain = chain(source(), task("hot", "filter", expr="temp > 3"), task("out", "sink", topic="t"))
    first = client.post("/dataflows", json=plain)
    assert first.status_code == 201
    delayed = chain(source(), task("hot", "filter", expr="temp > 3"), task("out", "sink", topic="t", max_delay="5000 ms"),
                    name="delayed")
    second = client.post("/dataflows", json=delayed)
    assert second.status_code == 201, second.text
    assert sorted(second.json()["reused"]) == ["hot", "out", "src"], "one sink writes the topic, not two"
    assert client.get("/stats").json()["running_tasks"] == 3


def _keyed_flow(join_config: dict, sink: str = "joined-keyed") -> dict:
    return {
        "name": "keyed-knobs",
        "tasks": [
            source("a", "left-topic", {"k": "string", "x": "double", "ts": "timestamp"}),
            source("b", "right-topic", {"k": "string", "y": "double", "ts": "timestamp"}),
            task("j", "join", on=["k"], window="10 seconds", **join_config),
            task("out", "sink", topic=sink),
        ],
        "streams": [stream("a", "j", "left"), stream("b", "j", "right"), stream("j", "out")],
    }


@pytest.mark.parametrize(("knobs", "named"), [
    ({"workers": 0}, "config.workers"),
    ({"workers": 65}, "config.workers"),
    ({"reshape": {"eta": 0.5}}, "config.reshape.eta"),
    ({"reshape": {"split": "halves"}}, "config.reshape.split"),
    ({"reshape": {"tau_min": 0.9, "tau_max": 0.5}}, "tau_min 0.9 is above tau_max 0.5"),
    ({"reshape": {"helpers": 2}}, "config.reshape.helpers"),
])
def test_keyed_knobs_are_checked_and_name_the_field(client, knobs, named):
    response = client.post("/dataflows", json=_keyed_flow(knobs))
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "OPERATOR_CONFIG_INVALID"
    assert "task 'j' (join)" in response.json()["detail"] and named in response.json()["detail"]
    assert client.get("/stats").json()["running_tasks"] == 0


def test_keyed_knobs_do_not_change_what_is_shared(client):
    first = client.post("/dataflows", json=_keyed_flow({"workers": 4, "reshape": {"eta": 2.0}}, "out-1"))
    second = client.post("/dataflows", json=_keyed_flow({}, "out-2"))
    assert first.status_code == second.status_code == 201
    assert sorted(second.json()["reused"]) == ["a", "b", "j"]  # the knobs tune how the join runs, not what it computes


UNSAFE_EXPRESSIONS = [
    # (case, task, field, expression, text of the message): every input gets a coded 422, never a 500
    ("50 parentheses", "hot", "expr", "(" * 50 + "temp" + ")" * 50 + " > 1", "nests 21 levels deep"),
    ("NOT NOT ...", "hot", "expr", "NOT " * 300 + "temp > 1", "nests 21 levels deep"),
    ("- - ...", "hot", "expr", "- " * 500 + "temp > 1", "nests 21 levels deep"),
    ("nested CASE", "hot", "expr", "CASE WHEN temp > 1 THEN " * 60 + "true" + " END" * 60, "nests 21 levels deep"),
    ("nested calls", "proj", "columns.f", "abs(" * 60 + "temp" + ")" * 60, "nests 21 levels deep"),
    ("a + a + ...", "hot", "expr", " + ".join(["temp"] * 1400) + " > 1", "its parsed tree is more than 1,000 levels deep (at most 100)"),
    ("::int chain", "proj", "columns.f", "temp" + "::int" * 500, "its parsed tree is 502 levels deep"),
    ("deep regex", "hot", "expr", "sensor RLIKE '" + "(" * 40 + "a" + ")" * 40 + "'", "it nests groups more than 20 deep"),
    ("typed literal now", "hot", "expr", "ts < TIMESTAMP 'now'", "is the string 'now', which Spark turns into the current date"),
    ("implicit tomorrow", "hot", "expr", "ts > 'tomorrow'", "is the string 'tomorrow'"),
    ("text to timestamp", "proj", "columns.f", "CAST(sensor AS TIMESTAMP)", "'sensor' is text from the row that becomes a timestamp"),
    ("nested repeat", "proj", "columns.f", "repeat(repeat(repeat(sensor, 100), 100), 100)", "can make a value of up to 10,000 MiB"),
    ("catastrophic regex", "hot", "expr", "repeat(sensor, 100) RLIKE '(.*a){8}b'", "nested quantifiers"),
    ("LIKE with several %", "hot", "expr", "sensor LIKE '%a%b%'", "LIKE pattern '%a%b%' has '%' wildcards"),
    ("pattern from a column", "hot", "expr", "sensor RLIKE sensor", "RLIKE takes its pattern from 'sensor'"),
]


@pytest.mark.parametrize(("case", "task_id", "field", "expression", "text"), UNSAFE_EXPRESSIONS,
                         ids=[case[0] for case in UNSAFE_EXPRESSIONS])
def test_an_unsafe_or_too_deep_expression_gets_422_naming_task_and_culprit(client, case, task_id, field, expression, text):
    config = {"expr": expression} if task_id == "hot" else {"columns": {"sensor": "sensor", "f": expression, "ts": "ts"}}
    before = client.get("/stats").json()
    response = client.post("/dataflows", json=_tasks_with(1 if task_id == "hot" else 2, config=config))
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["code"] == "OPERATOR_CONFIG_INVALID"
    assert (answer["culprit"]["task"], answer["culprit"]["field"]) == (task_id, f"config.{field}")
    kind = "filter" if task_id == "hot" else "select"
    assert answer["detail"].startswith(f"task {task_id!r} ({kind}) config.{field}: ") and text in answer["detail"]
    assert client.get("/stats").json() == before
