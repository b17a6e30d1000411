"""The working view while one query is planned: what is mapped where, and what the plan adds to the WAN.

A *ref* names a producer of a stream: ``(True, running task id)`` or
``(False, query task id)`` for a task the plan creates. Available bandwidth is
the monitor's spare bandwidth minus what the plan itself already added, so
the decisions for later tasks see the load of earlier ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from planning.exceptions import QueryMalformed
from planning.model import Crossing, PlanningOptions, QueryTask, Ref, RunningView
from wan.monitor import WanMonitor


class PlanContext:
    """Mutable bookkeeping of one planning pass (never shared between passes)."""

    def __init__(self, query: Sequence[QueryTask], running: RunningView, wan: WanMonitor, options: PlanningOptions) -> None:
        self.order = [task.id for task in query]
        self.query = {task.id: task for task in query}
        seen: set[str] = set()
        for task in query:
            for port, parent in task.inputs:
                if parent not in seen:
                    raise QueryMalformed(f"query task {task.id!r} reads {parent!r} on port {port!r}, which does not come before it")
            seen.add(task.id)
        self.running = running
        self.wan = wan
        self.options = options
        self.mapping: dict[str, Ref] = {}
        self.new_sites: dict[str, str] = {}
        self.planned: dict[Ref, dict[str, list[str]]] = {}
        self.delta: dict[tuple[str, str], float] = {}
        self.reserved: dict[tuple[Ref, str], tuple[tuple[str, str], float]] = {}
        self._running_arrivals: dict[Ref, dict[str, str]] = {}
        self.shared: set[Ref] = set()
        self.crossings: list[Crossing] = []
        self.children: dict[str, list[str]] = {task.id: [] for task in query}
        for task in query:
            for _, parent in task.inputs:
                self.children[parent].append(task.id)
        self.exits = self._exits()
        self.dests = {task_id: frozenset(rates) for task_id, rates in self.exits.items()}

    # -- producers ---------------------------------------------------------------------

    def ref_site(self, ref: Ref) -> str:
        running, name = ref
        return self.running.task(name).site if running else self.new_sites[name]

    def ref_rate(self, ref: Ref) -> float:
        running, name = ref
        return self.running.task(name).rate_mbps if running else self.query[name].rate_mbps

    def input_refs(self, task: QueryTask) -> list[tuple[str, Ref]]:
        return [(port, self.mapping[parent]) for port, parent in task.inputs]

    def arrival_sites(self, ref: Ref) -> dict[str, str]:
        """Sites other than the producer's where its stream already arrives -> a consumer there.

        Only with routers: without them a stream arriving for one consumer
        does not serve another.
        """
        if not self.options.router:
            return {}
        if ref[0] and ref not in self._running_arrivals:
            self._running_arrivals[ref] = {site: min(consumers) for site, consumers in self.running.arrivals(ref[1]).items() if consumers}
        result: dict[str, str] = dict(self._running_arrivals.get(ref, {}))
        for site, consumers in self.planned.get(ref, {}).items():
            result.setdefault(site, consumers[0])
        return result

    def available_at(self, ref: Ref, site: str) -> bool:
        """Whether ``ref``'s stream can be read at ``site`` without a new WAN crossing."""
        return site == self.ref_site(ref) or site in self.arrival_sites(ref)

    # -- bandwidth ---------------------------------------------------------------------

    def spare(self, src: str, dst: str) -> float:
        """Spare bandwidth of a link after what this plan added or reserved on it."""
        reserved = sum(rate for link, rate in self.reserved.values() if link == (src, dst))
        return self.wan.spare(src, dst) - self.delta.get((src, dst), 0.0) - reserved

    def reserve(self, ref: Ref, link: tuple[str, str], rate: float) -> None:
        """Hold bandwidth an admitted share will need once its consumers are placed.

        Two shares admitted against the same spare bandwidth must not both
        count on it; the reservation is released when the crossing is made.
        """
        key = (ref, link[1])
        _, held = self.reserved.get(key, (link, 0.0))
        self.reserved[key] = (link, max(held, rate))

    def connect(self, ref: Ref, consumer: str, site: str) -> None:
        """Record that query task ``consumer`` at ``site`` reads ``ref``; add a crossing when needed."""
        source_site = self.ref_site(ref)
        if source_site == site:
            return
        self.reserved.pop((ref, site), None)
        if self.options.router and site in self.arrival_sites(ref):
            self.planned.setdefault(ref, {}).setdefault(site, []).append(consumer)
            return
        rate = self.ref_rate(ref)
        self.planned.setdefault(ref, {}).setdefault(site, []).append(consumer)
        self.delta[(source_site, site)] = self.delta.get((source_site, site), 0.0) + rate
        self.crossings.append(Crossing(ref[1], ref[0], source_site, site, rate, None if self.options.router else consumer))

    # -- destinations --------------------------------------------------------------------

    def _exits(self) -> dict[str, dict[str, float]]:
        """For each task, the pinned sites its output must reach and the Mbps that leave its site towards each.

        A destination is the site of the first pinned task on a downstream
        path. Downstream tasks with a single input follow their input (site
        locality), so what leaves is the output of the last of them before
        a pinned task or a task with several inputs (whose site the
        scheduler chooses): a filter feeding an aggregate sends the
        aggregate's output, not its own.
        """
        result: dict[str, dict[str, float]] = {}
        for task_id in reversed(self.order):
            rates: dict[str, float] = {}
            own = self.query[task_id].rate_mbps
            for child_id in self.children[task_id]:
                child = self.query[child_id]
                if child.site is not None:
                    found = {child.site: own}
                elif len({parent for _, parent in child.inputs}) == 1:
                    found = result[child_id]
                else:
                    found = {site: own for site in result[child_id]}
                for site, rate in found.items():
                    rates[site] = max(rates.get(site, 0.0), rate)
            result[task_id] = rates
        return result
