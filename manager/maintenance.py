"""Background maintenance: defragmentation on request and after every N-th removal.

Merges never restart a running query, so removals leave queries that one query
could run. :meth:`Maintenance.defragment` has the runtime run such groups as
one (``sana defrag``); with ``defrag_after_removals=N``
(``SANA_DEFRAG_AFTER_REMOVALS``) :meth:`Maintenance.removed` starts it in a
background thread after every N-th removal. Only which query runs the tasks
changes: the tasks, their fragments and the state stay as they are. The cost
of each task is sampled by the runtime itself (:mod:`runtime.costs`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from manager.ledger import Ledger

log = logging.getLogger("sana.manager")


class Maintenance:
    """Defragmentation of one manager's runtime, asked for or in the background."""

    def __init__(self, ledger: Ledger, *, defrag_after_removals: int, ensure_started: Callable[[], None]) -> None:
        self.ledger = ledger
        self.defrag_after_removals = defrag_after_removals
        self.ensure_started = ensure_started
        self.removals = 0
        self.background_defrag: threading.Thread | None = None
        self.defragmenting = threading.Lock()

    def defragment(self) -> dict[str, Any]:
        """Recompact the runtime's queries (``sana defrag``); no change runs meanwhile.

        The running tasks and their fragments stay as they are: only which Spark
        query runs them changes. A runtime without queries (dry run) has nothing to do.
        """
        self.ensure_started()
        with self.ledger.guard(), self.ledger.changing:  # reads (and /healthz) go on meanwhile; changes wait
            return self.ledger.runtime.defragment()

    def removed(self) -> None:
        """Count a committed removal; every ``defrag_after_removals``-th starts a defragmentation in the background."""
        self.removals += 1
        if self.defrag_after_removals and self.removals % self.defrag_after_removals == 0:
            self.background_defrag = threading.Thread(target=self.defragment_in_background, name="sana-defrag",
                                                      daemon=True)
            self.background_defrag.start()

    def defragment_in_background(self) -> None:
        if not self.defragmenting.acquire(blocking=False):  # one is running: it sees this removal too
            return
        try:
            report = self.defragment()
            if report["merged"] or report["skipped"]:
                log.info("automatic defragmentation: %d -> %d queries (%s)", report["queries_before"],
                         report["queries_after"], report)
        except Exception:  # the next removal tries again; nothing changed for a group that failed
            log.exception("automatic defragmentation failed")
        finally:
            self.defragmenting.release()
