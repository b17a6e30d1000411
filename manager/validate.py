"""Validation of a dataflow document: every rejection rule of the dataflow document.

:func:`parse_dataflow` takes the body (bytes, text or an already decoded
object) and returns a :class:`~manager.model.Dataflow` with canonical configs,
propagated schemas and signatures, or raises a :class:`DataflowInvalid`
subclass whose message names the task or stream at fault.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from typing import Any

import pydantic

from manager import exceptions as errors
from manager.document import DataflowDocument
from manager.model import Dataflow, Stream, Task
from manager.signature import signatures
from runtime.exceptions import OperatorConfigInvalid, OperatorUnknown
from runtime.operators import OperatorSpec, get_operator
from runtime.operators.keyed_options import tidy_runtime_keys, without_runtime_keys
from runtime.operators.io import RUNTIME_KEYS as SINK_RUNTIME_KEYS
from runtime.operators.limits import OperatorLimitExceeded, OperatorLimits
from runtime.operators.names import check_output
from runtime.operators.types import Schema


def parse_dataflow(body: bytes | str | dict[str, Any], limits: OperatorLimits | None = None) -> Dataflow:
    """Decode, check and canonicalize a dataflow document.

    Raises a :class:`~manager.exceptions.DataflowInvalid` subclass; nothing is
    changed anywhere (this function is pure). ``limits`` bounds what a task's
    config may multiply (records, state, Spark tasks; runtime/operators/limits.py);
    without it, the settings' defaults (the API passes the service's settings).

    >>> flow = parse_dataflow({"name": "n", "tasks": [
    ...     {"id": "s", "type": "source", "config": {"topic": "t", "schema": {"x": "int"}}},
    ...     {"id": "o", "type": "sink", "config": {"topic": "out"}}],
    ...     "streams": [{"from": "s", "to": "o"}]})
    >>> flow.order, flow.schemas["o"]
    (('s', 'o'), {'x': 'int'})
    """
    raw = _decode(body)
    document = _structure(raw)
    tasks = {}
    for task in document.tasks:
        if task.id in tasks:
            raise errors.TaskIdDuplicate(f"task id {task.id!r} is used twice", culprit={"task": task.id})
        tasks[task.id] = task
    streams = _streams(document, tasks)
    specs = {}
    for task in document.tasks:
        try:
            specs[task.id] = get_operator(task.type)
        except OperatorUnknown as unknown:
            raise errors.OperatorTypeUnknown(f"task {task.id!r}: {unknown.message}", culprit={"task": task.id, "field": "type"}) from None
    limits = limits or OperatorLimits()
    parents, children = _check_ports(streams, tasks, specs, limits)
    order = _topological_order(list(tasks), parents, children)
    _check_reaches_sink(list(tasks), specs, parents)
    configs = {task.id: _config(task.id, specs[task.id], task.config) for task in document.tasks}
    for task_id, config in configs.items():
        try:
            config.check_limits(limits)
        except OperatorConfigInvalid as invalid:
            raise _rejected(task_id, specs[task_id], invalid) from None
    canonical = {task_id: config.model_dump(mode="json", by_alias=True) for task_id, config in configs.items()}
    schemas = _propagate(order, specs, configs, parents, canonical, limits)
    canonical = {task_id: tidy_runtime_keys(config) if specs[task_id].keyed else config for task_id, config in canonical.items()}
    task_values = {
        task.id: Task(id=task.id, type=task.type, config=canonical[task.id], site=task.site) for task in document.tasks
    }
    sigs = signatures(
        order,
        {task_id: task.type for task_id, task in task_values.items()},
        {task_id: _signed(specs[task_id], config) for task_id, config in canonical.items()},
        {task_id: task.site for task_id, task in task_values.items()},
        {task_id: [(port, parent) for port, parent in pairs] for task_id, pairs in parents.items()},
    )
    _check_sink_topics(task_values, sigs)
    return Dataflow(
        name=document.name,
        tasks=task_values,
        streams=tuple(streams),
        order=tuple(order),
        schemas=schemas,
        signatures=sigs,
        document=raw,
        owner=document.owner,
    )


def _signed(spec: OperatorSpec, config: dict[str, Any]) -> dict[str, Any]:
    """What a task's signature hashes: its config without the keys that tune how it runs, not what it computes
    (a keyed operator's workers and Reshape, a sink's ``max_delay``): tasks differing only there are shared."""
    if spec.keyed:
        return without_runtime_keys(config)
    if spec.is_sink:
        return {key: value for key, value in config.items() if key not in SINK_RUNTIME_KEYS}
    return config


MAX_DEPTH = 32  # nesting of a document: a dataflow needs 6 (a window's aggregates); far less than Python's stack


def _decode(body: bytes | str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise errors.NotJson(f"the body is not JSON: {error}") from None
        except RecursionError:
            raise errors.DocumentMalformed(f"the body nests deeper than Python can parse; a dataflow nests at most "
                                           f"{MAX_DEPTH} levels") from None
    if not isinstance(body, dict):
        raise errors.DocumentMalformed(f"a dataflow is a JSON object, not {type(body).__name__}")
    _check_depth(body)
    return body


def _check_depth(document: Any) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH`, naming where (checked without recursion).

    >>> _check_depth({"tasks": [{"config": {"a": [[[1]]]}}]})
    >>> deep = 1
    >>> for _ in range(40): deep = [deep]
    >>> _check_depth({"tasks": deep})
    Traceback (most recent call last):
    ...
    manager.exceptions.DocumentMalformed: the document nests deeper than 32 levels at tasks[0][0]...[0]
    """
    pending: list[tuple[Any, str, int]] = [(document, "", 0)]
    while pending:
        value, where, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise errors.DocumentMalformed(f"the document nests deeper than {MAX_DEPTH} levels at {where}",
                                           culprit={"field": where})
        if isinstance(value, dict):
            pending.extend((item, f"{where}.{key}" if where else str(key), depth + 1) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((item, f"{where}[{index}]", depth + 1) for index, item in enumerate(value))


def _structure(raw: dict[str, Any]) -> DataflowDocument:
    try:
        return DataflowDocument.model_validate(raw)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where, culprit = _locate(raw, first["loc"])
        raise errors.DocumentMalformed(f"{where}: {first['msg']}", culprit=culprit) from None


def _locate(raw: dict[str, Any], loc: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """Render a pydantic error location, naming the task or stream when it can."""
    culprit: dict[str, Any] = {"field": ".".join(str(part) for part in loc)}
    if len(loc) >= 2 and loc[0] in ("tasks", "streams") and isinstance(loc[1], int):
        items = raw.get(loc[0]) or []
        item = items[loc[1]] if loc[1] < len(items) and isinstance(items[loc[1]], dict) else {}
        rest = ".".join(str(part) for part in loc[2:])
        if loc[0] == "tasks" and isinstance(item.get("id"), str):
            culprit = {"task": item["id"], "field": rest}
            return f"task {item['id']!r} (tasks[{loc[1]}]) {rest}".rstrip(), culprit
        if loc[0] == "streams" and item:
            culprit = {"stream": loc[1], "field": rest}
            return f"stream {item.get('from')!r} -> {item.get('to')!r} (streams[{loc[1]}]) {rest}".rstrip(), culprit
        return f"{loc[0]}[{loc[1]}] {rest}".rstrip(), culprit
    return ".".join(str(part) for part in loc) or "document", culprit


def _streams(document: DataflowDocument, tasks: dict[str, Any]) -> list[Stream]:
    streams: list[Stream] = []
    seen: set[Stream] = set()
    for index, item in enumerate(document.streams):
        for end, task_id in (("from", item.from_), ("to", item.to)):
            if task_id not in tasks:
                raise errors.StreamUnknownTask(
                    f"stream {item.from_!r} -> {item.to!r} (streams[{index}]): '{end}' names unknown task {task_id!r}",
                    culprit={"stream": index, "task": task_id, "field": end},
                )
        stream = Stream(item.from_, item.to, item.port)
        if stream in seen:
            raise errors.StreamDuplicate(
                f"stream {item.from_!r} -> {item.to!r} on port {item.port!r} (streams[{index}]) appears twice",
                culprit={"stream": index, "task": item.to},
            )
        seen.add(stream)
        streams.append(stream)
    return streams


def _check_ports(
    streams: list[Stream], tasks: dict[str, Any], specs: dict[str, OperatorSpec], limits: OperatorLimits
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[str]]]:
    parents: dict[str, list[tuple[str, str]]] = defaultdict(list)
    children: dict[str, list[str]] = defaultdict(list)
    for stream in streams:
        src_spec, dst_spec = specs[stream.src], specs[stream.dst]
        if dst_spec.is_source:
            raise errors.SourceHasInputs(
                f"task {stream.dst!r} is a source and cannot take the stream from {stream.src!r}",
                culprit={"task": stream.dst},
            )
        if src_spec.is_sink:
            raise errors.SinkHasOutputs(
                f"task {stream.src!r} is a sink and cannot feed {stream.dst!r}",
                culprit={"task": stream.src},
            )
        if dst_spec.port(stream.port) is None:
            ports = ", ".join(port.name for port in dst_spec.ports)
            raise errors.PortInvalid(
                f"task {stream.dst!r} ({dst_spec.type}) has no input port {stream.port!r} (ports: {ports}); "
                f"stream from {stream.src!r}",
                culprit={"task": stream.dst, "field": "port"},
            )
        parents[stream.dst].append((stream.port, stream.src))
        children[stream.src].append(stream.dst)
    for task_id, spec in specs.items():
        arriving = [port for port, _ in parents.get(task_id, [])]
        for port in spec.ports:
            count = arriving.count(port.name)
            if count < port.min_streams or (count > 1 and not port.many):
                expected = f"at least {port.min_streams}" if port.many else "exactly one"
                raise errors.PortInvalid(
                    f"task {task_id!r} ({spec.type}) needs {expected} stream(s) on port {port.name!r}, got {count}",
                    culprit={"task": task_id, "field": "port"},
                )
            if port.many and count > limits.max_union_inputs:  # every input's records pass through it
                raise errors.PortInvalid(
                    f"task {task_id!r} ({spec.type}) takes {count} streams on port {port.name!r}; at most "
                    f"{limits.max_union_inputs} (SANA_MAX_UNION_INPUTS)",
                    culprit={"task": task_id, "field": "port", "limit": "SANA_MAX_UNION_INPUTS"},
                )
    return parents, children


def _topological_order(
    task_ids: list[str], parents: dict[str, list[tuple[str, str]]], children: dict[str, list[str]]
) -> list[str]:
    indegree = {task_id: len(parents.get(task_id, [])) for task_id in task_ids}
    ready = deque(task_id for task_id in task_ids if indegree[task_id] == 0)
    order: list[str] = []
    while ready:
        task_id = ready.popleft()
        order.append(task_id)
        for child in children.get(task_id, []):
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if len(order) < len(task_ids):
        cycle = _find_cycle({task_id for task_id, degree in indegree.items() if degree > 0}, children)
        raise errors.DagCycle(
            f"the streams form a cycle: {' -> '.join(repr(task_id) for task_id in cycle)}",
            culprit={"task": cycle[0], "cycle": cycle},
        )
    return order


def _find_cycle(remaining: set[str], children: dict[str, list[str]]) -> list[str]:
    """One cycle among the tasks Kahn's algorithm could not order (each has a parent there)."""
    start = min(remaining)
    path: list[str] = []
    position: dict[str, int] = {}
    node = start
    while node not in position:
        position[node] = len(path)
        path.append(node)
        node = next(child for child in children.get(node, []) if child in remaining)
    return path[position[node]:] + [node]


def _check_reaches_sink(
    task_ids: list[str], specs: dict[str, OperatorSpec], parents: dict[str, list[tuple[str, str]]]
) -> None:
    reached = {task_id for task_id in task_ids if specs[task_id].is_sink}
    frontier = list(reached)
    while frontier:
        for _, parent in parents.get(frontier.pop(), []):
            if parent not in reached:
                reached.add(parent)
                frontier.append(parent)
    stranded = [task_id for task_id in task_ids if task_id not in reached]
    if stranded:
        names = ", ".join(repr(task_id) for task_id in stranded)
        raise errors.TaskReachesNoSink(
            f"task {stranded[0]!r} reaches no sink (tasks without a path to a sink: {names})",
            culprit={"task": stranded[0], "tasks": stranded},
        )


def _config(task_id: str, spec: OperatorSpec, config: dict[str, Any]):
    try:
        return spec.config_model.model_validate(config)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        field_path = ".".join(str(part) for part in first["loc"]) or ""
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            accepted = ", ".join(
                field.alias or name for name, field in spec.config_model.model_fields.items()
            )
            message = f"unknown key (accepted: {accepted})"
        elif first["type"] == "missing":
            message = "required key is missing"
        where = f"config.{field_path}" if field_path else "config"
        raise errors.OperatorConfigRejected(
            f"task {task_id!r} ({spec.type}) {where}: {message}",
            culprit={"task": task_id, "field": where},
        ) from None


def _propagate(order, specs, configs, parents, canonical, limits: OperatorLimits) -> dict[str, Schema]:
    """Every task's output schema, each checked for names and width (runtime/operators/names.py)."""
    schemas: dict[str, Schema] = {}
    for task_id in order:
        spec = specs[task_id]
        arriving: dict[str, list[Schema]] = defaultdict(list)
        for port, parent in sorted(parents.get(task_id, [])):
            arriving[port].append(schemas[parent])
        try:
            schemas[task_id] = spec.output_schema(configs[task_id], arriving)
            check_output(schemas[task_id], [schema for port in arriving.values() for schema in port],
                         canonical[task_id], limits)
        except OperatorConfigInvalid as invalid:
            raise _rejected(task_id, spec, invalid) from None
    return schemas


def _rejected(task_id: str, spec: OperatorSpec, invalid: OperatorConfigInvalid) -> errors.OperatorConfigRejected:
    """``invalid`` (raised by an operator, which knows no task id) as the rejection naming the task."""
    field_path = invalid.culprit["field"]
    culprit = {"task": task_id, "field": field_path}
    if isinstance(invalid, OperatorLimitExceeded):
        culprit["limit"] = invalid.limit
    return errors.OperatorConfigRejected(f"task {task_id!r} ({spec.type}) {field_path}: {invalid.message}",
                                         culprit=culprit)


def _check_sink_topics(tasks: dict[str, Task], sigs: dict[str, str]) -> None:
    writers: dict[str, str] = {}
    for task_id, task in tasks.items():
        if task.type != "sink":
            continue
        topic = task.config["topic"]
        other = writers.setdefault(topic, task_id)
        if other != task_id and sigs[other] != sigs[task_id]:
            raise errors.SinkTopicConflict(
                f"sinks {other!r} and {task_id!r} both write topic {topic!r} but compute different streams",
                culprit={"task": task_id, "field": "config.topic"},
            )
