"""The record of every running query in Redis: where it starts reading, what it hosts, its id.

A query's record (``<prefix>:runtime:queries``, query id -> JSON) holds the
offsets its inputs start from (fixed when it is created, so records produced
later are read), its fragments and site, and ``batch_base`` when it continues
another query's state. A restarted service starts each recorded query from its
checkpoint, or from the record's offsets when it has none; a Redis restarted
empty is given the records back (:meth:`QueryRecords.write_back`). Query ids
come from a counter (``<prefix>:runtime:next-query``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from runtime.broker.offsets import probe_consumer, topic_end_offsets
from runtime.exceptions import RuntimeFailure
from runtime.spark.layout import QueryLayout


class QueryRecords:
    """The query records of one runtime prefix."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.key = f"{prefix}:runtime:queries"
        self.counter = f"{prefix}:runtime:next-query"

    def load(self) -> dict[str, dict[str, Any]]:
        return {key.decode(): json.loads(value) for key, value in self.redis.hgetall(self.key).items()}

    def save(self, *records: dict[str, Any]) -> None:
        """Write ``records`` (one round trip)."""
        if records:
            self.redis.hset(self.key, mapping={record["id"]: json.dumps(record, sort_keys=True) for record in records})

    def delete(self, query_id: str) -> None:
        self.redis.hdel(self.key, query_id)

    def switch(self, add: dict[str, Any] | None, remove: list[str],
               restore: list[list[dict[str, Any]]] | None = None) -> None:
        """One Redis transaction: a merged query's record in, the merged ones' out (or back)."""
        pipe = self.redis.pipeline(transaction=True)
        if add is not None:
            pipe.hset(self.key, add["id"], json.dumps(add, sort_keys=True))
        if remove:
            pipe.hdel(self.key, *remove)
        for records in restore or []:
            for record in records:
                pipe.hset(self.key, record["id"], json.dumps(record, sort_keys=True))
        pipe.execute()

    def write_back(self, records: dict[str, dict[str, Any]]) -> None:
        """Write ``records`` and the counter past their ids (Redis came back empty under a running service)."""
        numbers = [int(query_id[1:].split("-", 1)[0]) for query_id in records]
        pipe = self.redis.pipeline(transaction=True)
        for record in records.values():
            pipe.hset(self.key, record["id"], json.dumps(record, sort_keys=True))
        if numbers:
            pipe.set(self.counter, max(numbers))
        pipe.execute()

    def next_id(self, fragment: str) -> str:
        number = self.redis.incr(self.counter)
        return f"q{number}-{fragment.removeprefix('frag-')[:8]}"

    @staticmethod
    def new(query_id: str, plan: QueryLayout, fresh_topics: set[str], bootstrap: str) -> dict[str, Any]:
        """A query's record: the offsets it starts from are fixed now (records produced later are read); a topic
        created for it is read from its start."""
        topics = sorted(plan.input_topics)
        consumer = probe_consumer(bootstrap)
        try:
            ends = topic_end_offsets(consumer, topics)
        finally:
            consumer.close()
        inputs = {}
        for topic in topics:
            if topic not in ends:
                raise RuntimeFailure(f"topic {topic!r} has no partitions at {bootstrap}")
            inputs[topic] = {str(p): (0 if topic in fresh_topics else offset) for p, offset in ends[topic].items()}
        site = plan.tasks[0].site if plan.tasks else None
        return {"id": query_id, "site": site, "fragments": [], "inputs": inputs, "created_at": time.time()}
