"""The inspector at common screen widths with the content of a busy service (tests/browser/staged.py): no panel cuts
or pushes out what it holds, no empty band beside a tall panel, stalled and failed work shown as such, the owners'
own task ids, and no polling of a WAN that is not configured.

``SANA_DOCS_SCREENSHOT=1`` also saves the 1,280 px page as docs/img/inspector.png (at 3/4 scale).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

import api.services
from api.app import create_app
from tests.browser.staged import StagedRuntime
from tests.browser.test_inspector import CHROMIUM, EXAMPLES, FLAGS
from tests.fixtures.dataflows import chain, source, task
from tests.fixtures.services import ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.redis]

DOCS_SCREENSHOT = Path(__file__).parents[2] / "docs" / "img" / "inspector.png"
FLOWS = ["riot-etl", "riot-stats", "riot-pred", "taxi-fares", "urban-hot-stats"]
# Names as long as a document allows (128 characters, task ids 64), as one word: they wrap or end in an ellipsis.
LONG_NAMES = {**chain(source("readings_of_the_north_district_gateway_sensors_and_the_rooftops", "urban-north"),
                      task("readings_above_the_alert_threshold_of_the_north_district_gateway", "filter", expr="temp > 40"),
                      task("alerts_for_the_north_district_operations_team_and_the_engineers", "sink", topic="urban-north-alerts"),
                      name="north-district-temperature-alerts-for-the-operations-team-on-call-rotation-escalating-to-the-city-"
                           "engineers-at-night"),
              "owner": "operations-team-north-district-on-call@city.example.org"}

# Every way a panel can cut what it holds, as the browser lays it out: the page scrolls sideways, a panel scrolls
# sideways, or an element (a cell, a chart, a button) lies past its panel's left or right edge.
OVERFLOWS = """() => {
  const problems = [];
  const page = document.documentElement;
  if (page.scrollWidth > window.innerWidth) problems.push(`the page is ${page.scrollWidth} px wide in ${window.innerWidth}`);
  for (const panel of document.querySelectorAll(".panel")) {
    if (panel.scrollWidth > panel.clientWidth) problems.push(`#${panel.id} scrolls: ${panel.scrollWidth} > ${panel.clientWidth} px`);
    const edge = panel.getBoundingClientRect();
    for (const node of panel.querySelectorAll("*")) {
      const box = node.getBoundingClientRect();
      if (!box.width && !box.height) continue;
      if (box.left < edge.left - 1 || box.right > edge.right + 1) {
        const name = `${node.tagName.toLowerCase()}.${(node.className.baseVal ?? node.className) || ""}`;
        problems.push(`#${panel.id}: ${name} "${node.textContent.slice(0, 30)}" spans ${Math.round(box.left)}-${Math.round(box.right)}, ` +
                      `the panel ${Math.round(edge.left)}-${Math.round(edge.right)}`);
      }
    }
  }
  return problems;
}"""

# A row of panels that does not reach across the page leaves an empty band beside its tallest panel.
UNFILLED_ROWS = """() => {
  const main = document.querySelector("main");
  const style = getComputedStyle(main);
  const left = main.getBoundingClientRect().left + parseFloat(style.paddingLeft);
  const right = main.getBoundingClientRect().right - parseFloat(style.paddingRight);
  const rows = {};
  for (const panel of document.querySelectorAll("main > .panel")) {
    const box = panel.getBoundingClientRect();
    (rows[Math.round(box.top)] ||= []).push([panel.id, box.left, box.right]);
  }
  return Object.values(rows)
    .filter((row) => Math.min(...row.map(([, l]) => l)) > left + 2 || Math.max(...row.map(([, , r]) => r)) < right - 2)
    .map((row) => `${row.map(([id]) => id).join(", ")} span ${Math.round(Math.min(...row.map(([, l]) => l)))}-` +
                  `${Math.round(Math.max(...row.map(([, , r]) => r)))} of ${Math.round(left)}-${Math.round(right)}`);
}"""


@pytest.fixture
def service(settings_factory, monkeypatch):
    """The API on the staged runtime (the dry run's bookkeeping with the metrics Spark reports), and its app."""
    monkeypatch.setattr(api.services, "DryRunRuntime", StagedRuntime)
    app = create_app(settings_factory())
    with ServerThread(app) as url:
        yield url, app


@pytest.fixture
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _busy(url: str, app) -> dict[str, dict]:
    """Six dataflows of five owners; df-3's predict fails at run time and df-4's query is down."""
    flows = {}
    for document in [json.loads((EXAMPLES / f"{name}.json").read_text()) for name in FLOWS] + [LONG_NAMES]:
        answer = httpx.post(url + "/dataflows", json=document, timeout=30)
        assert answer.status_code == 201, answer.text
        flows[answer.json()["id"]] = answer.json()
    runtime = app.state.services.manager.runtime
    runtime.fail(flows["df-3"]["tasks"]["predict"], "[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012", "value / (slope - 1)")
    runtime.stall(runtime.specs[flows["df-4"]["tasks"]["per-zone"]].fragment,
                  "org.apache.kafka.common.errors.TimeoutException: Topic taxi-trips not present in metadata after 60000 ms.")
    return flows


def _open(browser, url: str, width: int, height: int):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url + "/")
    return page


def _refreshes(page, count: int) -> None:
    for _ in range(count):
        stamp = page.locator("#refreshed").inner_text()
        expect(page.locator("#refreshed")).not_to_have_text(stamp, timeout=15_000)


