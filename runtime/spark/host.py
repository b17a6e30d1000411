"""What a runtime that hosts fragment queries offers the procedures that rearrange them.

A defragmentation (:mod:`runtime.spark.defrag`) and a hand-over at a cut
(:mod:`runtime.spark.handover`) stop queries and start others in their place.
They need the runtime's view of what runs and a few of its steps, no more:
this protocol names them, so those modules depend on it and not on
:class:`runtime.spark.runtime.SparkRuntime`, which calls them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from runtime.plan import TaskSpec
from runtime.spark.fragment import FragmentQuery
from runtime.spark.live_plan import LivePlan
from runtime.spark.layout import QueryLayout


class QueryHost(Protocol):
    """The running queries and the steps that replace some of them."""

    queries: dict[str, FragmentQuery]  # query id -> the query
    host: dict[str, str]  # fragment -> the query running it
    plans: dict[str, QueryLayout]  # query id -> what it runs
    tasks: Mapping[str, TaskSpec]  # every running task
    prefix: str
    bootstrap: str
    trigger_s: float
    checkpoint_root: Path

    def record(self, query_id: str) -> dict[str, Any]: ...

    def new_query_id(self, fragment: str) -> str: ...

    def make_query(self, record: dict[str, Any]) -> FragmentQuery: ...

    def live_plan(self, plan: QueryLayout) -> LivePlan: ...

    def switch_records(self, add: dict[str, Any] | None, remove: list[str],
                       restore: list[list[dict[str, Any]]] | None = None) -> None: ...

    def retire(self, query_id: str) -> FragmentQuery | None: ...

    def adopt(self, query: FragmentQuery, record: dict[str, Any]) -> None: ...

    def delete_unused_topics(self, in_use: set[str]) -> None: ...

    def converge(self, desired: dict[str, TaskSpec], reason: str, rollback: bool,
                 handing_over: Any = None) -> None: ...
