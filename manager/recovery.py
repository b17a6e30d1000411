"""Crash recovery: a change the process died in is finished or undone when the manager starts again.

:func:`recover` runs under the ledger's locks at start: it loads the state, looks
at the pending marker a change leaves in Redis until it commits, and decides:

- a **submit** goes back: its client got no 201, so its deployment is undone
  (the runtime is reconciled with the committed state);
- a **removal** goes forward: its work may already have stopped, bringing it
  back would leave a gap in its sinks, and the user asked for it to go (a
  retried DELETE gets 404);
- a **group** of changes committed together (:mod:`manager.group`): each of its
  submits goes back and each of its removals forward, as above;
- a **re-placement** is completed once the runtime handed the work over (its
  state after was staged in Redis) and undone before.

Either way the runtime is then made to run exactly the state.
"""

from __future__ import annotations

import logging
from typing import Any

from manager import merge
from manager.ledger import Ledger

log = logging.getLogger("sana.manager")


def recover(ledger: Ledger) -> None:
    """Load the state, settle a change cut short, and make the runtime run exactly the state."""
    ledger.sync(force=True)
    pending = ledger.store.read_pending()
    if pending is not None:
        finish_interrupted(ledger, pending)
    ledger.runtime.reconcile(ledger.state.tasks)
    if pending is not None:
        ledger.store.clear_pending()


def finish_interrupted(ledger: Ledger, pending: dict[str, Any]) -> None:
    """Complete or undo (in the state; the caller reconciles the runtime) the change ``pending`` describes."""
    dataflow = pending.get("dataflow")
    if pending.get("kind") == "replace" and (pending.get("handed_over") or handed_over(ledger)):
        log.warning("re-placement %r was handed over before its commit; completing it", pending.get("reason"))
        ledger.store.complete_staged()
        ledger.state = ledger.store.load()
    elif pending.get("kind") == "replace":
        log.warning("re-placement %r was not handed over; undoing what of it the runtime did", pending.get("reason"))
        ledger.store.drop_staged()
    elif pending.get("kind") == "unmerge" and dataflow in ledger.state.dataflows:
        complete_removal(ledger, dataflow)
    elif pending.get("kind") == "group":
        log.warning("group of %d changes was interrupted before its commit; undoing its submits, completing its "
                    "removals", len(pending.get("members", ())))
        for member in pending.get("members", ()):
            if member.get("kind") == "unmerge" and member.get("dataflow") in ledger.state.dataflows:
                complete_removal(ledger, member["dataflow"])
    else:
        log.warning("change %r was interrupted before its commit; undoing its deployment", pending.get("reason"))


def complete_removal(ledger: Ledger, dataflow: str) -> None:
    log.warning("removal of %s was interrupted before its commit; completing it", dataflow)
    plan = merge.plan_unmerge(ledger.state, dataflow)
    version = ledger.store.commit_unmerge(plan, ledger.state)
    merge.apply_unmerge(ledger.state, plan)
    ledger.state.version = version


def handed_over(ledger: Ledger) -> bool:
    """Whether the runtime runs the staged state of a re-placement: its hand-over completed, and the process
    died before it could say so. Undoing it would start the moved work afresh from the topics' ends."""
    return ledger.store.has_staged() and ledger.runtime.runs(ledger.store.staged().load().tasks)
