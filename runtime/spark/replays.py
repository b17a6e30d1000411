"""Dropping replayed upstream batches when a query reads another query's output.

A query restarted after a crash re-runs its batch in flight with the same
offsets and writes the same records again (same ``sana.writer``, ``sana.batch``
and ``sana.seq``). A downstream query reading that internal topic would
process them twice; this filter recognizes them. Per (topic, partition,
writer) it remembers the newest batch id seen and the sequence numbers seen
in it: an older batch, or a sequence number seen before in the newest one, is
a replay. A partial first run followed by a complete replay keeps exactly the
records the first run did not deliver. The memory is kept with the reading
query's keyed state, so it survives the reader's own restarts.
"""

from __future__ import annotations

from collections.abc import Iterable

Key = tuple[str, str, str]  # (topic, partition, writer)


def replays(seen: dict[Key, tuple[int, set[int]]], records: Iterable[tuple[str, str]]) -> list[str]:
    """Update ``seen`` with ``(topic, origin)`` pairs in arrival order; return the origins that are replays.

    ``origin`` is ``writer|batch|seq|partition`` as the sana_kafka source reports it.

    >>> seen = {}
    >>> replays(seen, [("t", "q1|4|0|0"), ("t", "q1|4|1|0")])
    []
    >>> replays(seen, [("t", "q1|4|0|0"), ("t", "q1|4|1|0"), ("t", "q1|4|2|0"), ("t", "q1|5|0|0")])
    ['q1|4|0|0', 'q1|4|1|0']
    >>> replays(seen, [("t", "q1|4|2|0")])
    ['q1|4|2|0']
    """
    dropped: list[str] = []
    for topic, origin in records:
        writer, batch_text, seq_text, partition = origin.rsplit("|", 3)
        batch, seq = int(batch_text), int(seq_text)
        key = (topic, partition, writer)
        newest, seqs = seen.get(key, (-1, set()))
        if batch < newest or (batch == newest and seq in seqs):
            dropped.append(origin)
            continue
        if batch > newest:
            newest, seqs = batch, set()
        seqs.add(seq)
        seen[key] = (newest, seqs)
    return dropped
