"""A Spark standalone cluster from pyspark's own distribution: a master and workers, each a JVM of its own.

``sana spark-cluster`` starts one on this machine for trying Sana against a
real cluster master (``SANA_SPARK_MASTER=spark://127.0.0.1:7077``); the tests
use it to run the runtime with executors in other JVMs, and to kill a worker
while records flow. pip's pyspark ships ``bin/spark-class`` and the jars, not
``sbin/start-master.sh``, so the daemons are started by their main classes.

A worker runs its executors' Python with this interpreter (``PYSPARK_PYTHON``),
so they import Sana as the driver does. Executors write their keyed state and
read checkpoints on the local file system: on more than one machine those
paths must be on a shared file system (docs/runtime.md, "On a cluster").
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from runtime.exceptions import RuntimeFailure

log = logging.getLogger("sana.runtime.standalone")

START_TIMEOUT_S = 60.0


def spark_class() -> Path:
    """``bin/spark-class`` of the installed pyspark."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen
    log_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on ``host``, logging to ``run_dir``."""

    run_dir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    host: str = "127.0.0.1"
    port: int = 0
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def start(self) -> "StandaloneCluster":
        """Start the master, then the workers; returns once every worker has registered."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port(self.host)
        self._web_port = _free_port(self.host)
        try:
            self.daemons.append(self._spawn("master", "org.apache.spark.deploy.master.Master",
                                            "--host", self.host, "--port", str(self.port),
                                            "--webui-port", str(self._web_port)))
            self._wait(lambda: self._alive_workers() is not None, "the master to answer")
            for number in range(self.workers):
                self.start_worker(number)
            self._wait(lambda: (self._alive_workers() or 0) >= self.workers, f"{self.workers} workers to register")
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, number: int) -> Daemon:
        work = self.run_dir / f"worker-{number}"
        work.mkdir(parents=True, exist_ok=True)
        daemon = self._spawn(f"worker-{number}", "org.apache.spark.deploy.worker.Worker",
                             "--host", self.host, "--cores", str(self.cores), "--memory", self.memory,
                             "--work-dir", str(work), "--webui-port", str(_free_port(self.host)), self.master_url)
        self.daemons.append(daemon)
        return daemon

    def worker(self, number: int) -> Daemon:
        return next(daemon for daemon in self.daemons if daemon.name == f"worker-{number}" and daemon.alive())

    def kill(self, daemon: Daemon) -> None:
        """SIGKILL a daemon and its executors (they are its children): as when a machine is lost."""
        _kill_tree(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master."""
        for daemon in reversed(self.daemons):
            if daemon.alive():
                _kill_tree(daemon.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for daemon in self.daemons:
            try:
                daemon.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_tree(daemon.process.pid, signal.SIGKILL)
                daemon.process.wait(timeout=10)
        self.daemons.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- inside ------------------------------------------------------------------------------

    def _spawn(self, name: str, main_class: str, *arguments: str) -> Daemon:
        log_path = self.run_dir / f"{name}.log"
        environment = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
                       "SPARK_LOG_DIR": str(self.run_dir), "SPARK_NO_DAEMONIZE": "1"}
        environment.pop("SPARK_HOME", None)  # spark-class finds pyspark's own
        with open(log_path, "ab") as output:
            process = subprocess.Popen([str(spark_class()), main_class, *arguments], stdout=output,
                                       stderr=subprocess.STDOUT, env=environment, start_new_session=True)
        log.info("spark %s started (pid %d), log %s", name, process.pid, log_path)
        return Daemon(name, process, log_path)

    def _alive_workers(self) -> int | None:
        """Workers the master counts as alive (from its web UI's JSON), or None if it does not answer."""
        import json

        try:
            with urllib.request.urlopen(f"http://{self.host}:{self._web_port}/json/", timeout=2) as answer:
                state = json.load(answer)
        except (OSError, ValueError):
            return None
        return int(state.get("aliveworkers", 0))

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            dead = [daemon for daemon in self.daemons if not daemon.alive()]
            if dead:
                raise RuntimeFailure(f"spark {dead[0].name} exited while waiting for {what}; see {dead[0].log_path}")
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"timed out after {START_TIMEOUT_S:.0f} s waiting for {what}; see {self.run_dir}")
            time.sleep(0.25)


def _kill_tree(pid: int, sig: int) -> None:
    """Signal a daemon's whole process group (it was started in a session of its own)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
