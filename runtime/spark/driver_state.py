"""The driver's small per-query state, versioned by micro-batch id next to the query's checkpoint.

What the driver keeps between batches is small and does not grow with the
input: per keyed operator its watermarks, routing table and row counts (the
rows themselves live in the worker state store, :mod:`runtime.spark.worker_state`),
and the replay memory of the topics the query reads from other queries.
After batch ``b`` it is written to ``<checkpoint>/sana-state/<b>.pkl`` (write
then rename). Batch ``b`` starts from
the newest version older than ``b``, so a batch replayed after a crash (Spark
re-runs it with the same offsets) starts from the same state and produces the
same output: the state is as exact as Spark's offset log.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

KEEP_VERSIONS = 4


class StateStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _versions(self) -> list[int]:
        if not self.path.is_dir():
            return []
        return sorted(int(name[:-4]) for name in os.listdir(self.path) if name.endswith(".pkl") and name[:-4].isdigit())

    def load_before(self, batch_id: int) -> tuple[int | None, dict[str, Any]]:
        """The newest saved version older than ``batch_id`` and its states (``(None, {})`` if none)."""
        older = [version for version in self._versions() if version < batch_id]
        if not older:
            return None, {}
        with open(self.path / f"{older[-1]}.pkl", "rb") as handle:
            return older[-1], pickle.load(handle)

    def save(self, batch_id: int, states: dict[str, Any]) -> int:
        """Write the states after ``batch_id``; returns the bytes written. Old versions are pruned."""
        self.path.mkdir(parents=True, exist_ok=True)
        temporary = self.path / f".{batch_id}.tmp"
        with open(temporary, "wb") as handle:
            pickle.dump(states, handle, protocol=pickle.HIGHEST_PROTOCOL)
            handle.flush()
            os.fsync(handle.fileno())
        size = temporary.stat().st_size
        os.replace(temporary, self.path / f"{batch_id}.pkl")
        for version in self._versions()[:-KEEP_VERSIONS]:
            (self.path / f"{version}.pkl").unlink(missing_ok=True)
        return size
