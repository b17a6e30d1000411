"""Internal topics a batch of an older plan may still use, kept until that batch has ended.

Where the driver writes, a change that removes work does not wait for the
batches in flight (their rows for removed outputs are dropped by the
producer, :meth:`runtime.broker.producer.BatchProducer.retire`). Such a batch
may still read a tap the new plans no longer use, or be about to write one,
so the topics the old plans used are deleted only once every query the change
did not wait for has no batch of a plan older than the one it was given.
"""

from __future__ import annotations

from typing import Protocol


class Quiescing(Protocol):
    def in_flight_version(self) -> int | None: ...


class SettlingTopics:
    """Topics held for queries still running older plans; changed and read under the runtime's lock."""

    def __init__(self) -> None:
        self._held: list[tuple[set[str], list[tuple[Quiescing, int]]]] = []

    def hold(self, topics: set[str], waiting: list[tuple[Quiescing, int]]) -> None:
        """Keep ``topics`` until each ``(query, version)`` of ``waiting`` runs no batch of a plan older than version."""
        if topics and waiting:
            self._held.append((set(topics), list(waiting)))

    def topics(self) -> set[str]:
        """The topics still held (what has settled is let go first). Each query is asked once (a question to the
        JVM), however many holds wait for it."""
        running: dict[int, int | None] = {}

        def settled(query: Quiescing, version: int) -> bool:
            if id(query) not in running:
                running[id(query)] = query.in_flight_version()
            return running[id(query)] is None or running[id(query)] >= version

        self._held = [(topics, [(query, version) for query, version in waiting if not settled(query, version)])
                      for topics, waiting in self._held]
        self._held = [(topics, waiting) for topics, waiting in self._held if waiting]
        return set().union(*(topics for topics, _ in self._held))

    def __len__(self) -> int:
        return len(self._held)
