"""The server's collector policy (api/collector.py): survivors of a full collection are frozen, and the manager's
state forms no reference cycles that freezing would keep alive."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from api.collector import FreezeSurvivors
from benchmarks.riot import riot_dataflow
from tests.conftest import REDIS_URL

# Modules whose objects make up the manager's state and plans: none of them may be left in an unreachable cycle.
STATE_MODULES = ("manager.", "planning.", "optimizer.", "scheduler.", "runtime.", "wan.", "sana.")


@pytest.fixture
def policy():
    installed = FreezeSurvivors().install()
    yield installed
    installed.uninstall()
    assert gc.get_freeze_count() == 0


def test_a_full_collection_freezes_what_survives_it_and_is_counted(policy):
    kept = [{"n": number} for number in range(1000)]
    gc.collect()
    assert gc.get_freeze_count() >= len(kept)
    summary = policy.summary()
    assert summary["full_collections"] >= 1 and summary["longest_full_ms"] >= summary["last_full_ms"] >= 0
    assert summary["frozen_objects"] == gc.get_freeze_count()


def test_uninstall_gives_the_frozen_objects_back_and_stops_freezing():
    policy = FreezeSurvivors().install()
    gc.collect()
    assert gc.get_freeze_count() > 0
    policy.uninstall()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gc.get_freeze_count() == 0 and policy._callback not in gc.callbacks


def test_a_cycle_dropped_after_it_was_frozen_is_found_by_the_audit(policy):
    class Node:
        pass

    first, second = Node(), Node()
    first.other, second.other = second, first
    gc.collect()                    # the cycle is reachable: frozen
    del first, second               # now unreachable, and the collector does not look at frozen objects
    assert not any(type(item).__name__ == "Node" for item in gc.garbage)
    gc.collect()
    assert policy.audit() >= 2      # the audit unfreezes, finds the two nodes (and their dicts), freezes again
    assert gc.get_freeze_count() > 0


def test_a_removed_dataflow_leaves_no_cycle_of_the_managers_objects(state_prefix):
    """What freezing costs is bounded by the cycles left behind; the manager's own state leaves none: every
    object of a removed dataflow is freed by reference counting, frozen or not. Run in a fresh interpreter, so
    that no other test's objects are in its collector."""
    finished = subprocess.run([sys.executable, "-c", CYCLE_CHECK, REDIS_URL, state_prefix], capture_output=True,
                              text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert finished.returncode == 0, finished.stderr
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert result["frozen"] > 0 and result["removed"] == 60 and result["left_running"] == 0
    assert result["in_cycles"] == [], f"objects of removed dataflows left in reference cycles: {result['in_cycles']}"


CYCLE_CHECK = """
import gc, json, sys
import redis
from api.collector import FreezeSurvivors
from benchmarks.riot import riot_dataflow
from manager.service import Manager
from runtime.dryrun import DryRunRuntime
STATE_MODULES = %r
client, prefix = redis.Redis.from_url(sys.argv[1]), sys.argv[2]
policy = FreezeSurvivors().install()
manager = Manager(client, prefix, DryRunRuntime(client, prefix))
manager.start()
ids = [manager.submit(riot_dataflow(number)).id for number in range(60)]
gc.collect()   # the survivors, the 60 dataflows' state among them, are frozen
frozen = gc.get_freeze_count()
for dataflow_id in ids:
    manager.remove(dataflow_id)
gc.collect()   # garbage that was never frozen
gc.set_debug(gc.DEBUG_SAVEALL)
policy.uninstall()
gc.collect()   # what only freezing kept: unreachable cycles among frozen objects
left = sorted({f"{type(item).__module__}.{type(item).__qualname__}" for item in gc.garbage
               if type(item).__module__.startswith(STATE_MODULES)})
print(json.dumps({"frozen": frozen, "removed": len(ids), "left_running": manager.stats()["submitted_dataflows"],
                  "in_cycles": left}))
""" % (STATE_MODULES,)


def test_the_server_installs_it_and_healthz_shows_it(settings_factory):
    from api.app import create_app
    from tests.api.clients import local_client

    with local_client(create_app(settings_factory())) as client:
        assert client.post("/dataflows", json=riot_dataflow(0)).status_code == 201
        gc.collect()
        collector = client.get("/healthz").json()["components"]["manager"]["collector"]
        assert collector["full_collections"] >= 1 and collector["frozen_objects"] > 0
    assert gc.get_freeze_count() == 0  # stopping the server gave them back


def test_sana_gc_freeze_off_leaves_the_collector_alone(settings_factory):
    from api.app import create_app
    from tests.api.clients import local_client

    with local_client(create_app(settings_factory(gc_freeze=False))) as client:
        gc.collect()
        assert "collector" not in client.get("/healthz").json()["components"]["manager"]
        assert gc.get_freeze_count() == 0
