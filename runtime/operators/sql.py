"""Spark SQL expressions in operator configs, parsed by sqlglot's Spark dialect.

An expression is parsed once (cached by its text), checked against the columns
its input has, and typed with sqlglot's type annotator so output schemas can be
derived without Spark. Its canonical text (sqlglot's Spark rendering) is what
signatures hash, so whitespace and keyword case do not break sharing.

Expressions are data, not code: every node of the parsed tree must be of a
kind on an explicit allow-list (:data:`ALLOWED`), deny by default, so a
function a newer parser learns (or Spark's ``reflect``/``java_method``) is
refused until someone adds it here on purpose. Nondeterministic functions
(``rand``, ``uuid``, ``current_timestamp``, ...) are refused: the runtime
replays a failed micro-batch and shares a task's output between dataflows,
and both promise the same records as a private, first run would give
(:data:`NONDETERMINISTIC`), and so is a value Spark takes from the clock
through a string (``TIMESTAMP 'now'``, ``ts > 'tomorrow'``, a string column
becoming a timestamp: ``runtime/operators/wall_clock.py``). Calls whose output
can be far bigger than their input (``repeat``, ``lpad``/``rpad``, ``space``,
``sequence``) take a literal size within a bound (:data:`AMPLIFYING`), and the
whole expression must stay within a size bound however such calls nest
(``runtime/operators/size_bound.py``). Regular expressions and LIKE patterns
must be literals Java's backtracking engine runs in reasonable time
(``runtime/operators/regex_safety.py``, reading Java's syntax with
``runtime/operators/regex_syntax.py``).

Every input gets an answer, never a crash: the text's length and nesting are
bounded before sqlglot's recursive-descent parser sees it, the parsed tree's
depth after (``runtime/operators/nesting.py``), and a RecursionError in any
pass still becomes a :class:`SqlProblem` naming the expression.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types

from runtime.operators.nesting import depth_problem, nesting_problem
from runtime.operators.regex_safety import like_problem, regex_problem
from runtime.operators.size_bound import integer_literal, size_problem
from runtime.operators.types import Schema, canonical_type
from runtime.operators.wall_clock import clock_problem

DIALECT = "spark"
_TABLE = "_input"

# Nodes that make an expression more than a row-level expression.
_FORBIDDEN = (exp.Query, exp.Subquery, exp.Command, exp.DDL, exp.DML, exp.Block, exp.Window, exp.Star)


class SqlProblem(ValueError):
    """An expression does not parse, or uses something the context forbids."""


def _kinds(*names: str) -> frozenset[type]:
    """The sqlglot node classes of ``names`` that this sqlglot version has."""
    return frozenset(getattr(exp, name) for name in names if isinstance(getattr(exp, name, None), type))


# Every node kind an expression may contain; anything else is refused by name.
ALLOWED = _kinds(
    # values and names
    "Column", "Identifier", "Literal", "Null", "Boolean", "Paren", "Star", "DataType", "DataTypeParam", "Var",
    "Interval", "Array", "Bracket",
    # operators
    "Add", "Sub", "Mul", "Div", "IntDiv", "Mod", "Neg", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "EQ", "NEQ", "NullSafeEQ", "NullSafeNEQ", "GT", "GTE", "LT", "LTE", "And", "Or", "Not", "Is", "In", "Between",
    "Like", "ILike", "RegexpLike", "Case", "If", "Coalesce", "Nullif", "Cast", "TryCast",
    # numbers
    "Abs", "Ceil", "Floor", "Round", "Sqrt", "Cbrt", "Pow", "Exp", "Ln", "Log", "Sign", "Greatest", "Least",
    # text
    "Lower", "Upper", "Length", "Substring", "Trim", "Concat", "ConcatWs", "StrPosition", "Left", "Right", "Initcap",
    "Reverse", "Replace", "RegexpExtract", "RegexpReplace", "StartsWith", "EndsWith", "Contains", "MD5", "SHA", "SHA2",
    "Hex", "Repeat", "Pad", "Space",
    # time
    "Year", "Month", "Day", "DayOfMonth", "DayOfWeek", "DayOfYear", "Hour", "Minute", "Second", "Quarter", "WeekOfYear",
    "TimestampTrunc", "DateTrunc", "DateAdd", "DateSub", "DateDiff", "TimestampAdd", "TimestampDiff", "TsOrDsToDate",
    "StrToTime", "TimeToStr", "StrToUnix", "UnixToTime", "TimeToUnix", "UnixSeconds", "TsOrDsAdd", "UnixToStr",
    "TimeStrToTime", "Extract", "TimestampFromParts",
    # JSON text, structs and arrays
    "JSONExtract", "JSONExtractScalar", "JSONPath", "JSONPathRoot", "JSONPathKey", "JSONPathSubscript", "JSONFormat",
    "Struct", "PropertyEQ", "ArraySize", "ArrayContains", "RegexpSplit", "GenerateSeries",
    # aggregates (only where one aggregate call is expected)
    "Count", "Sum", "Avg", "Min", "Max",
)

# Refused with the reason: a replayed batch or a shared task would give other records than a private first run.
# Besides randomness, anything that reads the clock or the session (user, database, time zone).
NONDETERMINISTIC = _kinds("Rand", "Randn", "Uuid", "Shuffle", "CurrentTimestamp", "CurrentDate", "CurrentTime",
                          "CurrentDatetime", "Random", "CurrentTimestampLTZ", "Localtime", "Localtimestamp",
                          "Systimestamp", "CurrentTimezone", "CurrentUser", "SessionUser", "CurrentSchema",
                          "CurrentDatabase", "CurrentCatalog", "CurrentRole", "CurrentVersion")
# The same for functions sqlglot does not know (parsed as anonymous calls), by the name Spark gives them.
NONDETERMINISTIC_NAMES = frozenset({
    "now", "curdate", "curtime", "localtimestamp", "localtime", "sysdate", "getdate", "current_timezone", "user",
    "session_user", "current_user", "current_database", "current_schema", "current_catalog", "version",
    "input_file_name", "input_file_block_start", "input_file_block_length", "monotonically_increasing_id",
    "spark_partition_id", "uuid", "rand", "randn", "random", "shuffle",
})

# Output size bounds of the amplifying calls: (argument holding the size, largest literal allowed).
AMPLIFYING = {
    "Repeat": ("times", 100),
    "Pad": ("expression", 10_000),
    "Space": ("this", 10_000),
}
MAX_SEQUENCE = 10_000  # elements of a sequence(start, stop[, step])


def _function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Pad):
        return "lpad" if node.args.get("is_left") else "rpad"
    if isinstance(node, exp.Space):
        return "space"
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.Func):  # as Spark spells it (sqlglot's class names are its own)
        return node.sql(DIALECT).split("(", 1)[0].strip().lower() or node.sql_name().lower()
    return type(node).__name__


def _check_allowed(text: str, node: exp.Expression) -> None:
    kind = type(node)
    if kind in NONDETERMINISTIC or (isinstance(node, exp.Anonymous) and _function_name(node) in NONDETERMINISTIC_NAMES):
        raise SqlProblem(f"{_quoted(text)}: {_function_name(node)}() is nondeterministic; a replayed micro-batch or a task "
                         "shared with another dataflow would not give the records a private first run gives")
    if kind not in ALLOWED:
        what = f"function {_function_name(node)}()" if isinstance(node, exp.Func) else f"{_function_name(node)} expression"
        raise SqlProblem(f"{_quoted(text)}: {what} is not allowed (allowed functions: docs/operators.md, \"Expressions\")")
    if kind.__name__ in AMPLIFYING:
        argument, bound = AMPLIFYING[kind.__name__]
        size = integer_literal(node.args.get(argument))
        if size is None or size > bound:
            raise SqlProblem(f"{_quoted(text)}: {_function_name(node)}() makes its output as big as its size argument; "
                             f"give a literal of at most {bound:,}")
    if isinstance(node, exp.GenerateSeries):
        start, stop = integer_literal(node.args.get("start")), integer_literal(node.args.get("end"))
        step = integer_literal(node.args.get("step")) if node.args.get("step") is not None else 1
        if start is None or stop is None or not step or abs(stop - start) // abs(step) + 1 > MAX_SEQUENCE:
            raise SqlProblem(f"{_quoted(text)}: sequence() takes literal bounds of at most {MAX_SEQUENCE:,} elements")


def _quoted(text: str) -> str:
    """The expression as messages name it: its repr, cut short when long."""
    return repr(text) if len(text) <= 200 else repr(text[:200]) + "..."


_Result = TypeVar("_Result")


def _guarded(function: Callable[..., _Result]) -> Callable[..., _Result]:
    """Turn a RecursionError anywhere in ``function(text, ...)`` into a :class:`SqlProblem` naming the text."""

    @wraps(function)
    def guarded(text: str, *args, **kwargs) -> _Result:
        try:
            return function(text, *args, **kwargs)
        except RecursionError:
            raise SqlProblem(f"{_quoted(text)} nests too deeply to be analysed; split it into simpler "
                             "expressions") from None

    return guarded


@lru_cache(maxsize=4096)
def _parse(text: str) -> exp.Expression:
    if not text.strip():
        raise SqlProblem("empty expression")
    problem = nesting_problem(text)
    if problem:
        raise SqlProblem(f"{_quoted(text)} {problem}")
    try:
        expressions = sqlglot.parse(text, dialect=DIALECT)
    except SqlglotError as error:
        first_line = str(error).splitlines()[0]
        raise SqlProblem(f"{_quoted(text)} does not parse: {first_line}") from None
    except RecursionError:
        raise SqlProblem(f"{_quoted(text)} nests too deeply to be parsed; split it into simpler expressions") from None
    except Exception as error:  # noqa: BLE001 - the parser failed on this input: the input's fault, answered as such
        raise SqlProblem(f"{_quoted(text)} does not parse ({type(error).__name__} in the parser)") from None
    if len(expressions) != 1 or expressions[0] is None:
        raise SqlProblem(f"{_quoted(text)} must be a single expression")
    problem = depth_problem(expressions[0])
    if problem:
        raise SqlProblem(f"{_quoted(text)}: {problem}")
    return expressions[0]


# Calls whose second argument is a Java regular expression, and LIKE/ILIKE whose pattern may become one.
_PATTERN_CALLS = {exp.RegexpLike: "RLIKE", exp.RegexpExtract: "regexp_extract()", exp.RegexpReplace: "regexp_replace()",
                  exp.RegexpSplit: "split()", exp.Like: "LIKE", exp.ILike: "ILIKE"}


def _check_pattern(text: str, node: exp.Expression) -> None:
    """Refuse a pattern taken from the row, or one Java's backtracking engine could run for very long."""
    pattern = node.args.get("expression")
    while isinstance(pattern, exp.Paren):
        pattern = pattern.this
    if isinstance(pattern, exp.Null):
        return
    name = _PATTERN_CALLS[type(node)]
    if not isinstance(pattern, exp.Literal) or not pattern.is_string:
        source = pattern.sql(DIALECT) if pattern is not None else ""
        raise SqlProblem(f"{_quoted(text)}: {name} takes its pattern from {source!r}; give the pattern as a string "
                         "literal, so that it can be checked before it runs")
    if isinstance(node, (exp.Like, exp.ILike)):
        problem = like_problem(pattern.this, case_insensitive=isinstance(node, exp.ILike))
        if problem:
            raise SqlProblem(f"{_quoted(text)}: {problem}")
        return
    problem = regex_problem(pattern.this)
    if problem:
        raise SqlProblem(f"{_quoted(text)}: the regular expression {pattern.this!r} of {name} is refused: {problem}")


