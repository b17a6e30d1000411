"""Every rejection rule of CONTRACT.md section 1, through the API: status and culprit."""

from __future__ import annotations

import json

import pytest

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
]


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
