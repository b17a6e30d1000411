"""What a dataflow's work is doing: running, failed (a task quarantined at run time) or stalled.

The runtime names the running tasks that failed at run time
(``Runtime.failures()``: quarantined, see :mod:`runtime.quarantine`) and the
tasks whose query is down or restarting (``Runtime.stalled()``). A dataflow
uses the running tasks its submitted tasks map onto, so its status is read off
those: ``failed`` if one of them is quarantined (naming the submitted task,
the expression and Spark's error), else ``stalled`` if one waits for its
query, else ``running``. Pure functions over plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from manager.state import State, SubmittedDataflow

RUNNING, FAILED, STALLED = "running", "failed", "stalled"


def status(flow: SubmittedDataflow, failures: Mapping[str, Mapping[str, Any]], stalled: Mapping[str, Mapping[str, Any]],
           *, details: bool = True) -> dict[str, Any]:
    """The status of ``flow`` given the runtime's failures and stalled tasks (running task id -> record).

    ``details=False`` leaves out what is about the service rather than the
    dataflow (query ids, Spark's error of a query that stalled: it may come
    from another owner's work).

    >>> flow = SubmittedDataflow("df-1", "n", "ann", 0.0, {"tasks": [{"id": "hot", "type": "filter",
    ...     "config": {"expr": "date_add(d, n) > d"}}]}, {"src": "r1", "hot": "r2", "out": "r3"}, {})
    >>> status(flow, {}, {})
    {'status': 'running'}
    >>> failed = status(flow, {"r2": {"error": "[DATETIME_OVERFLOW] ...", "expression": "date_add(d, n)",
    ...     "error_class": "DATETIME_OVERFLOW", "batch": 7, "at": 1.0, "query": "q1"}}, {})
    >>> failed["status"], failed["failure"]["task"], failed["failure"]["config"]
    ('failed', 'hot', {'expr': 'date_add(d, n) > d'})
    >>> status(flow, {}, {"r3": {"query": "q2", "error": "boom", "restarts": 2}}, details=False)
    {'status': 'stalled', 'stalled': {'tasks': ['out'], 'restarts': 2}}
    """
    submitted_of: dict[str, list[str]] = {}
    for submitted, running in flow.tasks.items():
        submitted_of.setdefault(running, []).append(submitted)
    failed = [running for running in submitted_of if running in failures]
    if failed:
        running = min(failed)
        record = failures[running]
        task = sorted(submitted_of[running])[0]
        failure = {
            "task": task,
            "running_task": running,
            "type": _task_field(flow, task, "type"),
            "config": _task_field(flow, task, "config"),
            "expression": _written(flow, task) or record.get("expression"),
            "error": record.get("error"),
            "error_class": record.get("error_class"),
            "batch": record.get("batch"),
            "at": record.get("at"),
        }
        if details:
            failure["query"] = record.get("query")
        return {"status": FAILED, "failure": failure}
    waiting = sorted(running for running in submitted_of if running in stalled)
    if waiting:
        first = stalled[waiting[0]]
        report: dict[str, Any] = {
            "tasks": sorted(task for running in waiting for task in submitted_of[running]),
            "restarts": first.get("restarts", 0),
        }
        if details:
            report.update(query=first.get("query"), error=first.get("error"))
        return {"status": STALLED, "stalled": report}
    return {"status": RUNNING}


def counts(flows: Iterable[SubmittedDataflow], failures: Mapping[str, Mapping[str, Any]],
           stalled: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """How many of ``flows`` are running, failed and stalled.

    >>> flow = SubmittedDataflow("df-1", "n", None, 0.0, {}, {"a": "r1"}, {})
    >>> counts([flow], {"r1": {}}, {})
    {'running': 0, 'failed': 1, 'stalled': 0}
    """
    result = {RUNNING: 0, FAILED: 0, STALLED: 0}
    for flow in flows:
        result[status(flow, failures, stalled, details=False)["status"]] += 1
    return result


def quarantined_with_readers(state: State, failed: Iterable[str]) -> set[str]:
    """The failed running tasks and every running task reading them, directly or not.

    A new dataflow must not be served by any of these: their output no longer flows.
    """
    out: set[str] = set()
    pending = [task for task in failed if task in state.tasks]
    while pending:
        task = pending.pop()
        if task not in out:
            out.add(task)
            pending.extend(state.children.get(task, ()))
    return out


def _written(flow: SubmittedDataflow, task_id: str) -> str | None:
    """The SQL of a task as its owner wrote it (a filter's condition, a select's columns), if it has one."""
    config = _task_field(flow, task_id, "config") or {}
    kind = _task_field(flow, task_id, "type")
    if kind == "filter" and isinstance(config.get("expr"), str):
        return config["expr"]
    if kind == "select" and isinstance(config.get("columns"), dict):
        return ", ".join(f"{name} = {text}" for name, text in config["columns"].items()) or None
    return None


def _task_field(flow: SubmittedDataflow, task_id: str, name: str) -> Any:
    for task in (flow.document or {}).get("tasks", []):
        if isinstance(task, dict) and task.get("id") == task_id:
            return task.get(name)
    return None
