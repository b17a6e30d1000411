"""Containment sharing in the manager (dry run, real Redis): which shares it takes, and that traces keep the invariants.

Dataflows are chains over one stream of a filter (thresholds and ranges on two columns), a select (a few of
five derived columns) and a tumbling window aggregate (windows of 10 s to 2 min, four aggregates), with
parameters drawn so that many contain one another. Random traces of submits and removals are checked after
every step by tests/fixtures/invariants.py: the running set is exactly what the dataflows run as (each
rewritten by its recorded shares), every share is proved again independently, and nothing runs for nobody.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from types import SimpleNamespace

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from manager.containment import read_by_owner
from manager.exceptions import DataflowDuplicate
from manager.service import Manager
from manager.validate import parse_dataflow
from runtime.dryrun import DryRunRuntime
from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.invariants import check_state
from tests.manager.test_wan_sharing import WAN
from tests.conftest import REDIS_URL, delete_prefix

pytestmark = pytest.mark.redis

SCHEMA = {"sensor": "string", "temp": "double", "humidity": "double", "ts": "timestamp"}
DERIVED = {"sensor": "sensor", "f": "temp * 9 / 5 + 32", "wet": "humidity > 60", "ts": "ts", "t": "temp"}


def chain(name: str, expr: str | None, columns: list[str] | None, window: str | None, aggregates: dict | None,
          slide: str | None = None) -> dict:
    tasks = [{"id": "src", "type": "source", "config": {"topic": "readings", "schema": dict(SCHEMA)}}]
    streams = []
    last = "src"
    for task_id, item in (("keep", expr and task("keep", "filter", expr=expr)),
                          ("proj", columns and task("proj", "select", columns={c: DERIVED[c] for c in columns})),
                          ("win", window and task("win", "window_aggregate", keys=["sensor"], time_column="ts",
                                                  window=window, watermark="5 seconds", aggregates=aggregates,
                                                  **({"slide": slide} if slide else {})))):
        if item:
            tasks.append(item)
            streams.append(stream(last, task_id))
            last = task_id
    tasks.append({"id": "out", "type": "sink", "config": {"topic": f"out-{name}"}})
    streams.append(stream(last, "out"))
    return {"name": name, "tasks": tasks, "streams": streams}


@st.composite
def dataflows(draw, index: int) -> dict:
    # few choices, often the same, so that chains meet on the same running parent
    expr = draw(st.sampled_from([None, None, "temp > 20", "temp > 30", "30 < temp", "temp > 30 AND humidity < 50",
                                 "temp BETWEEN 20 AND 40"]))
    columns = draw(st.sampled_from([None, None, ["sensor", "ts", "t"], ["sensor", "ts", "f", "t"], ["sensor", "ts", "f"],
                                    ["sensor", "ts", "wet", "t"]]))
    window = aggregates = slide = None
    if draw(st.booleans()):
        window = draw(st.sampled_from(["10 seconds", "10 seconds", "30 seconds", "1 minute", "2 minutes"]))
        if window != "10 seconds":  # sliding by a multiple of 10 s rolls up a running 10 s window; by 15 s it cannot
            slide = draw(st.sampled_from([None, None, "10 seconds", "20 seconds", "15 seconds"]))
            slide = None if slide == "20 seconds" and window == "30 seconds" else slide
        value = "t" if columns and "t" in columns else "temp" if not columns else None
        pool = {"n": "count(*)", **({"hi": f"max({value})", "lo": f"min({value})", "s": f"sum({value})",
                                     "c": f"count({value})", "m": f"avg({value})"} if value else {})}
        chosen = draw(st.lists(st.sampled_from(sorted(pool)), min_size=1, max_size=len(pool), unique=True))
        aggregates = {name: pool[name] for name in chosen}
    return chain(f"df{index}", expr, columns, window, aggregates, slide)


@st.composite
def traces(draw) -> list[tuple[str, dict | int]]:
    steps: list[tuple[str, dict | int]] = []
    alive: list[int] = []
    for index in range(draw(st.integers(4, 9))):
        if alive and draw(st.integers(0, 3)) == 0:
            steps.append(("remove", alive.pop(draw(st.integers(0, len(alive) - 1)))))
        steps.append(("add", draw(dataflows(index))))
        alive.append(index)
    while alive and draw(st.booleans()):
        steps.append(("remove", alive.pop(draw(st.integers(0, len(alive) - 1)))))
    return steps


@pytest.fixture
def make_manager():
    client = redis.Redis.from_url(REDIS_URL)
    prefixes: list[str] = []

    def make(**options) -> Manager:
        prefix = f"contain-{uuid.uuid4().hex[:10]}"
        prefixes.append(prefix)
        manager = Manager(client, prefix, DryRunRuntime(client, prefix), **options)
        manager.start()
        return manager

    yield make
    for prefix in prefixes:
        delete_prefix(client, prefix)
    client.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(trace=traces())
def test_traces_with_containment_keep_the_invariants(make_manager, trace):
    manager = make_manager()
    submitted: dict[str, dict] = {}
    ids: dict[int, str] = {}
    for step, (op, item) in enumerate(trace):
        if op == "add":
            result = manager.submit(item)
            ids[int(item["name"][2:])] = result.id
            submitted[result.id] = item
            for share in result.contained:
                event(f"contained {share['kind']}{' (equivalent)' if share['residual'] is None else ''}")
            assert set(result.tasks) == {entry["id"] for entry in item["tasks"]}
        else:
            dataflow_id = ids.pop(item)
            before = set(manager.state.tasks)
            removed = manager.remove(dataflow_id)
            del submitted[dataflow_id]
            assert set(removed.terminated) == before - set(manager.state.tasks)
        check_state(manager.state, submitted)
    store = manager.ledger.store
    restarted = Manager(store.redis, store.prefix, DryRunRuntime(store.redis, store.prefix))
    restarted.start()
    check_state(restarted.state, submitted)  # the shares are stored with the dataflows


def test_a_narrower_filter_reads_the_wider_one_and_keeps_it_running(make_manager):
    manager = make_manager()
    wide = manager.submit(chain("wide", "temp > 20", None, None, None))
    narrow = manager.submit(chain("narrow", "temp > 30 AND humidity < 50", None, None, None))
    assert narrow.contained == [{"task": "keep", "kind": "filter", "reads": wide.tasks["keep"],
                                 "residual": {"expr": "temp > 30 AND humidity < 50"}}]
    assert narrow.reused == ["src"] and narrow.created == ["keep", "out"]
    same = manager.submit(chain("same", "humidity < 50 AND temp > 30", None, None, None))
    assert same.tasks["keep"] == narrow.tasks["keep"]  # the residual, shared exactly (an equivalent predicate)
    manager.remove(wide.id)
    assert wide.tasks["keep"] in manager.state.tasks, "the wider filter stops while a narrower one reads it"
    assert manager.state.users[wide.tasks["keep"]] == {narrow.id, same.id}
    stats = manager.stats()
    assert stats["containment_shares"] == {"filter": 2, "select": 0, "window_aggregate": 0, "equivalent": 0}
    assert stats["submitted_tasks"] == 6  # the documents' tasks, not the wider filter each reads
    manager.remove(narrow.id)
    manager.remove(same.id)
    assert not manager.state.tasks


class NoScan(set):
    """A running task's users that fail the test when iterated: the question asked must be a lookup."""

    def __iter__(self):
        raise AssertionError("scanned every user of a running task")


