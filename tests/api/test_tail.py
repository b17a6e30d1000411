"""Reading a topic through the API and ``sana tail``: from the start or from now, copies dropped, who may read."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from kafka import KafkaAdminClient

from api.app import create_app
from api.exit_codes import EXIT_OK, EXIT_SERVER, EXIT_USAGE
from tests.api.clients import bearer, local_client, write_tokens
from tests.fixtures import services
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.kafka_io import topic_maker
from tests.fixtures.tail_io import batch, produce

pytestmark = [pytest.mark.redis, pytest.mark.kafka]

TOKENS = {"ann": ("user", "ann-token"), "bob": ("user", "bob-token"), "ops": ("admin", "ops-token")}
kafka_bootstrap = services.kafka_bootstrap  # the session's broker (a fixture)
WAIT_S = 60  # what a test waits for a line or an exit at most; no test sleeps


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


@pytest.fixture
def api_url(settings_factory, kafka_bootstrap) -> Iterator[str]:
    with services.ServerThread(create_app(settings_factory(kafka_bootstrap=kafka_bootstrap))) as url:
        yield url


def sana_command(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "api.cli", "--api", url, *args]


def sana(url: str, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    env = services.sana_env(**({"SANA_TOKEN": token} if token else {}))
    return subprocess.run(sana_command(url, *args), capture_output=True, text=True, timeout=WAIT_S, env=env)


def printed(done: subprocess.CompletedProcess) -> list:
    assert done.returncode == EXIT_OK, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_sana_tail_prints_each_record_once_or_every_copy_with_raw(api_url, replayed):
    done = sana(api_url, "tail", replayed, "--from-start", "-n", "5")
    assert printed(done) == ONCE
    assert done.stderr == f"sana: tailing {replayed} from its first record, each record once, until 5 record(s) are printed\n"
    assert printed(sana(api_url, "tail", replayed, "-b", "-n", "7", "--raw")) == EVERY_COPY
    assert printed(sana(api_url, "tail", replayed, "-b", "-n", "1")) == ONCE[:1]
    whole = printed(sana(api_url, "tail", replayed, "-b", "-n", "3", "--headers"))
    assert [(record["partition"], record["offset"], record["headers"].get("sana.seq")) for record in whole] == [
        (0, 0, "0"), (0, 1, "1"), (0, 2, None)]


def test_sana_tail_names_the_topic_it_cannot_read(api_url):
    missing = sana(api_url, "tail", "no-such-topic", "-b")
    assert (missing.returncode, missing.stdout) == (EXIT_SERVER, "")
    assert missing.stderr == "sana: 404: no topic 'no-such-topic'\n"
    for args in (["not a topic"], ["t", "-n", "0"]):
        refused = sana(api_url, "tail", *args)
        assert refused.returncode == EXIT_USAGE and refused.stderr.count("\n") == 1, refused.stderr


def test_sana_tail_as_a_user_reads_their_dataflows_topics_only(settings_factory, kafka_bootstrap, make_topic,
                                                               tmp_path):
    sink = make_topic("ann.alerts")
    produce(kafka_bootstrap, sink, batch("q-1", 0, [{"alert": 1}]))
    settings = settings_factory(kafka_bootstrap=kafka_bootstrap, tokens_file=write_tokens(tmp_path, TOKENS))
    with services.ServerThread(create_app(settings)) as url:
        flow = tmp_path / "flow.json"
        flow.write_text(json.dumps(urban_etl(sink)))
        assert sana(url, "submit", str(flow), token="ann-token").returncode == EXIT_OK
        assert printed(sana(url, "tail", sink, "-b", "-n", "1", token="ann-token")) == [{"alert": 1}]
        refused = sana(url, "tail", sink, "-b", "-n", "1", token="bob-token")
        assert refused.returncode == EXIT_SERVER
        assert refused.stderr == f"sana: 404: no topic {sink!r} among the topics 'bob''s dataflows read or write\n"


class Lines:
    """A child's output, read line by line on a thread, each line waited for at most :data:`WAIT_S`."""

    def __init__(self, stream) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._pump_thread.start()

    def _pump(self, stream) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))

    def next(self) -> str:
        try:
            return self._lines.get(timeout=WAIT_S)
        except queue.Empty:
            raise AssertionError(f"no line within {WAIT_S} s") from None

    def rest(self) -> list[str]:
        """The lines left once the stream has ended (the child exited)."""
        self._pump_thread.join(WAIT_S)
        assert not self._pump_thread.is_alive(), f"the stream did not end within {WAIT_S} s"
        return list(self._lines.queue)


def test_sana_tail_follows_from_now_until_n_records_or_ctrl_c(api_url, kafka_bootstrap, make_topic):
    topic = make_topic("follow")
    produce(kafka_bootstrap, topic, [({"before": True}, None)])
    # ignored: started as a non-interactive shell starts `sana tail ... &`, with SIGINT ignored; Ctrl-C still ends it
    for count, stop, ignored in (([], "ctrl-c", False), ([], "ctrl-c", True), (["-n", "3"], "count", False)):
        child = subprocess.Popen(sana_command(api_url, "tail", topic, *count), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=services.sana_env(),
                                 preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None)
        try:
            out, err = Lines(child.stdout), Lines(child.stderr)
            assert err.next().startswith(f"sana: tailing {topic} from now, each record once, until ")  # it is there
            later = batch("q-9", 1, [{"after": 1}, {"after": 2}])
            produce(kafka_bootstrap, topic, later + later + [({"plain": stop}, None)])  # the batch, its replay, a mark
            assert [json.loads(out.next()) for _ in range(3)] == [{"after": 1}, {"after": 2}, {"plain": stop}]
            if stop == "ctrl-c":
                child.send_signal(signal.SIGINT)
            assert child.wait(WAIT_S) == EXIT_OK
            assert (out.rest(), err.rest()) == ([], [])  # nothing more printed, no traceback
        finally:
            child.kill()
            child.wait()
