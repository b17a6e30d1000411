"""The supervisor: a thread that restarts dead queries from their checkpoints and samples costs.

Every :data:`SUPERVISE_EVERY_S` it takes a cost sample when one is due
(:class:`~runtime.costs.CostMeter`) and looks at every query: a query that
died is marked degraded (with Spark's error, which ``/healthz`` and the
dataflows' status show) and started again from its checkpoint, after a back-off
that doubles up to :data:`MAX_BACKOFF_S`; a degraded query that runs a batch
again is well. It never holds the runtime's lock for long: a pass that cannot
take it within half a second is skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from runtime.costs import CostMeter
from runtime.spark.fragment import FragmentQuery

log = logging.getLogger("sana.runtime.spark")

SUPERVISE_EVERY_S = 1.0
MAX_BACKOFF_S = 30.0


class Supervisor:
    """Watches the queries ``queries()`` returns, under ``lock``; ``degraded`` maps query id -> why it is down."""

    def __init__(self, queries: Callable[[], Mapping[str, FragmentQuery]], lock: threading.RLock, meter: CostMeter,
                 closing: threading.Event) -> None:
        self.queries = queries
        self.lock = lock
        self.meter = meter
        self.closing = closing
        self.degraded: dict[str, str] = {}
        self.backoff: dict[str, tuple[float, float]] = {}  # query id -> (next restart at, the delay after it)
        self.thread = threading.Thread(target=self.run, name="sana-supervisor", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def forget(self, query_id: str) -> None:
        """Another query took this one's work over (or it stopped): nothing to watch any more."""
        self.degraded.pop(query_id, None)
        self.backoff.pop(query_id, None)

    def run(self) -> None:
        while not self.closing.wait(SUPERVISE_EVERY_S):
            try:
                if self.meter.due():
                    self.meter.sample()
            except Exception:  # a failed sample leaves a longer window, nothing else
                log.exception("cost sample failed")
            if not self.lock.acquire(timeout=0.5):
                continue
            try:
                for query_id, query in list(self.queries().items()):
                    self.check(query_id, query)
            except Exception:  # the supervisor must survive anything a query throws at it
                log.exception("supervisor pass failed")
            finally:
                self.lock.release()

    def check(self, query_id: str, query: FragmentQuery) -> None:
        if query.alive():
            if query_id in self.degraded and query.ran_since_start():
                log.info("query %s runs again after %d restart(s)", query_id, query.restarts)
                self.forget(query_id)
            return
        if query_id not in self.degraded:
            self.degraded[query_id] = query.error() or "the query stopped"
            log.error("query %s died: %s", query_id, self.degraded[query_id])
        next_at, delay = self.backoff.get(query_id, (0.0, 1.0))
        if time.monotonic() < next_at:
            return
        self.backoff[query_id] = (time.monotonic() + delay, min(MAX_BACKOFF_S, delay * 2))
        query.restarts += 1
        try:
            query.start()
            log.warning("restarted query %s from its checkpoint (restart %d)", query_id, query.restarts)
        except Exception as error:  # retried at the next pass, after the backoff
            self.degraded[query_id] = f"restart failed: {error}"