def test_whether_an_owner_runs_a_shared_task_is_a_lookup_at_any_number_of_users(make_manager):
    """A submit's answer (and a user's view of shares) names a task a share reads only if the owner runs it as a task
    of their document; the state answers that from per-owner counts, not by scanning the task's users (which grew with
    the running set: 1,287 users scanned per submit on average at 20,000 dataflows of 200 owners)."""
    manager = make_manager()
    documents = {f"u{n}": chain(f"wide{n}", "temp > 20", None, None, None) for n in range(30)}
    documents["bob"] = chain("narrow", "temp > 30", None, None, None)
    results = {owner: manager.submit_validated(replace(parse_dataflow(document), owner=owner))
               for owner, document in documents.items()}
    wide, narrow = [results[f"u{n}"] for n in range(30)], results["bob"]
    hot = wide[0].tasks["keep"]
    assert [share["reads"] for share in narrow.contained] == [hot]
    state = manager.snapshot()
    users = state.users[hot]
    state.users[hot] = NoScan(users)
    try:
        reads = [SimpleNamespace(reads=hot)]
        assert read_by_owner(state, "bob", reads) == frozenset()  # bob only reads it through his share
        assert read_by_owner(state, "u7", reads) == {hot}
        assert not state.in_document_of("bob", hot) and state.uses("bob", hot) and state.in_document_of("u0", hot)
    finally:
        state.users[hot] = users
    check_state(manager.state, {results[owner].id: document for owner, document in documents.items()})


