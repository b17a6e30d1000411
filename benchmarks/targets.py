"""What the latency benchmark talks to: the manager in this process, or ``sana up --dry-run`` over HTTP.

Both expose ``submit(document, body)``, ``remove(id)``, ``stats()``,
``baseline(n)`` and ``close()``; latencies are in milliseconds, measured
around exactly the call a client makes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from manager.results import Limits
from manager.service import Manager
from manager.validate import parse_dataflow
from runtime.dryrun import DryRunRuntime
from sana.auth import new_token, token_hash

SERVER_START_TIMEOUT_S = 60.0
# In-process runs fill far past one owner's and one machine's limits; only a dataflow's size stays bounded.
UNLIMITED = Limits(tasks_per_dataflow=200, dataflows_per_owner=10**9, running_tasks=10**9, queries=10**9)


@dataclass(frozen=True)
class Submitted:
    id: str
    ms: float
    created: int
    tasks: int
    parse_ms: float | None = None
    signatures: tuple[str, ...] = ()


def redis_client(url: str) -> redis.Redis:
    """A client built as the API builds its own (api/services.py)."""
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=10)


def delete_prefix(client: redis.Redis, prefix: str) -> int:
    """Delete every key under ``prefix:``; returns how many."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += client.delete(*batch)
            batch.clear()
    if batch:
        deleted += client.delete(*batch)
    return deleted


class InProcessTarget:
    """``Manager`` + ``DryRunRuntime`` on a real Redis, called directly.

    A submit is timed as ``parse_dataflow`` then ``Manager.submit_validated``,
    which is exactly what ``Manager.submit`` does, so the parse share is known.
    """

    mode = "in-process"

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.prefix = prefix
        self.client = redis_client(redis_url)
        self.manager = Manager(self.client, prefix, DryRunRuntime(self.client, prefix), limits=UNLIMITED)
        self.manager.start()
        self.pids = (os.getpid(),)

    def submit(self, document: dict[str, Any], body: bytes) -> Submitted:
        start = time.perf_counter()
        flow = parse_dataflow(document)
        parsed = time.perf_counter()
        result = self.manager.submit_validated(flow)
        end = time.perf_counter()
        return Submitted(result.id, (end - start) * 1000, len(result.created), len(flow.tasks),
                         (parsed - start) * 1000, tuple(flow.signatures.values()))

    def remove(self, dataflow_id: str) -> tuple[float, int]:
        start = time.perf_counter()
        result = self.manager.remove(dataflow_id)
        return (time.perf_counter() - start) * 1000, len(result.terminated)

    def stats(self) -> dict[str, Any]:
        return self.manager.stats()

    def baseline(self, count: int) -> list[float]:
        """One Redis round trip (PING) on the manager's client: the unit of most of a submit's cost."""
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            self.client.ping()
            samples.append((time.perf_counter() - start) * 1000)
        return samples

    def close(self) -> None:
        self.manager.close()
        self.client.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(process: subprocess.Popen, client: httpx.Client, log_path: Path, timeout_s: float,
                 pause_s: float, session: bool = False) -> None:
    """Return once ``sana up`` (``process``) answers 200 on ``/healthz`` (with ``session``: and its SparkSession is
    ready, so that no measured change waits for Spark to start); raise if it exits or takes too long."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sana up exited with {process.returncode}; see {log_path}")
        try:
            response = client.get("/healthz")
            if response.status_code == 200 and (
                    not session or response.json()["components"]["runtime"].get("session") == "ready"):
                return
        except httpx.TransportError:
            pass
        time.sleep(pause_s)
    raise RuntimeError(f"sana up did not answer on {client.base_url} within {timeout_s:.0f} s; see {log_path}")


class Tenants:
    """``count`` user principals with bearer tokens, and an admin, for a service with a tokens file.

    Dataflows go to the users in turn; each one's sink topics move into its user's namespace
    (``<name>.``), since a user's sinks may write nothing else, and its sources read ``riot-*``
    (granted). The service then checks every request's token, owner, topics and per-owner limit
    as it does for real users.
    """

    def __init__(self, count: int) -> None:
        self.users = [(f"u{index}", new_token()) for index in range(count)]
        self.admin = ("bench-admin", new_token())
        self._turn = 0
        self._token_of: dict[str, str] = {}

    def tokens_document(self) -> dict[str, Any]:
        entries = [{"name": name, "role": "user", "token_sha256": token_hash(token), "read_topics": ["riot-*"]}
                   for name, token in self.users]
        return {"principals": entries + [{"name": self.admin[0], "role": "admin",
                                          "token_sha256": token_hash(self.admin[1])}]}

    def assign(self, document: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """``document`` as the next user submits it (sinks in their namespace), and that user's token."""
        name, token = self.users[self._turn % len(self.users)]
        self._turn += 1
        tasks = [{**task, "config": {**task["config"], "topic": f"{name}.{task['config']['topic']}"}}
                 if task["type"] == "sink" else task for task in document["tasks"]]
        return {**document, "owner": name, "tasks": tasks}, token

    def remember(self, dataflow_id: str, token: str) -> None:
        self._token_of[dataflow_id] = token

    def token_for(self, dataflow_id: str) -> str:
        return self._token_of.pop(dataflow_id)


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


