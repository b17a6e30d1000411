"""A filter behind a chain of selects that each read their input many times runs, with the right output.

Spark pushed such a filter down through every select, substituting each one's
expression for the column it reads: the condition grew as (reads per select)
to the power of the chain's length, and six OPMW-like pi stages ran the
driver out of heap, which stopped every query of the process
(runtime/spark/session.py, ``NO_PUSHDOWN_THROUGH_SELECTS``).
"""

from __future__ import annotations

import math

import pytest

from tests.fixtures.dataflows import source, stream, task
from tests.fixtures.kafka_io import produce, read_all, values, wait_for
from tests.runtime.test_sharing import raise_dead_queries

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

STAGES = 6
TERMS = 4  # value is read 1 + 3 * TERMS times per stage
KEEP_BELOW = 0.5
SCHEMA = {"msgid": "string", "value": "double"}


def series_sql(terms: int) -> str:
    """``value / 2`` plus ``terms`` terms of Nilakantha's series offset by ``value % 1`` (as benchmarks.opmw)."""
    offset = "value % 1"
    return "0.5 * value + 3" + "".join(
        f" {'+' if k % 2 else '-'} 4 / (({2 * k} + {offset}) * ({2 * k + 1} + {offset}) * ({2 * k + 2} + {offset}))"
        for k in range(1, terms + 1))


def series(value: float, terms: int) -> float:
    result = 0.5 * value + 3
    offset = math.fmod(value, 1)  # Spark's % on doubles keeps the dividend's sign, like fmod
    for k in range(1, terms + 1):
        term = 4 / ((2 * k + offset) * (2 * k + 1 + offset) * (2 * k + 2 + offset))
        result = result + term if k % 2 else result - term
    return result


def test_a_filter_behind_six_pi_selects_is_not_pushed_through_them(manager_factory, kafka_bootstrap, topic_factory):
    topic = topic_factory("deep")
    sink = f"{topic}-out"
    stages = [f"p{number}" for number in range(1, STAGES + 1)]
    document = {
        "name": "deep",
        "tasks": [source("src", topic, dict(SCHEMA)),
                  *(task(stage, "select", columns={"msgid": "msgid", "value": series_sql(TERMS)}) for stage in stages),
                  task("keep", "filter", expr=f"value % 1 < {KEEP_BELOW}"),
                  task("out", "sink", topic=sink)],
        "streams": [stream(a, b) for a, b in zip(["src", *stages, "keep"], [*stages, "keep", "out"])],
    }
    records = [{"msgid": f"m{i}", "value": 10.0 + i * 13.7} for i in range(60)]
    expected = {}
    for record in records:
        value = record["value"]
        for _ in stages:
            value = series(value, TERMS)
        assert abs(math.fmod(value, 1) - KEEP_BELOW) > 1e-6, "pick records away from the filter's edge"
        if math.fmod(value, 1) < KEEP_BELOW:
            expected[record["msgid"]] = value
    assert 10 < len(expected) < len(records), "the filter keeps some records and drops others"

    manager = manager_factory(trigger_s=0.5)
    manager.submit(document)
    produce(kafka_bootstrap, topic, records)
    received = wait_for(lambda: (got := read_all(kafka_bootstrap, sink)) and len(got) >= len(expected) and got,
                        120, f"{len(expected)} records on {sink}", check=lambda: raise_dead_queries(manager))
    got = {record["msgid"]: record["value"] for record in values(received)}
    assert got.keys() == expected.keys()
    assert all(got[msgid] == pytest.approx(value, rel=1e-12) for msgid, value in expected.items())
