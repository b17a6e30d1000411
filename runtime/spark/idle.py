"""Queries kept running for a while after their last task left, for a change that needs the same inputs.

Starting a Spark query is the slowest step of a change (5-10 s on 2 cores
before it plans its first trigger), and a query whose last task leaves is
often wanted again soon: under many users the same fragment (a dataflow's
second source and its join, say) is stopped when its last user leaves and
started again by the next. So an emptied query does not stop at once: it
keeps running with an empty plan (each batch commits its input and computes
nothing) for ``keep_s`` seconds. A later change that needs a new query at
the same site reading exactly the same topics takes it instead of starting
one; its tasks then read from where the idle query is, which is where a new
query would start (the topics' ends, up to one trigger).

An idle query has no record in Redis and runs no task: a crash forgets it
(its checkpoint is deleted at the next start, like any without a record),
and the manager's view of what runs is unchanged. While it is kept, the
internal topics it reads are kept too (a topic deleted and created again
starts at offset 0, below the position the query would resume from).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.spark.fragment import FragmentQuery

#: Most idle queries kept at once; the one idle longest goes first.
MAX_IDLE = 8


@dataclass
class IdleQuery:
    query: FragmentQuery
    record: dict[str, Any]  # as it was when its last task left (id, site, inputs, batch base)
    since: float  # the runtime's clock when it went idle

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self.record["inputs"])


class IdleQueries:
    """The idle queries of one runtime: changed under the runtime's lock; :meth:`queries`, :meth:`topics` and
    ``len`` may be read from any thread."""

    def __init__(self, keep_s: float, limit: int = MAX_IDLE, clock: Callable[[], float] = time.monotonic) -> None:
        self.keep_s = keep_s
        self.limit = limit
        self.clock = clock
        self._idle: dict[str, IdleQuery] = {}

    def __len__(self) -> int:
        return len(self._idle)

    def __contains__(self, query_id: object) -> bool:
        return query_id in self._idle

    def queries(self) -> dict[str, FragmentQuery]:
        return {query_id: idle.query for query_id, idle in list(self._idle.items())}

    def topics(self) -> set[str]:
        """The topics the idle queries read (the runtime keeps those of them that are internal)."""
        return set().union(*(idle.topics for idle in list(self._idle.values())))

    def keep(self, query: FragmentQuery, record: dict[str, Any] | None) -> list[FragmentQuery]:
        """Keep ``query`` (its plan already empty) if it runs; returns the queries to stop instead: ``query`` when it
        is not kept, the longest idle one when the limit is reached."""
        if self.keep_s <= 0 or record is None or not query.alive():
            return [query]
        self._idle[query.id] = IdleQuery(query, dict(record), self.clock())
        return self._over_limit()

    def take(self, topics: set[str], site: str | None,
             fits: Callable[[IdleQuery], bool] = lambda idle: True) -> IdleQuery | None:
        """An idle query at ``site`` that reads exactly ``topics`` and ``fits`` (the one idle the shortest), no
        longer idle."""
        wanted = frozenset(topics)
        found = [idle for idle in self._idle.values()
                 if idle.topics == wanted and idle.record.get("site") == site and idle.query.alive() and fits(idle)]
        if not found:
            return None
        chosen = max(found, key=lambda idle: idle.since)
        return self._idle.pop(chosen.query.id)

    def expired(self) -> list[FragmentQuery]:
        """Remove and return the queries idle for ``keep_s`` or more, and those that died."""
        now = self.clock()
        gone = [query_id for query_id, idle in self._idle.items()
                if now - idle.since >= self.keep_s or not idle.query.alive()]
        return [self._idle.pop(query_id).query for query_id in gone]

    def drain(self) -> list[FragmentQuery]:
        """Remove and return every idle query."""
        queries = [idle.query for idle in self._idle.values()]
        self._idle.clear()
        return queries

    def _over_limit(self) -> list[FragmentQuery]:
        surplus = sorted(self._idle.values(), key=lambda idle: idle.since)[:max(0, len(self._idle) - self.limit)]
        return [self._idle.pop(idle.query.id).query for idle in surplus]
