"""Defragmentation: run a group of queries linked by taps at one site as one query, exactly.

Merges never restart a running query, so over many merges and unmerges
queries accumulate that one query could run (:func:`runtime.spark.layout.mergeable`
finds them). :func:`merge_queries` hands a group over to one new query:

1. **cut**: the end offsets of every topic the group reads from outside
   become a bound next to each query's checkpoint; the ``sana_kafka`` source
   reads no further while the bound exists. A batch planned before its bound
   was written may have read past the cut: the cut moves up to it.
2. **drain**: every query processes exactly up to the cut and the taps
   between them to their ends, with nothing in flight, on two passes in a
   row that saw the same targets.
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

import json
import logging
import shutil
import time
from typing import TYPE_CHECKING, Any

from runtime.broker.offsets import probe_consumer, topic_end_offsets
from runtime.exceptions import DefragmentationFailed
from runtime.spark.fragment import REPLAYS_KEY, FragmentQuery
from runtime.spark.layout import internal_topics, layouts

if TYPE_CHECKING:
    from runtime.spark.runtime import SparkRuntime

log = logging.getLogger("sana.runtime.defrag")

Offsets = dict[str, dict[str, int]]


def merge_queries(runtime: "SparkRuntime", group: list[str], timeout_s: float) -> dict[str, Any]:
    """Run the queries of ``group`` as one new query; returns what was merged into what."""
    old = [runtime.queries[query_id] for query_id in group]
    fragments = sorted(fragment for fragment, query_id in runtime.host.items() if query_id in group)
    new_id = runtime._new_query_id(fragments[0])
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
        cut = _ends(consumer, bounded)
        _set_bounds(old, cut)
        _drain(old, cut, inside, consumer, timeout_s, max(0.2, min(1.0, runtime.trigger_s / 2)))
        for query in old:
            query.stop()
        stopped = True
        states: dict[str, Any] = {}
        saved = []
        for query in old:
            version, own = query.saved_states()
            saved.append((query, version))
            for key, value in own.items():
                states[key] = {**states.get(key, {}), **value} if key == REPLAYS_KEY else value
        record = {"id": new_id, "site": plan.tasks[0].site, "fragments": sorted({task.fragment for task in plan.tasks}),
                  "inputs": {topic: cut[topic] for topic in sorted(plan.input_topics)}, "created_at": time.time(),
                  "batch_base": 1, "merged_from": group}
        new_query = runtime._make_query(record)
        new_query.seed(states, saved)
        runtime._switch_records(add=record, remove=group)
        switched = True
        new_query.set_plan(runtime._query_plan(plan))
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
        runtime.queries.pop(query_id, None)
        runtime._records.pop(query_id, None)
        runtime._degraded.pop(query_id, None)
        runtime._backoff.pop(query_id, None)
        query.discard()
        shutil.rmtree(runtime.checkpoint_root / query_id, ignore_errors=True)
    runtime.queries[new_id] = new_query
    runtime._records[new_id] = record
    runtime.host, runtime.plans = host, plans
    runtime._delete_unused_topics(internal_topics(plans.values()))
    log.info("defragmentation: %s now run as %s", group, new_id)
    return {"queries": group, "into": new_id, "fragments": record["fragments"]}


def _ends(consumer, topics: set[str]) -> Offsets:
    """End offsets of ``topics``; raises :class:`DefragmentationFailed` if the broker did not answer for one."""
    ends = topic_end_offsets(consumer, sorted(topics)) if topics else {}
    missing = topics - set(ends)
    if missing:
        raise DefragmentationFailed(f"no end offsets for {sorted(missing)}")
    return {topic: {str(partition): int(offset) for partition, offset in parts.items()} for topic, parts in ends.items()}


def _set_bounds(queries: list[FragmentQuery], cut: Offsets) -> None:
    for query in queries:
        query.set_bound({topic: cut[topic] for topic in query.inputs if topic in cut})


def _drain(queries: list[FragmentQuery], cut: Offsets, inside: set[str], consumer, timeout_s: float,
           pause_s: float) -> None:
    """Wait until every query processed its bounded inputs up to ``cut`` and the taps between them to their ends."""
    deadline = time.monotonic() + timeout_s
    previous = None
    while time.monotonic() < deadline:
        for query in queries:
            if not query.alive():
                raise DefragmentationFailed(f"query {query.id} died while draining: {query.error()}")
        ends = _ends(consumer, inside)  # before the progress: a tap that grows after this is seen next pass
        processed = {query.id: query.processed() for query in queries}
        idle = all(query.idle() for query in queries)
        raised = False
        for done in processed.values():
            for topic, parts in done.items():
                for partition, offset in parts.items():
                    if topic in cut and offset > cut[topic].get(partition, offset):
                        cut[topic][partition] = offset  # read before its bound was written: the cut moves there
                        raised = True
        if raised:
            _set_bounds(queries, cut)
        target = {**cut, **ends}
        reached = not raised and idle and all(
            processed[query.id].get(topic, {}).get(partition) == offset
            for query in queries for topic in query.inputs for partition, offset in target[topic].items()
        )
        snapshot = json.dumps(target, sort_keys=True) if reached else None
        if snapshot is not None and snapshot == previous:
            return
        previous = snapshot
        time.sleep(pause_s)
    raise DefragmentationFailed(f"queries {[query.id for query in queries]} did not reach the cut within {timeout_s:.0f} s")


def _undo(runtime: "SparkRuntime", group: list[str], old: list[FragmentQuery], new_query: FragmentQuery | None,
          record: dict[str, Any], *, stopped: bool, switched: bool) -> None:
    """Put the group back as it was; a step that fails is logged and the next one still runs."""
    steps = []
    if switched:
        steps.append(("restore the records", lambda: runtime._switch_records(
            add=None, remove=[record["id"]], restore=[[runtime._records[query_id] for query_id in group]])))
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
