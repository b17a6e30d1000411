"""Java regular expressions read with Java's syntax, and judged by runtime/operators/regex_safety.py's rules."""

from __future__ import annotations

import doctest
import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.operators.regex_safety import like_problem, regex_problem
from runtime.operators.regex_syntax import Chars, RegexRefused, Repeat, parse_pattern


def _chars(pattern: str):
    """The character set of a pattern that is one position (a class, an escape, a literal)."""
    node = parse_pattern(pattern)
    (item,) = node.items
    assert isinstance(item, Chars)
    return item.chars


def _takes(pattern: str, char: str) -> bool:
    return _chars(pattern).overlaps(_chars("\\x{%x}" % ord(char)))


@pytest.mark.parametrize(("pattern", "takes", "leaves"), [
    ("[a-z&&[^e]]", "adz", "eA1"),
    ("[a-z&&[def]]", "def", "ag"),
    ("[a-d[m-p]]", "bn", "fz"),
    ("[^\\d\\s]", "a_!", "5 \t"),
    ("\\p{Alpha}", "aZ", "1_ "),
    ("\\p{Lower}", "q", "Q1"),
    ("\\P{Digit}", "a é", "7"),
    ("\\x{41}", "A", "B"),
    ("\\u00e9", "é", "e"),
    ("\\0101", "A", "a"),
    ("\\cA", "\x01", "A"),
    ("(?i)k", "kK", "j"),
    ("\\h", " \t\u00a0", "\n"),
])
def test_character_classes_follow_java(pattern, takes, leaves):
    assert all(_takes(pattern, char) for char in takes)
    assert not any(_takes(pattern, char) for char in leaves)


def test_quoting_comments_possessive_and_atomic_parts_are_read_as_java_does():
    assert [type(item).__name__ for item in parse_pattern("\\Q(a+)+\\E").items] == ["Chars"] * 5
    assert [type(item).__name__ for item in parse_pattern("(?x) a + # comment\n b").items] == ["Repeat", "Chars"]
    possessive = parse_pattern("a*+").items[0]
    assert isinstance(possessive, Repeat) and possessive.possessive and possessive.high is None
    assert parse_pattern("(?>ab)").items[0].kind == "atomic"
    assert parse_pattern("(?<year>\\d{4})").items[0].body.items[0].low == 4


@pytest.mark.parametrize(("pattern", "why"), [
    ("(a)\\1", "it uses the backreference '\\\\1'"),
    ("\\k<name>", "it uses the backreference"),
    ("\\X", "it cannot be analysed: \\X is not supported at position 0"),
    ("(ab", "it cannot be analysed: unclosed group at position 0"),
    ("ab)", "it cannot be analysed: unmatched ')' at position 2"),
    ("a**", "it cannot be analysed: two quantifiers in a row at position 2"),
    ("*a", "it cannot be analysed: nothing to repeat before '*' at position 0"),
    ("a{x}", "it cannot be analysed: illegal repetition '{'"),
    ("[z-a]", "it cannot be analysed: illegal character range"),
    ("[abc", "it cannot be analysed: unclosed character class"),
    ("\\q", "it cannot be analysed: unknown escape \\q"),
    ("a{1001}", "it counts a repetition above 1,000"),
    ("(" * 21 + ")" * 21, "it nests groups more than 20 deep"),
    ("[" * 9 + "a" + "]" * 9, "it nests character classes more than 8 deep"),
    ("a" * 2_001, "it is 2,001 characters long; at most 2,000 can be checked"),
])
def test_what_cannot_be_read_or_decided_is_refused_saying_why(pattern, why):
    assert why in regex_problem(pattern)
    if "characters long" not in why:
        with pytest.raises(RegexRefused):
            parse_pattern(pattern)


