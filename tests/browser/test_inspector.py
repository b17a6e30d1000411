"""The admin inspector in headless Chromium (Debian's /usr/bin/chromium driven by Playwright)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from api.app import create_app
from tests.fixtures.services import ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.redis]

EXAMPLES = Path(__file__).parents[2] / "examples"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture
def page(settings_factory):
    assert Path(CHROMIUM).exists(), "Chromium is missing: scripts/setup.sh installs Debian's chromium package"
    with ServerThread(create_app(settings_factory())) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            tab = browser.new_page(viewport={"width": 1500, "height": 1300})
            tab.goto(url + "/")
            yield tab
        finally:
            browser.close()


def _submit(page, document: dict | str) -> None:
    page.fill("#document", document if isinstance(document, str) else json.dumps(document, indent=2))
    page.click("#submit")


def test_submit_see_graph_and_reuse_then_error_then_remove(page, tmp_path):
    expect(page.locator("#health")).to_have_text("ok")
    expect(page.locator("#running-tasks")).to_have_text("0")

    _submit(page, json.loads((EXAMPLES / "riot-etl.json").read_text()))
    expect(page.locator("#submit-result")).to_contain_text("Submitted df-1: 0 task(s) reused, 6 created")
    expect(page.locator("svg .node")).to_have_count(6)
    expect(page.locator("#running-tasks")).to_have_text("6")

    _submit(page, json.loads((EXAMPLES / "riot-stats.json").read_text()))
    expect(page.locator("#submit-result")).to_contain_text("Submitted df-2: 2 task(s) reused, 4 created")
    expect(page.locator("svg .node")).to_have_count(10)
    expect(page.locator("#submitted-tasks")).to_have_text("12")
    expect(page.locator("#saving")).to_have_text("16.67%")
    expect(page.locator("#contained-count")).to_have_text("0")  # RIoT's apps share exactly, none by containment
    expect(page.locator('svg .node[data-users="2"]')).to_have_count(2)
    expect(page.locator('#histogram rect[data-users="2"]')).to_have_count(1)
    # the new dataflow is selected: its tasks are highlighted, the others dimmed
    expect(page.locator("svg .node.highlight")).to_have_count(6)
    expect(page.locator("svg .node.dim")).to_have_count(4)
    expect(page.locator("#selection")).to_contain_text("riot-stats-avg")

    bad = json.loads((EXAMPLES / "riot-etl.json").read_text())
    bad["tasks"][2]["config"]["expr"] = "valeu > 3"
    _submit(page, bad)
    expect(page.locator("#submit-result")).to_contain_text("422 OPERATOR_CONFIG_INVALID: task 'range' (filter) config.expr")
    expect(page.locator("#document-tasks li.culprit")).to_have_text("range: filter")
    expect(page.locator("#running-tasks")).to_have_text("10")

    expect(page.locator("tr[data-id='df-1'] td.cost")).to_have_text("–")  # a dry run measures no cost
    page.locator("tr[data-id='df-1'] td").first.click()
    expect(page.locator("tr.selected")).to_have_attribute("data-id", "df-1")
    stamp = page.locator("#refreshed").inner_text()
    expect(page.locator("#refreshed")).not_to_have_text(stamp, timeout=15_000)  # a refresh happened...
    expect(page.locator("tr.selected")).to_have_attribute("data-id", "df-1")  # ...and kept the selection
    expect(page.locator("svg .node.highlight")).to_have_count(6)
    page.screenshot(path=str(tmp_path / "inspector.png"), full_page=True)

    page.click("button.remove[data-id='df-1']")
    expect(page.locator("#submit-result")).to_contain_text("Removed df-1; stopped 4 running task(s).")
    expect(page.locator("svg .node")).to_have_count(6)
    expect(page.locator("#dataflow-rows tr")).to_have_count(1)
    assert (tmp_path / "inspector.png").stat().st_size > 10_000


# A filter of Ohio's stream with its results at Virginia: where the filter runs decides what crosses ohio -> virginia.
OHIO_HOT = {"name": "ohio-hot", "tasks": [
    {"id": "src", "type": "source", "config": {"topic": "urban", "schema": {"sensor": "string", "temp": "double"}}},
    {"id": "hot", "type": "filter", "config": {"expr": "temp > 30"}},
    {"id": "out", "type": "sink", "site": "virginia", "config": {"topic": "ohio-hot"}}],
    "streams": [{"from": "src", "to": "hot"}, {"from": "hot", "to": "out"}]}


def test_wan_panel_shows_sites_and_links(page):
    config = json.loads((EXAMPLES / "wan" / "wan-config.json").read_text())
    answer = page.request.put(page.url + "wan", data=json.dumps(config), headers={"content-type": "application/json"})
    assert answer.ok, answer.text()
    expect(page.locator("#wan-body")).to_contain_text("sites: virginia, california")
    expect(page.locator("#wan-body")).to_contain_text("link(s) carry nothing")
    # a filter of Ohio's stream with its results at Virginia: the raw stream crosses ohio -> virginia
    _submit(page, OHIO_HOT)
    expect(page.locator("#submit-result")).to_contain_text("Submitted df-1")
    row = page.locator('#wan-body tr[data-link="ohio>virginia"]')
    expect(row).to_contain_text("16")  # the configured estimate: nothing runs, nothing is measured
    expect(row.locator("td.basis")).to_have_text("estimated")
    expect(page.locator("#fragment-body")).to_contain_text("Dry run: nothing runs on Spark")
    expect(page.locator("#skew-body")).to_contain_text("No keyed operator runs on Spark.")
    expect(page.locator("#wan-body .replacement-plan")).to_have_count(0)  # no link is hot
    for link in config["links"]:  # the raw stream (16 Mbps) now needs more than ohio <-> virginia has
        if {link["from"], link["to"]} == {"ohio", "virginia"}:
            link["bandwidth_mbps"] = 10
    answer = page.request.put(page.url + "wan", data=json.dumps(config), headers={"content-type": "application/json"})
    assert answer.ok, answer.text()
    plan = page.locator("#wan-body .replacement-plan")
    expect(plan).to_contain_text("Re-placement at 95% utilization would re-plan 1 dataflow(s) over 1 hot link(s): "
                                 "1 task(s) would move.")
    # Ohio cannot compute: the filter moves to Canada, off the thin link, and only the hot readings reach Virginia
    expect(plan.locator('li[data-task="df-1/hot"]')).to_contain_text("virginia → canada")
    plan.locator("button.replace-now").click()
    expect(page.locator("#wan-body .replace-result")).to_have_text(
        "Re-placed 1 dataflow(s): 2 task(s) started, 2 stopped.")
    expect(row).to_have_count(0)  # ohio -> virginia carries nothing now
    expect(page.locator('#wan-body tr[data-link="canada>virginia"]')).to_contain_text("8")
    expect(page.locator("#wan-body .replacement-plan")).to_have_count(0)  # nothing is hot any more
    assert page.request.get(page.url + "dataflows/df-1").json()["id"] == "df-1"


def test_the_wan_panel_shows_what_the_services_own_re_placement_did(page):
    config = json.loads((EXAMPLES / "wan" / "wan-config.json").read_text())
    answer = page.request.put(page.url + "wan", data=json.dumps(config), headers={"content-type": "application/json"})
    assert answer.ok, answer.text()
    _submit(page, OHIO_HOT)
    expect(page.locator("#submit-result")).to_contain_text("Submitted df-1")
    expect(page.locator("#wan-body .last-replacement")).to_have_count(0)  # not configured: no watcher
    for link in config["links"]:  # ohio <-> virginia too thin for the raw stream, and the service re-places itself
        if {link["from"], link["to"]} == {"ohio", "virginia"}:
            link["bandwidth_mbps"] = 10
    config["replacement"] = {"utilization": 0.95, "check_every_s": 0.2}
    answer = page.request.put(page.url + "wan", data=json.dumps(config), headers={"content-type": "application/json"})
    assert answer.ok, answer.text()
    expect(page.locator("#wan-body .last-replacement")).to_contain_text(
        "1 dataflow(s) re-planned, 2 task(s) started, 2 stopped.", timeout=30_000)
    expect(page.locator('#wan-body tr[data-link="ohio>virginia"]')).to_have_count(0)
    expect(page.locator("#wan-body .replacement-plan")).to_have_count(0)  # nothing is hot any more


def test_a_service_with_tokens_needs_one_and_the_inspector_sends_it(settings_factory, tmp_path):
    from sana.auth import token_hash

    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"principals": [{"name": "ops", "role": "admin", "token_sha256": token_hash("ops-token")},
                                                 {"name": "ann", "role": "user", "token_sha256": token_hash("ann-token"),
                                                  "read_topics": ["urban-*"], "write_topics": ["riot-*"]}]}))
    with ServerThread(create_app(settings_factory(tokens_file=tokens))) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1300})
            page.goto(url + "/")
            expect(page.locator("#auth-state")).to_have_text("this service needs a token")
            expect(page.locator("#running-tasks")).to_have_text("–")
            _submit(page, json.loads((EXAMPLES / "riot-etl.json").read_text()))
            expect(page.locator("#submit-result")).to_contain_text("401 UNAUTHENTICATED")

            page.fill("#token", "wrong")
            page.click("#use-token")
            expect(page.locator("#auth-state")).to_have_text("token refused")

            page.fill("#token", "ann-token")
            page.click("#use-token")
            expect(page.locator("#auth-state")).to_have_text("token in use")
            expect(page.locator("#running-tasks")).to_have_text("0")
            example = json.loads((EXAMPLES / "riot-etl.json").read_text())
            _submit(page, example)  # the example names another owner: a user submits as themselves
            expect(page.locator("#submit-result")).to_contain_text("403 FORBIDDEN: owner 'ana'")
            example.pop("owner")
            _submit(page, example)
            expect(page.locator("#submit-result")).to_contain_text("Submitted df-1")
            expect(page.locator("tr[data-id='df-1']")).to_contain_text("ann")
            expect(page.locator("svg .node")).to_have_count(0)  # the running DAGs are an admin's view

            page.fill("#token", "ops-token")
            page.click("#use-token")
            expect(page.locator("svg .node")).to_have_count(6)
        finally:
            browser.close()
