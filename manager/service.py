"""The manager: validates, plans, deploys and commits every change.

A submit or remove runs under a thread lock and the Redis writer lock:
sync with Redis -> plan (pure) -> mark pending -> runtime.apply -> commit
(one transaction) -> update memory (:class:`manager.ledger.Ledger`). Changes
that arrive while another deploys are planned in order and deployed and
committed together, each answered as if alone (:mod:`manager.group`). If the
runtime fails, nothing was committed and the caller gets :class:`DeployFailed`;
if the commit fails after a successful deployment, the deployment is undone
first. A manager restarted on the same Redis loads the state and reconciles
the runtime with it, which also undoes a submit whose commit never happened (a
removal cut short is completed instead: :mod:`manager.recovery`).

:class:`Manager` is the one object the API holds. It does submission, removal
and the reads itself, and hands the rest to parts with one job each: the WAN
configuration, link loads and re-placement (:class:`~manager.wan_control.WanControl`),
defragmentation (:class:`~manager.maintenance.Maintenance`), crash recovery
(:mod:`manager.recovery`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from manager import merge
from manager.containment import containment_shares, read_by_owner
from manager.costs import attribute
from manager.duplicates import find_repeats
from manager.exceptions import DataflowNotFound
from manager.group import GroupCommit, Prepared
from manager.ledger import Ledger
from manager.maintenance import Maintenance
from manager.model import Dataflow
from manager.recovery import recover
from manager.results import Limits, RemoveResult, SubmitResult, owned_among
from manager.state import State, SubmittedDataflow
from manager.status import counts, quarantined_with_readers, status
from manager.store import Store
from manager.validate import parse_dataflow
from manager.wan_control import WanControl
from runtime.base import Runtime
from wan.topology import WanConfig, load_wan_config

log = logging.getLogger("sana.manager")

__all__ = ["Limits", "Manager", "RemoveResult", "SubmitResult", "task_wan_fields"]


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
        containment: bool = True,
        defrag_after_removals: int = 0,
        limits: Limits | None = None,
    ):
        """``wan_config`` names a WAN configuration file (``SANA_WAN_CONFIG``), applied at :meth:`start`.

        ``sharing=False`` (``SANA_SHARING=false``) runs every dataflow alone: the baseline that
        shows what sharing saves. Dataflows submitted while it was on stay shared.
        ``containment=False`` (``SANA_CONTAINMENT=false``) shares only equivalent tasks, not a
        filter or select that reads a running one containing it (:mod:`manager.containment`).
        ``defrag_after_removals=N`` runs :meth:`defragment` in the background after every
        N-th removal (``SANA_DEFRAG_AFTER_REMOVALS``; 0 never). ``limits``: what one dataflow,
        one owner and the whole service may hold (:class:`Limits`).
        """
        self.limits = limits or Limits()
        self.ledger = Ledger(client, prefix, runtime)
        self.clock = clock
        self.wan_config = wan_config
        self.sharing = sharing
        self.containment = containment
        self._started = False
        self._closing = threading.Event()
        self.wan_control = WanControl(self.ledger, sharing=sharing, clock=clock, ensure_started=self._ensure_started,
                                      closing=self._closing, containment=containment)
        self.maintenance = Maintenance(self.ledger, defrag_after_removals=defrag_after_removals,
                                       ensure_started=self._ensure_started)
        self.group = GroupCommit(self.ledger)

    # What the API and the tests read of the parts.

    @property
    def state(self) -> State:
        """The state in memory (unsynced; :meth:`snapshot` syncs first)."""
        return self.ledger.state

    @property
    def store(self) -> Store:
        return self.ledger.store

    @property
    def runtime(self) -> Runtime:
        return self.ledger.runtime

    @runtime.setter
    def runtime(self, runtime: Runtime) -> None:
        self.ledger.runtime = runtime

    @property
    def background_defrag(self) -> threading.Thread | None:
        return self.maintenance.background_defrag

    @property
    def link_watch(self) -> threading.Thread | None:
        return self.wan_control.link_watch

    @property
    def last_replacement(self) -> dict[str, Any] | None:
        return self.wan_control.last_replacement

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Load the state from Redis, settle a change cut short, and make the runtime run exactly the state."""
        ledger = self.ledger
        with ledger.guard(), ledger.mutex, ledger.store.lock():
            recover(ledger)
        if self.wan_config:
            wan = load_wan_config(self.wan_config)
            if ledger.state.wan is None or ledger.state.wan.to_dict() != wan.to_dict():
                log.info("applying the WAN configuration in %s", self.wan_config)
                self.wan_control.commit_wan(wan)
        if ledger.state.wan is not None and ledger.state.wan.replace_above is not None:
            self.wan_control.watch_links()
        self._started = True

    def _ensure_started(self) -> None:
        """Finish a start that failed (Redis or the runtime was down when the service came up)."""
        if not self._started:
            self.start()

    def close(self) -> None:
        self._closing.set()
        self.runtime.close()

    # -- changes -----------------------------------------------------------------

    def submit(self, body: bytes | str | dict[str, Any], unique: bool = False) -> SubmitResult:
        """Validate and merge a dataflow; returns once its new work runs."""
        flow = parse_dataflow(body)
        return self.submit_validated(flow, unique=unique)

    def submit_validated(self, flow: Dataflow, unique: bool = False) -> SubmitResult:
        """Merge a validated dataflow. One identical to a dataflow its owner runs is accepted with a warning, or
        refused with :class:`~manager.exceptions.DataflowDuplicate` when ``unique`` (nothing changes): :mod:`manager.duplicates`.
        Submits and removals arriving together are deployed and committed together (:mod:`manager.group`)."""
        self.limits.check_dataflow(flow)
        self._ensure_started()
        ledger = self.ledger

        def prepare(state: State) -> Prepared:
            repeats = find_repeats(state, flow)
            if unique and repeats.duplicates:
                raise repeats.refusal()
            self.limits.check_owner(state, flow.owner)
            state.quarantined = quarantined_with_readers(state, self.runtime.failures())
            plan = merge.plan_merge(state, flow, self.clock(), sharing=self.sharing, measured=ledger.measured(),
                                    containment=self.containment)
            self.limits.check_service(state, plan.new_tasks)
            named = {plan.dataflow.tasks[task] for task in plan.reused} | {row["equivalent"] for row in plan.not_shared}
            owner_tasks = owned_among(state, flow.owner, named) | read_by_owner(state, flow.owner, plan.contained)

            def apply(state: State) -> SubmitResult:
                merge.apply_merge(state, plan)
                submitted = plan.dataflow.document_tasks()
                record = plan.dataflow
                return SubmitResult(
                    id=record.id,
                    name=record.name,
                    tasks=submitted,
                    reused=list(plan.reused),
                    created=list(plan.created),
                    sinks=record.sinks,
                    started=[spec.id for spec in plan.new_tasks],
                    sites={task_id: state.tasks[running].site for task_id, running in submitted.items()},
                    not_shared=list(plan.not_shared),
                    placement=dict(plan.placement),
                    weighing=plan.weighing,
                    owner_tasks=owner_tasks,
                    contained=[share.to_dict() for share in plan.contained],
                    duplicate_of=repeats.duplicate_of.id if repeats.duplicate_of else None,
                    warnings=repeats.warnings(record.id, len(plan.new_tasks)),
                )

            return Prepared("merge", plan.dataflow.id, plan.change, ledger.store.merge_writes(plan, state), apply)

        return self.group.run(prepare)

    def remove(self, dataflow_id: str, check: Callable[[SubmittedDataflow], None] | None = None) -> RemoveResult:
        """Unmerge a dataflow; returns once its unshared work has stopped. ``check`` is called with the dataflow
        in the state the removal is planned on, and refuses it by raising (the caller may not remove it)."""
        self._ensure_started()
        ledger = self.ledger

        def prepare(state: State) -> Prepared:
            if dataflow_id not in state.dataflows:
                raise DataflowNotFound(f"no dataflow {dataflow_id!r}", culprit={"dataflow": dataflow_id})
            flow = state.dataflows[dataflow_id]
            if check is not None:
                check(flow)
            plan = merge.plan_unmerge(state, dataflow_id)

            def apply(state: State) -> RemoveResult:
                merge.apply_unmerge(state, plan)
                used = flow.running_ids()
                released = sorted(used - owned_among(state, flow.owner, used))
                return RemoveResult(id=dataflow_id, terminated=[spec.id for spec in plan.terminated], released=released)

            return Prepared("unmerge", dataflow_id, plan.change, ledger.store.unmerge_writes(plan), apply)

        result = self.group.run(prepare)
        self.maintenance.removed()
        return result

    # -- the WAN and maintenance (their parts do the work) ---------------------------

    def set_wan(self, document: dict[str, Any] | str | bytes | None) -> WanConfig | None:
        """Store a WAN configuration (None removes it): :meth:`WanControl.set_wan`."""
        return self.wan_control.set_wan(document)

    def wan(self) -> dict[str, Any]:
        return self.wan_control.wan()

    def wan_links(self) -> dict[str, Any]:
        return self.wan_control.wan_links()

    def replacement(self, utilization: float) -> dict[str, Any]:
        return self.wan_control.replacement(utilization)

    def replace(self, utilization: float) -> dict[str, Any]:
        return self.wan_control.replace(utilization)

    def defragment(self) -> dict[str, Any]:
        return self.maintenance.defragment()

    # -- reads -------------------------------------------------------------------

    def sync(self, force: bool = False) -> None:
        """Make memory match Redis (:meth:`Ledger.sync`)."""
        self.ledger.sync(force)

    def snapshot(self) -> State:
        """The current state, synced with Redis (read-only: do not mutate)."""
        return self.ledger.snapshot()

    def dataflow(self, dataflow_id: str) -> SubmittedDataflow:
        state = self.snapshot()
        try:
            return state.dataflows[dataflow_id]
        except KeyError:
            raise DataflowNotFound(f"no dataflow {dataflow_id!r}", culprit={"dataflow": dataflow_id}) from None

    def costs(self) -> dict[str, Any]:
        """Every dataflow's share of the measured cost of the tasks it uses (:mod:`manager.costs`)."""
        state = self.snapshot()
        return attribute(self.runtime.task_costs(), {flow.id: flow.tasks for flow in state.dataflows.values()})

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
        sharing = {users: count for users, count in state.tally.by_users.items() if users}
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
            "containment": self.containment,
            "containment_shares": containment_shares(state),
            "wan_configured": state.wan is not None,
            "change_groups": self.group.counts(),
        }


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
