"""Canonical configs and ancestor signatures (docs/architecture.md, "Guarantees").

A task's signature is a Merkle hash over its type, its canonical config, its
site when it is a source, and the sorted (port, parent signature) pairs. Two
tasks are ancestor-graph equivalent iff their signatures are equal, so sharing
is a dictionary lookup per task.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any


def normalize(value: Any) -> Any:
    """Strip representation noise from a JSON value: integral floats become ints.

    >>> normalize({"b": [1.0, 2.5], "a": -0.0})
    {'b': [1, 2.5], 'a': 0}
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            return int(value)
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        return {str(key): normalize(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(item) for item in value]
    raise TypeError(f"not a JSON value: {value!r}")


def canonical_json(value: Any) -> str:
    """JSON text that is equal for equal values, whatever the key order or number spelling.

    >>> canonical_json({"b": 1.0, "a": [2, 3]})
    '{"a":[2,3],"b":1}'
    """
    return json.dumps(normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def task_signature(
    task_type: str,
    config: Mapping[str, Any],
    inputs: Iterable[tuple[str, str]],
    site: str | None = None,
) -> str:
    """The signature of a task given its parents' signatures.

    ``inputs`` holds ``(port, parent signature)`` pairs in any order; ``site``
    counts only for sources (pass None otherwise).

    >>> a = task_signature("filter", {"expr": "x > 1"}, [("in", "s1")])
    >>> a == task_signature("filter", {"expr": "x > 1"}, [("in", "s1")])
    True
    >>> a == task_signature("filter", {"expr": "x > 1"}, [("in", "s2")])
    False
    """
    body = {
        "type": task_type,
        "config": config,
        "site": site,
        "inputs": sorted([port, parent] for port, parent in inputs),
    }
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def signatures(
    order: Iterable[str],
    types: Mapping[str, str],
    configs: Mapping[str, Mapping[str, Any]],
    sites: Mapping[str, str | None],
    parents: Mapping[str, list[tuple[str, str]]],
) -> dict[str, str]:
    """Signatures of every task of a DAG, computed bottom-up.

    ``order`` must list parents before children; ``parents[t]`` holds
    ``(port, parent id)`` pairs. A source's site is hashed, other sites are not.
    """
    result: dict[str, str] = {}
    for task_id in order:
        task_type = types[task_id]
        inputs = [(port, result[parent]) for port, parent in parents.get(task_id, [])]
        site = sites.get(task_id) if task_type == "source" else None
        result[task_id] = task_signature(task_type, configs[task_id], inputs, site)
    return result
