"""Predicate implication (containment sharing) checked against an evaluator of Spark's semantics, row by row.

Predicates are drawn over four columns (int, double, string, boolean) from comparisons with literals and
between columns, IN, BETWEEN, IS [NOT] NULL, <=>, AND/OR/NOT and a few calls the solver treats as opaque
(abs, upper, LIKE). Every pair the solver says implies is checked on a grid of rows that holds NULL, NaN, the
infinities, every literal the grammar uses and the values between and around them: for these predicates
a row that separates two of them exists on the grid if it exists at all. The evaluator below is written
from Spark's rules (three-valued logic, NaN equal to itself and above every number), independently of the
solver's encoding; a real-Spark check of the same property is in tests/runtime/test_containment.py.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from runtime.operators.implication import conjuncts, implies, residual
from runtime.operators.sql import parse_expression

SCHEMA = {"i": "int", "d": "double", "s": "string", "b": "boolean"}
INTS = ["0", "1", "3", "5", "-2"]
DOUBLES = ["0.5", "1", "2.5", "-1.5", "1e1"]
STRINGS = ["'a'", "'ab'", "'b'"]
ROWS = list(itertools.product(
    [None, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6],
    [None, math.nan, math.inf, -math.inf, -2.0, -1.5, -1.0, 0.0, 0.5, 0.75, 1.0, 2.0, 2.5, 3.0, 10.0, 11.0],
    [None, "", "a", "ab", "abc", "b", "c", "A"],
    [None, True, False],
))
DICT_ROWS = [dict(zip("idsb", row)) for row in ROWS]


def atoms() -> st.SearchStrategy[str]:
    compare = st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "<=>"])
    return st.one_of(
        st.builds(lambda op, v: f"i {op} {v}", compare, st.sampled_from(INTS)),
        st.builds(lambda op, v: f"d {op} {v}", compare, st.sampled_from(DOUBLES + INTS)),
        st.builds(lambda op, v: f"s {op} {v}", compare, st.sampled_from(STRINGS)),
        st.builds(lambda op: f"i {op} d", compare),
        st.builds(lambda v: f"b = {v}", st.sampled_from(["true", "false"])),
        st.just("b"),
        st.builds(lambda c: f"{c} IS NULL", st.sampled_from(["i", "d", "s", "b"])),
        st.builds(lambda c: f"{c} IS NOT NULL", st.sampled_from(["i", "d", "s", "b"])),
        st.builds(lambda vs: f"i IN ({', '.join(vs)})", st.lists(st.sampled_from(INTS + ["NULL"]), min_size=1, max_size=3)),
        st.builds(lambda vs: f"s IN ({', '.join(vs)})", st.lists(st.sampled_from(STRINGS), min_size=1, max_size=3)),
        st.builds(lambda lo, hi: f"d BETWEEN {lo} AND {hi}", st.sampled_from(DOUBLES), st.sampled_from(DOUBLES)),
        st.builds(lambda lo, hi: f"i BETWEEN {lo} AND {hi}", st.sampled_from(INTS), st.sampled_from(INTS)),
        st.builds(lambda op, v: f"abs(i) {op} {v}", compare, st.sampled_from(INTS)),
        st.builds(lambda v: f"upper(s) = {v}", st.sampled_from(["'A'", "'AB'"])),
        st.just("s LIKE 'a%'"),
    )


def predicates() -> st.SearchStrategy[str]:
    return st.recursive(atoms(), lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
        st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
        st.builds(lambda a: f"NOT ({a})", inner),
    ), max_leaves=4)


def compiled(node: exp.Expression):
    """Spark's value of ``node`` as a function of a row: True, False or None (NULL)."""
    if isinstance(node, exp.Paren):
        return compiled(node.this)
    if isinstance(node, (exp.And, exp.Or)):
        left, right = compiled(node.this), compiled(node.expression)
        strong = isinstance(node, exp.Or)  # the value that decides alone: TRUE for OR, FALSE for AND

        def junction(row):
            a, b = left(row), right(row)
            if a is strong or b is strong:
                return strong
            return None if a is None or b is None else not strong
        return junction
    if isinstance(node, exp.Not):
        inner = compiled(node.this)
        return lambda row: None if (value := inner(row)) is None else not value
    if isinstance(node, exp.Is):
        inner = compiled(node.this)
        return lambda row: inner(row) is None
    if isinstance(node, exp.In):
        this, items = compiled(node.this), [compiled(item) for item in node.expressions]

        def member(row):
            found = [compare("=", this(row), item(row)) for item in items]
            return True if True in found else None if None in found else False
        return member
    if isinstance(node, exp.Between):
        return compiled(exp.and_(exp.GTE(this=node.this, expression=node.args["low"]),
                                 exp.LTE(this=node.this, expression=node.args["high"])))
    operators = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.NullSafeEQ: "<=>"}
    if type(node) in operators:
        op, left, right = operators[type(node)], compiled(node.this), compiled(node.expression)
        return lambda row: compare(op, left(row), right(row))
    if isinstance(node, exp.Column):
        return lambda row: row[node.name]
    if isinstance(node, (exp.Boolean, exp.Null, exp.Literal, exp.Neg)):
        value = constant(node)
        return lambda row: value
    calls = {exp.Abs: abs, exp.Upper: str.upper, exp.Like: lambda value: value.startswith("a")}
    if type(node) in calls:
        call, inner = calls[type(node)], compiled(node.this)
        return lambda row: None if (value := inner(row)) is None else call(value)
    raise AssertionError(f"the evaluator does not know {node.sql('spark')!r}")