def test_a_dataflow_containment_rewrote_is_a_duplicate_of_itself(make_manager):
    """Its running sink reads the rewritten graph (another signature); the duplicate check compares the sinks as
    submitted (before, the same document submitted again with ``unique`` was accepted)."""
    manager = make_manager()
    manager.submit(chain("wide", "temp > 20", None, None, None))
    narrow = manager.submit(chain("narrow", "temp > 30", None, None, None))
    assert narrow.contained, "the narrower filter reads the wider one"
    with pytest.raises(DataflowDuplicate, match=f"identical to {narrow.id}"):
        manager.submit(chain("narrow", "temp > 30", None, None, None), unique=True)
    again = manager.submit(chain("narrow", "temp > 30", None, None, None))
    assert again.duplicate_of == narrow.id


def test_an_equivalent_predicate_is_the_running_filter(make_manager):
    manager = make_manager()
    first = manager.submit(chain("a", "temp > 20 AND temp > 25", None, None, None))
    second = manager.submit(chain("b", "25 < temp", None, None, None))
    assert second.tasks["keep"] == first.tasks["keep"] and second.created == ["out"]
    assert second.contained == [{"task": "keep", "kind": "filter", "reads": first.tasks["keep"], "residual": None}]


def test_a_longer_window_rolls_up_a_running_one(make_manager):
    manager = make_manager()
    short = manager.submit(chain("short", None, None, "10 seconds", {"n": "count(*)", "hi": "max(temp)"}))
    long = manager.submit(chain("long", None, None, "1 minute", {"count": "count(*)", "top": "max(temp)"}))
    (share,) = long.contained
    assert (share["task"], share["reads"]) == ("win", short.tasks["win"])
    assert share["residual"]["aggregates"] == {"count": "SUM(n)", "top": "MAX(hi)"}
    assert share["residual"]["time_column"] == "window_start" and share["residual"]["window"] == "60 seconds"
    not_derivable = manager.submit(chain("avg", None, None, "1 minute", {"mean": "avg(temp)"}))
    assert not_derivable.contained == []
    not_a_multiple = manager.submit(chain("odd", None, None, "15 seconds", {"n": "count(*)"}))
    assert not_a_multiple.contained == []


def test_a_sliding_window_rolls_up_a_running_tumbling_one(make_manager):
    """A 1-minute window every 20 s is the union of the running 10 s windows starting in it; every 15 s it is not
    (a 10 s window would straddle its edges), and a running sliding window is never rolled up (its rows overlap)."""
    manager = make_manager()
    short = manager.submit(chain("short", None, None, "10 seconds", {"n": "count(*)", "hi": "max(temp)"}))
    sliding = manager.submit(chain("sliding", None, None, "1 minute", {"count": "count(*)"}, slide="20 seconds"))
    (share,) = sliding.contained
    assert (share["task"], share["reads"], share["kind"]) == ("win", short.tasks["win"], "window_aggregate")
    residual = share["residual"]
    assert (residual["window"], residual["slide"], residual["time_column"]) == ("60 seconds", "20 seconds", "window_start")
    assert residual["aggregates"] == {"count": "SUM(n)"}
    assert manager.submit(chain("straddling", None, None, "1 minute", {"n": "count(*)"}, slide="15 seconds")).contained == []
    over_sliding = manager.submit(chain("over", "temp > -100", None, "20 seconds", {"n": "count(*)"}, slide="10 seconds"))
    assert over_sliding.contained == []
    longer = manager.submit(chain("longer", "temp > -100", None, "40 seconds", {"n": "count(*)"}))
    assert longer.contained == [] and longer.reused == ["src", "keep"]
    manager.remove(short.id)
    assert manager.state.tasks[sliding.tasks["win"]].type == "window_aggregate", "the roll-up outlives the wider task's owner"