@pytest.mark.parametrize("width,height", [(1280, 900), (1920, 1080)])
def test_no_panel_cuts_what_it_holds_and_no_row_leaves_an_empty_band(service, browser, width, height, tmp_path):
    url, app = service
    _busy(url, app)
    page = _open(browser, url, width, height)
    expect(page.locator(".skew-op")).to_have_count(5)
    expect(page.locator("#fragment-body tbody tr")).to_have_count(len(httpx.get(url + "/runtime/fragments").json()["fragments"]))
    page.locator("tr[data-id='df-2'] td").first.click()
    expect(page.locator("#task-costs tbody tr")).to_have_count(6)
    _refreshes(page, 2)  # the sparklines have a few points
    page.screenshot(path=str(tmp_path / f"inspector-{width}.png"), full_page=True)
    assert page.evaluate(OVERFLOWS) == []
    assert page.evaluate(UNFILLED_ROWS) == []
    if os.environ.get("SANA_DOCS_SCREENSHOT") and width == 1280:
        _docs_screenshot(browser, url)


def _docs_screenshot(browser, url: str) -> None:
    """The page at 1,280 px with df-2 selected, drawn at 3/4 scale (the README shows it smaller still): under 400 KB."""
    page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=0.75)
    page.goto(url + "/")
    expect(page.locator(".skew-op")).to_have_count(5)
    page.locator("tr[data-id='df-2'] td").first.click()
    expect(page.locator("#task-costs tbody tr")).to_have_count(6)
    page.locator("#submit-box summary").click()  # the empty form says little
    _refreshes(page, 2)
    page.screenshot(path=str(DOCS_SCREENSHOT), full_page=True, scale="device")


def test_stalled_and_failed_work_and_sparse_operators_show_what_they_are(service, browser):
    url, app = service
    flows = _busy(url, app)
    runtime = app.state.services.manager.runtime
    page = _open(browser, url, 1280, 900)

    def fragment(flow: str, task_id: str):
        return page.locator(f"#fragment-body tr[data-fragment='{runtime.specs[flows[flow]['tasks'][task_id]].fragment}']")

    stalled = fragment("df-4", "per-zone")  # its query is down: no lag is known, not 0
    expect(stalled.locator("td.status")).to_have_text("stalled (3 restarts)")
    expect(stalled.locator("td.status")).to_have_attribute("title", re.compile("TimeoutException: Topic taxi-trips"))
    expect(stalled.locator("td.lag")).to_have_text("—")
    failed = fragment("df-3", "predict")  # a task quarantined; its query runs on and its lag is measured
    expect(failed.locator("td.status")).to_have_text("failed: df-3/predict")
    # its sink allows 10 s of delay (the examples' max_delay): what its query holds on purpose is said
    expect(failed.locator("td.lag")).to_have_text(re.compile(r"^\d+ held ≤10 s$"))
    expect(failed.locator("td.lag")).to_have_attribute("title", re.compile("holds records up to 10 s .* max_delay"))
    alerts = fragment("df-6", "alerts_for_the_north_district_operations_team_and_the_engineers")
    expect(alerts.locator("td.lag")).to_have_text(re.compile(r"^\d+$"))  # a sink without a delay: nothing held
    expect(page.locator("tr[data-id='df-3'] td.cost")).to_have_text("failed (predict)")
    expect(page.locator("tr[data-id='df-4'] td.cost")).to_have_text("stalled")

    # keyed operators by their owners' ids; a ratio only where there are rows enough to tell skew from chance
    avg = page.locator(f".skew-op[data-task='{flows['df-2']['tasks']['avg']}']")
    expect(avg.locator("h3")).to_have_text("df-2/avg (window_aggregate)")
    expect(page.locator(".skew-op .balance")).to_have_count(5)
    balances = page.locator(".skew-op .balance").all_inner_texts()
    assert "idle" in balances and "—" in balances and "0.00" not in balances, balances

    # a dataflow's cost per task names the tasks as its owner submitted them, in the order of its document
    page.locator("tr[data-id='df-2'] td").first.click()
    expect(page.locator("#task-costs td.submitted")).to_have_text(list(flows["df-2"]["tasks"]))
    src = page.locator(f"#task-costs tr[data-task='{flows['df-2']['tasks']['src']}']")
    expect(src.locator("td.submitted")).to_have_attribute("title", f"running task {flows['df-2']['tasks']['src']}")
    expect(src.locator("td").nth(1)).to_have_text("3")  # src is shared by three dataflows


def test_without_a_wan_configuration_the_page_never_asks_for_one(service, browser):
    url, _ = service
    asked: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("request", lambda request: asked.append(request.url) if urlparse(request.url).path.startswith("/wan") else None)
    page.goto(url + "/")
    expect(page.locator("#wan-body")).to_have_text("No WAN configuration: every equivalent task is shared.")
    _refreshes(page, 2)
    assert asked == []
    config = json.loads((EXAMPLES / "wan" / "wan-config.json").read_text())
    assert httpx.put(url + "/wan", json=config, timeout=30).status_code == 200
    expect(page.locator("#wan-body")).to_contain_text("sites: virginia, california")  # asked once configured
    assert asked
    assert httpx.delete(url + "/wan", timeout=30).status_code == 200
    expect(page.locator("#wan-body")).to_have_text("No WAN configuration: every equivalent task is shared.")
    _refreshes(page, 1)
    before = len(asked)
    _refreshes(page, 2)
    assert len(asked) == before
