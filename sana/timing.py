"""Where a slow step spent its time: a few named phases, timed back to back, for one log line.

>>> phases = Phases(clock=iter([0.0, 0.5, 0.75, 2.0]).__next__)
>>> phases.mark("plan"); phases.mark("start"); phases.mark("plan")
>>> phases.total, str(phases)
(2.0, 'plan 1750 ms, start 250 ms')
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Phases:
    """Seconds spent per phase since the object was made; a phase marked twice adds up."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.started = self.last = clock()
        self.spent: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        """The time since the previous mark (or the start) was spent in ``phase``."""
        now = self.clock()
        self.spent[phase] = self.spent.get(phase, 0.0) + now - self.last
        self.last = now

    @property
    def total(self) -> float:
        return self.last - self.started

    def __str__(self) -> str:
        return ", ".join(f"{phase} {seconds * 1000:.0f} ms" for phase, seconds in self.spent.items())