@lru_cache(maxsize=4096)
def _checked(text: str, aggregate: bool) -> exp.Expression:
    """The parsed tree of ``text`` once every check that needs no input schema passed (shared: never mutate)."""
    tree = _parse(text)
    for node in tree.walk():
        if isinstance(node, exp.Star) and aggregate and isinstance(node.parent, exp.Count):
            continue
        if isinstance(node, _FORBIDDEN):
            raise SqlProblem(f"{_quoted(text)}: only a plain expression is allowed here, not {node.sql(DIALECT)!r}")
        _check_allowed(text, node)
        if isinstance(node, exp.Column) and node.table:
            raise SqlProblem(f"{_quoted(text)}: qualified column {node.sql(DIALECT)!r}; name the column alone")
        if not aggregate and isinstance(node, exp.AggFunc):
            raise SqlProblem(f"{_quoted(text)}: aggregate {node.sql(DIALECT)!r} is not allowed here")
        if type(node) in _PATTERN_CALLS:
            _check_pattern(text, node)
    for problem in (size_problem(tree), clock_problem(tree, typed=False)):
        if problem:
            raise SqlProblem(f"{_quoted(text)}: {problem}")
    return tree


@_guarded
def parse_expression(text: str, *, aggregate: bool = False) -> exp.Expression:
    """Parse a row-level Spark SQL expression and return a private copy of its tree.

    With ``aggregate=True`` the expression must be one aggregate call instead.

    Raises :class:`SqlProblem` naming the text and the culprit when it does
    not parse (or is too long or nests too deeply to parse safely), is a
    statement or subquery, contains anything not on :data:`ALLOWED` (a
    nondeterministic call, an amplifying call without a bounded literal size),
    can make a value over the size bound, reads the clock through a string,
    holds a regular expression or LIKE pattern that could backtrack
    catastrophically (or one taken from the row), or (for a row-level
    expression) an aggregate. What depends on the input's column types (a
    string column becoming a timestamp) is checked by :func:`expression_type`.

    >>> parse_expression("temp  >  30").sql("spark")
    'temp > 30'
    >>> parse_expression("reflect('java.lang.System', 'exit', 0) = 0")
    Traceback (most recent call last):
    ...
    runtime.operators.sql.SqlProblem: "reflect('java.lang.System', 'exit', 0) = 0": function reflect() is not allowed (allowed functions: docs/operators.md, "Expressions")
    """
    return _checked(text, aggregate).copy()


