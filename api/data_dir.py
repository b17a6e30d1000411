"""The data folder ``sana up`` keeps across runs, who holds it, and ``sana reset``.

``.sana/data`` (``SANA_DATA_DIR``) holds the embedded broker's object store
(``objects/``), the embedded Valkey's append-only file (``valkey/``) and, by
default, the Spark checkpoints (``checkpoints/``), which record broker offsets
and so belong with the broker's data. One ``sana up`` at a time uses it: it
writes its process id to ``sana-up.pid`` and removes it when it stops; a file
left by a killed ``sana up`` names a dead process and is taken over.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from sana.exceptions import SanaError
from sana.settings import Settings

PID_FILE = "sana-up.pid"


class DataDirBusy(SanaError):
    """Another running ``sana up`` holds the data folder."""

    code = "DATA_DIR_BUSY"


def holder(data_dir: Path) -> int | None:
    """The live process that holds ``data_dir``, or None (no pid file, or one left by a process that is gone)."""
    try:
        pid = int((data_dir / PID_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return pid


@dataclass
class DataDirClaim:
    """``sana up``'s hold on its data folder, released by :meth:`release`."""

    data_dir: Path

    @classmethod
    def take(cls, data_dir: Path) -> "DataDirClaim":
        data_dir.mkdir(parents=True, exist_ok=True)
        pid = holder(data_dir)
        if pid is not None:
            raise DataDirBusy(f"another sana up (process {pid}) uses {data_dir}: stop it first, or give this one "
                              "another folder with SANA_DATA_DIR (and its own ports)")
        (data_dir / PID_FILE).write_text(f"{os.getpid()}\n")
        return cls(data_dir)

    def release(self) -> None:
        path = self.data_dir / PID_FILE
        if holder(self.data_dir) is None and path.exists():
            path.unlink()


def reset(settings: Settings, say: Callable[[str], None]) -> list[str]:
    """Delete what ``sana up`` keeps: the data folder, the checkpoints and the state under the state prefix.

    The state's keys are deleted in the Redis at ``SANA_REDIS_URL`` when one answers (an embedded Valkey's file is in
    the data folder already). Raises :class:`DataDirBusy` while a ``sana up`` holds the folder; returns what went.
    """
    pid = holder(settings.data_dir)
    if pid is not None:
        raise DataDirBusy(f"sana up (process {pid}) is using {settings.data_dir}: stop it (Ctrl-C), then reset")
    gone = []
    for folder in (settings.data_dir, settings.checkpoint_dir):
        if folder.exists():
            shutil.rmtree(folder)
            gone.append(f"deleted {folder}")
    gone.extend(_delete_state(settings))
    for line in gone or ["nothing to delete"]:
        say(line)
    return gone


def _delete_state(settings: Settings) -> list[str]:
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=1)
    try:
        keys = list(client.scan_iter(f"{settings.state_prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    except redis.RedisError:
        return [f"no Redis answers at {settings.redis_url}: its state (if any) is kept"]
    return [f"deleted {len(keys)} state key(s) under {settings.state_prefix}: in {settings.redis_url}"] if keys else []
