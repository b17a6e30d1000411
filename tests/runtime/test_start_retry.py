"""A query whose start failed for want of resources is started again; any other failure is reported at once.

Pure logic: the Spark query is replaced by stand-ins with the attributes
``FragmentQuery.wait_running`` reads (the real failure, a Python worker that
did not connect back within Spark's 10 s, needs a loaded machine).
"""

from __future__ import annotations

import pytest

from runtime.exceptions import QueryFailed
from runtime.spark.fragment import START_RETRIES, FragmentQuery

TRANSIENT = "Python worker failed to connect back."


class Dead:
    isActive = False


class Running:
    isActive = True
    recentProgress: list = []
    status = {"message": "Waiting for next trigger"}


def query_failing(errors: list[str]) -> tuple[FragmentQuery, list[str]]:
    """A FragmentQuery whose starts fail with ``errors`` in turn, then run; returns it and its start log."""
    query = object.__new__(FragmentQuery)
    query.id, query.query = "q1", Dead()
    pending, starts = list(errors[1:]), []

    def start() -> None:
        starts.append("start")
        query.query = Dead() if pending else Running()
        query.error = (lambda error=pending.pop(0): error) if pending else (lambda: None)

    query.start, query.error = start, lambda: errors[0]
    return query, starts


def test_a_start_that_failed_for_want_of_resources_is_tried_again():
    query, starts = query_failing([TRANSIENT])
    query.wait_running(timeout_s=5)
    assert starts == ["start"] and query.query.isActive


def test_it_is_tried_again_at_most_twice():
    query, starts = query_failing([TRANSIENT] * (START_RETRIES + 1))
    with pytest.raises(QueryFailed, match="q1 stopped while starting: Python worker failed to connect back"):
        query.wait_running(timeout_s=5)
    assert len(starts) == START_RETRIES


def test_another_failure_is_reported_without_a_retry():
    query, starts = query_failing(["AnalysisException: column 'x' does not exist"])
    with pytest.raises(QueryFailed, match="column 'x' does not exist"):
        query.wait_running(timeout_s=5)
    assert starts == []


class Processing:
    isActive = True
    recentProgress: list = []
    status = {"message": "Processing new data"}


def running_its_first_batch() -> FragmentQuery:
    query = object.__new__(FragmentQuery)
    query.id, query.query = "q1", Processing()
    return query


def test_a_query_running_its_first_batch_has_not_run_yet():
    """What a defragmentation or hand-over waits for: the first batch ended (it undoes itself otherwise)."""
    with pytest.raises(QueryFailed, match="q1 did not start within 0 s"):
        running_its_first_batch().wait_running(timeout_s=0.3)
