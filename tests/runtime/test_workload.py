"""``sana produce`` and ``sana up --demo`` (the latter in dry-run: no Spark needed)."""

from __future__ import annotations

from datetime import datetime, timezone

import httpx
import pytest

from api.cli import main
from api.launcher import EXAMPLES_DIR as EXAMPLES
from runtime.workload import stream
from tests.conftest import REDIS_URL
from tests.fixtures.kafka_io import read_all, values, wait_for
from tests.fixtures.services import SanaUp, free_port, sana_env

pytestmark = [pytest.mark.kafka]


def test_produce_writes_a_seeded_sensor_stream(kafka_bootstrap, capsys):
    """A seed and a start fix the whole stream, event times and the daily cycle's readings included."""
    topic = f"produced-{free_port()}"
    fixed = ["--count", "120", "--rate", "2000", "--seed", "5", "--start", "2026-03-01T08:59:30Z", "--bootstrap", kafka_bootstrap]
    assert main(["produce", topic, "--kind", "urban", *fixed]) == 0
    assert f"produced 120 records to {topic}" in capsys.readouterr().out
    first = values(read_all(kafka_bootstrap, topic))
    assert len(first) == 120
    assert set(first[0]) >= {"sensor", "temp", "humidity", "obstype", "value", "ts"}
    assert (first[0]["ts"], first[-1]["ts"]) == ("2026-03-01T08:59:30.000Z", "2026-03-01T08:59:30.059Z")
    again = f"{topic}-again"
    assert main(["produce", again, *fixed]) == 0
    assert values(read_all(kafka_bootstrap, again)) == first, "the same seed and start gave other records"


def test_produce_on_another_day_draws_the_same_values_on_another_daily_cycle():
    """The seed fixes the draws; the event time's hour moves the urban readings along the daily cycle."""
    morning = [record for _, record in stream("urban", 1000, seed=5, start=datetime(2026, 3, 1, 3, tzinfo=timezone.utc), count=50)]
    noon = [record for _, record in stream("urban", 1000, seed=5, start=datetime(2026, 3, 1, 15, tzinfo=timezone.utc), count=50)]
    assert [r["sensor"] for r in morning] == [r["sensor"] for r in noon]
    assert sum(r["temp"] for r in noon) > sum(r["temp"] for r in morning) + 50 * 19, "15:00 is not 20 degrees warmer than 03:00"


def test_produce_rejects_a_bad_start(capsys):
    assert main(["produce", "t", "--start", "yesterday"]) == 2
    assert "--start 'yesterday' is not an ISO-8601 time" in capsys.readouterr().err


def test_produce_rejects_a_bad_rate(capsys):
    assert main(["produce", "t", "--rate", "0"]) == 2
    assert "--rate must be positive" in capsys.readouterr().err


@pytest.mark.redis
def test_up_demo_submits_the_examples(tmp_path, state_prefix):
    port = free_port()
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=REDIS_URL, SANA_DRY_RUN="1", SANA_RUN_DIR=str(tmp_path / "run"))
    service = SanaUp(["--port", str(port), "--demo"], env, tmp_path / "up.log")
    try:
        service.wait_healthy(f"http://127.0.0.1:{port}")
        stats = wait_for(lambda: (s := httpx.get(f"http://127.0.0.1:{port}/stats", timeout=5).json())["submitted_dataflows"] >= 4 and s,
                         60, "the example dataflows submitted")
        wait_for(lambda: "demo: " in service.output() and "% saved" in service.output(), 30, "the demo's summary line")
        assert stats["running_tasks"] < stats["submitted_tasks"], "the examples share nothing"
    finally:
        assert service.terminate() == 0, service.output()


@pytest.mark.redis
def test_up_demo_twice_runs_each_example_once(tmp_path, state_prefix):
    """``--demo``, Ctrl-C, ``--demo`` again on the kept state: the same dataflows, none submitted twice."""
    examples = sorted(path.stem for path in EXAMPLES.glob("*.json"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=REDIS_URL, SANA_DRY_RUN="1", SANA_RUN_DIR=str(tmp_path / "run"))

    def demo(log: str) -> tuple[SanaUp, list[tuple[str, str]]]:
        service = SanaUp(["--port", str(port), "--demo"], env, tmp_path / log)
        service.wait_healthy(url)
        wait_for(lambda: "% saved" in service.output(), 60, "the demo's summary line")
        flows = httpx.get(f"{url}/dataflows", timeout=5).json()["dataflows"]
        return service, sorted((flow["name"], flow["id"]) for flow in flows)

    first, flows = demo("first.log")
    assert first.terminate() == 0, first.output()
    assert [name for name, _ in flows] == examples
    again, flows_again = demo("second.log")
    try:
        assert flows_again == flows, "the second demo changed the dataflows"
        output = again.output()
        assert f"bringing back {len(examples)} submitted dataflow(s)" in output
        assert output.count("already runs as") == len(examples) and "submitted riot" not in output
    finally:
        assert again.terminate() == 0, again.output()