@_guarded
def canonical_sql(text: str) -> str:
    """The canonical rendering of an expression (what signatures hash); cached by the text."""
    return _canonical(text)


@lru_cache(maxsize=8192)
def _canonical(text: str) -> str:
    return _parse(text).sql(DIALECT)


def referenced_columns(tree: exp.Expression) -> list[str]:
    """Column names the expression reads, in order of first use."""
    seen: dict[str, None] = {}
    for column in tree.find_all(exp.Column):
        seen.setdefault(column.name, None)
    return list(seen)


def check_columns(text: str, tree: exp.Expression, schema: Schema) -> None:
    """Raise :class:`SqlProblem` if the expression reads a column ``schema`` lacks."""
    for name in referenced_columns(tree):
        if name not in schema:
            have = ", ".join(sorted(schema)) or "none"
            raise SqlProblem(f"{_quoted(text)}: column {name!r} is not in the input (columns: {have})")


@_guarded
def infer_type(text: str, tree: exp.Expression, schema: Schema) -> str | None:
    """The canonical Spark type of the expression over ``schema``, or None if unknown.

    Raises :class:`SqlProblem` when, over these column types, the value could
    come from the clock (a string column becoming a timestamp: see
    ``runtime/operators/wall_clock.py``).

    ``tree`` is unused (the cache keys on the text). Cached by the text and the
    input columns: type annotation is most of the
    cost of validating a dataflow, and the same expressions over the same
    inputs come back with every dataflow that shares a prefix.
    """
    return _infer_type(text, tuple(sorted(schema.items())))


