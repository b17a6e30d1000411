"""The `sana` CLI against a running API: exit codes, --json shapes, server errors passed through."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from api.app import create_app
from tests.fixtures.dataflows import urban_etl
from tests.fixtures.services import ServerThread, free_port
from tests.manager.test_wan_sharing import WAN, hot

pytestmark = pytest.mark.redis


@pytest.fixture
def api_url(settings_factory):
    with ServerThread(create_app(settings_factory())) as url:
        yield url


def sana(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", "--api", url, *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_submit_ls_stats_remove(api_url, tmp_path):
    path = tmp_path / "etl.json"
    path.write_text(json.dumps(urban_etl("alerts-a")))
    done = sana(api_url, "submit", str(path))
    assert done.returncode == 0, done.stderr
    assert "submitted df-1 (urban-etl): 0 task(s) reused, 4 created" in done.stdout
    assert "sink out: output on topic alerts-a" in done.stdout

    again = sana(api_url, "submit", "-", "--json", stdin=json.dumps(urban_etl("alerts-b")))
    assert again.returncode == 0
    answer = json.loads(again.stdout)
    assert answer["id"] == "df-2" and sorted(answer["reused"]) == ["hot", "proj", "src"]

    listing = sana(api_url, "ls")
    assert listing.returncode == 0
    assert listing.stdout.splitlines()[0].split() == ["ID", "NAME", "OWNER", "SUBMITTED", "TASKS", "STATUS"]
    assert [line.split()[0] for line in listing.stdout.splitlines()[1:]] == ["df-1", "df-2"]
    assert [line.split()[-1] for line in listing.stdout.splitlines()[1:]] == ["running", "running"]
    assert {flow["id"] for flow in json.loads(sana(api_url, "ls", "--json").stdout)["dataflows"]} == {"df-1", "df-2"}

    stats = json.loads(sana(api_url, "stats", "--json").stdout)
    assert stats["running_tasks"] == 5 and stats["submitted_tasks"] == 8
    assert "saving_percent" in sana(api_url, "stats").stdout

    removed = sana(api_url, "remove", "df-1")
    assert removed.returncode == 0 and "removed df-1; stopped: sink-" in removed.stdout
    assert json.loads(sana(api_url, "remove", "df-2", "--json").stdout)["id"] == "df-2"


def test_server_errors_pass_through_with_exit_1(api_url, tmp_path):
    bad = urban_etl()
    bad["tasks"][1]["config"]["expr"] = "tmp > 1"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    done = sana(api_url, "submit", str(path))
    assert done.returncode == 1
    assert "422: task 'hot' (filter) config.expr: 'tmp > 1': column 'tmp' is not in the input" in done.stderr
    as_json = sana(api_url, "submit", str(path), "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["code"] == "OPERATOR_CONFIG_INVALID"
    missing = sana(api_url, "remove", "df-404")
    assert missing.returncode == 1 and "404: no dataflow 'df-404'" in missing.stderr


def test_usage_and_unreachable_exit_codes(tmp_path):
    unreadable = sana("http://127.0.0.1:9", "submit", str(tmp_path / "missing.json"))
    assert unreadable.returncode == 2 and "cannot read" in unreadable.stderr
    nobody = sana(f"http://127.0.0.1:{free_port()}", "ls")
    assert nobody.returncode == 3 and "cannot reach the API" in nobody.stderr
    assert sana("http://127.0.0.1:9", "frobnicate").returncode == 2


def test_cost_prints_the_shares_or_says_nothing_is_measured(api_url):
    hot = json.loads(sana(api_url, "submit", "-", "--json", stdin=json.dumps(urban_etl("alerts-a"))).stdout)["tasks"]["hot"]
    sana(api_url, "submit", "-", stdin=json.dumps(urban_etl("alerts-b")))
    done = sana(api_url, "cost", "df-1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "df-1: nothing measured yet (a dry run measures nothing; a real runtime needs two samples, ~5 s)"
    assert lines[1].split() == ["CPU", "KAFKA", "WRITES", "STATE"]
    assert [line.split()[:4] for line in lines if line.startswith("hot ")] == [["hot", hot, "2", "0.000"]], \
        "a task row opens with the id the owner submitted, then the running task's"
    assert {row["users"] for row in json.loads(sana(api_url, "cost", "df-2", "--json").stdout)["tasks"]} == {1, 2}
    missing = sana(api_url, "cost", "df-404")
    assert missing.returncode == 1 and "404: no dataflow 'df-404'" in missing.stderr


def test_defrag_under_a_dry_run_has_nothing_to_do(api_url):
    sana(api_url, "submit", "-", stdin=json.dumps(urban_etl("alerts-a")))
    done = sana(api_url, "defrag")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "queries: 0 -> 0 (the dry-run runtime runs no queries)"
    assert json.loads(sana(api_url, "defrag", "--json").stdout)["merged"] == []


def test_replace_plans_then_moves_a_filter_off_a_thinned_link(api_url):
    wan = json.loads(json.dumps(WAN))
    wan["links"][2]["bandwidth_mbps"] = 50  # P -> H2 wide: the filter at P is shared towards H2
    assert httpx.put(f"{api_url}/wan", json=wan).status_code == 200
    sana(api_url, "submit", "-", stdin=json.dumps(hot("a", "P", "one")))
    sana(api_url, "submit", "-", stdin=json.dumps(hot("b", "H2", "two")))
    wan["links"][2]["bandwidth_mbps"] = 5  # now 8 Mbps estimated over 5
    assert httpx.put(f"{api_url}/wan", json=wan).status_code == 200
    plan = sana(api_url, "replace", "--plan")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines() == ["links at or above 95 %: P -> H2 (160 %)",
                                        "df-2 (two): hot P -> H2 (stops sharing)",
                                        "would start 2 running task(s), would stop 1"]
    done = sana(api_url, "replace", "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["executed"] is True and len(body["start"]) == 2 and len(body["stop"]) == 1
    again = sana(api_url, "replace")
    assert again.stdout.splitlines() == ["links at or above 95 %: none", "started 0 running task(s), stopped 0"]
