"""Simulator scenarios: a WAN, raw streams and queries arriving over time (docs/wan.md, "Scenarios").

A scenario is JSON::

    {
      "name": "two-sources",
      "wan": {"sites": [...], "links": [...], "default_link": {...}},
      "sources": {"us": {"site": "ohio", "rate_rps": 1000, "record_bytes": 1250}},
      "queries": [
        {"name": "q1", "at_s": 0,
         "tasks": [{"id": "s", "type": "source", "stream": "us"},
                   {"id": "f", "type": "filter", "config": {"expr": "lang = 'en'"}, "selectivity": 0.5},
                   {"id": "k", "type": "sink", "site": "virginia"}],
         "streams": [["s", "f"], ["f", "k"]]}
      ],
      "bandwidth_changes": [{"at_s": 60, "from": "ohio", "to": "virginia", "bandwidth_mbps": 5}],
      "duration_s": 120,
      "latency": {"batch_kb": 32, "buffer_mb": 1}
    }

``wan`` is a WAN configuration (:mod:`wan.topology`); ``sources`` gives
each raw stream's origin and rate. A task's ``config`` says what it computes:
two tasks are equivalent when their type, config and inputs are (the
manager's signatures); a source's identity is its stream. ``selectivity`` is
records out per record in, ``size`` bytes out per byte in per record
(default 1), ``delay_ms`` the time a record spends in the operator (a
window's wait, default 0). A sink writes the query's own output unless its
config says otherwise; ``site`` pins a task (a query's home for its sink).
Streams are ``[from, to]`` or ``{"from", "to", "port"}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manager.signature import task_signature
from wan.exceptions import WanConfigInvalid
from wan_sim.exceptions import ScenarioInvalid
from wan.topology import DEFAULT_SELECTIVITY, WanConfig, parse_wan_config
from wan.flow import LatencyModel


@dataclass(frozen=True)
class SimTask:
    """A de-duplicated task of a scenario query, with its full-rate output estimate."""

    id: str
    signature: str
    type: str
    inputs: tuple[tuple[str, str], ...]
    factor: float
    rate_mbps: float
    site: str | None = None
    rate_rps: float = 0.0
    delay_ms: float = 0.0


@dataclass(frozen=True)
class SimQuery:
    name: str
    at_s: float
    tasks: tuple[SimTask, ...]
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def sinks(self) -> tuple[str, ...]:
        return tuple(task.id for task in self.tasks if task.type == "sink")


@dataclass(frozen=True)
class BandwidthChange:
    at_s: float
    src: str
    dst: str
    bandwidth_mbps: float


@dataclass(frozen=True)
class Scenario:
    name: str
    wan: WanConfig
    queries: tuple[SimQuery, ...]
    changes: tuple[BandwidthChange, ...] = ()
    duration_s: float = 0.0
    latency: LatencyModel = LatencyModel()
    document: dict[str, Any] = field(default_factory=dict, hash=False)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; errors name the file and the field."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ScenarioInvalid(f"cannot read scenario {str(path)!r}: {error.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ScenarioInvalid(f"{path}: not JSON: {error}") from None
    try:
        return parse_scenario(data)
    except ScenarioInvalid as error:
        raise ScenarioInvalid(f"{path}: {error.message}", culprit=error.culprit) from None


def parse_scenario(data: Mapping[str, Any]) -> Scenario:
    """Validate a scenario document.

    Raises :class:`ScenarioInvalid` naming the query and task at fault.

    >>> scenario = parse_scenario({"wan": {"sites": ["x", "y"], "default_link": {"bandwidth_mbps": 10, "latency_ms": 5}},
    ...     "sources": {"s": {"site": "x", "rate_rps": 1000, "record_bytes": 1250}},
    ...     "queries": [{"name": "q", "tasks": [{"id": "a", "type": "source", "stream": "s"},
    ...                                         {"id": "f", "type": "filter", "selectivity": 0.5},
    ...                                         {"id": "k", "type": "sink", "site": "y"}],
    ...                  "streams": [["a", "f"], ["f", "k"]]}]})
    >>> [(task.id, task.rate_mbps) for task in scenario.queries[0].tasks]
    [('a', 10.0), ('f', 5.0), ('k', 5.0)]
    """
    if not isinstance(data, Mapping):
        raise ScenarioInvalid("a scenario is a JSON object")
    unknown = set(data) - {"name", "description", "wan", "sources", "queries", "bandwidth_changes", "duration_s", "latency"}
    if unknown:
        raise ScenarioInvalid(f"unknown scenario field(s): {', '.join(sorted(unknown))}")
    name = str(data.get("name", "scenario"))
    sources = data.get("sources", {})
    if not isinstance(sources, Mapping):
        raise ScenarioInvalid("sources: must map stream names to {site, rate_rps, record_bytes}")
    wan_doc = dict(data.get("wan") or {})
    wan_doc.setdefault("sources", {})
    streams: dict[str, tuple[str, float, float]] = {}
    for stream, spec in sources.items():
        if not isinstance(spec, Mapping) or "site" not in spec:
            raise ScenarioInvalid(f"sources.{stream}: needs a site", culprit={"field": f"sources.{stream}"})
        rate = _number(spec.get("rate_rps", 0), f"sources.{stream}.rate_rps")
        size = _number(spec.get("record_bytes", 1000), f"sources.{stream}.record_bytes")
        streams[stream] = (str(spec["site"]), rate, size)
        wan_doc["sources"][stream] = {"site": str(spec["site"]), "rate_mbps": rate * size * 8 / 1e6}
    try:
        wan = parse_wan_config(wan_doc)
    except WanConfigInvalid as error:
        raise ScenarioInvalid(f"wan.{error.message}", culprit=error.culprit) from None
    queries = []
    names: set[str] = set()
    for number, raw in enumerate(data.get("queries") or []):
        query = _query(raw, number, streams, wan)
        if query.name in names:
            raise ScenarioInvalid(f"queries[{number}]: query name {query.name!r} is used twice")
        names.add(query.name)
        queries.append(query)
    if not queries:
        raise ScenarioInvalid("a scenario needs at least one query")
    _check_consistent(queries)
    changes = []
    for number, raw in enumerate(data.get("bandwidth_changes") or []):
        where = f"bandwidth_changes[{number}]"
        try:
            src, dst = str(raw["from"]), str(raw["to"])
            change = BandwidthChange(_number(raw["at_s"], where + ".at_s"), src, dst, _number(raw["bandwidth_mbps"], where + ".bandwidth_mbps"))
        except (KeyError, TypeError):
            raise ScenarioInvalid(f"{where}: needs at_s, from, to and bandwidth_mbps") from None
        if wan.link(src, dst) is None:
            raise ScenarioInvalid(f"{where}: no link {src} -> {dst}")
        if change.bandwidth_mbps <= 0:
            raise ScenarioInvalid(f"{where}: bandwidth_mbps must be > 0")
        changes.append(change)
    last_event = max([query.at_s for query in queries] + [change.at_s for change in changes])
    duration = _number(data.get("duration_s", last_event + 60.0), "duration_s")
    if duration <= last_event:
        raise ScenarioInvalid(f"duration_s ({duration}) must come after the last event ({last_event})")
    latency_doc = data.get("latency") or {}
    latency = LatencyModel(
        batch_kb=_number(latency_doc.get("batch_kb", 32.0), "latency.batch_kb"),
        buffer_mb=_number(latency_doc.get("buffer_mb", 1.0), "latency.buffer_mb"),
    )
    return Scenario(name, wan, tuple(sorted(queries, key=lambda q: q.at_s)), tuple(sorted(changes, key=lambda c: c.at_s)),
                    duration, latency, dict(data))


def _query(raw: Any, number: int, streams: Mapping[str, tuple[str, float, float]], wan: WanConfig) -> SimQuery:
    where = f"queries[{number}]"
    if not isinstance(raw, Mapping):
        raise ScenarioInvalid(f"{where}: a query is an object")
    name = str(raw.get("name", f"q{number + 1}"))
    where = f"query {name!r}"
    at_s = _number(raw.get("at_s", 0.0), f"{where}.at_s")
    tasks: dict[str, dict[str, Any]] = {}
    for item in raw.get("tasks") or []:
        if not isinstance(item, Mapping) or "id" not in item or "type" not in item:
            raise ScenarioInvalid(f"{where}: every task needs an id and a type")
        task_id = str(item["id"])
        if task_id in tasks:
            raise ScenarioInvalid(f"{where}: task id {task_id!r} is used twice", culprit={"query": name, "task": task_id})
        tasks[task_id] = dict(item)
    parents: dict[str, list[tuple[str, str]]] = {task_id: [] for task_id in tasks}
    for item in raw.get("streams") or []:
        if isinstance(item, Mapping):
            src, dst, port = str(item.get("from")), str(item.get("to")), str(item.get("port", "in"))
        else:
            src, dst, port = str(item[0]), str(item[1]), "in"
        for end in (src, dst):
            if end not in tasks:
                raise ScenarioInvalid(f"{where}: stream {src} -> {dst} names unknown task {end!r}", culprit={"query": name, "task": end})
        parents[dst].append((port, src))
    order = _topological(parents, where)
    signatures: dict[str, str] = {}
    rates: dict[str, float] = {}
    canonical: dict[str, str] = {}
    by_signature: dict[str, str] = {}
    result: list[SimTask] = []
    for task_id in order:
        item = tasks[task_id]
        kind = str(item["type"])
        inputs = tuple(sorted((port, canonical[parent]) for port, parent in parents[task_id]))
        site = item.get("site")
        if site is not None and not wan.has_site(site):
            raise ScenarioInvalid(f"{where}: task {task_id!r} names unknown site {site!r}", culprit={"query": name, "task": task_id})
        if kind == "source":
            if inputs:
                raise ScenarioInvalid(f"{where}: source {task_id!r} has inputs", culprit={"query": name, "task": task_id})
            stream = item.get("stream")
            if stream not in streams:
                raise ScenarioInvalid(f"{where}: source {task_id!r} reads unknown stream {stream!r}", culprit={"query": name, "task": task_id})
            origin, rps, size = streams[stream]
            config: dict[str, Any] = {"stream": stream}
            site, factor, rate, delay = origin, 1.0, rps * size * 8 / 1e6, 0.0
            signature = task_signature("source", config, [], origin)
        else:
            if not inputs:
                raise ScenarioInvalid(f"{where}: task {task_id!r} ({kind}) has no inputs", culprit={"query": name, "task": task_id})
            config = dict(item.get("config") or {})
            if kind == "sink" and not config:
                config = {"topic": f"{name}.{task_id}"}
            selectivity = _number(item.get("selectivity", DEFAULT_SELECTIVITY.get(kind, 1.0)), f"{where}.{task_id}.selectivity")
            size = _number(item.get("size", 1.0), f"{where}.{task_id}.size")
            factor = selectivity * size
            rate = factor * sum(rates[parent] for _, parent in inputs)
            delay = _number(item.get("delay_ms", 0.0), f"{where}.{task_id}.delay_ms")
            rps = 0.0
            signature = task_signature(kind, config, [(port, signatures[parent]) for port, parent in inputs])
        if signature in by_signature:
            canonical[task_id] = by_signature[signature]
            continue
        by_signature[signature] = task_id
        canonical[task_id] = task_id
        signatures[task_id] = signature
        rates[task_id] = rate
        result.append(SimTask(task_id, signature, kind, inputs, factor, rate, site,
                              rps if kind == "source" else 0.0, delay))
    if not any(task.type == "sink" for task in result):
        raise ScenarioInvalid(f"{where}: a query needs a sink", culprit={"query": name})
    return SimQuery(name, at_s, tuple(result), {task_id: target for task_id, target in canonical.items() if task_id != target})


def _topological(parents: Mapping[str, list[tuple[str, str]]], where: str) -> list[str]:
    children: dict[str, list[str]] = {task_id: [] for task_id in parents}
    pending = {task_id: len(items) for task_id, items in parents.items()}
    for task_id, items in parents.items():
        for _, parent in items:
            children[parent].append(task_id)
    ready = [task_id for task_id in parents if pending[task_id] == 0]
    order = []
    while ready:
        task_id = ready.pop(0)
        order.append(task_id)
        for child in children[task_id]:
            pending[child] -= 1
            if pending[child] == 0:
                ready.append(child)
    if len(order) != len(parents):
        stuck = sorted(set(parents) - set(order))
        raise ScenarioInvalid(f"{where}: the streams form a cycle through {', '.join(stuck)}")
    return order


def _check_consistent(queries: list[SimQuery]) -> None:
    """Equivalent tasks must have the same selectivity and delay in every query."""
    seen: dict[str, tuple[str, SimTask]] = {}
    for query in queries:
        for task in query.tasks:
            if task.signature in seen:
                other_query, other = seen[task.signature]
                if abs(other.factor - task.factor) > 1e-12 or abs(other.delay_ms - task.delay_ms) > 1e-12:
                    raise ScenarioInvalid(
                        f"task {task.id!r} of {query.name!r} is equivalent to {other.id!r} of {other_query!r} "
                        f"but has another selectivity, size or delay",
                        culprit={"query": query.name, "task": task.id},
                    )
            else:
                seen[task.signature] = (query.name, task)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise ScenarioInvalid(f"{where}: must be a number >= 0, not {value!r}", culprit={"field": where})
    return float(value)