class HttpTarget:
    """``sana up --dry-run`` started as a subprocess, driven by one keep-alive httpx client.

    ``dry_run=False``: ``sana up`` with Spark (``local[2]``) and its embedded broker on a free port.
    ``tenants``: the service runs with a tokens file of those principals and ``limits`` (``SANA_*``
    variables) and every request carries its principal's token.
    """

    mode = "http"

    def __init__(self, redis_url: str, prefix: str, run_dir: Path, dry_run: bool = True,
                 tenants: Tenants | None = None, limits: dict[str, str] | None = None) -> None:
        self.prefix = prefix
        self.run_dir = run_dir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.dry_run = dry_run
        sana = Path(sys.executable).with_name("sana")
        self.command = [str(sana), "up", "--port", str(self.port)] + (["--dry-run"] if dry_run else [])
        env = {**os.environ, "SANA_STATE_PREFIX": prefix, "SANA_REDIS_URL": redis_url, "SANA_RUN_DIR": str(run_dir),
               "SANA_DATA_DIR": str(run_dir / "data")}
        self.bootstrap: str | None = None
        if not dry_run:
            broker_port = free_port()
            self.bootstrap = f"127.0.0.1:{broker_port}"
            env.update(SANA_EMBEDDED_KAFKA_PORT=str(broker_port), SANA_SPARK_MASTER="local[2]",
                       SANA_CHECKPOINT_DIR=str(run_dir / "checkpoints"))
            env.pop("SANA_KAFKA_BOOTSTRAP", None)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.tenants = tenants
        if tenants is not None:
            tokens_file = run_dir / "tokens.json"
            tokens_file.write_text(json.dumps(tenants.tokens_document()))
            env["SANA_TOKENS_FILE"] = str(tokens_file)
        env.update(limits or {})
        self.log_path = run_dir / "sana-up.log"
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command, env=env, cwd=run_dir, stdout=self._log, stderr=subprocess.STDOUT)
        self.pids = (os.getpid(), self.process.pid)
        self.client = httpx.Client(base_url=self.base_url, timeout=120,
                                   headers=_bearer(tenants.admin[1]) if tenants is not None else None)
        self._wait_ready()

    def _wait_ready(self) -> None:
        timeout = SERVER_START_TIMEOUT_S if self.dry_run else 3 * SERVER_START_TIMEOUT_S  # + the broker and Spark
        wait_healthy(self.process, self.client, self.log_path, timeout, pause_s=0.2, session=not self.dry_run)

    def submit(self, document: dict[str, Any], body: bytes) -> Submitted:
        headers = {"content-type": "application/json"}
        if self.tenants is not None:
            document, token = self.tenants.assign(document)
            body = encode(document)
            headers.update(_bearer(token))
        start = time.perf_counter()
        response = self.client.post("/dataflows", content=body, headers=headers)
        elapsed = (time.perf_counter() - start) * 1000
        if response.status_code != 201:
            raise RuntimeError(f"POST /dataflows {document['name']}: {response.status_code} {response.text[:500]}")
        answer = response.json()
        if self.tenants is not None:
            self.tenants.remember(answer["id"], token)
        return Submitted(answer["id"], elapsed, len(answer["created"]), len(answer["tasks"]))

    def remove(self, dataflow_id: str) -> tuple[float, int]:
        headers = _bearer(self.tenants.token_for(dataflow_id)) if self.tenants is not None else None
        start = time.perf_counter()
        response = self.client.delete(f"/dataflows/{dataflow_id}", headers=headers)
        elapsed = (time.perf_counter() - start) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"DELETE /dataflows/{dataflow_id}: {response.status_code} {response.text[:500]}")
        return elapsed, len(response.json()["terminated"])

    def stats(self) -> dict[str, Any]:
        return self.client.get("/stats").raise_for_status().json()

    def baseline(self, count: int) -> list[float]:
        """``GET /dataflows/df-0`` (404): the HTTP + FastAPI + one Redis round trip floor."""
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            response = self.client.get("/dataflows/df-0")
            samples.append((time.perf_counter() - start) * 1000)
            if response.status_code != 404:
                raise RuntimeError(f"GET /dataflows/df-0: expected 404, got {response.status_code}")
        return samples

    def close(self) -> None:
        """Stop the server; its run directory (with its log) is kept only if it exited on its own."""
        self.client.close()
        crashed = self.process.poll() is not None
        if not crashed:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        if not crashed:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()
