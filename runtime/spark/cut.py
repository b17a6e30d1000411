"""A cut across running queries: bound their inputs at offsets, wait until they processed exactly up to them.

Work changes hands at a cut. :mod:`runtime.spark.defrag` (queries merged into
one) and :mod:`runtime.spark.handover` (tasks moved or copied to other sites)
both take it the same way:

1. the end offsets of every topic the queries read from outside the group
   become a bound next to each query's checkpoint; the ``sana_kafka`` source
   reads no further while the bound exists;
2. every query processes exactly up to the bound, and the topics written
   inside the group (taps) to their ends, with nothing in flight, on two
   passes in a row that saw the same targets. A batch planned before its
   bound was written may have read past it: the cut moves up to it.

What was written before the cut has then been processed by every query of
the group and nothing after it, so a query started from the cut continues
the group's work exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from runtime.broker.offsets import topic_end_offsets
from runtime.exceptions import CutNotReached
from runtime.spark.fragment import FragmentQuery

Offsets = dict[str, dict[str, int]]


def topic_ends(consumer, topics: set[str]) -> Offsets:
    """End offsets of ``topics``; raises :class:`CutNotReached` if the broker did not answer for one."""
    ends = topic_end_offsets(consumer, sorted(topics)) if topics else {}
    missing = topics - set(ends)
    if missing:
        raise CutNotReached(f"no end offsets for {sorted(missing)}")
    return {topic: {str(partition): int(offset) for partition, offset in parts.items()} for topic, parts in ends.items()}


def set_bounds(queries: Iterable[FragmentQuery], cut: Offsets) -> None:
    for query in queries:
        query.set_bound({topic: cut[topic] for topic in query.inputs if topic in cut})


def lift_bounds(queries: Iterable[FragmentQuery]) -> None:
    for query in queries:
        query.set_bound(None)


def drain(queries: list[FragmentQuery], cut: Offsets, inside: set[str], consumer, timeout_s: float,
          pause_s: float) -> None:
    """Wait until every query processed its bounded inputs up to ``cut`` and the taps between them to their ends.

    ``cut`` is raised in place where a batch had read past it. Raises
    :class:`CutNotReached` when a query dies or the cut is not reached within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    previous = None
    while time.monotonic() < deadline:
        for query in queries:
            if not query.alive():
                raise CutNotReached(f"query {query.id} died while draining: {query.error()}")
        ends = topic_ends(consumer, inside)  # before the progress: a tap that grows after this is seen next pass
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
            set_bounds(queries, cut)
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
    raise CutNotReached(f"queries {[query.id for query in queries]} did not reach the cut within {timeout_s:.0f} s")
