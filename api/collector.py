"""The server's garbage collection: a full collection's pause follows what changed lately, not the running set.

CPython's collector examines every object it tracks in a full (generation 2)
collection. The manager keeps a few dozen tracked objects per running
dataflow, so a full collection of the server holding 100,000 dataflows
paused every thread for about 2 s, and a request arriving then waited for it
(docs/benchmarks.md, "Garbage collection"). Full collections come when the
objects kept since the last one reach a quarter of those it kept, so they
come all the way up.

:class:`FreezeSurvivors` freezes (:func:`gc.freeze`) what survives each full
collection, right after it: those objects were all reachable a moment ago.
The next full collection then examines only what was allocated and kept since
the one before, and, since the collector counts the quarter from the
survivors it examined, full collections come more often and each is short.
The server installs it when it starts, before it loads the state, and
removes it (unfreezing) when it stops; ``SANA_GC_FREEZE=0`` leaves it out.
On a heap growing to 3 million dicts, the longest full pause went from
1,092 ms to 23 ms and the collector's total time from 7.2 s to 1.2 s
(``benchmarks/gc_pauses.py``).

What it costs: a frozen object that later becomes part of a reference cycle
nobody reaches is never collected (reference counting still frees every
frozen object outside a cycle). The manager's state forms no cycles: a removed
dataflow's objects are freed by reference counting
(``tests/api/test_collector.py`` checks it on a real manager), so what can
leak is a cycle of another part (a connection's objects, a traceback) that
happened to be alive at a full collection. ``summary()`` shows the frozen
count in ``GET /healthz``: one that grows while the running set does not is
such a leak; :meth:`FreezeSurvivors.audit` unfreezes, collects and freezes
again, paying one full pause to find and free it.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

log = logging.getLogger("sana.collector")


class FreezeSurvivors:
    """Freeze what each full collection leaves; count the full collections and their pauses.

    >>> policy = FreezeSurvivors().install()
    >>> _ = gc.collect()
    >>> policy.summary()["full_collections"] >= 1 and gc.get_freeze_count() > 0
    True
    >>> policy.uninstall(); gc.get_freeze_count()
    0
    """

    def __init__(self) -> None:
        self.full_collections = 0
        self.longest_ms = 0.0
        self.last_ms = 0.0
        self._started: float | None = None
        self._lock = threading.Lock()

    def install(self) -> FreezeSurvivors:
        """Freeze the survivors of every full collection to come (the server installs it before loading the
        state, so that the collections the load brings are short too)."""
        gc.callbacks.append(self._callback)
        return self

    def uninstall(self) -> None:
        """Stop freezing and give the frozen objects back to the collector: the process collects as before."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        gc.unfreeze()

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is not None:
            elapsed = (time.perf_counter() - self._started) * 1000
            self._started = None
            self.full_collections += 1
            self.last_ms = elapsed
            self.longest_ms = max(self.longest_ms, elapsed)
        # After the collection's last step: every tracked object left was reachable, so none is garbage.
        gc.freeze()

    def audit(self) -> int:
        """Give the frozen objects back to the collector, collect everything once, freeze again: the unreachable
        objects found (what freezing had kept alive). Pauses the process for one full collection of it all."""
        with self._lock:
            gc.unfreeze()
            found = gc.collect()
            gc.freeze()
            if found:
                log.warning("collector audit: %d unreachable objects had been frozen", found)
            return found

    def summary(self) -> dict[str, Any]:
        """Full collections since installed, the last and the longest pause (ms), and the objects frozen now."""
        return {"full_collections": self.full_collections, "last_full_ms": round(self.last_ms, 2),
                "longest_full_ms": round(self.longest_ms, 2), "frozen_objects": gc.get_freeze_count()}
