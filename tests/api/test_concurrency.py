"""50 parallel submits and removes over HTTP, split across two managers on one Redis prefix."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from api.app import create_app
from manager.service import Manager
from runtime.dryrun import DryRunRuntime
from tests.fixtures.dataflows import chain, source, stream, task
from tests.fixtures.invariants import check_state
from tests.fixtures.services import ServerThread

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _workload(count: int) -> list[dict]:
    """Seeded dataflows over three sources: shared prefixes, forks, some shared sinks."""
    rng = random.Random(20261121)
    documents = []
    for number in range(count):
        topic = rng.choice(["urban", "grid", "taxi"])
        threshold = rng.choice([10, 20, 30])
        columns = rng.choice([{"sensor": "sensor", "f": "temp * 9 / 5 + 32", "ts": "ts"}, {"sensor": "upper(sensor)", "ts": "ts"}])
        tasks = [
            source("src", topic=topic),
            task("hot", "filter", expr=f"temp > {threshold}"),
            task("proj", "select", columns=columns),
            task("out", "sink", topic=f"out-{topic}-{threshold}-{len(columns)}" if rng.random() < 0.3 else f"out-{number}"),
        ]
        document = chain(*tasks, name=f"c{number}")
        if rng.random() < 0.4:
            document["tasks"].append(task("cold", "filter", expr="humidity < 50"))
            document["tasks"].append(task("out2", "sink", topic=f"cold-{number}"))
            document["streams"] += [stream("src", "cold"), stream("cold", "out2")]
        documents.append(document)
    return documents


def test_parallel_submits_and_removes_end_consistent(settings_factory, redis_client, state_prefix):
    workload = _workload(40)
    with ServerThread(create_app(settings_factory())) as one, ServerThread(create_app(settings_factory())) as two:
        clients = [httpx.Client(base_url=one, timeout=60), httpx.Client(base_url=two, timeout=60)]
        submitted: dict[str, dict] = {}
        lock = threading.Lock()

        def submit(number: int) -> None:
            response = clients[number % 2].post("/dataflows", json=workload[number])
            assert response.status_code == 201, response.text
            with lock:
                submitted[response.json()["id"]] = workload[number]

        def remove(dataflow_id: str) -> None:
            response = clients[hash(dataflow_id) % 2].delete(f"/dataflows/{dataflow_id}")
            assert response.status_code == 200, response.text
            with lock:
                del submitted[dataflow_id]

        with ThreadPoolExecutor(max_workers=12) as pool:
            list(pool.map(submit, range(30)))
            victims = random.Random(5).sample(sorted(submitted), 10)
            futures = [pool.submit(remove, victim) for victim in victims]
            futures += [pool.submit(submit, number) for number in range(30, 40)]
            for future in futures:
                future.result()
        for client in clients:
            client.close()
        assert len(submitted) == 30
        listed = httpx.get(f"{one}/dataflows").json()["dataflows"]
        assert {flow["id"] for flow in listed} == set(submitted)

    fresh = Manager(redis_client, state_prefix, DryRunRuntime(redis_client, state_prefix))
    fresh.start()
    check_state(fresh.state, submitted)
    assert len({flow_id for flow_id in fresh.state.dataflows}) == 30
