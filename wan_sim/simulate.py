"""Run a scenario under a policy: plan each query as it arrives, then solve the flow model over time.

Queries are planned one at a time in arrival order (as in Sana's
evaluation, independently submitted): the planner reads a WAN monitor whose
link loads are the demand of everything already placed. Placement changes
afterwards only through re-placement, when the WAN configuration sets a
utilization threshold (:func:`replace_over_threshold`, checked every
``check_every_s``). Between consecutive events (an arrival, a bandwidth
change, a check) the flow model gives the steady state; the summary averages
the epochs after the last arrival, weighted by their length.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planning.model import Decision, PlanningOptions, QueryTask, RunningTask, Weighing
from optimizer.planner import admit_shares
from scheduler.placement import place
from wan.flow import FlowQuery, FlowResult, FlowTask, solve
from wan.monitor import WanMonitor
from wan_sim.policies import policy_options
from wan_sim.scenario import Scenario, SimQuery


class Deployment:
    """The simulator's running set (a :class:`~planning.model.RunningView`): placed tasks and who uses them."""

    def __init__(self, router: bool) -> None:
        self.router = router
        self.tasks: dict[str, RunningTask] = {}
        self.flow: dict[str, FlowTask] = {}
        self.users: dict[str, list[str]] = {}
        self.queries: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self.placement: dict[str, dict[str, dict[str, Any]]] = {}
        self.refusals: list[dict[str, Any]] = []
        self.overruled: list[dict[str, Any]] = []
        self.weighings: list[tuple[str, Weighing | None]] = []  # (query, how its plans stood), in planning order
        self._by_signature: dict[str, list[str]] = {}
        self._arrivals: dict[str, dict[str, list[str]]] = {}

    # RunningView
    def instances(self, signature: str) -> Iterable[RunningTask]:
        return [self.tasks[task_id] for task_id in self._by_signature.get(signature, ())]

    def task(self, task_id: str) -> RunningTask:
        return self.tasks[task_id]

    def arrivals(self, task_id: str) -> Mapping[str, Iterable[str]]:
        return self._arrivals.get(task_id, {})

    def running_tasks(self) -> Iterable[RunningTask]:
        return self.tasks.values()

    def flow_index(self) -> None:
        return None

    def link_loads(self) -> dict[tuple[str, str], float]:
        """Demand per link at full source rates (routers: one crossing per producer and site)."""
        loads: dict[tuple[str, str], float] = {}
        seen: set[tuple[str, str]] = set()
        for task in self.tasks.values():
            for _, parent in task.inputs:
                producer = self.tasks[parent]
                if producer.site == task.site:
                    continue
                if self.router:
                    if (parent, task.site) in seen:
                        continue
                    seen.add((parent, task.site))
                key = (producer.site, task.site)
                loads[key] = loads.get(key, 0.0) + producer.rate_mbps
        return loads

    def apply(self, query: SimQuery, decisions: Mapping[str, Decision]) -> None:
        by_id = {task.id: task for task in query.tasks}
        mapping: dict[str, str] = {}
        for task_id, decision in decisions.items():
            task = by_id[task_id]
            if decision.action == "reuse":
                mapping[task_id] = decision.running
            else:
                running_id = self._new_id(f"{query.name}.{task_id}")
                inputs = tuple(sorted((port, mapping[parent]) for port, parent in task.inputs))
                self.tasks[running_id] = RunningTask(running_id, task.signature, task.type, decision.site, inputs, task.rate_mbps)
                self.flow[running_id] = FlowTask(running_id, decision.site, tuple(parent for _, parent in inputs), task.factor,
                                                 task.rate_mbps if task.type == "source" else 0.0, task.rate_rps, task.delay_ms)
                self._by_signature.setdefault(task.signature, []).append(running_id)
                for _, parent in inputs:
                    if self.tasks[parent].site != decision.site:
                        self._arrivals.setdefault(parent, {}).setdefault(decision.site, []).append(running_id)
                mapping[task_id] = running_id
            self.users.setdefault(mapping[task_id], []).append(query.name)
            entry = {"running": mapping[task_id], "site": decision.site, "rule": decision.rule, "action": decision.action}
            if decision.partner:
                entry["partner"] = decision.partner
            self.placement.setdefault(query.name, {})[task_id] = entry
            for refusal in decision.refused:
                self.refusals.append({"query": query.name, "task": task_id, **refusal.to_dict()})
        used = tuple(dict.fromkeys(mapping.values()))
        self.queries[query.name] = (used, tuple(mapping[sink] for sink in query.sinks))

    def _new_id(self, base: str) -> str:
        """``base``, or ``base~2``, ``base~3``, ... when a running task holds it: a query re-placed while its
        first plan's task still runs for others (shared) gets a copy under a name of its own."""
        candidate, number = base, 1
        while candidate in self.tasks:
            number += 1
            candidate = f"{base}~{number}"
        return candidate

    def remove(self, name: str) -> None:
        """Take query ``name`` out (unmerge): the tasks no other query uses stop."""
        used, _ = self.queries.pop(name)
        self.placement.pop(name, None)
        for task_id in reversed(used):  # consumers before their producers
            users = self.users[task_id]
            users.remove(name)
            if users:
                continue
            del self.users[task_id]
            task = self.tasks.pop(task_id)
            del self.flow[task_id]
            self._by_signature[task.signature].remove(task_id)
            if not self._by_signature[task.signature]:
                del self._by_signature[task.signature]
            for _, parent in task.inputs:
                consumers = self._arrivals.get(parent, {}).get(task.site)
                if consumers is not None and task_id in consumers:
                    consumers.remove(task_id)
                    if not consumers:
                        del self._arrivals[parent][task.site]
                    if not self._arrivals[parent]:
                        del self._arrivals[parent]

    def crossing_queries(self, links: set[tuple[str, str]]) -> list[str]:
        """The queries (in the order they were last placed) with a stream over one of ``links``: an input of a
        task they use."""
        found = []
        for name, (used, _) in self.queries.items():
            if any((self.tasks[parent].site, self.tasks[task_id].site) in links
                   for task_id in used for _, parent in self.tasks[task_id].inputs):
                found.append(name)
        return found

    def flow_queries(self) -> list[FlowQuery]:
        return [FlowQuery(name, tasks, sinks) for name, (tasks, sinks) in self.queries.items()]


