"""Topics an older plan's batch may still use are kept until that batch has ended (runtime.spark.settling)."""

from __future__ import annotations

import threading
import time

from runtime.spark.fragment import LONG_BATCH_S, FragmentQuery
from runtime.spark.settling import SettlingTopics


class StandIn:
    """What SettlingTopics reads of a query: the plan version its batch in flight runs, if any."""

    def __init__(self, in_flight: int | None) -> None:
        self.in_flight = in_flight
        self.asked = 0

    def in_flight_version(self) -> int | None:
        self.asked += 1
        return self.in_flight


def test_topics_are_held_until_every_query_waited_for_runs_the_new_plan():
    settling = SettlingTopics()
    slow, quick = StandIn(in_flight=3), StandIn(in_flight=None)
    settling.hold({"tap.a", "tap.b"}, [(slow, 5), (quick, 6)])
    assert settling.topics() == {"tap.a", "tap.b"}, "the slow query still runs plan 3"
    slow.in_flight = 5
    assert settling.topics() == set() and len(settling) == 0


def test_holds_settle_one_by_one_and_nothing_is_held_without_a_query_to_wait_for():
    settling = SettlingTopics()
    first, second = StandIn(in_flight=1), StandIn(in_flight=1)
    settling.hold({"t1"}, [(first, 2)])
    settling.hold({"t2"}, [(second, 4)])
    settling.hold({"t3"}, [])
    settling.hold(set(), [(second, 9)])
    assert settling.topics() == {"t1", "t2"} and len(settling) == 2
    first.in_flight = None
    assert settling.topics() == {"t2"}
    second.in_flight = 4
    assert settling.topics() == set()


def test_a_query_many_holds_wait_for_is_asked_once_a_look():
    settling = SettlingTopics()
    busy = StandIn(in_flight=1)
    for version in range(2, 12):
        settling.hold({f"t{version}"}, [(busy, version)])
    assert len(settling.topics()) == 10
    assert busy.asked == 1, "one question to the JVM per query, not one per hold"


class JvmQuery:
    """The Spark query handle, counting how often it is asked whether it runs."""

    def __init__(self, active: bool) -> None:
        self.active, self.asked = active, 0

    @property
    def isActive(self) -> bool:
        self.asked += 1
        return self.active


def fragment_in_flight(version: int | None, running_for_s: float, active: bool) -> FragmentQuery:
    """A FragmentQuery (only what ``in_flight_version`` reads) whose batch of plan ``version`` began ``running_for_s`` ago."""
    query = object.__new__(FragmentQuery)
    query._cond, query.query = threading.Condition(), JvmQuery(active)
    query._in_flight, query._in_flight_since = version, time.monotonic() - running_for_s
    return query


def test_a_batch_in_flight_is_answered_without_asking_the_jvm_until_it_runs_long():
    assert fragment_in_flight(None, 0, active=True).in_flight_version() is None
    short = fragment_in_flight(4, 0.5, active=False)
    assert short.in_flight_version() == 4 and short.query.asked == 0, "a short batch ends by itself"
    long_alive = fragment_in_flight(4, LONG_BATCH_S + 1, active=True)
    assert long_alive.in_flight_version() == 4 and long_alive.query.asked == 1
    long_dead = fragment_in_flight(4, LONG_BATCH_S + 1, active=False)
    assert long_dead.in_flight_version() is None, "a long batch of a dead query holds nothing"
