"""Reshape end to end: a skewed window aggregate submitted over REST to the real service (`sana up` as a
child process: Spark, the broker, Redis), its skew panel in headless Chromium, and its output against the
plain-Python reference."""

from __future__ import annotations

import random
import re

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser.test_inspector import CHROMIUM, FLAGS
from tests.conftest import REDIS_URL
from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, values, wait_for
from tests.fixtures.services import SanaUp, free_port, kafka_bootstrap, sana_env  # noqa: F401 (fixture)
from tests.fixtures.streams import URBAN, iso, multiset
from tests.runtime.test_keyed import window_reference

pytestmark = [pytest.mark.browser, pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

PHASES, PER_PHASE, SENSORS = 16, 1500, 200


def zipf_phase(phase: int) -> list[dict]:
    """One second of event time; sensor ranks Zipf(1.2) over 200 sensors (s0 carries about a quarter)."""
    rng = random.Random(phase)
    weights = [1 / (rank + 1) ** 1.2 for rank in range(SENSORS)]
    sensors = rng.choices(range(SENSORS), weights=weights, k=PER_PHASE)
    return [{"sensor": f"s{sensor}", "temp": float(rng.randrange(0, 50)), "humidity": float(phase * 10 + i * 10 // PER_PHASE),
             "ts": iso(phase * 10 + i * 10 // PER_PHASE)} for i, sensor in enumerate(sensors)]


def test_a_skewed_window_aggregate_is_split_shown_in_the_skew_panel_and_exact(state_prefix, kafka_bootstrap,  # noqa: F811
                                                                               tmp_path):
    stem = f"skew-{random.randrange(1 << 30)}"
    topic, sink = f"{stem}-in", f"{stem}-out"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = sana_env(SANA_STATE_PREFIX=state_prefix, SANA_REDIS_URL=REDIS_URL, SANA_KAFKA_BOOTSTRAP=kafka_bootstrap,
                   SANA_CHECKPOINT_DIR=str(tmp_path / "checkpoints"), SANA_SPARK_MASTER="local[2]",
                   SANA_RUN_DIR=str(tmp_path / "run"))
    flow = {
        "name": "skewed-counts",
        "tasks": [source("src", topic, dict(URBAN)),
                  task("per_sensor", "window_aggregate", keys=["sensor"], time_column="ts", window="10 seconds",
                       watermark="1 second", aggregates={"n": "count(*)", "hi": "max(temp)"},
                       # 1,500 records a batch are too few for the service's default to split; the task asks for any load
                       reshape={"min_excess_rows": 0}),
                  task("out", "sink", topic=sink)],
        "streams": [stream("src", "per_sensor"), stream("per_sensor", "out")],
    }
    phases = [zipf_phase(phase) for phase in range(PHASES)]
    service = SanaUp(["--port", str(port)], env, tmp_path / "up.log")
    try:
        service.wait_healthy(url, timeout=120)
        response = httpx.post(f"{url}/dataflows", json=flow, timeout=180)
        assert response.status_code == 201, response.text
        for phase in phases:  # about one micro-batch per phase: wait until the keyed operator has run another
            before = _batches(url)
            produce(kafka_bootstrap, topic, phase)
            wait_for(lambda: _batches(url) > before, 120, "a micro-batch of the keyed operator")
        groups = wait_for(lambda: _groups(url), 120, "Reshape splitting the hot sensor's worker")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1300})
                page.goto(url + "/")
                operator = page.locator(".skew-op")
                expect(operator).to_have_count(1, timeout=20_000)
                expect(operator.locator("svg.load-chart polyline.worker")).to_have_count(8)
                expect(operator.locator("svg.load-chart polyline.skewed")).to_have_count(1)
                expect(operator.locator("svg.load-chart polyline.helper")).to_have_count(len(groups[0]["helpers"]))
                expect(operator.locator(".skew-group")).to_contain_text(f"worker {groups[0]['skewed']} → helpers")
                expect(operator).to_contain_text("Reshape on (split by records")
                cost = page.locator("tr[data-id='df-1'] td.cost")  # its share of the measured CPU
                expect(cost).to_have_text(re.compile(r"^\d+\.\d{3} cores$"), timeout=20_000)
                expect(cost).to_have_attribute("title", re.compile(r"alone .* sharing saves"))
            finally:
                browser.close()
        # the last phase's windows close once a later record moves the watermark past them
        produce(kafka_bootstrap, topic, [{"sensor": "s1", "temp": 0.0, "humidity": 1000.0, "ts": iso(1000)}])
        expected = window_reference(phases + [[{"sensor": "s1", "temp": 0.0, "humidity": 1000.0}]], 10, 10, 1,
                                    {"n": len, "hi": max})
        got = wait_for(lambda: _if_complete(read_all(kafka_bootstrap, sink), len(expected)), 120, "every window emitted")
        assert multiset(values(got)) == multiset(expected)
    finally:
        service.terminate()


def _fragments(url: str) -> list[dict]:
    return httpx.get(url + "/runtime/fragments", timeout=30).json()["fragments"]


def _operator(url: str) -> dict | None:
    for fragment in _fragments(url):
        for metrics in fragment.get("keyed_operators", {}).values():
            return metrics
    return None


def _batches(url: str) -> int:
    metrics = _operator(url)
    return metrics["workers"]["batches"] if metrics else 0


def _groups(url: str) -> list[dict]:
    metrics = _operator(url)
    return metrics["reshape"]["groups"] if metrics else []


def _if_complete(received, count: int):
    return received if len(received) >= count else None
