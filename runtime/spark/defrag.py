"""Defragmentation: run a group of queries linked by taps at one site as one query, exactly.

Merges never restart a running query, so over many merges and unmerges
queries accumulate that one query could run (:func:`runtime.spark.layout.mergeable`
finds them). :func:`merge_queries` hands a group over to one new query:

1. **cut** and 2. **drain**: :mod:`runtime.spark.cut` bounds every topic the
   group reads from outside at its end and waits until every query processed
   exactly up to the bound and the taps between them to their ends.
3. **hand over**: the queries stop (nothing in flight, nothing left to
   read), and one query starts from the cut, seeded with their driver
   states (keyed operators, replay memory) and their keyed operators' worker
   state of the same versions. The record switch in Redis is one
   transaction.

Any failure before the new query has run a batch puts everything back (the
records, the old queries running from their checkpoints, no bound) and
raises :class:`DefragmentationFailed`; once the new query has run a batch it
owns the group's work (if it died, the supervisor restarts it).
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import Any

from runtime.broker.offsets import probe_consumer
from runtime.exceptions import DefragmentationFailed
from runtime.spark.cut import drain, set_bounds, topic_ends
from runtime.spark.fragment import FragmentQuery, StateCopy
from runtime.spark.statement import REPLAYS_KEY
from runtime.spark.host import QueryHost
from runtime.spark.layout import internal_topics, layouts

log = logging.getLogger("sana.runtime.defrag")


def merge_queries(runtime: QueryHost, group: list[str], timeout_s: float) -> dict[str, Any]:
    """Run the queries of ``group`` as one new query; returns what was merged into what."""
    old = [runtime.queries[query_id] for query_id in group]
    fragments = sorted(fragment for fragment, query_id in runtime.host.items() if query_id in group)
    new_id = runtime.new_query_id(fragments[0])
    host = {**runtime.host, **{fragment: new_id for fragment in fragments}}
    plans = layouts(runtime.tasks, host, runtime.prefix)
    plan = plans[new_id]
    inside = {topic for query_id in group for _, topic in runtime.plans[query_id].outputs} - plan.sink_topics
    bounded = set().union(*(set(query.inputs) for query in old)) - inside  # every outside input, used or not
    if not plan.input_topics <= bounded:
        raise DefragmentationFailed(f"queries {group} cannot be merged: the merged query would read "
                                    f"{sorted(plan.input_topics - bounded)}, which none of them reads from outside")
    consumer = probe_consumer(runtime.bootstrap)
    new_query: FragmentQuery | None = None
    stopped = switched = False
    record: dict[str, Any] = {}
    try:
        cut = topic_ends(consumer, bounded)
        set_bounds(old, cut)
        drain(old, cut, inside, consumer, timeout_s, max(0.2, min(1.0, runtime.trigger_s / 2)))
        for query in old:
            query.stop()
        stopped = True
        states: dict[str, Any] = {}
        copies = []
        for query in old:
            version, own = query.saved_states()
            for key, value in own.items():
                states[key] = {**states.get(key, {}), **value} if key == REPLAYS_KEY else value
                if key != REPLAYS_KEY and version is not None:
                    copies.append(StateCopy(query, key, version, key))
        record = {"id": new_id, "site": plan.tasks[0].site, "fragments": sorted({task.fragment for task in plan.tasks}),
                  "inputs": {topic: cut[topic] for topic in sorted(plan.input_topics)}, "created_at": time.time(),
                  "batch_base": 1, "merged_from": group}
        new_query = runtime.make_query(record)
        new_query.seed(states, copies)
        runtime.switch_records(add=record, remove=group)
        switched = True
        new_query.set_plan(runtime.live_plan(plan))
        new_query.start()
        new_query.wait_running()
    except BaseException as error:
        if new_query is not None and new_query.batches_done > 0:
            log.error("merged query %s failed after it ran (%s); the supervisor restarts it", new_id, error)
        else:
            _undo(runtime, group, old, new_query, record, stopped=stopped, switched=switched)
            if not isinstance(error, Exception):
                raise
            raise DefragmentationFailed(f"queries {group} were not merged ({error}); they run as before") from error
    finally:
        consumer.close()
    for query_id, query in zip(group, old):
        runtime.retire(query_id)
        query.discard()
        shutil.rmtree(runtime.checkpoint_root / query_id, ignore_errors=True)
    runtime.adopt(new_query, record)
    runtime.host, runtime.plans = host, plans
    runtime.delete_unused_topics(internal_topics(plans.values()))
    log.info("defragmentation: %s now run as %s", group, new_id)
    return {"queries": group, "into": new_id, "fragments": record["fragments"]}


def _undo(runtime: QueryHost, group: list[str], old: list[FragmentQuery], new_query: FragmentQuery | None,
          record: dict[str, Any], *, stopped: bool, switched: bool) -> None:
    """Put the group back as it was; a step that fails is logged and the next one still runs."""
    steps = []
    if switched:
        steps.append(("restore the records", lambda: runtime.switch_records(
            add=None, remove=[record["id"]], restore=[[runtime.record(query_id) for query_id in group]])))
    if new_query is not None:
        steps.append((f"discard {new_query.id}", new_query.discard))
    for query in old:
        steps.append((f"lift the bound of {query.id}", lambda q=query: q.set_bound(None)))
        if stopped:
            steps.append((f"restart {query.id}", query.start))
    for what, step in steps:
        try:
            step()
        except Exception as error:  # keep undoing; reconcile at the next start lifts bounds and restarts queries
            log.error("defragmentation rollback: could not %s: %s", what, error)
