"""Any expression text, however deep, long or broken, gets a coded refusal naming its task, never a crash.

sqlglot's parser is recursive: 50 nested parentheses used to end in an unhandled RecursionError (an HTTP 500).
The expressions below are built from deep shapes (parentheses, NOT, unary minus, long + and AND chains, nested
CASE, nested calls, [i] and ::type chains, nested groups in a regular expression) around one another, plus
random text, and go through ``parse_dataflow`` as a filter's ``expr`` or a select's column: only
:class:`~manager.exceptions.DataflowInvalid` may come out.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manager.exceptions import DataflowInvalid, OperatorConfigRejected
from manager.validate import parse_dataflow
from tests.fixtures.dataflows import urban_etl

LONGEST = 12_000  # a little over what a config field takes, so the length bound is exercised too

# Each shape wraps an expression ``e`` ``n`` times.
SHAPES: list[Callable[[int, str], str]] = [
    lambda n, e: "(" * n + e + ")" * n,
    lambda n, e: "NOT " * n + e,
    lambda n, e: "- " * n + e,
    lambda n, e: "-" * n + e,
    lambda n, e: "~" * n + e,
    lambda n, e: " + ".join([e] * n),
    lambda n, e: " AND ".join([e] * n),
    lambda n, e: " || ".join([e] * n),
    lambda n, e: "CASE WHEN temp > 1 THEN " * n + e + " END" * n,
    lambda n, e: "abs(" * n + e + ")" * n,
    lambda n, e: "concat(" * n + e + ", 'x')" * n,
    lambda n, e: "coalesce(" * n + e + ", NULL)" * n,
    lambda n, e: e + "[0]" * n,
    lambda n, e: e + "::int" * n,
    lambda n, e: e + " IS NULL" * n,
    lambda n, e: "array(" * n + e + ")" * n,
    lambda n, e: "struct(" * n + e + ")" * n,
    lambda n, e: "repeat(" * n + e + ", 100)" * n,
    lambda n, e: "x IN (" * n + e + ")" * n,
    lambda n, e: f"sensor RLIKE '{'(' * n}a{')' * n}'",
    lambda n, e: f"sensor RLIKE '{'[' * n}a{']' * n}'",
    lambda n, e: f"sensor RLIKE '{'(?:a*' * n}{')*' * n}'",
    lambda n, e: f"sensor LIKE '{'%a' * n}%'",
    lambda n, e: f"'{'(' * n}' = {e}",
    lambda n, e: f"/* {'(' * n} */ {e}",
]
LEAVES = ["temp", "sensor", "ts", "1", "2.5e3", "'now'", "'12:30'", "temp > 1", "NULL", "TRUE", "x'00'", "`ts`", "*",
          "CAST(sensor AS TIMESTAMP)", "TIMESTAMP 'now'", "sensor RLIKE '(a+)+'", "rand()", "", "(", ")", "'", "\\"]
TOKENS = ["(", ")", "[", "]", "{", "}", "NOT ", "-", "+", "*", "/", "%", "~", "!", " ", "\n", "temp", "sensor", "ts", "'",
          '"', "`", ",", ".", "::", " AND ", " OR ", "CASE ", "WHEN ", "THEN ", "ELSE ", "END", "abs(", "concat(",
          "repeat(", "100", "'now'", "RLIKE ", "LIKE ", "'%a%b%'", "'(a|ab)*'", "/*", "*/", "--", "\\", "INTERVAL ",
          "1 DAY", "SELECT ", "FROM ", ";", "=", "<", ">", "||", "?", "$", "\x00", "é", "\u2028"]


def _wrap(shape: Callable[[int, str], str], times: int, inner: str) -> str:
    times = max(1, min(times, LONGEST // max(len(inner), 1)))  # keep the text near the length bound, not far past it
    return shape(times, inner)[:LONGEST]


deep = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.builds(_wrap, st.sampled_from(SHAPES), st.integers(1, 2_000), inner),
    max_leaves=4,
)
junk = st.text(max_size=300) | st.lists(st.sampled_from(TOKENS), max_size=120).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=deep | junk, in_select=st.booleans())
def test_every_expression_is_accepted_or_refused_with_a_coded_error(text, in_select):
    document = urban_etl()
    if in_select:
        document["tasks"][2]["config"] = {"columns": {"sensor": "sensor", "f": text, "ts": "ts"}}
    else:
        document["tasks"][1]["config"] = {"expr": text}
    try:
        parse_dataflow(document)
    except OperatorConfigRejected as rejected:
        assert rejected.culprit["task"] == ("proj" if in_select else "hot")
        assert rejected.code == "OPERATOR_CONFIG_INVALID"
    except DataflowInvalid:
        pass
