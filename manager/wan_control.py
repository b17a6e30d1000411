"""The WAN configuration, the view of its links, and re-placement when a link runs hot.

:class:`WanControl` stores a configuration (it governs the submits that follow;
nothing running moves by the change itself), reports every link's load (measured
where the runtime measured it), plans and carries out re-placement, and runs the
link watch: a thread that re-places whenever a link reaches the utilization the
configuration's ``replacement`` names.

A re-placement plans on the running set, has the runtime hand the moved work
over at a cut (``runtime.hand_over``), stages the state after it next to the
pending marker, and commits it; a manager that dies after the hand-over
completes it on restart from the staged state (:mod:`manager.recovery`). Its
hand-over pauses the queries it touches, not the service: reads go on
meanwhile, other changes wait.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import Any

import redis

from manager.exceptions import DeployFailed
from manager.ledger import REDIS_DOWN, Ledger
from manager.replacement import hot_links, plan_replacement
from manager.state import State
from manager.store import StaleState
from manager.traffic import basis, link_loads_in_use
from runtime.exceptions import RuntimeFailure
from sana.failpoints import fail_point
from wan.exceptions import WanNotConfigured
from wan.monitor import WanMonitor
from wan.topology import WanConfig, parse_wan_config

log = logging.getLogger("sana.manager")

#: After an automatic re-placement that moved work, this many link checks are skipped.
HOLD_OFF_CHECKS = 3
#: The longest wait between automatic re-placement rounds after failures in a row.
MAX_WATCH_BACKOFF_S = 300.0


def streams_basis(state: State, measured: dict[str, float]) -> str:
    """The basis of the loads of all links together: whether the streams crossing between sites were measured."""
    return basis({producer in measured for producer in state.arrivals})


class WanControl:
    """The WAN side of one manager: configuration, link loads, re-placement and the link watch."""

    def __init__(self, ledger: Ledger, *, sharing: bool, clock: Callable[[], float],
                 ensure_started: Callable[[], None], closing: threading.Event, containment: bool = False) -> None:
        self.ledger = ledger
        self.sharing = sharing
        self.containment = containment
        self.clock = clock
        self.ensure_started = ensure_started
        self.closing = closing
        self.link_watch: threading.Thread | None = None
        self.last_replacement: dict[str, Any] | None = None  # what the automatic re-placement did last

    # -- the configuration -----------------------------------------------------------

    def set_wan(self, document: dict[str, Any] | str | bytes | None) -> WanConfig | None:
        """Validate and store a WAN configuration (None removes it); it governs the submits that follow.

        Running tasks are not moved or restarted by the change itself; with ``replacement`` in it, a
        thread re-places them whenever a link reaches that utilization (:meth:`replace`). Raises
        :class:`~wan.exceptions.WanConfigInvalid` naming the field at fault.
        """
        wan = None if document is None else parse_wan_config(document)
        ledger = self.ledger
        with ledger.guard(), ledger.mutex, ledger.store.lock():
            ledger.sync()
            self.commit_wan(wan)
        return wan

    def commit_wan(self, wan: WanConfig | None) -> None:
        """Store ``wan`` (the caller holds the locks and synced) and start the link watch if it asks for one."""
        ledger = self.ledger
        version = ledger.store.commit_wan(wan, ledger.state)
        ledger.state.set_wan(wan)
        ledger.state.version = version
        if wan is not None and wan.replace_above is not None:
            self.watch_links()

    def wan(self) -> dict[str, Any]:
        """The WAN configuration with every link's load, spare bandwidth and utilization (``GET /wan``).

        Raises :class:`~wan.exceptions.WanNotConfigured` without one.
        """
        state = self.ledger.snapshot()
        if state.wan is None:
            raise WanNotConfigured("no WAN configuration: every equivalent task is shared (PUT /wan or SANA_WAN_CONFIG sets one)")
        document = state.wan.to_dict()
        document["links"] = self.wan_links()["links"]
        document["configured"] = True
        if state.wan.replace_above is not None:
            document["last_replacement"] = self.last_replacement
        return document

    def wan_links(self) -> dict[str, Any]:
        """Every link: capacity, latency, the load of the running streams crossing it, and those streams.

        A stream's rate is what the runtime measured it writing when it did (``measured_mbps``), else the
        configured estimate (``rate_mbps``); a link's ``basis`` says which its load is made of
        (``measured``, ``estimated`` or ``mixed``), and ``estimated_load_mbps`` keeps the estimate beside it.
        """
        state = self.ledger.snapshot()
        if state.wan is None:
            raise WanNotConfigured("no WAN configuration: no link is modelled")
        measured = self.ledger.measured()
        streams: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for producer, sites in state.arrivals.items():
            source_site = state.tasks[producer].site
            for site, consumers in sites.items():
                rate = measured.get(producer)
                streams.setdefault((source_site, site), []).append({
                    "producer": producer,
                    "rate_mbps": round(state.rates.get(producer, 0.0), 6),
                    "measured_mbps": None if rate is None else round(rate, 6),
                    "consumers": sorted(consumers),
                })
        rows = WanMonitor(state.wan, link_loads_in_use(state, measured)).report()
        for row in rows:
            crossing = sorted(streams.get((row["from"], row["to"]), []), key=lambda item: item["producer"])
            row["streams"] = crossing
            row["estimated_load_mbps"] = round(state.link_load.get((row["from"], row["to"]), 0.0), 6)
            row["basis"] = basis({stream["measured_mbps"] is not None for stream in crossing})
        total = sum(row["load_mbps"] for row in rows)
        return {"links": rows, "total_load_mbps": round(total, 6), "basis": streams_basis(state, measured)}

    # -- re-placement ----------------------------------------------------------------

    def replacement(self, utilization: float) -> dict[str, Any]:
        """What re-placement would move now, at links whose utilization is at least ``utilization``
        (``GET /wan/replacement``; :func:`manager.replacement.plan_replacement`). Nothing is changed.

        Raises :class:`~wan.exceptions.WanNotConfigured` without a WAN configuration.
        """
        ledger = self.ledger
        measured = ledger.measured()
        with ledger.guard(), ledger.mutex:
            ledger.sync()
            self.require_wan()
            state = copy.deepcopy(ledger.state)
        result = plan_replacement(state, measured, utilization, sharing=self.sharing,
                                  containment=self.containment).report
        result["basis"] = streams_basis(state, measured)
        return result

    def replace(self, utilization: float) -> dict[str, Any]:
        """Carry re-placement out now (``POST /wan/replacement``): the plan of :meth:`replacement`, executed.

        The runtime hands the work over at a cut (nothing lost or written twice) and the state after
        it is committed in one transaction; the dataflows keep their ids. If the runtime fails,
        nothing changed and :class:`DeployFailed` says why; if the commit fails, the work is handed
        back. Other changes wait meanwhile; reads go on (they see the state before until the commit).
        """
        self.ensure_started()
        ledger = self.ledger
        measured = ledger.measured()
        with ledger.guard(), ledger.changing, ledger.store.lock():
            with ledger.mutex:
                ledger.sync()
                self.require_wan()
                before = ledger.state
                planned = plan_replacement(before, measured, utilization, sharing=self.sharing,
                                           containment=self.containment)
            report = {**planned.report, "basis": streams_basis(before, measured), "executed": True}
            if planned.change.empty:
                return report
            pending = {"kind": "replace", "reason": planned.change.reason, "start": report["start"], "stop": report["stop"]}
            ledger.store.stage(planned.after, {**pending, "handed_over": False})
            fail_point("manager.replace.pending")
            try:
                report["hand_over"] = ledger.runtime.hand_over(planned.change, planned.seeds)
                fail_point("manager.replace.deployed")
            except RuntimeFailure as failure:
                ledger.forget_staged()
                raise DeployFailed(f"{planned.change.reason}: the runtime failed, nothing changed: {failure.message}",
                                   culprit={"dataflows": [row["dataflow"] for row in report["dataflows"]]}) from failure
            with ledger.mutex:
                try:
                    ledger.store.mark_pending({**pending, "handed_over": True})
                    fail_point("manager.replace.staged")
                    version = ledger.store.commit_state(planned.after, before)
                except (redis.RedisError, StaleState) as error:
                    log.error("commit of %s failed (%s); handing the work back", planned.change.reason, error)
                    self.hand_back(planned)
                    try:
                        ledger.store.drop_staged()
                    except redis.RedisError:
                        log.warning("could not drop the staged state; the next start completes the re-placement")
                    ledger.loaded = False
                    if isinstance(error, REDIS_DOWN):
                        raise
                    raise DeployFailed(f"{planned.change.reason}: the state changed underneath, nothing changed: {error}") from error
                ledger.state = planned.after
                ledger.state.version = version
        log.info("re-placement at utilization >= %s: started %s, stopped %s", utilization, report["start"], report["stop"])
        return report

    def hand_back(self, planned) -> None:
        """Undo a hand-over whose commit failed: the stopped tasks start again, each continuing the state of the
        task that took over from it (a copy of a task that ran on has nothing to give back)."""
        stopped = {spec.id for spec in planned.change.stop}
        seeds: dict[str, str] = {}
        for task, source in planned.seeds.items():
            if source in stopped:
                seeds.setdefault(source, task)
        try:
            self.ledger.runtime.hand_over(planned.change.inverse(), seeds)
        except RuntimeFailure:
            log.exception("handing back %s failed; the next start reconciles it", planned.change.reason)

    def require_wan(self) -> None:
        if self.ledger.state.wan is None:
            raise WanNotConfigured("no WAN configuration: nothing is placed by bandwidth, so nothing re-placed")

    # -- the link watch ----------------------------------------------------------------

    def watch_links(self) -> None:
        """Start the thread that re-places when a link reaches the configured utilization (once per manager)."""
        if self.link_watch is None or not self.link_watch.is_alive():
            self.link_watch = threading.Thread(target=self.watch_loop, name="sana-link-watch", daemon=True)
            self.link_watch.start()

    def watch_loop(self) -> None:
        """Every ``check_every_s`` of the WAN configuration's ``replacement``: if a link's utilization (measured
        where measured) is at or above its ``utilization``, re-place (:meth:`replace`). Ends when the WAN
        configuration no longer asks for it.

        After a re-placement that moved work, the next :data:`HOLD_OFF_CHECKS` checks are skipped, so that
        the measurements see the new placement before anything moves again (re-placing on every check
        oscillates: docs/wan.md). A round that fails changed nothing; the wait doubles after each failure
        in a row, up to :data:`MAX_WATCH_BACKOFF_S`.
        """
        wait_checks = 1
        failures = 0
        while True:
            wan = self.ledger.state.wan
            if wan is None or wan.replace_above is None:
                return
            delay = wan.check_every_s * wait_checks
            if failures:
                delay = min(MAX_WATCH_BACKOFF_S, max(delay, wan.check_every_s * 2 ** failures))
            if self.closing.wait(delay):
                return
            wait_checks = 1
            try:
                state = self.ledger.snapshot()
                if state.wan is None or state.wan.replace_above is None:
                    return
                if not hot_links(state, self.ledger.measured(), state.wan.replace_above):
                    failures = 0
                    continue
                report = self.replace(state.wan.replace_above)
                failures = 0
                self.last_replacement = {**report, "at": self.clock()}
                if report["start"] or report["stop"]:
                    wait_checks = 1 + HOLD_OFF_CHECKS
                    log.warning("link(s) %s at or above %.0f %% utilization: re-placed %s",
                                [f"{row['from']} -> {row['to']}" for row in report["hot_links"]],
                                100 * state.wan.replace_above, [row["dataflow"] for row in report["dataflows"]])
            except Exception as error:  # Redis or the runtime down, a plan that failed: nothing changed
                failures += 1
                self.last_replacement = {"error": str(error), "at": self.clock()}
                log.exception("automatic re-placement failed (%d in a row)", failures)
