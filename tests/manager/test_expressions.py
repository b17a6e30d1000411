"""Expressions are data, not code: the allow-list of runtime/operators/sql.py (deny by default)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.opmw import opmw_workload
from benchmarks.riot import riot_workload
from manager.validate import parse_dataflow
from runtime.operators.sql import ALLOWED, AMPLIFYING, NONDETERMINISTIC, SqlProblem, parse_expression, expression_type


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


# What is refused besides the allow-list (docs/operators.md, "What is refused"). Each class below has several
# members: the checks are on the class (a wall-clock value, a size, a regular expression, a depth), not a spelling.

SCHEMA = {"name": "string", "word": "string", "s": "string", "ts": "timestamp", "d": "date", "n": "bigint",
          "x": "double", "b": "boolean"}


def _refused(text: str, fragment: str, *, schema: dict[str, str] | None = SCHEMA) -> None:
    """``text`` is refused (with the input's types, or at parse time) by a message holding ``fragment``."""
    with pytest.raises(SqlProblem, match=re.escape(fragment)) as raised:
        if schema is None:
            parse_expression(text)
        else:
            expression_type(text, schema)
    assert str(raised.value).startswith(repr(text) if len(text) <= 200 else repr(text[:200]) + "...")  # names the expression


@pytest.mark.parametrize(("text", "fragment"), [
    ("ts < TIMESTAMP 'now'", "\"'now'\" is the string 'now', which Spark turns into the current date or time when it "
                             "becomes a timestamp, as it does in \"CAST('now' AS TIMESTAMP)\""),
    ("to_timestamp('now') > ts", "is the string 'now', which Spark turns into the current date or time"),
    ("DATE 'today' = d", "is the string 'today', which Spark turns into the current date or time when it becomes a date"),
    ("CAST('yesterday' AS DATE) = d", "is the string 'yesterday'"),
    ("ts > 'tomorrow'", "is the string 'tomorrow', which Spark turns into the current date or time when it becomes a "
                        "timestamp, as it does in \"ts > 'tomorrow'\""),
    ("date_add('today', 1) = d", "as it does in \"DATE_ADD('today', 1)\""),
    ("ts < ' Now '", "is the string ' Now '"),
    ("CAST('today UTC' AS DATE) = d", "is the string 'today UTC'"),
    ("d > 'Today+01:00'", "is the string 'Today+01:00'"),
    ("CAST(concat('no', 'w') AS TIMESTAMP) > ts", "\"CONCAT('no', 'w')\" is the string 'now'"),
    ("CAST(lower('NOW') AS TIMESTAMP) > ts", "\"LOWER('NOW')\" is the string 'now'"),
    ("CAST(trim(' now ') AS TIMESTAMP) > ts", "\"TRIM(' now ')\" is the string 'now'"),
    ("CAST(CAST('now' AS STRING) AS TIMESTAMP) > ts", "\"CAST('now' AS STRING)\" is the string 'now'"),
    ("year('now') = 2026", "as it does in \"YEAR('now')\""),
    ("hour('TODAY') = 1", "as it does in \"HOUR('TODAY')\""),
    ("'now' - INTERVAL 1 DAY < ts", "as it does in \"'now' - INTERVAL '1' DAY\""),
    ("ts BETWEEN 'yesterday' AND ts", "is the string 'yesterday'"),
    ("ts IN ('now')", "is the string 'now'"),
    ("coalesce(ts, 'now') > ts", "as it does in \"COALESCE(ts, 'now')\""),
    ("CASE WHEN b THEN ts ELSE 'tomorrow' END > ts", "is the string 'tomorrow'"),
    ("TIMESTAMP_NTZ 'now' IS NULL", "is the string 'now'"),
    ("TIMESTAMP '12:30:00' < ts", "is the string '12:30:00', which does not start with a date: Spark gives it today's date"),
    ("CAST('T12' AS TIMESTAMP) < ts", "is the string 'T12', which does not start with a date"),
    ("CAST(md5('x') AS TIMESTAMP) > ts", "cannot tell at submit what \"MD5('x')\" is, and it becomes a timestamp"),
])
def test_strings_spark_reads_from_the_clock_are_refused_whatever_the_spelling(text, fragment):
    _refused(text, fragment)


@pytest.mark.parametrize(("text", "fragment"), [
    ("CAST('now' AS TIMESTAMP) IS NULL", "is the string 'now'"),
    ("date_add('today', 1) IS NULL", "is the string 'today'"),
    ("CAST(concat('to', 'day') AS DATE) IS NULL", "is the string 'today'"),
])
def test_constant_clock_strings_are_refused_without_a_schema(text, fragment):
    _refused(text, fragment, schema=None)


@pytest.mark.parametrize(("text", "fragment"), [
    ("CAST(s AS TIMESTAMP) > ts", "'s' is text from the row that becomes a timestamp in 'CAST(s AS TIMESTAMP)': Spark "
                                  "gives a text holding only a time of day (such as '12:30:00') today's date"),
    ("to_timestamp(s) > ts", "in 'CAST(s AS TIMESTAMP)'"),
    ("try_cast(s AS TIMESTAMP) IS NULL", "in 'TRY_CAST(s AS TIMESTAMP)'"),
    ("s::timestamp > ts", "'s' is text from the row that becomes a timestamp"),
    ("hour(s) = 1", "in 'HOUR(s)'"),
    ("s > ts", "in 's > ts'"),
    ("date_format(s, 'yyyy') = '2020'", "in \"DATE_FORMAT(s, 'yyyy')\""),
    ("date_trunc('DAY', s) = ts", "in \"DATE_TRUNC('DAY', s)\""),
    ("ts > concat('2020', s)", "\"CONCAT('2020', s)\" is text from the row that becomes a timestamp"),
])
def test_text_from_the_row_never_becomes_a_timestamp(text, fragment):
    """Spark 4.3 gives a string holding only a time of day ('12:34:56', 'T12') today's date (runtime/operators/wall_clock.py)."""
    _refused(text, fragment)


@pytest.mark.parametrize(("text", "culprit"), [
    ("now() > ts", "now() is nondeterministic"),
    ("localtimestamp() > ts", "localtimestamp() is nondeterministic"),
    ("current_timezone() = s", "current_timezone() is nondeterministic"),
    ("current_user() = s", "current_user() is nondeterministic"),
    ("user() = s", "user() is nondeterministic"),
    ("to_unix_timestamp() > 0", "unix_timestamp() without an argument reads the clock: it is nondeterministic"),
])
def test_calls_reading_the_clock_or_the_session_are_refused(text, culprit):
    _refused(text, culprit)


@pytest.mark.parametrize(("accepted", "refused"), [
    ("word = 'today'", "d = 'today'"),
    ("s = 'now'", "ts = 'now'"),
    ("word IN ('today', 'now', 'T12')", "ts IN ('today', 'now', 'T12')"),
    ("CASE WHEN word = 'tomorrow' THEN 1 ELSE 0 END = 1", "CASE WHEN ts = 'tomorrow' THEN 1 ELSE 0 END = 1"),
    ("coalesce(s, 'now') = word", "coalesce(ts, 'now') = ts"),
    ("get_json_object(s, '$.a') = 'yesterday'", "to_date(get_json_object(s, '$.a')) = 'yesterday'"),
    ("CAST(x AS STRING) = 'today'", "CAST(x AS DATE) = 'today'"),
    ("ts > '2020-01-01'", "ts > '12:00'"),
    ("ts > TIMESTAMP '2026-01-01 00:00:00'", "ts > TIMESTAMP '00:00:00'"),
    ("d = DATE '2026-01-01'", "d = DATE 'yesterday'"),
    ("CAST('epoch' AS TIMESTAMP) < ts", "CAST('today' AS TIMESTAMP) < ts"),
    ("to_timestamp(s, 'yyyy-MM-dd HH:mm:ss') > ts", "to_timestamp(s) > ts"),
    ("unix_timestamp(s) > 0", "unix_seconds(CAST(s AS TIMESTAMP)) > 0"),
    ("CAST(s AS DATE) = d", "CAST(s AS TIMESTAMP) = ts"),
    ("year(s) = 2020", "hour(s) = 12"),
    ("CAST(n AS TIMESTAMP) > ts", "CAST(word AS TIMESTAMP) > ts"),
    ("date_trunc('minute', ts) = ts", "date_trunc('minute', s) = ts"),
    ("date_format(ts, 'yyyy-MM') = '2026-01'", "date_format(s, 'yyyy-MM') = '2026-01'"),
    ("make_timestamp(2026, 1, 1, 0, 0, 0) < ts", "make_timestamp(2026, 1, 1, 0, 0, 0) < 'now'"),
])
def test_text_compared_as_text_passes_where_text_becoming_a_date_or_timestamp_does_not(accepted, refused):
    expression_type(accepted, SCHEMA)
    with pytest.raises(SqlProblem, match="clock"):
        expression_type(refused, SCHEMA)


@pytest.mark.parametrize(("text", "fragment"), [
    ("length(repeat(repeat(repeat(repeat(repeat('a', 100), 100), 100), 100), 100)) > 0",
     "\"REPEAT(REPEAT(REPEAT(REPEAT(REPEAT('a', 100), 100), 100), 100), 100)\" can make a value of up to 9,537 MiB from "
     "an input record of at most 1 MiB; an expression may make at most 128 MiB"),
    ("repeat(repeat(name, 100), 2)", "'REPEAT(REPEAT(name, 100), 2)' can make a value of up to 200 MiB"),
    ("concat(repeat(name, 100), repeat(name, 100))", "can make a value of up to 200 MiB"),
    ("upper(repeat(name, 100))", "'UPPER(REPEAT(name, 100))' can make a value of up to 300 MiB"),
    ("to_json(struct(repeat(name, 100)))", "can make a value of up to 600 MiB"),
    ("regexp_replace(regexp_replace(name, 'x*', '$0$0$0$0$0$0$0$0$0$0'), 'x*', '$0$0$0$0$0$0$0$0$0$0')",
     "can make a value of up to 961 MiB"),
    ("replace(replace(replace(name, 'a', 'bbbbbbbbbb'), 'b', 'cccccccccc'), 'c', 'dddddddddd')",
     "can make a value of up to 1,331 MiB"),
    ("concat_ws(repeat('-', 100), split(repeat(name, 10), ''))", "can make a value of up to 1,"),
    ("replace(name, 'a', word)", "\"REPLACE(name, 'a', word)\" grows with the square of the input record"),
    ("regexp_replace(name, '[0-9]', word)", "grows with the square of the input record"),
    ("concat_ws(word, split(name, ','))", "grows with the square of the input record"),
])
def test_sizes_multiply_across_nested_calls_and_are_bounded_as_a_whole(text, fragment):
    _refused(text, fragment, schema=None)


@pytest.mark.parametrize(("accepted", "refused"), [
    ("repeat(name, 100)", "repeat(repeat(name, 100), 2)"),
    ("concat(repeat(name, 100), repeat(word, 100))", "concat(repeat(name, 100), repeat(name, 100))"),
    ("lpad(repeat(name, 3), 10000, 'x')", "repeat(repeat(lpad(name, 10000, 'x'), 100), 100)"),
    ("replace(name, 'a', 'bb')", "replace(name, 'a', word)"),
    ("regexp_replace(name, '([0-9])', '<$1>')", "regexp_replace(name, '([0-9])', word)"),
    ("concat_ws('-', split(name, ','))", "concat_ws(word, split(name, ','))"),
    ("to_json(struct(name, word))", "to_json(struct(repeat(name, 100), word))"),
    ("repeat(repeat(space(10000), 100), 100)", "repeat(repeat(repeat(space(10000), 100), 100), 2)"),
    ("hex(repeat(name, 50))", "hex(repeat(name, 100))"),
])
def test_the_size_bound_passes_what_stays_within_it(accepted, refused):
    parse_expression(accepted)
    with pytest.raises(SqlProblem, match="can make a value of up to|grows with the square"):
        parse_expression(refused)


@pytest.mark.parametrize(("text", "fragment"), [
    ("repeat('a', 100) RLIKE '(.*a){8}b'", "the regular expression '(.*a){8}b' of RLIKE is refused: nested quantifiers: "
                                           "the repeated group '(.*a){8}' holds '.*'"),
    ("name RLIKE '(a+)+$'", "nested quantifiers: the repeated group '(a+)+' holds 'a+'"),
    ("regexp_extract(name, '(\\\\d+\\\\.)+x', 0) = ''", "of regexp_extract() is refused: nested quantifiers"),
    ("regexp_like(name, '(?:[a-z]{1,20}\\\\s?)*!')", "nested quantifiers: the repeated group"),
    ("regexp_replace(name, '.*.*=', '') = ''", "of regexp_replace() is refused: '.*' and '.*' can both take the same "
                                               "characters"),
    ("size(split(name, '\\\\d+\\\\d*')) > 1", "of split() is refused:"),
    ("name RLIKE '.*a.*b'", "'.*' and '.*' can both take the same characters"),
    ("name RLIKE '^\\\\s*-?\\\\s*[0-9]+$'", "can both take the same characters"),
    ("name RLIKE '(a|ab)*c'", "the alternatives of 'a|ab' inside the repeated group '(a|ab)*' can match the same text"),
    ("name RLIKE '(a|a)*c'", "the alternatives of 'a|a' inside the repeated group '(a|a)*'"),
    ("name RLIKE '(?:x?){25}x{25}'", "the repeated group '(?:x?){25}' can match the empty string"),
    ("name RLIKE '(x{1,3}){9}y'", "inside the repeated group '(x{1,3}){9}', 'x{1,3}' can stop before a 'x' or take it"),
    ("name RLIKE '(a)\\\\1'", "it uses the backreference"),
    ("name RLIKE '(ab'", "it cannot be analysed: unclosed group at position 0"),
    ("name RLIKE '\\\\y+'", "it cannot be analysed: unknown escape \\y at position 0"),
    ("name RLIKE '" + "(" * 25 + "a" + ")" * 25 + "'", "it nests groups more than 20 deep"),
    ("name RLIKE word", "RLIKE takes its pattern from 'word'; give the pattern as a string literal"),
    ("regexp_replace(name, concat('a', word), '') = ''", "regexp_replace() takes its pattern from \"CONCAT('a', word)\""),
    ("name LIKE '%a%b%'", "LIKE pattern '%a%b%' has '%' wildcards that can take the same characters"),
    ("name LIKE 'a_%b%c'", "LIKE pattern 'a_%b%c' has '%' wildcards"),
    ("name ILIKE 'A%B%C'", "LIKE pattern 'a%b%c' has '%' wildcards"),
    ("name LIKE word", "LIKE takes its pattern from 'word'"),
])
def test_patterns_that_can_backtrack_catastrophically_are_refused(text, fragment):
    _refused(text, fragment, schema=None)


@pytest.mark.parametrize(("accepted", "refused"), [
    ("name RLIKE '\\\\d+-\\\\d+'", "name RLIKE '\\\\d+\\\\d+'"),
    ("name RLIKE '\\\\w+\\\\s+\\\\w+'", "name RLIKE '\\\\w+\\\\s*\\\\w+'"),
    ("name RLIKE '^(\\\\d{1,3}\\\\.){3}\\\\d{1,3}$'", "name RLIKE '^(\\\\d{1,30}\\\\.){3}\\\\d{1,3}$'"),
    ("name RLIKE '(\\\\d++\\\\.)+x'", "name RLIKE '(\\\\d+\\\\.)+x'"),
    ("name RLIKE '(?>\\\\d+\\\\.)+x'", "name RLIKE '(?:\\\\d+\\\\.)+x'"),
    ("name RLIKE '\\\\p{Alpha}+\\\\s+\\\\p{Alpha}+'", "name RLIKE '\\\\p{Alpha}+\\\\p{Lower}+'"),
    ("name RLIKE '\\\\Q.*.*\\\\E'", "name RLIKE '.*.*'"),
    ("name RLIKE '[a-z&&[^e]]+e[a-z]+'", "name RLIKE '[a-z&&[^x]]+e[a-z]+'"),
    ("name RLIKE '[^a]*a.*'", "name RLIKE '.*a.*'"),
    ("name RLIKE '[^,]*,[^,]*,'", "name RLIKE '.*,.*,'"),
    ("regexp_extract(name, '^(\\\\w+)=(.*)$', 2) = ''", "regexp_extract(name, '^(.*)=(.*)$', 2) = ''"),
    ("size(split(name, '\\\\s*,\\\\s*')) > 1", "size(split(name, '\\\\s*\\\\s*,')) > 1"),
    ("name RLIKE '(ab|cd)*x'", "name RLIKE '(ab|ad)*x'"),
    ("name LIKE '%abc%'", "name LIKE '%abc%d%'"),
    ("name LIKE 'ab%cd'", "name LIKE '%ab%cd'"),
    ("name LIKE 'a_c%'", "name LIKE 'a_c%%c'"),
    ("name ILIKE '%ABC%'", "name ILIKE '%A%B%'"),
    ("name LIKE 'a\\\\%b%'", "name LIKE 'a\\\\%b%c%'"),
])
def test_patterns_pass_where_each_part_stops_at_what_the_next_cannot_take(accepted, refused):
    parse_expression(accepted)
    with pytest.raises(SqlProblem, match="is refused|LIKE pattern"):
        parse_expression(refused)


@pytest.mark.parametrize(("text", "fragment"), [
    ("(" * 50 + "x" + ")" * 50 + " > 1", "nests 21 levels deep at character 21 (brackets, CASE ... END and stacked "
                                         "NOT/-/+ count); at most 20 are allowed"),
    ("NOT " * 300 + "b", "nests 21 levels deep"),
    ("- " * 500 + "x > 1", "nests 21 levels deep"),
    ("~" * 30 + "n = 1", "nests 21 levels deep"),
    ("CASE WHEN b THEN " * 60 + "1" + " END" * 60 + " = 1", "nests 21 levels deep"),
    ("abs(" * 60 + "x" + ")" * 60 + " > 1", "nests 21 levels deep"),
    ("NOT (" * 15 + "b" + ")" * 15, "nests 21 levels deep"),
    (" + ".join(["x"] * 1500) + " > 1", "its parsed tree is more than 1,000 levels deep (at most 100): a chain of operators"),
    (" AND ".join(["x > 1"] * 800), "its parsed tree is 802 levels deep"),
    ("x" + "::int" * 500 + " > 1", "its parsed tree is"),
    ("array(1)" + "[0]" * 900 + " > 1", "its parsed tree is"),
    ("b" + " IS NULL" * 1000, "its parsed tree is"),
    ("x > " + "1" * 10_000, "is 10,004 characters long; at most 10,000 are allowed"),
])
def test_deep_or_long_expressions_are_refused_before_they_exhaust_the_stack(text, fragment):
    _refused(text, fragment, schema=None)


def test_nesting_is_counted_outside_strings_and_comments_only():
    parse_expression("name = '" + "(" * 30 + "' /* " + "(" * 30 + " */ AND " + "(" * 20 + "x" + ")" * 20 + " > 1")
    _refused("name = '" + "(" * 30 + "' AND " + "(" * 21 + "x" + ")" * 21 + " > 1", "nests 21 levels deep", schema=None)


def test_a_recursion_error_in_any_pass_becomes_a_problem_naming_the_expression():
    """The bounds keep the parser far from the stack's end; if it is reached anyway, the caller still gets a SqlProblem."""
    import inspect
    import sys
    import time

    # within the bounds, but about 300 frames of sqlglot's parser; a new text each run (parses are cached)
    text = "(" * 15 + "x" + ")" * 15 + f" > {time.perf_counter_ns()}"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 120)
    try:
        with pytest.raises(SqlProblem, match=re.escape(f"{text!r} nests too deeply to be parsed")):
            expression_type(text, SCHEMA)
    finally:
        sys.setrecursionlimit(limit)
    expression_type(text, SCHEMA)


def test_every_allowed_kind_has_a_size_rule_and_a_clock_rule():
    from runtime.operators.size_bound import KINDS_WITH_RULES
    from runtime.operators.wall_clock import CLASSIFIED

    names = {kind.__name__ for kind in ALLOWED}
    assert names <= KINDS_WITH_RULES
    assert names <= CLASSIFIED
