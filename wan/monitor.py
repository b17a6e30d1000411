"""The WAN monitor: available bandwidth per link, as the optimizer and the scheduler read it.

As in Sana's section 6, a link's state is its utilization over its capacity
(a ratio above 1 means contention). Here the load of a link is the demand of
the streams that cross it: every running stream whose producer and consumer
sit at different sites, counted once per (producer, destination site) because
a router at the destination fans it out to every consumer there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from wan.topology import WanConfig

#: Slack when comparing rates, so that a stream that exactly fits a link fits.
EPSILON = 1e-9


def fits(needed_mbps: float, available_mbps: float) -> bool:
    """Whether a rate fits into what a link has spare.

    >>> fits(10, 10), fits(10.5, 10), fits(0, -math.inf)
    (True, False, False)
    """
    return needed_mbps <= available_mbps + EPSILON


def crossings(
    placed: Mapping[str, tuple[str | None, Iterable[str]]],
    rates: Mapping[str, float],
) -> dict[tuple[str, str], float]:
    """The WAN crossings of placed tasks: ``(producer, destination site) -> Mbps``.

    ``placed[t] = (site of t, ids of t's inputs)``. A producer's stream crosses
    to a site once whatever the number of its consumers there (the router).

    >>> crossings({"s": ("x", []), "a": ("y", ["s"]), "b": ("y", ["s"]), "c": ("x", ["s"])}, {"s": 5})
    {('s', 'y'): 5}
    """
    result: dict[tuple[str, str], float] = {}
    for task_id, (site, inputs) in placed.items():
        for parent in inputs:
            parent_site = placed[parent][0]
            if site is not None and parent_site is not None and parent_site != site:
                result[(parent, site)] = rates.get(parent, 0.0)
    return result


def link_loads(
    crossed: Mapping[tuple[str, str], float], site_of: Mapping[str, str | None]
) -> dict[tuple[str, str], float]:
    """Sum crossings per directed link ``(source site, destination site)``.

    >>> link_loads({("s", "y"): 5.0, ("t", "y"): 1.0}, {"s": "x", "t": "x"})
    {('x', 'y'): 6.0}
    """
    loads: dict[tuple[str, str], float] = {}
    for (producer, destination), rate in crossed.items():
        key = (site_of[producer], destination)
        loads[key] = loads.get(key, 0.0) + rate
    return loads


class WanMonitor:
    """Capacity, latency and load of every link of a :class:`WanConfig`.

    ``loads`` maps directed links to the Mbps their crossing streams demand.
    A missing link has no spare bandwidth at all (``-inf``); a site has
    unlimited bandwidth to itself.

    >>> from wan.topology import parse_wan_config
    >>> wan = parse_wan_config({"sites": ["a", "b"], "links": [{"from": "a", "to": "b", "bandwidth_mbps": 10, "latency_ms": 5}]})
    >>> monitor = WanMonitor(wan, {("a", "b"): 4})
    >>> monitor.spare("a", "b"), monitor.spare("b", "a"), monitor.utilization("a", "b"), monitor.spare("a", "a")
    (6.0, 10.0, 0.4, inf)
    """

    def __init__(self, config: WanConfig, loads: Mapping[tuple[str, str], float] | None = None) -> None:
        self.config = config
        self._loads = dict(loads or {})

    @property
    def sites(self) -> tuple[str, ...]:
        return self.config.site_names

    @property
    def compute_sites(self) -> tuple[str, ...]:
        return self.config.compute_sites

    def can_compute(self, site: str) -> bool:
        return self.config.can_compute(site)

    def reachable(self, src: str, dst: str) -> bool:
        return src == dst or self.config.link(src, dst) is not None

    def capacity(self, src: str, dst: str) -> float:
        if src == dst:
            return math.inf
        link = self.config.link(src, dst)
        return 0.0 if link is None else link.bandwidth_mbps

    def latency(self, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        link = self.config.link(src, dst)
        return math.inf if link is None else link.latency_ms

    def load(self, src: str, dst: str) -> float:
        return self._loads.get((src, dst), 0.0)

    @property
    def loads(self) -> dict[tuple[str, str], float]:
        """The load of every link that carries any, in Mbps."""
        return dict(self._loads)

    def spare(self, src: str, dst: str) -> float:
        """Available bandwidth ``src -> dst`` in Mbps (negative when the link is oversubscribed)."""
        if src == dst:
            return math.inf
        link = self.config.link(src, dst)
        if link is None:
            return -math.inf
        return link.bandwidth_mbps - self.load(src, dst)

    def utilization(self, src: str, dst: str) -> float:
        """Load over capacity: above 1 means the link is contended."""
        capacity = self.capacity(src, dst)
        if src == dst or capacity == 0:
            return 0.0
        return self.load(src, dst) / capacity

    def with_loads(self, loads: Mapping[tuple[str, str], float]) -> "WanMonitor":
        return WanMonitor(self.config, loads)

    def report(self) -> list[dict[str, Any]]:
        """Every link with its capacity, latency, load, spare bandwidth and utilization."""
        rows = []
        for link in self.config.all_links():
            load = self.load(link.src, link.dst)
            rows.append({
                "from": link.src,
                "to": link.dst,
                "bandwidth_mbps": link.bandwidth_mbps,
                "latency_ms": link.latency_ms,
                "load_mbps": round(load, 6),
                "spare_mbps": round(link.bandwidth_mbps - load, 6),
                "utilization": round(load / link.bandwidth_mbps, 6),
            })
        return rows
