"""State of each (keyed operator, logical worker), versioned by micro-batch, where executors reach it.

Layout under the query's checkpoint::

    <root>/<operator>/w<worker>/<batch id, 12 digits>.arrow

One Arrow IPC file per version holds the worker's state rows; its schema
metadata carries the worker's report of that batch (rows routed to it, state
rows, event-time maxima, task time), which is all the driver ever reads.
Batch ``b`` of a worker starts from the newest version older than ``b``, so a
batch that Spark replays (same offsets) or a task Spark retries starts from
the same state and writes the same version again. A version is written to a
temporary name and renamed, so a reader never sees half a file. The newest
:data:`KEEP_VERSIONS` versions per worker are kept; older ones are deleted by
the task that writes a new one.

``root`` is a local path (in a cluster: a filesystem every executor mounts
at the same path) or any URI ``pyarrow.fs`` understands (``s3://...``,
``gs://...``, ``hdfs://...``).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

KEEP_VERSIONS = 3
META_KEY = b"sana.meta"
_VERSION = re.compile(r"^(\d{12})\.arrow$")
_FILESYSTEMS: dict[str, tuple[pafs.FileSystem, str]] = {}


def _filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    cached = _FILESYSTEMS.get(root)
    if cached is None:
        if "://" in root:
            cached = pafs.FileSystem.from_uri(root)
        else:
            cached = (pafs.LocalFileSystem(), root)
        _FILESYSTEMS[root] = cached
    return cached


def operator_dir(name: str) -> str:
    """A directory name for a running task id (task ids are ``[A-Za-z0-9_.-]``; anything else is escaped)."""
    return re.sub(r"[^A-Za-z0-9_.-]", lambda match: f"%{ord(match.group()):02x}", name)


@dataclass(frozen=True)
class WorkerStateStore:
    root: str

    def _dir(self, operator: str, worker: int) -> str:
        _, base = _filesystem(self.root)
        return f"{base}/{operator_dir(operator)}/w{worker}"

    def _versions(self, operator: str, worker: int) -> list[int]:
        fs, _ = _filesystem(self.root)
        selector = pafs.FileSelector(self._dir(operator, worker), allow_not_found=True)
        versions = []
        for info in fs.get_file_info(selector):
            match = _VERSION.match(info.base_name)
            if match:
                versions.append(int(match[1]))
        return sorted(versions)

    def _path(self, operator: str, worker: int, version: int) -> str:
        return f"{self._dir(operator, worker)}/{version:012d}.arrow"

    def load_before(self, operator: str, worker: int, batch_id: int) -> tuple[int | None, pa.Table | None]:
        """The newest version older than ``batch_id`` and its rows (``(None, None)`` if there is none)."""
        older = [version for version in self._versions(operator, worker) if version < batch_id]
        if not older:
            return None, None
        fs, _ = _filesystem(self.root)
        with fs.open_input_file(self._path(operator, worker, older[-1])) as handle:
            table = ipc.open_file(handle).read_all()
        return older[-1], (table.replace_schema_metadata(None) if table.num_columns else None)

    def save(self, operator: str, worker: int, batch_id: int, table: pa.Table | None, meta: dict[str, Any]) -> int:
        """Write version ``batch_id`` (rows and report); returns its size in bytes. Prunes old versions."""
        fs, _ = _filesystem(self.root)
        directory = self._dir(operator, worker)
        fs.create_dir(directory, recursive=True)
        if table is None:
            table = pa.table({})
        table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
        temporary = f"{directory}/.tmp-{uuid.uuid4().hex}"
        with fs.open_output_stream(temporary) as sink:
            with ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            size = sink.tell()
        fs.move(temporary, self._path(operator, worker, batch_id))
        for version in self._versions(operator, worker)[:-KEEP_VERSIONS]:
            try:
                fs.delete_file(self._path(operator, worker, version))
            except FileNotFoundError:  # a retried task pruned it first
                pass
        return size

    def meta(self, operator: str, worker: int, batch_id: int) -> dict[str, Any] | None:
        """The report stored with version ``batch_id`` (reads the file's footer only), or None."""
        fs, _ = _filesystem(self.root)
        try:
            with fs.open_input_file(self._path(operator, worker, batch_id)) as handle:
                metadata = ipc.open_file(handle).schema.metadata or {}
        except FileNotFoundError:
            return None
        return json.loads(metadata[META_KEY]) if META_KEY in metadata else None

    def copy_version(self, operator: str, version: int, target: "WorkerStateStore", as_version: int,
                     as_operator: str | None = None) -> int:
        """Copy the state of every worker of ``operator`` after batch ``version`` into ``target`` as ``as_version``.

        How a defragmentation or a hand-over gives a keyed task's state to the
        query that takes it over (under the name ``as_operator``, by default the
        same); returns the number of workers copied. A worker's state after a
        batch is its newest version up to it (a batch with nothing to do for the
        operator writes none). Raises ``LookupError`` if a worker has only newer
        versions (its state would not match the driver's).
        """
        fs, base = _filesystem(self.root)
        selector = pafs.FileSelector(f"{base}/{operator_dir(operator)}", allow_not_found=True)
        copied = 0
        for info in fs.get_file_info(selector):
            if info.type != pafs.FileType.Directory or not info.base_name.startswith("w"):
                continue
            worker = int(info.base_name[1:])
            found, table = self.load_before(operator, worker, version + 1)
            if found is None:
                raise LookupError(f"keyed operator {operator}: worker {worker} has no state version up to {version}")
            target.save(as_operator or operator, worker, as_version, table, self.meta(operator, worker, found) or {})
            copied += 1
        return copied

    def drop(self, operator: str) -> None:
        """Delete every version of every worker of ``operator`` (the task stopped for good)."""
        fs, base = _filesystem(self.root)
        try:
            fs.delete_dir(f"{base}/{operator_dir(operator)}")
        except FileNotFoundError:
            pass
