"""Measured WAN traffic: what the runtime wrote for each stream that crosses between sites.

A stream crosses from its producer's site to another site once whatever the
number of its consumers there (the router). Fragments are cut per site, so a
producer with a consumer at another site writes its output to Kafka (a tap),
and the runtime measures the value bytes it writes per second
(:mod:`runtime.costs`). Those measurements replace the configured estimates
(source rates times selectivities) wherever they exist: in ``GET /wan/links``
and in the rates and link loads the optimizer plans with. A producer the
runtime does not measure (a source read straight from its topic, writes made
on the executors of a cluster, or no sample yet) keeps its estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from manager.state import State

#: Mbps per byte/s.
MBPS = 8 / 1e6


def measured_mbps(costs: Mapping[str, Any]) -> dict[str, float]:
    """Task id -> measured output Mbps, from the runtime's cost window (empty when nothing is measured).

    >>> measured_mbps({"measured": True, "tasks": {"f": {"kafka_bytes_per_s": 125000.0}, "k": {"kafka_bytes_per_s": None}}})
    {'f': 1.0}
    """
    if not costs.get("measured"):
        return {}
    return {task_id: float(task["kafka_bytes_per_s"]) * MBPS
            for task_id, task in costs.get("tasks", {}).items() if task.get("kafka_bytes_per_s") is not None}


def rates_in_use(state: State, measured: Mapping[str, float]) -> dict[str, float]:
    """Every running task's output Mbps: measured where it is, the estimate elsewhere."""
    return {task_id: measured.get(task_id, state.rates.get(task_id, 0.0)) for task_id in state.tasks}


def link_loads_in_use(state: State, measured: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """Mbps per directed link, counting each crossing stream once per destination site at its rate in use."""
    loads: dict[tuple[str, str], float] = {}
    for producer, sites in state.arrivals.items():
        rate = measured.get(producer, state.rates.get(producer, 0.0))
        for site in sites:
            link = (state.tasks[producer].site, site)
            loads[link] = loads.get(link, 0.0) + rate
    return loads


def measured_by_signature(state: State, measured: Mapping[str, float]) -> dict[str, float]:
    """Signature -> measured output Mbps of a running instance (equal signatures compute the same stream)."""
    result: dict[str, float] = {}
    for signature, instances in state.instances.items():
        rates = [measured[task_id] for task_id in sorted(instances) if task_id in measured]
        if rates:
            result[signature] = max(rates)
    return result


def basis(measured_flags: set[bool]) -> str:
    """What a load is made of, from whether each stream in it was measured: ``measured``, ``estimated``
    (no stream measured, or no stream) or ``mixed``.

    >>> basis({True}), basis({False}), basis({True, False}), basis(set())
    ('measured', 'estimated', 'mixed', 'estimated')
    """
    return "mixed" if len(measured_flags) > 1 else "measured" if measured_flags == {True} else "estimated"
