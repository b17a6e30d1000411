"""What a user sees of other owners' work: nothing but aggregate counts. Admins see everything.

Sharing crosses owners, so the facts of a submit or a removal name other
owners' work: which tasks were already running, which equivalent task was not
shared, which tasks a removal left running. A user gets them from their own
point of view instead, where the other owners' dataflows do not exist:

* ``reused`` lists the tasks served by running tasks the caller's own
  dataflows already used, ``created`` all the others (some may have been
  running for someone else); ``not_shared`` keeps only refusals to share the
  caller's own tasks; ``placement`` and ``weighing`` (which weigh every share)
  are left out; ``contained`` keeps only the shares reading the caller's
  own running tasks (another owner's wider filter or select is not named);
* ``terminated`` of a removal lists the running tasks the removed dataflow
  used that none of the caller's other dataflows uses (some may go on running
  for someone else);
* another owner's dataflow answers 404 ``DATAFLOW_NOT_FOUND`` exactly as a
  missing one does, so ids cannot be probed;
* a cost tells no sharer count per task (``users`` and ``share`` are null);
  its totals (``cost``, ``alone``, ``saved``) stay, as ``/stats`` counts do;
* a topic is read (``GET /topics/{topic}/records``) only if one of the
  caller's dataflows reads it (a source) or writes it (a sink); any other
  answers 404 ``TOPIC_NOT_FOUND`` whether it exists or not.
"""

from __future__ import annotations

from typing import Any

from manager.exceptions import DataflowNotFound
from manager.results import RemoveResult, SubmitResult
from manager.state import State, SubmittedDataflow
from runtime.exceptions import TopicNotFound
from sana.auth import Principal

#: Submit answer fields that weigh every running task, whoever's: left out of a user's answer.
ADMIN_ONLY_SUBMIT_FIELDS = ("placement", "weighing")
#: Cost row fields that count the dataflows sharing a task: null in a user's answer.
SHARER_FIELDS = ("users", "share")


def check_visible(principal: Principal, owner: str | None, dataflow_id: str) -> None:
    """Raise what a missing dataflow raises unless ``principal`` owns the dataflow or is an admin."""
    if principal.admin or owner == principal.name:
        return
    raise DataflowNotFound(f"no dataflow {dataflow_id!r}", culprit={"dataflow": dataflow_id})


def check_topic_visible(principal: Principal, topic: str, state: State) -> None:
    """Raise what a missing topic raises unless ``principal`` is an admin or one of their dataflows uses ``topic``."""
    if principal.admin or state.owner_uses_topic(principal.name, topic):
        return
    raise TopicNotFound(f"no topic {topic!r} among the topics {principal.name!r}'s dataflows read or write",
                        culprit={"topic": topic})


def submit_answer(principal: Principal, result: SubmitResult) -> dict[str, Any]:
    """The 201 of a submit as ``principal`` may see it."""
    answer = result.to_dict()
    if principal.admin:
        return answer
    own = result.owner_tasks
    reused = [task for task in result.reused if result.tasks[task] in own]
    answer["reused"] = reused
    answer["created"] = [task for task in result.tasks if task not in set(reused)]
    answer["contained"] = [share for share in result.contained if share["reads"] in own]
    answer["not_shared"] = [row for row in result.not_shared if row.get("equivalent") in own]
    for field in ADMIN_ONLY_SUBMIT_FIELDS:
        answer.pop(field, None)
    return answer


def visible_shares(principal: Principal, flow: SubmittedDataflow, state: State) -> list[dict[str, Any]]:
    """``flow``'s containment shares as ``principal`` may see them: an admin all; a user those reading a running task
    that one of the owner's dataflows runs as a task of its document, not only as the task a share reads (a lookup
    per share in ``state``'s owner indexes)."""
    if principal.admin:
        return flow.shares()
    return [share for share in flow.shares() if state.in_document_of(flow.owner, share["reads"])]


def removal_answer(principal: Principal, result: RemoveResult) -> dict[str, Any]:
    """The answer of a removal as ``principal`` may see it: ``terminated`` from their point of view (the tasks
    no dataflow of theirs uses now, whatever others' dataflows keep running)."""
    answer = result.to_dict()
    if principal.admin:
        return answer
    return {**answer, "terminated": result.released}


def cost_answer(principal: Principal, cost: dict[str, Any]) -> dict[str, Any]:
    """A dataflow's cost as ``principal`` may see it."""
    if principal.admin:
        return cost
    rows = [{**row, **{key: None for key in SHARER_FIELDS}} for row in cost.get("tasks", [])]
    return {**cost, "tasks": rows}
