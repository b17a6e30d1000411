"""The dry-run runtime: records what would be deployed, starts nothing.

``sana up --dry-run`` (or ``SANA_DRY_RUN=1``) uses it to answer "what would
sharing save?" without Spark or Kafka. What it records lives in Redis beside
the manager's state, under ``<prefix>:dryrun:``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import redis

from runtime.exceptions import RuntimeFailure
from runtime.plan import Change, TaskSpec, seeds_problem

LOG_LENGTH = 1000


class DryRunRuntime:
    """Keeps ``<prefix>:dryrun:deployed`` (task id -> fragment) and a change log."""

    kind = "dry-run"

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._redis = client
        self._deployed = f"{prefix}:dryrun:deployed"
        self._log = f"{prefix}:dryrun:log"

    def apply(self, change: Change) -> None:
        if change.empty:
            return
        entry = {
            "at": time.time(),
            "reason": change.reason,
            "started": [task.id for task in change.start],
            "stopped": [task.id for task in change.stop],
        }
        try:
            with self._redis.pipeline(transaction=True) as pipe:
                if change.stop:
                    pipe.hdel(self._deployed, *(task.id for task in change.stop))
                if change.start:
                    pipe.hset(self._deployed, mapping={task.id: task.fragment for task in change.start})
                pipe.lpush(self._log, json.dumps(entry))
                pipe.ltrim(self._log, 0, LOG_LENGTH - 1)
                pipe.execute()
        except redis.RedisError as error:
            raise RuntimeFailure(f"dry-run runtime could not record {change.reason}: {error}") from error

    def hand_over(self, change: Change, seeds: Mapping[str, str]) -> dict[str, Any]:
        """Nothing runs, so nothing is cut: the change is recorded like any other (its seeds checked as Spark does)."""
        problem = seeds_problem(change, seeds, self.deployed())
        if problem is not None:
            raise RuntimeFailure(f"{change.reason}: {problem}")
        self.apply(change)
        return {"paused": [], "cut": {}, "seeded": sorted(seeds), "seeded_from": dict(seeds), "drain_s": 0.0, "paused_s": 0.0}

    def reconcile(self, tasks: Mapping[str, TaskSpec]) -> None:
        deployed = self.deployed()
        extra = [task_id for task_id in deployed if task_id not in tasks]
        missing = {task_id: task.fragment for task_id, task in tasks.items() if deployed.get(task_id) != task.fragment}
        with self._redis.pipeline(transaction=True) as pipe:
            if extra:
                pipe.hdel(self._deployed, *extra)
            if missing:
                pipe.hset(self._deployed, mapping=missing)
            pipe.execute()

    def restore(self, tasks: Mapping[str, TaskSpec]) -> None:
        self.reconcile(tasks)

    def fragment_metrics(self) -> dict[str, Any]:
        """Nothing runs as queries."""
        return {"fragments": {}, "queries": {}}

    def read_positions(self) -> dict[str, dict[int, int]]:
        """Nothing reads the broker."""
        return {}

    def task_costs(self) -> dict[str, Any]:
        """Nothing runs, so nothing is measured."""
        return {"measured": False, "window_s": 0.0, "tasks": {}}

    def defragment(self) -> dict[str, Any]:
        """No queries, nothing to merge."""
        return {"queries_before": 0, "queries_after": 0, "merged": [], "skipped": [],
                "note": f"the {self.kind} runtime runs no queries"}

    def work(self) -> dict[str, Any]:
        """Nothing runs, so nothing fails or stalls."""
        return {"status": "ok", "degraded": [], "quarantined": []}

    def failures(self) -> dict[str, Any]:
        return {}

    def stalled(self) -> dict[str, dict[str, Any]]:
        return {}

    def runs(self, tasks: Mapping[str, TaskSpec]) -> bool:
        return self.deployed() == {task_id: task.fragment for task_id, task in tasks.items()}

    def deployed(self) -> dict[str, str]:
        """Task id -> fragment of everything recorded as running."""
        return {key.decode(): value.decode() for key, value in self._redis.hgetall(self._deployed).items()}

    def log(self, count: int = 50) -> list[dict[str, Any]]:
        """The most recent changes, newest first."""
        return [json.loads(item) for item in self._redis.lrange(self._log, 0, count - 1)]

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "kind": self.kind, "deployed_tasks": self._redis.hlen(self._deployed)}

    def close(self) -> None:
        return None