@dataclass(frozen=True)
class Epoch:
    start_s: float
    end_s: float
    result: FlowResult

    def to_dict(self) -> dict[str, Any]:
        return {"start_s": self.start_s, "end_s": self.end_s, "throughput_rps": round(self.result.throughput_rps, 3),
                "wan_mbps": round(self.result.wan_mbps, 3), "mean_latency_ms": round(self.result.mean_latency_ms, 3),
                "queries": len(self.result.queries)}


@dataclass(frozen=True)
class SimulationResult:
    """What ``sana wan-sim`` prints: the steady-state summary, epochs, placement and refusals."""

    scenario: str
    policy: str
    epochs: tuple[Epoch, ...]
    deployment: Deployment = field(repr=False)
    replacements: tuple[dict[str, Any], ...] = ()

    @property
    def final(self) -> FlowResult:
        return self.epochs[-1].result

    def _steady(self) -> list[Epoch]:
        """The epochs where every query runs (the last one when none lasts)."""
        total = len(self.deployment.queries)
        full = [epoch for epoch in self.epochs if len(epoch.result.queries) == total and epoch.end_s > epoch.start_s]
        return full or [self.epochs[-1]]

    def summary(self) -> dict[str, Any]:
        """Time-weighted averages over the epochs where every query runs."""
        steady = self._steady()
        weights = [max(epoch.end_s - epoch.start_s, 0.0) for epoch in steady]
        span = sum(weights)
        if span <= 0:
            weights, span = [1.0] * len(steady), float(len(steady))

        def mean(value) -> float:
            return sum(value(epoch.result) * weight for epoch, weight in zip(steady, weights)) / span

        queries = []
        for query in self.final.queries:
            name = query.name
            queries.append({
                "name": name,
                "throughput_rps": round(mean(lambda r, n=name: r.query(n).throughput_rps), 3),
                "demand_rps": round(query.demand_rps, 3),
                "latency_ms": round(mean(lambda r, n=name: r.query(n).latency_ms), 3),
            })
        return {
            "throughput_rps": round(mean(lambda r: r.throughput_rps), 3),
            "demand_rps": round(sum(q["demand_rps"] for q in queries), 3),
            "wan_mbps": round(mean(lambda r: r.wan_mbps), 3),
            "mean_latency_ms": round(mean(lambda r: r.mean_latency_ms), 3),
            "running_tasks": len(self.deployment.tasks),
            "queries": queries,
        }

    def to_dict(self, detail: bool = True) -> dict[str, Any]:
        result: dict[str, Any] = {"scenario": self.scenario, "policy": self.policy, "summary": self.summary()}
        if detail:
            result["links"] = [link.to_dict() for link in self.final.links]
            result["epochs"] = [epoch.to_dict() for epoch in self.epochs]
            result["placement"] = self.deployment.placement
            result["not_shared"] = self.deployment.refusals
            result["overruled"] = self.deployment.overruled
            result["replacements"] = list(self.replacements)
        return result


def to_query_tasks(query: SimQuery) -> list[QueryTask]:
    return [QueryTask(task.id, task.signature, task.type, task.inputs, task.rate_mbps, task.site) for task in query.tasks]