@pytest.mark.parametrize(("pattern", "rule"), [
    # 1. nested quantifiers, also under a bounded outer count and around a class or a possessive-free group
    ("(.*a){8}b", "nested quantifiers: the repeated group '(.*a){8}' holds '.*'"),
    ("(a+)+$", "nested quantifiers"),
    ("(?:\\w+\\s?)*!", "nested quantifiers"),
    ("((ab)*c){2}d", "nested quantifiers"),
    ("(?:[a-z]{0,50},)+;", "nested quantifiers"),
    ("(?i)(?:A+)+b", "nested quantifiers"),
    # 2. choices inside a repetition the next character does not settle
    ("(a|ab)*c", "the alternatives of 'a|ab' inside the repeated group"),
    ("(?:x|x)+y", "the alternatives of 'x|x'"),
    ("(?:\\d|[0-9a-f])+g", "the alternatives of"),
    ("(?:a?b?){9}c", "can match the empty string"),
    ("(x{1,3}){9}y", "can stop before a 'x' or take it"),
    ("(ab?){9}bc", "can stop before a 'b' or take it"),
    # 3. a repetition that can match nothing
    ("(a*)*b", "the repeated group '(a*)*' can match the empty string"),
    ("(a|)+b", "can match the empty string"),
    # 4. overlapping neighbours, with or without something both can take in between
    (".*.*=", "'.*' and '.*' can both take the same characters"),
    ("\\d+\\d*x", "'\\\\d+' and '\\\\d*' can both take"),
    (".*a.*b", "'.*' and '.*' can both take"),
    ("\\s*-?\\s*\\d", "'\\\\s*' and '\\\\s*' can both take"),
    ("\\w+\\s*\\w+;", "can both take"),
    ("(?x) \\d+ \\d+", "can both take"),  # comments mode joins the two
    ("(?i)A+a+", "'A+' and 'a+' can both take"),
    ("\\p{L}+\\p{Lu}+1", "can both take"),
    (".*(?=.*x)", "can both take"),  # the lookahead scans again after each split
    (".*a(?>[^b]*)b", "'.*' and '[^b]*' can both take"),  # so does an atomic group
    # ... and chains of small optional parts over common characters
    ("a?" * 9 + "a" * 9, "the optional or variable parts from 'a?' at 0 to 'a?' at 16 can all take the same characters "
                         "(such as 'a'), so a text can be split among them in more than 256 ways"),
    ("x" + "[a-z]?" * 12 + "!", "can be split among them in more than 256 ways"),
    ("\\d{0,3}" * 5 + "x", "can be split among them in more than 256 ways"),
    (".*" + "\\d?" * 9 + "x", "can be split among them in more than 256 ways"),
])
def test_each_rule_refuses_every_member_of_its_class(pattern, rule):
    assert rule in regex_problem(pattern)


@pytest.mark.parametrize("pattern", [
    "^a[0-9]+$", "\\d+-\\d+", "\\w+\\s+\\w+", "^(\\d{1,3}\\.){3}\\d{1,3}$", "(\\d++\\.)+x", "(?>\\d+\\.)+x",
    "\\p{Lower}+\\p{Upper}+", "[\\w&&[^\\d]]+\\d+", "[^a]*a.*", "\\s*+-?\\s*\\d", "(?:https?|ftp)://\\S+", "(?:\\r\\n|\\n)+",
    "\\Q.*.*\\E", "(?:[0-9a-f]{2}:){5}[0-9a-f]{2}", "(?:a{1,3}+)+b", "^\\s+|\\s+$", "(\\w+)@(\\w+)\\.com",
    "a?" * 7 + "a" * 7, "\\d{1,2}/\\d{1,2}/\\d{2,4}", "\\s?-?\\s?\\d",
])
def test_patterns_whose_parts_stop_at_a_separator_pass_beside_refused_neighbours(pattern):
    assert regex_problem(pattern) is None
    assert regex_problem(pattern + "(a+)+") is not None  # the same pattern, one nested quantifier more


@pytest.mark.parametrize(("pattern", "refused"), [
    ("%abc%", False), ("abc%", False), ("%%abc", False), ("ab%%cd", False), ("a_c", False), ("a_c%", False),
    ("a\\%b%", False), ("%", False), ("%a%b", True), ("%a%b%", True), ("a%b%c", True), ("%_%", True),
    ("a\\%b%c%", True), ("_%a%", True),
])
def test_like_patterns_are_refused_when_spark_makes_them_an_ambiguous_regex(pattern, refused):
    assert (like_problem(pattern) is not None) == refused
    assert (like_problem(pattern.upper(), case_insensitive=True) is not None) == refused


def test_a_bad_escape_in_a_like_pattern_is_refused():
    assert like_problem("a\\xb%") == "LIKE pattern 'a\\\\xb%': the escape character must be followed by _, % or \\ (at position 1)"


_PIECES = st.sampled_from(["a", "b", ".", "*", "+", "?", "{", "}", "{2,3}", "[", "]", "^", "-", "&&", "(", ")", "(?:",
                           "(?>", "(?=", "(?<=", "(?i)", "(?x)", "|", "\\", "\\d", "\\p{L}", "\\Q", "\\E", "*+", "#",
                           " ", "\n", "$", ",", "%", "_", "é", "\\x{", "\\u00", "\\0", "1"])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=60).map("".join) | st.text(max_size=100))
def test_any_pattern_gets_an_answer_and_never_an_exception(pattern):
    for answer in (regex_problem(pattern), like_problem(pattern), like_problem(pattern, case_insensitive=True)):
        assert answer is None or isinstance(answer, str)


@pytest.mark.parametrize("name", ["runtime.operators.regex_syntax", "runtime.operators.regex_safety",
                                  "runtime.operators.size_bound", "runtime.operators.wall_clock",
                                  "runtime.operators.nesting"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
