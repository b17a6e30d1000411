"""Cost attribution: each running task's measured cost, split among the dataflows that use it.

A task used by k dataflows charges each of them 1/k of its cost, so the
dataflows' shares add up to the cost of every task some dataflow uses (the
manager's minimization guarantee: that is every running task). A dataflow's
``alone`` cost is the full cost of its tasks: what it would cost if no other
dataflow shared them; ``saved`` is the difference. The costs themselves come
from the runtime (:mod:`runtime.costs`); without measurements (dry run, or
the first seconds) every figure is zero and ``measured`` is False.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

METRICS = ("cpu_cores", "kafka_bytes_per_s", "state_bytes")


def _zero() -> dict[str, float]:
    return {metric: 0.0 for metric in METRICS}


def _task_cost(measured: Mapping[str, Any] | None) -> dict[str, float]:
    measured = measured or {}
    return {metric: float(measured.get(metric) or 0.0) for metric in METRICS}


def attribute(costs: Mapping[str, Any], tasks_of: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """Split the runtime's task costs among dataflows.

    ``costs`` is what the runtime measured (``tasks``: task id -> metrics);
    ``tasks_of`` maps each dataflow id to its tasks: submitted task id -> the
    running task id serving it. A row of a dataflow's ``tasks`` names the
    running task (``task``) and the dataflow's own ids it serves (``submitted``).

    >>> costs = {"measured": True, "window_s": 30.0, "tasks": {
    ...     "r1": {"cpu_cores": 0.2, "kafka_bytes_per_s": 0, "state_bytes": 0},
    ...     "r2": {"cpu_cores": 0.4, "kafka_bytes_per_s": 100.0, "state_bytes": 900}}}
    >>> split = attribute(costs, {"df-1": {"src": "r1", "agg": "r2"}, "df-2": {"in": "r1"}})
    >>> split["dataflows"]["df-1"]["cost"]["cpu_cores"], split["dataflows"]["df-2"]["cost"]["cpu_cores"]
    (0.5, 0.1)
    >>> split["dataflows"]["df-1"]["saved"]["cpu_cores"], split["total"]["cpu_cores"]
    (0.1, 0.6)
    >>> [(row["task"], row["submitted"]) for row in split["dataflows"]["df-2"]["tasks"]]
    [('r1', ['in'])]
    """
    measured_tasks = costs.get("tasks") or {}
    users: dict[str, list[str]] = {}
    for dataflow_id, tasks in tasks_of.items():
        for task_id in set(tasks.values()):
            users.setdefault(task_id, []).append(dataflow_id)
    task_cost = {task_id: _task_cost(measured_tasks.get(task_id)) for task_id in users}
    dataflows = {}
    for dataflow_id, tasks in tasks_of.items():
        cost, alone, rows = _zero(), _zero(), []
        for task_id, submitted in sorted(_submitted_of(tasks).items()):
            full, sharers = task_cost[task_id], len(users[task_id])
            for metric in METRICS:
                cost[metric] += full[metric] / sharers
                alone[metric] += full[metric]
            rows.append({"task": task_id, "submitted": submitted, "users": sharers, "share": 1.0 / sharers,
                         **{metric: full[metric] / sharers for metric in METRICS}})
        dataflows[dataflow_id] = {
            "id": dataflow_id,
            "cost": _rounded(cost),
            "alone": _rounded(alone),
            "saved": _rounded({metric: alone[metric] - cost[metric] for metric in METRICS}),
            "saved_percent": {metric: round(100.0 * (1 - cost[metric] / alone[metric]), 2) if alone[metric] else 0.0
                              for metric in METRICS},
            "tasks": [_rounded(row) for row in rows],
        }
    total = _zero()
    for full in task_cost.values():
        for metric in METRICS:
            total[metric] += full[metric]
    unattributed = _zero()
    for task_id, measured in measured_tasks.items():
        if task_id not in users:
            for metric, value in _task_cost(measured).items():
                unattributed[metric] += value
    return {
        "measured": bool(costs.get("measured")),
        "window_s": costs.get("window_s", 0.0),
        "service_cpu_cores": round(float(costs.get("cpu_cores") or 0.0), 6),
        "total": _rounded(total),
        "unattributed": _rounded(unattributed),
        "dataflows": dataflows,
    }


def _submitted_of(tasks: Mapping[str, str]) -> dict[str, list[str]]:
    """Running task id -> the submitted task ids it serves (sorted): one running task may serve several."""
    submitted: dict[str, list[str]] = {}
    for task_id, running in sorted(tasks.items()):
        submitted.setdefault(running, []).append(task_id)
    return submitted


def _rounded(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: round(value, 6) if isinstance(value, float) else value for key, value in values.items()}
