"""Idle queries on their way out, stopped by the runtime's housekeeping thread rather than under its lock.

An idle query (:mod:`runtime.spark.idle`) leaves when its keep time is over
or when a newer one pushes it over the limit. Stopping it first waits for its
batch in flight, then for Spark to tear the query down. Under load that takes
seconds: with 50 clients changing dataflows while records flow on 2 cores, the
wait for an idle query's batch hit its 5 s bound in most such stops, and the
stop itself took 0.1-0.9 s. Done inside a change, every change queued behind
it waited too. Nothing needs to wait: an idle query runs an empty plan
(it computes and writes nothing), has no record in Redis, and is no longer offered to
changes. So the change or the housekeeping pass hands it over here and goes
on, and the housekeeping thread stops it outside the runtime's lock. The
topics it reads stay until it has stopped (:meth:`Retiring.topics`), so that
a topic is never deleted under a reader. A crash meanwhile forgets it as it
forgets any idle query: its checkpoint, without a record, is deleted at the
next start.
"""

from __future__ import annotations

import logging
import threading

from runtime.spark.fragment import FragmentQuery

log = logging.getLogger("sana.runtime.spark")


class Retiring:
    """The queries handed over to be stopped; safe to use from any thread."""

    def __init__(self) -> None:
        self._queries: dict[str, FragmentQuery] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._queries)

    def add(self, query: FragmentQuery) -> None:
        with self._lock:
            self._queries[query.id] = query

    def topics(self) -> set[str]:
        """The topics the queries not stopped yet read."""
        with self._lock:
            return set().union(*(query.inputs for query in self._queries.values()))

    def stop_all(self, drain_s: float) -> list[str]:
        """Stop every query handed over (each after its batch in flight, waiting at most ``drain_s``) and delete its
        checkpoint; the ids stopped. A query stays listed (its topics kept) until it has stopped."""
        with self._lock:
            queries = list(self._queries.values())
        for query in queries:
            try:
                query.drain(drain_s)
                query.discard()
                log.info("stopped query %s", query.id)
            except Exception:  # a query that cannot be stopped cleanly is forgotten all the same
                log.exception("stopping query %s", query.id)
            with self._lock:
                self._queries.pop(query.id, None)
        return [query.id for query in queries]