def test_an_average_rolls_up_as_a_sum_over_a_count(make_manager):
    """A 1-minute avg of temp over a running 10 s window that keeps sum(temp) and count(temp): the roll-up window
    sums both, and the dataflow's own task becomes the select dividing them; a second such dataflow shares both
    exactly, and removing the first leaves the second's chain running."""
    manager = make_manager()
    short = manager.submit(chain("short", None, None, "10 seconds", {"s": "sum(temp)", "c": "count(temp)", "hi": "max(temp)"}))
    wanted = {"mean": "avg(temp)", "top": "max(temp)"}
    long = manager.submit(chain("long", None, None, "1 minute", wanted))
    (share,) = long.contained
    assert (share["task"], share["reads"], share["kind"]) == ("win", short.tasks["win"], "window_aggregate")
    assert share["residual"]["aggregates"] == {"mean__sum": "SUM(s)", "mean__count": "SUM(c)", "top": "MAX(hi)"}
    assert list(share["finish"]["columns"]) == ["sensor", "window_start", "window_end", "mean", "top"]
    flow = manager.state.dataflows[long.id]
    running = manager.state.tasks[flow.tasks["win"]]
    assert running.type == "select" and running.schema == {"sensor": "string", "window_start": "timestamp",
                                                           "window_end": "timestamp", "mean": "double", "top": "double"}
    (rollup,) = running.inputs
    assert manager.state.tasks[rollup[1]].type == "window_aggregate" and flow.tasks["win~rollup"] == rollup[1]
    assert set(long.tasks) == {"src", "win", "out"} and long.created == ["win", "out"]
    again = manager.submit(chain("again", None, None, "1 minute", wanted))
    assert again.tasks["win"] == long.tasks["win"] and again.created == ["out"]
    manager.remove(short.id)
    assert manager.state.tasks[short.tasks["win"]] and manager.state.tasks[long.tasks["win"]]
    manager.submit(chain("star", "temp > 0", None, "10 seconds", {"s": "sum(temp)", "n": "count(*)"}))
    counted = manager.submit(chain("star-long", "temp > 0", None, "1 minute", {"mean": "avg(temp)"}))
    assert counted.contained == [] and "keep" in counted.reused, "count(*) counts the nulls avg skips: no roll-up"


def test_containment_off_shares_only_equivalent_tasks(make_manager):
    manager = make_manager(containment=False)
    manager.submit(chain("wide", "temp > 20", None, None, None))
    narrow = manager.submit(chain("narrow", "temp > 30", None, None, None))
    assert narrow.contained == [] and narrow.created == ["keep", "out"]
    assert manager.stats()["containment"] is False


@pytest.mark.parametrize("link_mbps", [5, 1])
def test_with_a_wan_a_containment_share_goes_through_algorithm_1(make_manager, link_mbps):
    """The wider filter (8 Mbps out) runs at P; a narrower one whose sink is at P reads it there. One whose sink is
    at H2 reads it too when its residual, placed at P, ships 4 Mbps over the 5 Mbps link P -> H2 (a narrower stream
    than the wider one it reads); over a 1 Mbps link Algorithm 1 refuses, and it is planned without containment."""
    manager = make_manager()
    links = [{**link, "bandwidth_mbps": link_mbps} if (link["from"], link["to"]) == ("P", "H2") else link
             for link in WAN["links"]]
    manager.set_wan({**WAN, "links": links})

    def filtered(name: str, expr: str, site: str) -> dict:
        sink = task("out", "sink", topic=f"out-{name}")
        sink["site"] = site
        return {"name": name, "tasks": [source("src", "urban"), task("keep", "filter", expr=expr), sink],
                "streams": [stream("src", "keep"), stream("keep", "out")]}

    wide = manager.submit(filtered("wide", "temp > 20", "P"))
    assert wide.sites["keep"] == "P"
    near = manager.submit(filtered("near", "temp > 30", "P"))
    assert [(share["reads"], near.sites["keep"]) for share in near.contained] == [(wide.tasks["keep"], "P")]
    far = manager.submit(filtered("far", "temp > 35", "H2"))
    if link_mbps == 5:
        assert [share["reads"] for share in far.contained] == [wide.tasks["keep"]] and far.sites["keep"] == "P"
        assert manager.state.users[wide.tasks["keep"]] == {wide.id, near.id, far.id}
    else:
        assert far.contained == [] and far.reused == ["src"] and far.sites["keep"] == "H2"
        assert manager.state.users[wide.tasks["keep"]] == {wide.id, near.id}
