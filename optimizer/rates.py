"""Data-rate estimates of tasks from the WAN configuration (source rates, per-type selectivity)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from planning.model import QueryTask
from wan.topology import WanConfig


def estimate_rate(task_type: str, config: Mapping[str, Any], parent_rates: Iterable[float], wan: WanConfig) -> float:
    """Estimated output rate (Mbps) of a task.

    A source emits its topic's configured rate (``sources.<topic>.rate_mbps``,
    else ``default_source_mbps``); any other task its type's factor times the
    sum of its inputs.

    >>> from wan.topology import parse_wan_config
    >>> wan = parse_wan_config({"sites": ["a"], "sources": {"t": {"site": "a", "rate_mbps": 8}}, "selectivity": {"filter": 0.25}})
    >>> estimate_rate("source", {"topic": "t"}, [], wan), estimate_rate("filter", {}, [8.0], wan), estimate_rate("union", {}, [1.0, 2.0], wan)
    (8.0, 2.0, 3.0)
    """
    if task_type == "source":
        origin = wan.source_origin(str(config.get("topic")))
        if origin is not None and origin.rate_mbps is not None:
            return origin.rate_mbps
        return wan.default_source_mbps
    return wan.factor(task_type) * sum(parent_rates)


def with_rates(query: Sequence[QueryTask], wan: WanConfig, configs: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[QueryTask, ...]:
    """``query`` with every missing rate (None) estimated from its inputs' rates (parents first).

    ``configs`` gives the task configurations a source's rate is looked up by (its topic); a rate that is
    set (a measurement, the simulator's stream rates) is kept.

    >>> from wan.topology import parse_wan_config
    >>> wan = parse_wan_config({"sites": ["a"], "selectivity": {"filter": 0.5}, "default_source_mbps": 4})
    >>> [task.rate_mbps for task in with_rates([QueryTask("s", "1", "source", rate_mbps=None),
    ...     QueryTask("f", "2", "filter", (("in", "s"),), rate_mbps=None), QueryTask("g", "3", "filter", (("in", "s"),), rate_mbps=1.0)], wan)]
    [4.0, 2.0, 1.0]
    """
    configs = configs or {}
    rates: dict[str, float] = {}
    filled = []
    for task in query:
        rate = task.rate_mbps
        if rate is None:
            rate = estimate_rate(task.type, configs.get(task.id, {}), [rates[parent] for _, parent in task.inputs], wan)
            task = replace(task, rate_mbps=rate)
        rates[task.id] = rate
        filled.append(task)
    return tuple(filled)
