"""Fragments: connected groups of new tasks at one site, each run as one Spark query.

Running fragments are never changed by a merge (that would restart their
query), so the tasks a merge creates form fragments of their own: the
connected components of the new tasks, split by site. Streams from running
tasks into a new fragment become taps (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence


def default_site(declared: str | None, parent_sites: Sequence[str | None]) -> str | None:
    """Locality placement: the declared site, else the parents' site when they agree.

    >>> default_site(None, ["eu", "eu"]), default_site(None, ["eu", "us"]), default_site("us", ["eu"])
    ('eu', None, 'us')
    """
    if declared is not None:
        return declared
    sites = set(parent_sites)
    return sites.pop() if len(sites) == 1 else None


def assign_fragments(
    new_tasks: Sequence[str],
    inputs: Mapping[str, Sequence[str]],
    sites: Mapping[str, str | None],
    signatures: Mapping[str, str],
) -> dict[str, str]:
    """Give every new task a fragment id.

    ``new_tasks`` are running task ids created by one merge, ``inputs[t]`` the
    parent ids of ``t`` (new or already running), ``sites[t]`` its site and
    ``signatures[t]`` its signature. Two new tasks share a fragment iff a chain
    of new-to-new streams at one site links them. A fragment's id derives from
    the signatures of its tasks, so it never depends on submission order.

    >>> frags = assign_fragments(["a", "b", "c"], {"b": ["a"], "c": ["x"]},
    ...                          {"a": None, "b": None, "c": None}, {"a": "1", "b": "2", "c": "3"})
    >>> frags["a"] == frags["b"] != frags["c"]
    True
    """
    leader = {task: task for task in new_tasks}

    def find(task: str) -> str:
        while leader[task] != task:
            leader[task] = leader[leader[task]]
            task = leader[task]
        return task

    for task in new_tasks:
        for parent in inputs.get(task, ()):
            if parent in leader and sites.get(parent) == sites.get(task):
                leader[find(task)] = find(parent)
    groups: dict[str, list[str]] = {}
    for task in new_tasks:
        groups.setdefault(find(task), []).append(task)
    fragments: dict[str, str] = {}
    for members in groups.values():
        digest = hashlib.sha256("|".join(sorted(signatures[task] for task in members)).encode()).hexdigest()
        for task in members:
            fragments[task] = f"frag-{digest[:12]}"
    return fragments