def simulate(scenario: Scenario, policy: str | PlanningOptions, decoupled: bool = False) -> SimulationResult:
    """Place the scenario's queries under ``policy`` and solve the flow model epoch by epoch.

    ``decoupled`` scores the placements with buffered hops (:func:`wan.flow.decoupled_rates`: a congested
    crossing slows only its readers, as on Sana's Kafka-linked runtime) instead of the paper's backpressure; the
    planning is the same.

    >>> from wan_sim.scenario import parse_scenario
    >>> scenario = parse_scenario({"wan": {"sites": ["x", "y"], "default_link": {"bandwidth_mbps": 10, "latency_ms": 5}},
    ...     "sources": {"s": {"site": "x", "rate_rps": 1000, "record_bytes": 2500}},
    ...     "queries": [{"name": "q", "tasks": [{"id": "a", "type": "source", "stream": "s"}, {"id": "k", "type": "sink", "site": "y"}],
    ...                  "streams": [["a", "k"]]}]})
    >>> simulate(scenario, "sana").summary()["throughput_rps"]   # 20 Mbps of demand over a 10 Mbps link
    500.0
    """
    name = policy if isinstance(policy, str) else "custom"
    options = policy_options(policy) if isinstance(policy, str) else policy
    deployment = Deployment(options.router)
    config = scenario.wan
    checks: set[float] = set()
    if config.replace_above is not None:
        checks = {step * config.check_every_s for step in range(1, int(scenario.duration_s / config.check_every_s) + 1)}
    times = sorted({0.0} | {query.at_s for query in scenario.queries} | {change.at_s for change in scenario.changes} | checks)
    times = [time for time in times if time < scenario.duration_s]
    epochs: list[Epoch] = []
    replacements: list[dict[str, Any]] = []

    def plan(query: SimQuery) -> None:
        """The optimizer's and the scheduler's stages of a submit, on the running set as it is now."""
        monitor = WanMonitor(config, deployment.link_loads())
        placed = place(admit_shares(to_query_tasks(query), deployment, monitor, options), deployment, monitor)
        deployment.apply(query, placed.decisions)
        deployment.weighings.append((query.name, placed.weighing))
        deployment.overruled += [{"query": query.name, "task": task_id, **refusal.to_dict()}
                                 for task_id, refusal in placed.overruled]

    for index, time in enumerate(times):
        for change in scenario.changes:
            if change.at_s == time:
                config = config.with_bandwidth(change.src, change.dst, change.bandwidth_mbps)
        for query in scenario.queries:
            if query.at_s == time:
                plan(query)
        if not deployment.queries:
            continue
        result = solve(deployment.flow, deployment.flow_queries(), config, options.router, scenario.latency, decoupled)
        if time in checks:
            moved = replace_over_threshold(deployment, scenario, result, config.replace_above, plan)
            if moved is not None:
                replacements.append({"at_s": time, **moved})
                result = solve(deployment.flow, deployment.flow_queries(), config, options.router, scenario.latency,
                               decoupled)
        end = times[index + 1] if index + 1 < len(times) else scenario.duration_s
        epochs.append(Epoch(time, end, result))
    return SimulationResult(scenario.name, name, tuple(epochs), deployment, tuple(replacements))


def replace_over_threshold(deployment: Deployment, scenario: Scenario, result: FlowResult, threshold: float,
                           plan) -> dict[str, Any] | None:
    """Re-place the queries whose streams cross a link at or above ``threshold`` utilization (paper section 6).

    The queries with a stream over a hot link are taken out together, then each is planned again (``plan``:
    the optimizer's and the scheduler's stages of a submit) in arrival order, on the running set without
    them and the current WAN, so none is planned beside the others' old load on the link. The tasks other
    queries use stay where they are, so what moves is those queries' own work (a share the degraded link no
    longer carries becomes a copy elsewhere, if Algorithm 1 finds a better site). Returns what changed, or
    None when nothing did (nothing crosses a hot link, or every plan is the same again).
    """
    hot = {(link.src, link.dst) for link in result.links if link.utilization >= threshold - 1e-9}
    if not hot:
        return None
    arrival = {query.name: index for index, query in enumerate(scenario.queries)}
    names = sorted(deployment.crossing_queries(hot), key=arrival.__getitem__)  # re-placed queries join at the end
    by_name = {query.name: query for query in scenario.queries}
    before = {name: {task_id: (entry["running"], entry["site"]) for task_id, entry in deployment.placement[name].items()}
              for name in names}
    for name in reversed(names):
        deployment.remove(name)
    moved: dict[str, list[str]] = {}
    for name in names:
        plan(by_name[name])
        after = {task_id: (entry["running"], entry["site"]) for task_id, entry in deployment.placement[name].items()}
        changed = sorted(task_id for task_id in after if after[task_id] != before[name].get(task_id))
        if changed:
            moved[name] = changed
    if not moved:
        return None
    return {"links": sorted(f"{src} -> {dst}" for src, dst in hot), "queries": names, "moved": moved}
