"""Data-rate estimates of tasks from the WAN configuration (source rates, per-type selectivity)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wan_sim.topology import WanConfig


def estimate_rate(task_type: str, config: Mapping[str, Any], parent_rates: Iterable[float], wan: WanConfig) -> float:
    """Estimated output rate (Mbps) of a task.

    A source emits its topic's configured rate (``sources.<topic>.rate_mbps``,
    else ``default_source_mbps``); any other task its type's factor times the
    sum of its inputs.

    >>> from wan_sim.topology import parse_wan_config
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
