"""Fail points: named places between the steps of a change where a test makes the process die.

A recovery test sets ``SANA_FAILPOINTS`` on a real ``sana up`` and the process
sends itself SIGKILL when it passes the named place, as ``kill -9`` from outside
would, but at a chosen step instead of a lucky moment::

    SANA_FAILPOINTS="manager.merge.deployed=kill"           # the first pass dies
    SANA_FAILPOINTS="manager.unmerge.pending=kill@2,..."    # the second pass dies

Unset (always, outside tests) a pass costs one dict lookup. The places are
listed in :data:`POINTS`; naming another fails the settings, so a typo in a
test cannot silently test nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

log = logging.getLogger("sana.failpoints")

POINTS = (
    # the manager's change: mark pending -> runtime.apply -> commit -> memory
    "manager.merge.pending", "manager.merge.deployed", "manager.merge.committed",
    "manager.unmerge.pending", "manager.unmerge.deployed", "manager.unmerge.committed",
    # the same steps for a group of changes deployed and committed together (manager.group)
    "manager.group.pending", "manager.group.deployed", "manager.group.committed",
    # re-placement: stage the state after it (pending) -> runtime.hand_over -> mark it handed over -> commit
    "manager.replace.pending", "manager.replace.deployed", "manager.replace.staged",
    # inside the Spark runtime's apply: records and topics written -> queries (re)planned -> old queries stopped
    "runtime.converge.recorded", "runtime.converge.started",
)

_armed: dict[str, int] = {}
_passes: dict[str, int] = {}
_lock = threading.Lock()


def parse(spec: str | None) -> dict[str, int]:
    """``name=kill`` or ``name=kill@N``, comma separated -> {name: the pass that dies}; ValueError naming the culprit."""
    armed: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in (spec or "").split(","))):
        name, _, action = item.partition("=")
        if name not in POINTS:
            raise ValueError(f"SANA_FAILPOINTS: unknown fail point {name!r}; known: {', '.join(POINTS)}")
        verb, _, count = action.partition("@")
        if verb != "kill" or (count and not (count.isdigit() and int(count) >= 1)):
            raise ValueError(f"SANA_FAILPOINTS: {item!r}: the action is kill or kill@N (N >= 1)")
        armed[name] = int(count or 1)
    return armed


def configure(spec: str | None) -> None:
    """Arm the fail points of ``spec`` (see :func:`parse`); empty disarms all."""
    armed = parse(spec)
    with _lock:
        _armed.clear()
        _armed.update(armed)
        _passes.clear()
    if armed:
        log.warning("fail points armed (testing only): %s", ", ".join(f"{k} at pass {v}" for k, v in armed.items()))


def fail_point(name: str) -> None:
    """Pass the place ``name``: dies here (SIGKILL, no cleanup) if a test armed it for this pass."""
    if not _armed:
        return
    with _lock:
        if name not in _armed:
            return
        _passes[name] = _passes.get(name, 0) + 1
        due = _passes[name] == _armed[name]
    if due:
        log.warning("fail point %s: killing the process (SIGKILL)", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
