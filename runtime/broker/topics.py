"""Topic names derived from content, and creating/deleting topics.

Internal topics (a stream between two Spark queries, a tap on a running
task) are named from the producing task's signature and the runtime's
namespace (the state prefix), so two managers on one cluster never collide
and a name never depends on submission order. With a WAN configuration a
signature can run as several instances (a share refused for bandwidth, a
private plan); each has a topic of its own (:func:`tap_topic`).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterable

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from runtime.exceptions import TopicProblem

log = logging.getLogger("sana.runtime.topics")

MAX_TOPIC = 249
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
#: What Kafka takes as a topic name.
TOPIC_NAME = re.compile(rf"^[A-Za-z0-9._-]{{1,{MAX_TOPIC}}}$")


def stream_topic(namespace: str, signature: str) -> str:
    """The internal topic carrying the output of the task with ``signature``.

    >>> stream_topic("sana", "ab" * 32)
    'sana.stream.abababababababababababab'
    """
    name = f"{stream_topic_prefix(namespace)}{signature[:24]}"
    if len(name) > MAX_TOPIC:
        raise TopicProblem(f"topic name {name!r} is longer than {MAX_TOPIC} characters; use a shorter SANA_STATE_PREFIX")
    return name


def tap_topic(namespace: str, task_id: str, signature: str) -> str:
    """The internal topic carrying the output of running task ``task_id``.

    The manager gives the first instance of a signature the id ``<type>-<hex prefix of the signature>`` and any
    other instance another id (the site appended); the first writes :func:`stream_topic`, every other one a topic
    named from its id too, so two instances never write into one topic.

    >>> tap_topic("sana", "filter-" + "ab" * 8, "ab" * 32) == stream_topic("sana", "ab" * 32)
    True
    >>> tap_topic("sana", "filter-" + "ab" * 8 + "-west", "ab" * 32) == stream_topic("sana", "ab" * 32)
    False
    """
    _, _, rest = task_id.partition("-")
    if len(rest) >= 16 and signature.startswith(rest):
        return stream_topic(namespace, signature)
    return stream_topic(namespace, hashlib.sha256(f"{signature}|{task_id}".encode()).hexdigest())


def stream_topic_prefix(namespace: str) -> str:
    """What every internal topic's name of ``namespace`` starts with.

    >>> stream_topic_prefix("test:a1")
    'test-a1.stream.'
    """
    return f"{_UNSAFE.sub('-', namespace)}.stream."


#: How long a listing of the broker's topics is trusted: a change whose topics it names makes no round trip.
LISTING_FRESH_S = 30.0


class Topics:
    """Create and delete topics, and check partition counts, through one admin client.

    The last listing of the broker's topics, with what this object created and deleted since, answers for
    :data:`LISTING_FRESH_S`: under many changes a second, two full listings per change were a third of a
    change's time in the runtime. Only a topic deleted behind Sana's back (Sana deletes internal topics
    through this object alone) can be missed for that long.
    """

    def __init__(self, bootstrap: str, partitions: int = 1, fresh_s: float = LISTING_FRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.fresh_s = fresh_s
        self.clock = clock
        self.listings = 0
        self._admin: KafkaAdminClient | None = None
        self._known: set[str] = set()
        self._listed_at: float | None = None

    def _client(self) -> KafkaAdminClient:
        if self._admin is None:
            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        return self._admin

    def _reset(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:  # closing a broken client must not hide the first error
                pass
        self._admin = None
        self._listed_at = None

    def existing(self, fresh: bool = True) -> set[str]:
        """The broker's topics: listed now, or with ``fresh=False`` the last listing if it is recent enough."""
        if not fresh and self._listed_at is not None and self.clock() - self._listed_at < self.fresh_s:
            return set(self._known)
        try:
            listed = set(self._client().list_topics())
        except (KafkaError, OSError) as error:
            self._reset()
            raise TopicProblem(f"cannot list topics at {self.bootstrap}: {error}") from error
        self.listings += 1
        self._known, self._listed_at = listed, self.clock()
        return set(listed)

    def ensure(self, topics: Iterable[str], partitions: int | None = None) -> list[str]:
        """Create the topics that do not exist; returns the ones created. Waits until they are visible."""
        wanted = sorted(set(topics))
        if not wanted:
            return []
        have = self.existing(fresh=False)
        if not set(wanted) <= have:  # look again before creating: another client may have made them
            have = self.existing()
        missing = [topic for topic in wanted if topic not in have]
        if missing:
            count = partitions or self.partitions
            try:
                self._client().create_topics([NewTopic(topic, count, 1) for topic in missing])
            except TopicAlreadyExistsError:
                pass
            except (KafkaError, OSError) as error:
                self._reset()
                raise TopicProblem(f"cannot create topics {missing} at {self.bootstrap}: {error}") from error
            self._wait_visible(missing)
            log.info("created topics %s", missing)
        return missing

    def _wait_visible(self, topics: list[str], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            absent = set(topics) - self.existing()
            if not absent:
                return
            if time.monotonic() > deadline:
                raise TopicProblem(f"topics {sorted(absent)} were created but are not visible after {timeout_s:.0f} s")
            time.sleep(0.05)

    def delete(self, topics: Iterable[str]) -> None:
        """Delete topics; missing ones are ignored, failures only logged (a leftover topic is harmless)."""
        doomed = sorted(set(topics))
        if not doomed:
            return
        try:
            present = [topic for topic in doomed if topic in self.existing(fresh=False)]
            if present:
                self._known -= set(present)
                self._client().delete_topics(present)
                log.info("deleted topics %s", present)
        except (UnknownTopicOrPartitionError, TopicProblem):
            self._listed_at = None  # one was gone already: list before trusting the listing again
        except (KafkaError, OSError) as error:
            self._reset()
            log.warning("could not delete topics %s: %s", doomed, error)

    def close(self) -> None:
        self._reset()