def constant(node: exp.Expression):
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Neg):
        return -constant(node.this)
    return node.this if node.is_string else float(node.this) if any(c in node.this for c in ".e") else int(node.this)


def compare(op: str, a, b):
    if op == "<=>":
        return (a is None and b is None) or (a is not None and b is not None and compare("=", a, b))
    if a is None or b is None:
        return None
    if isinstance(a, float) or isinstance(b, float):  # Spark's double order: NaN equals NaN, above every number
        a, b = float(a), float(b)
        key = lambda x: (1, 0.0) if math.isnan(x) else (0, x)  # noqa: E731
        a, b = key(a), key(b)
    return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


@lru_cache(maxsize=4096)
def truth_table(text: str) -> tuple:
    function = compiled(parse_expression(text))
    return tuple(function(row) for row in DICT_ROWS)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(new=predicates(), running=predicates(), shape=st.sampled_from(["drawn", "weakened", "narrowed"]))
def test_a_proved_implication_holds_on_every_row(new, running, shape):
    if shape == "weakened":  # running holds whenever new does, the solver must see it through the rewriting
        running = f"NOT (NOT ({new}) AND NOT ({running}))"
    elif shape == "narrowed":
        new = f"({new}) AND NOT (NOT ({running}))"
    if not implies(new, running, SCHEMA):
        assert shape == "drawn", f"{new!r} implies {running!r} by construction"
        return
    event("proved")
    for row, (mine, theirs) in zip(ROWS, zip(truth_table(new), truth_table(running))):
        assert not (mine is True and theirs is not True), f"{new!r} is TRUE and {running!r} is {theirs} on {row}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wider=predicates(), extra=predicates())
def test_the_residual_over_the_wider_output_keeps_exactly_the_narrower_rows(wider, extra):
    new = f"({extra}) AND ({wider})"  # implies wider by construction
    assert implies(new, wider, SCHEMA)
    rest = residual(new, wider, SCHEMA)
    kept = truth_table(new)
    wide = truth_table(wider)
    again = wide if rest is None else tuple(w is True and r is True for w, r in zip(wide, truth_table(rest)))
    assert [value is True for value in kept] == [value is True for value in again], (new, wider, rest)


def test_interval_reasoning_proves_what_it_should():
    proved = [
        ("d > 30", "d > 20"), ("d >= 2.5", "d > 1"), ("i BETWEEN 2 AND 4", "i > 1 AND i < 5"),
        ("i IN (1, 3)", "i <= 3"), ("s = 'a'", "s IN ('a', 'b')"), ("d > 30 AND s = 'x'", "d > 20"),
        ("i = 3", "i IS NOT NULL"), ("NOT (i <= 3)", "i > 3"), ("d > 2", "d > 2 OR d IS NULL"),
        ("abs(i) > 3", "abs(i) > 2"), ("i > 3 AND upper(s) = 'A'", "upper(s) = 'A'"), ("d = 1e1", "d > 9.5"),
    ]
    for new, running in proved:
        assert implies(new, running, SCHEMA), (new, running)


def test_what_does_not_follow_is_refused():
    refused = [
        ("d > 20", "d > 30"), ("d < 30", "d < 20 OR d > 25"), ("NOT (d > 3)", "d < 3"),
        ("i > 3", "abs(i) > 3"),  # the solver knows nothing of abs: unproved, so refused
        ("upper(s) = 'A'", "s = 'a'"), ("i > 1", "d > 1"),
    ]
    for new, running in refused:
        assert not implies(new, running, SCHEMA), (new, running)
    # NaN <> 1 is TRUE and NaN > 1 is TRUE in Spark (NaN is above every number): this one holds, and is proved
    assert implies("d <> 1", "d < 1 OR d > 1 OR d = 2", SCHEMA)


def test_conjuncts_and_residual():
    assert conjuncts("(a > 1 AND b < 2) AND (c = 3 OR d = 4)") == ["a > 1", "b < 2", "c = 3 OR d = 4"]
    assert residual("d > 30 AND s = 'x' AND i = 1", "d > 30 AND i >= 1", SCHEMA) == "s = 'x' AND i = 1"
    assert residual("d > 30", "30 < d", SCHEMA) is None


def test_lossy_comparisons_are_left_opaque():
    schema = {"n": "bigint", "x": "double", "f": "float", "t": "timestamp"}
    assert not implies("n > x", "n >= x", {**schema})  # bigint becomes a rounded double: not modelled
    assert implies("n > x", "n > x", schema)  # the same atom, opaque, implies itself
    assert implies("f > 3 AND t > TIMESTAMP '2024-01-01 00:00:00'", "f > 3", schema)
    assert not implies("f > 3", "f > 2", schema)  # float: Spark widens it to double, not modelled
