"""Reading a topic through the API and ``sana tail``: from the start or from now, copies dropped, who may read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from kafka import KafkaAdminClient

from api.app import create_app
from tests.api.clients import bearer, local_client, write_tokens
from tests.fixtures import services
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.kafka_io import topic_maker
from tests.fixtures.tail_io import batch, produce

pytestmark = [pytest.mark.redis, pytest.mark.kafka]

TOKENS = {"ann": ("user", "ann-token"), "bob": ("user", "bob-token"), "ops": ("admin", "ops-token")}
kafka_bootstrap = services.kafka_bootstrap  # the session's broker (a fixture)


@pytest.fixture
def make_topic(kafka_bootstrap):
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    yield topic_maker(admin)
    admin.close()


@pytest.fixture
def replayed(kafka_bootstrap, make_topic) -> str:
    """A topic holding a batch cut short by a crash, a record without names, the batch's replay and the next batch."""
    topic = make_topic("tail")
    produce(kafka_bootstrap, topic, batch("q-1", 7, [{"n": 0}, {"n": 1}], run="r1") + [({"plain": True}, None)]
            + batch("q-1", 7, [{"n": 0}, {"n": 1}, {"n": 2}], run="r2") + batch("q-1", 8, [{"n": 3}], run="r2"))
    return topic


ONCE = [{"n": 0}, {"n": 1}, {"plain": True}, {"n": 2}, {"n": 3}]
EVERY_COPY = [{"n": 0}, {"n": 1}, {"plain": True}, {"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]


@pytest.fixture
def client(settings_factory, kafka_bootstrap) -> Iterator[TestClient]:
    with local_client(create_app(settings_factory(kafka_bootstrap=kafka_bootstrap))) as test_client:
        yield test_client


def records_of(answer) -> list:
    assert answer.status_code == 200, answer.text
    return [record["value"] for record in answer.json()["records"]]


def test_records_from_the_start_each_once_then_after_the_cursor(client, kafka_bootstrap, replayed):
    first = client.get(f"/topics/{replayed}/records", params={"from": "start", "limit": 2})
    assert records_of(first) == ONCE[:2]
    rest = client.get(f"/topics/{replayed}/records", params={"cursor": first.json()["next"]})
    assert records_of(rest) == ONCE[2:]
    assert rest.json()["records"][-1] == {"partition": 0, "offset": 6, "key": None, "value": {"n": 3},
                                          "headers": {"sana.writer": "q-1", "sana.run": "r2", "sana.batch": "8",
                                                      "sana.seq": "0"}}
    raw = client.get(f"/topics/{replayed}/records", params={"from": "start", "raw": "true"})
    assert records_of(raw) == EVERY_COPY

    now = client.get(f"/topics/{replayed}/records")  # from now: nothing yet
    assert records_of(now) == []
    produce(kafka_bootstrap, replayed, batch("q-1", 8, [{"n": 3}], run="r3") + batch("q-1", 9, [{"n": 4}], run="r3"))
    assert records_of(client.get(f"/topics/{replayed}/records", params={"cursor": now.json()["next"]})) == [{"n": 3}, {"n": 4}]
    assert records_of(client.get(f"/topics/{replayed}/records", params={"cursor": rest.json()["next"]})) == [{"n": 4}]


def test_bad_requests_are_refused_naming_what_is_wrong(client, replayed):
    missing = client.get("/topics/no-such-topic/records")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "no topic 'no-such-topic'", "code": "TOPIC_NOT_FOUND",
                              "culprit": {"topic": "no-such-topic"}}
    assert client.get(f"/topics/{replayed}/records", params={"cursor": "bm9wZQ"}).json()["code"] == "TAIL_CURSOR_INVALID"
    for params in ({"limit": 0}, {"limit": 1001}, {"wait_s": 31}, {"from": "yesterday"}):
        assert client.get(f"/topics/{replayed}/records", params=params).status_code == 422, params
    assert client.get("/topics/no%20spaces/records").status_code == 422


def test_a_dry_run_without_a_broker_has_no_topic(settings_factory):
    with local_client(create_app(settings_factory())) as client:
        answer = client.get("/topics/urban/records")
    assert answer.status_code == 404
    assert answer.json()["detail"] == "no topic 'urban': a dry run has no broker (SANA_KAFKA_BOOTSTRAP names one to read)"


def test_a_user_reads_the_topics_of_their_own_dataflows_only(settings_factory, kafka_bootstrap, make_topic,
                                                             tmp_path):
    source, sink, other = make_topic("ann.src"), make_topic("ann.alerts"), make_topic("ann.unused")
    for topic in (source, sink, other):
        produce(kafka_bootstrap, topic, [({"in": topic}, None)])
    flow = urban_etl(sink)
    flow["tasks"][0]["config"]["topic"] = source
    settings = settings_factory(kafka_bootstrap=kafka_bootstrap, tokens_file=write_tokens(tmp_path, TOKENS))
    with TestClient(create_app(settings)) as app:
        assert app.post("/dataflows", json=flow, headers=bearer(TOKENS, "ann")).status_code == 201

        def read(topic: str, name: str):
            return app.get(f"/topics/{topic}/records", params={"from": "start"}, headers=bearer(TOKENS, name))

        for topic in (source, sink):
            assert records_of(read(topic, "ann")) == [{"in": topic}]
            assert records_of(read(topic, "ops")) == [{"in": topic}]
        assert records_of(read(other, "ops")) == [{"in": other}]
        for name, topic in (("bob", sink), ("bob", source), ("ann", other), ("bob", "no-such-topic")):
            refused = read(topic, name)  # another's topic answers as a missing one does
            assert refused.status_code == 404, (name, topic)
            assert refused.json() == {"detail": f"no topic {topic!r} among the topics {name!r}'s dataflows read or write",
                                      "code": "TOPIC_NOT_FOUND", "culprit": {"topic": topic}}
        assert app.get(f"/topics/{sink}/records").status_code == 401
