"""Hand-over: move running tasks to other places (sites, queries) at a cut, nothing lost or written twice.

Re-placement (Sana section 6) stops some tasks and starts others that take
over their work: a dataflow's filter that read a shared copy over a hot link
gets a copy of its own at its site, its sink then reads that copy, and so
on. Started in the ordinary way, the new tasks would begin at the ends of
their inputs and with empty state: records written meanwhile would be lost
for them, and their windows would restart. :func:`hand_over` does it at a
cut instead:

1. **the group**: the queries that host a task that stops, a task whose
   state a new task takes over, or a task a new task reads from.
2. **cut and drain** (:mod:`runtime.spark.cut`): the group's outside inputs
   are bound at their ends, and every query of the group processes exactly
   up to the bound, its taps to their ends. The group pauses meanwhile;
   queries outside it run on.
3. **converge** to the running set after the change, with two differences
   from an ordinary change: a new task never joins a running query, and
   every new query starts at the cut (an input the group read: where the
   group stopped; a tap written inside the group: its end, which is the
   same point) with batch ids one up, seeded with the driver state, keyed
   worker state and replay memory its tasks take over (``seeds``: new task
   -> the task whose state it continues, itself running or stopping).
4. the bounds are lifted: the group and the new queries continue from the cut.

So every record before the cut was processed by the old tasks and every
record after it by the new ones, with the state at the cut carried over. A
failure before the converge completes undoes it (the runtime's ordinary
rollback) and lifts the bounds: the old tasks run on as before and
:class:`HandOverFailed` says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.broker.offsets import probe_consumer
from runtime.exceptions import HandOverFailed, RuntimeFailure
from runtime.plan import Change, seeds_problem
from runtime.spark.cut import Offsets, drain, lift_bounds, set_bounds, topic_ends
from runtime.spark.fragment import FragmentQuery, StateCopy
from runtime.spark.statement import REPLAYS_KEY
from runtime.spark.host import QueryHost
from runtime.spark.layout import QueryLayout

log = logging.getLogger("sana.runtime.handover")


@dataclass
class HandOver:
    """Where new queries start and what they are seeded with; used by the runtime's converge."""

    cut: Offsets
    seeds: Mapping[str, str]
    hosts: Mapping[str, FragmentQuery]  # every task of the group (as it ran before the change) -> its query
    saved: Mapping[str, tuple[int | None, dict[str, Any]]]  # group query id -> its states saved at the cut
    # Fragments holding a task that runs on (not started by the change): they stay in their queries. A fragment
    # whose tasks all start anew (a task that keeps its id but moves) gets a new query, which starts at the cut.
    kept: set[str]
    seeded: set[str] = field(default_factory=set)

    def starts(self, query_id: str, inputs: Offsets, fresh_topics: set[str]) -> Offsets:
        """The offsets a new query starts from: the cut where the group read, 0 on a topic created now."""
        result = {}
        for topic, parts in inputs.items():
            if topic in fresh_topics:
                result[topic] = {partition: 0 for partition in parts}
            elif topic in self.cut:
                result[topic] = dict(self.cut[topic])
            else:
                raise HandOverFailed(f"query {query_id} would read {topic!r}, which no query of the group read "
                                     "up to the cut (internal error: nothing was changed)")
        return result

    def seed(self, query: FragmentQuery, plan: "QueryLayout") -> None:
        """Give a new query the state at the cut of the tasks its tasks take over (version ``batch_base - 1``)."""
        replays: dict[str, Any] = {}  # the group's replay memory together: upstream batches any of it processed
        for _, own in self.saved.values():
            replays.update(own.get(REPLAYS_KEY) or {})
        states: dict[str, Any] = {REPLAYS_KEY: replays}
        copies = []
        for task in plan.tasks:
            source = self.seeds.get(task.id)
            if source is None:
                continue
            old = self.hosts[source]
            version, own = self.saved[old.id]
            if source in own:
                states[task.id] = own[source]
                if version is not None:
                    copies.append(StateCopy(old, source, version, task.id))
            self.seeded.add(task.id)
        query.seed(states, copies)


def hand_over(runtime: QueryHost, change: Change, seeds: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    """Apply ``change`` at a cut, each new task in ``seeds`` continuing the state of the task it names.

    Called with the runtime's lock held. Returns the group, the cut and which new tasks were seeded.
    """
    start_ids = {task.id for task in change.start}
    problem = seeds_problem(change, seeds, runtime.tasks)
    if problem is not None:
        raise HandOverFailed(f"{change.reason}: {problem}")
    desired = dict(runtime.tasks)
    for task in change.stop:
        desired.pop(task.id, None)
    desired.update({task.id: task for task in change.start})
    kept = {task.fragment for task_id, task in desired.items() if task_id not in start_ids}
    for task in change.start:  # a task seeded with state must start in a new query
        if task.id in seeds and task.fragment in kept:
            raise HandOverFailed(f"task {task.id} would join fragment {task.fragment}, which runs already; "
                                 "its state can only be handed over to a new query")

    query_of = {task.id: query_id for query_id, plan in runtime.plans.items() for task in plan.tasks}
    touched = {query_of[task.id] for task in change.stop if task.id in query_of}
    touched |= {query_of[source] for source in seeds.values() if source in query_of}
    touched |= {query_of[parent] for task in change.start for _, parent in task.inputs
                if parent not in start_ids and parent in query_of}
    group = [runtime.queries[query_id] for query_id in sorted(touched)]
    hosts = {task_id: runtime.queries[query_id] for task_id, query_id in query_of.items() if query_id in touched}
    sinks = set().union(*(plan.sink_topics for plan in runtime.plans.values()))
    inside = {topic for query_id in touched for _, topic in runtime.plans[query_id].outputs} - sinks
    outside = set().union(*(set(query.inputs) for query in group)) - inside
    outside |= {task.config["topic"] for task in change.start if task.type == "source"} - inside

    consumer = None
    began = time.monotonic()
    try:
        consumer = probe_consumer(runtime.bootstrap)
        cut = topic_ends(consumer, outside)
        set_bounds(group, cut)
        drain(group, cut, inside, consumer, timeout_s, max(0.2, min(1.0, runtime.trigger_s / 2)))
        drained = time.monotonic()
        saved = {query.id: query.saved_states() for query in group}
        handing = HandOver({**cut, **topic_ends(consumer, inside)}, dict(seeds), hosts, saved, kept)
        runtime.converge(desired, reason=change.reason, rollback=True, handing_over=handing)
    except Exception as error:  # the broker, Spark or a state copy: the converge rolled back, the bounds go below
        message = error.message if isinstance(error, RuntimeFailure) else f"{type(error).__name__}: {error}"
        raise HandOverFailed(f"not handed over ({message}); the tasks run as before") from error
    finally:
        if consumer is not None:
            consumer.close()
        lift_bounds(group)
    timing = {"drain_s": round(drained - began, 3), "paused_s": round(time.monotonic() - began, 3)}
    log.info("%s: handed over at a cut of %d topic(s); queries %s paused %.1f s (draining %.1f s); seeded %s",
             change.reason, len(handing.cut), [query.id for query in group], timing["paused_s"], timing["drain_s"],
             sorted(handing.seeded))
    return {"paused": [query.id for query in group], "cut": handing.cut, "seeded": sorted(handing.seeded),
            "seeded_from": {task: seeds[task] for task in sorted(handing.seeded)}, **timing}