@lru_cache(maxsize=8192)
def _infer_type(text: str, columns: tuple[tuple[str, str], ...]) -> str | None:
    tree = parse_expression(text, aggregate=True)
    column_types = dict(columns)
    select = exp.select(tree).from_(_TABLE)
    for column in select.find_all(exp.Column):
        column.set("table", exp.to_identifier(_TABLE))
    try:
        typed = annotate_types(select, schema={_TABLE: column_types}, dialect=DIALECT)
    except RecursionError:
        raise
    except Exception:  # noqa: BLE001 - sqlglot could not type this input: no types, as for an unknown one
        typed = None  # the clock check below then treats every type as unknown
    root = typed.expressions[0] if typed is not None else tree
    for column in root.find_all(exp.Column):
        column.set("table", None)  # messages name columns as the user wrote them
    problem = clock_problem(root, typed=True)
    if problem:
        raise SqlProblem(f"{_quoted(text)}: {problem}")
    if typed is None:
        return None
    data_type = typed.expressions[0].type
    if data_type is None or data_type.this == exp.DataType.Type.UNKNOWN:
        return None
    try:
        return canonical_type(data_type.sql(DIALECT))
    except ValueError:
        return None


@_guarded
@_guarded
def expression_type(text: str, schema: Schema, *, aggregate: bool = False) -> str | None:
    """Parse, check columns and infer the type: the common path of the operators.

    Reads the cached tree without copying it (nothing here changes it); :func:`parse_expression`
    hands out a private copy to callers that keep one."""
    tree = _checked(text, aggregate)
    check_columns(text, tree, schema)
    return infer_type(text, tree, schema)
