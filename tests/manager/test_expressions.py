"""Expressions are data, not code: the allow-list of runtime/operators/sql.py (deny by default)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.opmw import opmw_workload
from benchmarks.riot import riot_workload
from manager.validate import parse_dataflow
from runtime.operators.sql import ALLOWED, AMPLIFYING, NONDETERMINISTIC, SqlProblem, parse_expression


@pytest.mark.parametrize("text", [
    "temp > 30 AND hour(ts) < 5", "CASE WHEN a IS NULL THEN 0 ELSE abs(a) END", "coalesce(a, b, 0) BETWEEN 1 AND 2",
    "lower(name) LIKE 'x%'", "date_trunc('minute', ts)", "get_json_object(body, '$.x')", "CAST(a AS DOUBLE) / 2",
    "repeat(name, 3)", "lpad(name, 12, '0')", "size(sequence(1, 10)) > 0", "name RLIKE '^a[0-9]+$'",
    "round(sqrt(pow(x, 2) + pow(y, 2)), 3)", "concat_ws('-', a, b)", "greatest(a, b) - least(a, b)",
])
def test_ordinary_expressions_are_allowed(text):
    parse_expression(text)


@pytest.mark.parametrize(("text", "culprit"), [
    ("rand() > 0.5", "rand() is nondeterministic"),
    ("randn() > 0", "randn() is nondeterministic"),
    ("uuid() IS NOT NULL", "uuid() is nondeterministic"),
    ("current_timestamp() > ts", "current_timestamp() is nondeterministic"),
    ("size(shuffle(array(1, 2))) = 2", "shuffle() is nondeterministic"),
    ("length(repeat('a', 2000000000)) > 0", "repeat() makes its output as big as its size argument; give a literal of at most 100"),
    ("length(repeat('a', n)) > 0", "repeat() makes its output"),
    ("lpad(name, 100000, 'x')", "lpad() makes its output"),
    ("rpad(name, n, 'x')", "rpad() makes its output"),
    ("length(space(1000000)) > 0", "space() makes its output"),
    ("size(sequence(1, 100000)) > 0", "sequence() takes literal bounds of at most 10,000 elements"),
    ("size(sequence(1, n)) > 0", "sequence() takes literal bounds"),
    ("reflect('java.lang.System', 'exit', 0) IS NULL", "function reflect() is not allowed"),
    ("java_method('java.lang.Math', 'random') > 0", "function java_method() is not allowed"),
    ("size(array_repeat(a, 1000000000)) > 0", "function array_repeat() is not allowed"),
    ("explode(array(1, 2)) > 0", "function explode() is not allowed"),
])
def test_unsafe_expressions_are_refused_naming_the_call(text, culprit):
    with pytest.raises(SqlProblem) as raised:
        parse_expression(text)
    assert culprit in str(raised.value)
    assert repr(text) in str(raised.value)


def test_the_lists_are_consistent():
    assert not ALLOWED & NONDETERMINISTIC
    assert {kind.__name__ for kind in ALLOWED} >= set(AMPLIFYING)


def test_every_workload_expression_passes_the_allow_list():
    """The benchmarks' dataflows use what a user writes; none of it may be refused."""
    for document in [*riot_workload(60, seed=0), *opmw_workload(seed=0)]:
        parse_dataflow(document)


def _documented_examples() -> list[str]:
    page = (Path(__file__).resolve().parents[2] / "docs" / "operators.md").read_text()
    section = page.split("## Allowed", 1)[1].split("\n## ", 1)[0].split("\n- ", 1)[1]  # the bullets
    return re.findall(r"`([^`]+)`", section)


def test_documented_examples_are_accepted():
    examples = _documented_examples()
    assert len(examples) > 100
    for text in examples:
        parse_expression(text, aggregate=text.split("(", 1)[0] in ("count", "sum", "avg", "min", "max"))
