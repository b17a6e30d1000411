"""The manager: validates, plans, deploys and commits every change, one at a time.

A submit or remove runs under a thread lock and the Redis writer lock:
sync with Redis -> plan (pure) -> mark pending -> runtime.apply -> commit
(one transaction) -> update memory. If the runtime fails, nothing was
committed and the caller gets :class:`DeployFailed`; if the commit fails after
a successful deployment, the deployment is undone first. A manager restarted
on the same Redis loads the state and reconciles the runtime with it, which
also undoes a submit whose commit never happened (a removal cut short is
completed instead: :meth:`Manager._finish_interrupted`).

A re-placement (:meth:`Manager.replace`) plans the same way on the running set,
has the runtime hand the moved work over at a cut (``runtime.hand_over``),
stages the state after it next to the pending marker, and commits it; a
manager that dies after the hand-over completes it on restart from the staged
state. Its hand-over pauses the queries it touches, not the service: reads
go on meanwhile, other changes wait.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from manager import merge
from manager.costs import attribute
from manager.exceptions import DataflowNotFound, DeployFailed, LimitExceeded, ServiceFull, StateUnavailable
from manager.model import Dataflow
from manager.replacement import hot_links, plan_replacement
from manager.state import State, SubmittedDataflow
from manager.status import counts, quarantined_with_readers, status
from manager.store import StaleState, Store
from manager.traffic import basis, link_loads_in_use, measured_mbps
from manager.validate import parse_dataflow
from runtime.base import Runtime
from runtime.exceptions import RuntimeFailure
from runtime.plan import TaskSpec
from sana.failpoints import fail_point
from wan.exceptions import WanNotConfigured
from wan.monitor import WanMonitor
from wan.topology import WanConfig, load_wan_config, parse_wan_config

log = logging.getLogger("sana.manager")

_REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
#: After an automatic re-placement that moved work, this many link checks are skipped.
HOLD_OFF_CHECKS = 3
#: The longest wait between automatic re-placement rounds after failures in a row.
MAX_WATCH_BACKOFF_S = 300.0


@dataclass(frozen=True)
class SubmitResult:
    """What a submit did. ``sites`` maps submitted task ids to the site of their running task;
    ``not_shared`` lists the tasks that got a running task of their own although an equivalent
    one runs, with the link and the numbers that made Algorithm 1 refuse the share; ``placement``
    says, with a WAN configuration, which rule placed each task; ``weighing`` how Algorithm 1's plan
    and the one taking every share stood, and which was kept (:class:`planning.model.Weighing`).
    ``owner_tasks`` (not in :meth:`to_dict`): of the running tasks the answer names as already
    running (those of ``reused`` and the ``equivalent`` of ``not_shared``), the ones a dataflow of
    the same owner used before this submit; the API tells a user only about those (api/visibility.py)."""

    id: str
    name: str
    tasks: dict[str, str]
    reused: list[str]
    created: list[str]
    sinks: dict[str, dict[str, str]]
    started: list[str]
    sites: dict[str, str | None] = field(default_factory=dict)
    not_shared: list[dict[str, Any]] = field(default_factory=list)
    placement: dict[str, dict[str, Any]] = field(default_factory=dict)
    weighing: dict[str, Any] | None = None
    owner_tasks: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        result = {
            "id": self.id,
            "name": self.name,
            "tasks": self.tasks,
            "reused": self.reused,
            "created": self.created,
            "sinks": self.sinks,
            "sites": self.sites,
            "not_shared": self.not_shared,
        }
        if self.placement:
            result["placement"] = self.placement
        if self.weighing:
            result["weighing"] = self.weighing
        return result


def owned_among(state: State, owner: str | None, task_ids: set[str]) -> frozenset[str]:
    """Those of the running ``task_ids`` that some dataflow of ``owner`` uses in ``state``."""
    return frozenset(task for task in task_ids
                     if any(state.dataflows[flow].owner == owner for flow in state.users.get(task, ())))


@dataclass(frozen=True)
class RemoveResult:
    id: str
    terminated: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "terminated": self.terminated}


@dataclass(frozen=True)
class Limits:
    """What one dataflow, one owner and the whole service may hold; checked before anything changes."""

    tasks_per_dataflow: int = 200
    dataflows_per_owner: int = 1000
    running_tasks: int = 20_000
    queries: int = 2_000

    def check_dataflow(self, flow: Dataflow) -> None:
        if len(flow.tasks) > self.tasks_per_dataflow:
            raise LimitExceeded(f"dataflow {flow.name!r} has {len(flow.tasks)} tasks; at most "
                                f"{self.tasks_per_dataflow} per dataflow (SANA_MAX_TASKS_PER_DATAFLOW)",
                                culprit={"limit": "SANA_MAX_TASKS_PER_DATAFLOW"})

    def check_owner(self, state: State, owner: str | None) -> None:
        owned = sum(1 for flow in state.dataflows.values() if flow.owner == owner)
        if owned >= self.dataflows_per_owner:
            raise LimitExceeded(f"owner {owner!r} has {owned} dataflows; at most {self.dataflows_per_owner} "
                                "(SANA_MAX_DATAFLOWS_PER_OWNER): remove one first",
                                culprit={"limit": "SANA_MAX_DATAFLOWS_PER_OWNER"})

    def check_service(self, state: State, new_tasks: list[TaskSpec]) -> None:
        if len(state.tasks) + len(new_tasks) > self.running_tasks:
            raise ServiceFull(f"the service runs {len(state.tasks)} tasks and this dataflow needs {len(new_tasks)} more; "
                              f"at most {self.running_tasks} (SANA_MAX_RUNNING_TASKS)",
                              culprit={"limit": "SANA_MAX_RUNNING_TASKS"})
        # A query hosts one fragment or more, so fragments bound the queries whatever the runtime hosts together.
        fragments = {task.fragment for task in new_tasks} - set(state.fragments)
        if len(state.fragments) + len(fragments) > self.queries:
            raise ServiceFull(f"the service runs {len(state.fragments)} fragments (each up to one Spark query) and this "
                              f"dataflow needs {len(fragments)} more; at most {self.queries} (SANA_MAX_QUERIES)",
                              culprit={"limit": "SANA_MAX_QUERIES"})


def _streams_basis(state: State, measured: dict[str, float]) -> str:
    """The basis of the loads of all links together: whether the streams crossing between sites were measured."""
    return basis({producer in measured for producer in state.arrivals})


class Manager:
    """The reuse manager over one Redis prefix and one runtime."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        runtime: Runtime,
        clock: Callable[[], float] = time.time,
        wan_config: str | Path | None = None,
        sharing: bool = True,
        defrag_after_removals: int = 0,
        limits: Limits | None = None,
    ):
        """``wan_config`` names a WAN configuration file (``SANA_WAN_CONFIG``), applied at :meth:`start`.

        ``sharing=False`` (``SANA_SHARING=false``) runs every dataflow alone: the baseline that
        shows what sharing saves. Dataflows submitted while it was on stay shared.
        ``defrag_after_removals=N`` runs :meth:`defragment` in the background after every
        N-th removal (``SANA_DEFRAG_AFTER_REMOVALS``; 0 never). ``limits``: what one dataflow,
        one owner and the whole service may hold (:class:`Limits`).
        """
        self.limits = limits or Limits()
        self.store = Store(client, prefix)
        self.runtime = runtime
        self.clock = clock
        self.wan_config = wan_config
        self.sharing = sharing
        self.defrag_after_removals = defrag_after_removals
        self._removals = 0
        self.background_defrag: threading.Thread | None = None
        self._defragmenting = threading.Lock()
        self.state = State()
        self._mutex = threading.RLock()
        self._changing = threading.RLock()  # submit, remove, defragment, replace: one at a time; reads only take _mutex
        self._loaded = False
        self._started = False
        self._closing = threading.Event()
        self.link_watch: threading.Thread | None = None
        self.last_replacement: dict[str, Any] | None = None  # what the automatic re-placement did last

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Load the state from Redis and make the runtime run exactly it."""
        with self._guard(), self._mutex, self.store.lock():
            self.sync(force=True)
            pending = self.store.read_pending()
            if pending is not None:
                self._finish_interrupted(pending)
            self.runtime.reconcile(self.state.tasks)
            if pending is not None:
                self.store.clear_pending()
        if self.wan_config:
            wan = load_wan_config(self.wan_config)
            if self.state.wan is None or self.state.wan.to_dict() != wan.to_dict():
                log.info("applying the WAN configuration in %s", self.wan_config)
                self._commit_wan(wan)
        if self.state.wan is not None and self.state.wan.replace_above is not None:
            self._watch_links()
        self._started = True

    def _finish_interrupted(self, pending: dict[str, Any]) -> None:
        """A change the process died in: a submit is undone, a removal is completed, a re-placement
        is completed once the runtime handed the work over (its state was staged) and undone before.

        The runtime is then reconciled with the state either way. A removal goes
        forward because its work may already have stopped: bringing it back
        would leave a gap in its sinks, and the user asked for it to go (a
        retried DELETE gets 404). A submit goes back: its client got no 201.
        """
        dataflow = pending.get("dataflow")
        if pending.get("kind") == "replace" and (pending.get("handed_over") or self._handed_over()):
            log.warning("re-placement %r was handed over before its commit; completing it", pending.get("reason"))
            self.store.complete_staged()
            self.state = self.store.load()
        elif pending.get("kind") == "replace":
            log.warning("re-placement %r was not handed over; undoing what of it the runtime did", pending.get("reason"))
            self.store.drop_staged()
        elif pending.get("kind") == "unmerge" and dataflow in self.state.dataflows:
            log.warning("removal of %s was interrupted before its commit; completing it", dataflow)
            plan = merge.plan_unmerge(self.state, dataflow)
            version = self.store.commit_unmerge(plan, self.state)
            merge.apply_unmerge(self.state, plan)
            self.state.version = version
        else:
            log.warning("change %r was interrupted before its commit; undoing its deployment", pending.get("reason"))

    def _handed_over(self) -> bool:
        """Whether the runtime runs the staged state of a re-placement: its hand-over completed, and the process
        died before it could say so. Undoing it would start the moved work afresh from the topics' ends."""
        return self.store.has_staged() and self.runtime.runs(self.store.staged().load().tasks)

    def _ensure_started(self) -> None:
        """Finish a start that failed (Redis or the runtime was down when the service came up)."""
        if not self._started:
            self.start()

    def close(self) -> None:
        self._closing.set()
        self.runtime.close()

    # -- changes -----------------------------------------------------------------

    def submit(self, body: bytes | str | dict[str, Any]) -> SubmitResult:
        """Validate and merge a dataflow; returns once its new work runs."""
        flow = parse_dataflow(body)
        return self.submit_validated(flow)

    def submit_validated(self, flow: Dataflow) -> SubmitResult:
        self.limits.check_dataflow(flow)
        self._ensure_started()
        with self._guard(), self._changing, self._mutex, self.store.lock():
            self.sync()
            self.limits.check_owner(self.state, flow.owner)
            self.state.quarantined = quarantined_with_readers(self.state, self.runtime.failures())
            plan = merge.plan_merge(self.state, flow, self.clock(), sharing=self.sharing, measured=self._measured())
            self.limits.check_service(self.state, plan.new_tasks)
            named = {plan.dataflow.tasks[task] for task in plan.reused} | {row["equivalent"] for row in plan.not_shared}
            owner_tasks = owned_among(self.state, flow.owner, named)
            version = self._deploy_and_commit("merge", plan.change, lambda: self.store.commit_merge(plan, self.state),
                                              plan.dataflow.id)
            merge.apply_merge(self.state, plan)
            self.state.version = version
            sites = {task_id: self.state.tasks[running].site for task_id, running in plan.dataflow.tasks.items()}
        flow_record = plan.dataflow
        return SubmitResult(
            id=flow_record.id,
            name=flow_record.name,
            tasks=dict(flow_record.tasks),
            reused=list(plan.reused),
            created=list(plan.created),
            sinks=flow_record.sinks,
            started=[spec.id for spec in plan.new_tasks],
            sites=sites,
            not_shared=list(plan.not_shared),
            placement=dict(plan.placement),
            weighing=plan.weighing,
            owner_tasks=owner_tasks,
        )

    def remove(self, dataflow_id: str) -> RemoveResult:
        """Unmerge a dataflow; returns once its unshared work has stopped."""
        self._ensure_started()
        with self._guard(), self._changing, self._mutex, self.store.lock():
            self.sync()
            if dataflow_id not in self.state.dataflows:
                raise DataflowNotFound(f"no dataflow {dataflow_id!r}", culprit={"dataflow": dataflow_id})
            plan = merge.plan_unmerge(self.state, dataflow_id)
            version = self._deploy_and_commit("unmerge", plan.change, lambda: self.store.commit_unmerge(plan, self.state),
                                              dataflow_id)
            merge.apply_unmerge(self.state, plan)
            self.state.version = version
            self._removals += 1
            due = self.defrag_after_removals and self._removals % self.defrag_after_removals == 0
        if due:
            self.background_defrag = threading.Thread(target=self._defragment_in_background, name="sana-defrag", daemon=True)
            self.background_defrag.start()
        return RemoveResult(id=dataflow_id, terminated=[spec.id for spec in plan.terminated])

    # -- the WAN configuration ---------------------------------------------------

    def set_wan(self, document: dict[str, Any] | str | bytes | None) -> WanConfig | None:
        """Validate and store a WAN configuration (None removes it); it governs the submits that follow.

        Running tasks are not moved or restarted by the change itself; with ``replacement`` in it, a
        thread re-places them whenever a link reaches that utilization (:meth:`replace`). Raises
        :class:`~wan.exceptions.WanConfigInvalid` naming the field at fault.
        """
        wan = None if document is None else parse_wan_config(document)
        with self._guard(), self._mutex, self.store.lock():
            self.sync()
            self._commit_wan(wan)
        return wan

    def _commit_wan(self, wan: WanConfig | None) -> None:
        version = self.store.commit_wan(wan, self.state)
        self.state.set_wan(wan)
        self.state.version = version
        if wan is not None and wan.replace_above is not None:
            self._watch_links()

    # -- re-placement when a link runs hot ------------------------------------------

    def _watch_links(self) -> None:
        """Start the thread that re-places when a link reaches the configured utilization (once per manager)."""
        if self.link_watch is None or not self.link_watch.is_alive():
            self.link_watch = threading.Thread(target=self._watch_loop, name="sana-link-watch", daemon=True)
            self.link_watch.start()

    def _watch_loop(self) -> None:
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
            wan = self.state.wan
            if wan is None or wan.replace_above is None:
                return
            delay = wan.check_every_s * wait_checks
            if failures:
                delay = min(MAX_WATCH_BACKOFF_S, max(delay, wan.check_every_s * 2 ** failures))
            if self._closing.wait(delay):
                return
            wait_checks = 1
            try:
                state = self.snapshot()
                if state.wan is None or state.wan.replace_above is None:
                    return
                if not hot_links(state, self._measured(), state.wan.replace_above):
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

    def wan(self) -> dict[str, Any]:
        """The WAN configuration with every link's load, spare bandwidth and utilization (``GET /wan``).

        Raises :class:`~wan.exceptions.WanNotConfigured` without one.
        """
        state = self.snapshot()
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
        state = self.snapshot()
        if state.wan is None:
            raise WanNotConfigured("no WAN configuration: no link is modelled")
        measured = self._measured()
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
        return {"links": rows, "total_load_mbps": round(total, 6), "basis": _streams_basis(state, measured)}

    def replacement(self, utilization: float) -> dict[str, Any]:
        """What re-placement would move now, at links whose utilization is at least ``utilization``
        (``GET /wan/replacement``; :func:`manager.replacement.plan_replacement`). Nothing is changed.

        Raises :class:`~wan.exceptions.WanNotConfigured` without a WAN configuration.
        """
        measured = self._measured()
        with self._guard(), self._mutex:
            self.sync()
            self._require_wan()
            state = copy.deepcopy(self.state)
        result = plan_replacement(state, measured, utilization, sharing=self.sharing).report
        result["basis"] = _streams_basis(state, measured)
        return result

    def replace(self, utilization: float) -> dict[str, Any]:
        """Carry re-placement out now (``POST /wan/replacement``): the plan of :meth:`replacement`, executed.

        The runtime hands the work over at a cut (nothing lost or written twice) and the state after
        it is committed in one transaction; the dataflows keep their ids. If the runtime fails,
        nothing changed and :class:`DeployFailed` says why; if the commit fails, the work is handed
        back. Other changes wait meanwhile; reads go on (they see the state before until the commit).
        """
        self._ensure_started()
        measured = self._measured()
        with self._guard(), self._changing, self.store.lock():
            with self._mutex:
                self.sync()
                self._require_wan()
                before = self.state
                planned = plan_replacement(before, measured, utilization, sharing=self.sharing)
            report = {**planned.report, "basis": _streams_basis(before, measured), "executed": True}
            if planned.change.empty:
                return report
            pending = {"kind": "replace", "reason": planned.change.reason, "start": report["start"], "stop": report["stop"]}
            self.store.stage(planned.after, {**pending, "handed_over": False})
            fail_point("manager.replace.pending")
            try:
                report["hand_over"] = self.runtime.hand_over(planned.change, planned.seeds)
                fail_point("manager.replace.deployed")
            except RuntimeFailure as failure:
                self._forget_staged()
                raise DeployFailed(f"{planned.change.reason}: the runtime failed, nothing changed: {failure.message}",
                                   culprit={"dataflows": [row["dataflow"] for row in report["dataflows"]]}) from failure
            with self._mutex:
                try:
                    self.store.mark_pending({**pending, "handed_over": True})
                    fail_point("manager.replace.staged")
                    version = self.store.commit_state(planned.after, before)
                except (redis.RedisError, StaleState) as error:
                    log.error("commit of %s failed (%s); handing the work back", planned.change.reason, error)
                    self._hand_back(planned)
                    try:
                        self.store.drop_staged()
                    except redis.RedisError:
                        log.warning("could not drop the staged state; the next start completes the re-placement")
                    self._loaded = False
                    if isinstance(error, _REDIS_DOWN):
                        raise
                    raise DeployFailed(f"{planned.change.reason}: the state changed underneath, nothing changed: {error}") from error
                self.state = planned.after
                self.state.version = version
        log.info("re-placement at utilization >= %s: started %s, stopped %s", utilization, report["start"], report["stop"])
        return report

    def _hand_back(self, planned) -> None:
        """Undo a hand-over whose commit failed: the stopped tasks start again, each continuing the state of the
        task that took over from it (a copy of a task that ran on has nothing to give back)."""
        stopped = {spec.id for spec in planned.change.stop}
        seeds: dict[str, str] = {}
        for task, source in planned.seeds.items():
            if source in stopped:
                seeds.setdefault(source, task)
        try:
            self.runtime.hand_over(planned.change.inverse(), seeds)
        except RuntimeFailure:
            log.exception("handing back %s failed; the next start reconciles it", planned.change.reason)

    def _require_wan(self) -> None:
        if self.state.wan is None:
            raise WanNotConfigured("no WAN configuration: nothing is placed by bandwidth, so nothing re-placed")

    def _measured(self) -> dict[str, float]:
        """Output Mbps the runtime measured per running task (empty without a WAN or a measuring runtime)."""
        if self.state.wan is None:
            return {}
        return measured_mbps(self.runtime.task_costs())

    def _deploy_and_commit(self, kind: str, change, commit: Callable[[], int], what: str) -> int:
        self.store.mark_pending({"kind": kind, "dataflow": what, "reason": change.reason,
                                 "start": [t.id for t in change.start], "stop": [t.id for t in change.stop]})
        fail_point(f"manager.{kind}.pending")
        try:
            self.runtime.apply(change)
            fail_point(f"manager.{kind}.deployed")
        except RuntimeFailure as failure:
            self._forget_pending()
            raise DeployFailed(f"{change.reason}: the runtime failed, nothing changed: {failure.message}", culprit={"dataflow": what}) from failure
        try:
            version = commit()
            fail_point(f"manager.{kind}.committed")
            return version
        except (redis.RedisError, StaleState) as error:
            log.error("commit of %s failed (%s); undoing its deployment", change.reason, error)
            try:
                self.runtime.apply(change.inverse())
            except RuntimeFailure:
                log.exception("undoing %s failed; the next start reconciles it", change.reason)
            self._loaded = False
            if isinstance(error, _REDIS_DOWN):
                raise
            raise DeployFailed(f"{change.reason}: the state changed underneath, nothing changed: {error}") from error

    def _forget_pending(self) -> None:
        try:
            self.store.clear_pending()
        except redis.RedisError:
            log.warning("could not clear the pending marker; the next start clears it")

    def _forget_staged(self) -> None:
        try:
            self.store.drop_staged()
        except redis.RedisError:
            log.warning("could not drop the staged state; the next start drops it")

    # -- reads -------------------------------------------------------------------

    def snapshot(self) -> State:
        """The current state, synced with Redis (read-only: do not mutate)."""
        with self._guard(), self._mutex:
            self.sync()
            return self.state

    def dataflow(self, dataflow_id: str) -> SubmittedDataflow:
        state = self.snapshot()
        try:
            return state.dataflows[dataflow_id]
        except KeyError:
            raise DataflowNotFound(f"no dataflow {dataflow_id!r}", culprit={"dataflow": dataflow_id}) from None

    def defragment(self) -> dict[str, Any]:
        """Recompact the runtime's queries (``sana defrag``); no change runs meanwhile.

        The running tasks and their fragments stay as they are: only which Spark
        query runs them changes. A runtime without queries (dry run) has nothing to do.
        """
        self._ensure_started()
        with self._guard(), self._changing:  # reads (and /healthz) go on meanwhile; changes wait
            return self.runtime.defragment()

    def _defragment_in_background(self) -> None:
        if not self._defragmenting.acquire(blocking=False):  # one is running: it sees this removal too
            return
        try:
            report = self.defragment()
            if report["merged"] or report["skipped"]:
                log.info("automatic defragmentation: %d -> %d queries (%s)", report["queries_before"],
                         report["queries_after"], report)
        except Exception:  # the next removal tries again; nothing changed for a group that failed
            log.exception("automatic defragmentation failed")
        finally:
            self._defragmenting.release()

    def costs(self) -> dict[str, Any]:
        """Every dataflow's share of the measured cost of the tasks it uses (:mod:`manager.costs`)."""
        state = self.snapshot()
        return attribute(self.runtime.task_costs(), {flow.id: list(flow.tasks.values()) for flow in state.dataflows.values()})

    def cost(self, dataflow_id: str) -> dict[str, Any]:
        """One dataflow's cost: its shares, what it would cost alone, what sharing saves it."""
        self.dataflow(dataflow_id)
        split = self.costs()
        flow = split["dataflows"].get(dataflow_id)
        if flow is None:  # removed between the two reads
            raise DataflowNotFound(f"no dataflow {dataflow_id!r}", culprit={"dataflow": dataflow_id})
        # a failed or stalled dataflow's work costs nothing while it does not run: say so beside the zero
        return {"measured": split["measured"], "window_s": split["window_s"], **flow,
                **self.statuses([self.dataflow(dataflow_id)], details=False)[dataflow_id]}

    def statuses(self, flows: list[SubmittedDataflow], details: bool = True) -> dict[str, dict[str, Any]]:
        """Dataflow id -> its status (running, failed naming the task and error, or stalled: :mod:`manager.status`).

        ``details=False`` (a user asking) leaves out query ids and the errors of stalled queries."""
        failures = {task: failure.to_dict() for task, failure in self.runtime.failures().items()}
        stalled = self.runtime.stalled()
        return {flow.id: status(flow, failures, stalled, details=details) for flow in flows}

    def work(self) -> dict[str, Any]:
        """How many dataflows run, failed or stalled, and the runtime's work report (for ``/healthz``)."""
        state = self.snapshot()
        failures = {task: failure.to_dict() for task, failure in self.runtime.failures().items()}
        stalled = self.runtime.stalled()
        if not failures and not stalled:  # the common case, cheap at any number of dataflows (a probe reads it)
            return {"running": len(state.dataflows), "failed": 0, "stalled": 0, "quarantined_tasks": 0}
        return {**counts(state.dataflows.values(), failures, stalled), "quarantined_tasks": len(failures)}

    def stats(self) -> dict[str, Any]:
        state = self.snapshot()
        submitted = state.submitted_tasks()
        running = len(state.tasks)
        sharing = Counter(len(users) for users in state.users.values())
        return {
            "submitted_dataflows": len(state.dataflows),
            "submitted_tasks": submitted,
            "running_tasks": running,
            "running_streams": state.running_streams(),
            "running_dags": len(state.dag_members),
            "fragments": len(state.fragments),
            "saving_percent": round(100.0 * (submitted - running) / submitted, 2) if submitted else 0.0,
            "sharing_histogram": {str(users): count for users, count in sorted(sharing.items())},
            "sharing": self.sharing,
        }

    # -- internals ---------------------------------------------------------------

    def sync(self, force: bool = False) -> None:
        """Make memory match Redis; write memory back if Redis lost everything."""
        version = self.store.version()
        if version is None and self._loaded and (self.state.dataflows or self.state.tasks):
            log.warning("Redis holds no state under %r; writing ours back", self.store.prefix)
            self.state.version = self.store.write_all(self.state)
            self.runtime.restore(self.state.tasks)
            return
        if force or not self._loaded or (version or 0) != self.state.version:
            self.state = self.store.load()
            self._loaded = True

    def _guard(self):
        return _RedisGuard(self.store.redis)


class _RedisGuard:
    """Turn Redis being unreachable into :class:`StateUnavailable`."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, trace) -> bool:
        if isinstance(error, _REDIS_DOWN):
            location = self._client.connection_pool.connection_kwargs
            where = f"{location.get('host', '?')}:{location.get('port', '?')}"
            raise StateUnavailable(f"Redis at {where} does not answer: {error}") from error
        return False


def task_wan_fields(state: State, task_id: str) -> dict[str, Any]:
    """Extra fields of a running task for ``GET /running``.

    ``not_shared``: the refused shares that made this task start (each with
    the equivalent task, the link and the numbers); ``equivalents``: the
    other running tasks with the same signature (at other sites).
    """
    task = state.tasks[task_id]
    others = sorted(state.instances.get(task.signature, set()) - {task_id})
    return {
        "not_shared": state.not_shared.get(task_id, []),
        "equivalents": [{"id": other, "site": state.tasks[other].site} for other in others],
    }
