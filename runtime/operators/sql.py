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
(:data:`NONDETERMINISTIC`). Calls whose output can be far bigger than their
input (``repeat``, ``lpad``/``rpad``, ``space``, ``sequence``) take a literal
size within a bound (:data:`AMPLIFYING`).
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types

from runtime.operators.types import Schema, canonical_type

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
NONDETERMINISTIC = _kinds("Rand", "Randn", "Uuid", "Shuffle", "CurrentTimestamp", "CurrentDate", "CurrentTime",
                          "CurrentDatetime", "Random")

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


def _integer(node: exp.Expression | None) -> int | None:
    """The value of an integer literal (or its negation), else None."""
    if isinstance(node, exp.Neg):
        value = _integer(node.this)
        return None if value is None else -value
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            return None
    return None


def _check_allowed(text: str, node: exp.Expression) -> None:
    kind = type(node)
    if kind in NONDETERMINISTIC:
        raise SqlProblem(f"{text!r}: {_function_name(node)}() is nondeterministic; a replayed micro-batch or a task "
                         "shared with another dataflow would not give the records a private first run gives")
    if kind not in ALLOWED:
        what = f"function {_function_name(node)}()" if isinstance(node, exp.Func) else f"{_function_name(node)} expression"
        raise SqlProblem(f"{text!r}: {what} is not allowed (allowed functions: docs/operators.md, \"Expressions\")")
    if kind.__name__ in AMPLIFYING:
        argument, bound = AMPLIFYING[kind.__name__]
        size = _integer(node.args.get(argument))
        if size is None or size > bound:
            raise SqlProblem(f"{text!r}: {_function_name(node)}() makes its output as big as its size argument; "
                             f"give a literal of at most {bound:,}")
    if isinstance(node, exp.GenerateSeries):
        start, stop = _integer(node.args.get("start")), _integer(node.args.get("end"))
        step = _integer(node.args.get("step")) if node.args.get("step") is not None else 1
        if start is None or stop is None or not step or abs(stop - start) // abs(step) + 1 > MAX_SEQUENCE:
            raise SqlProblem(f"{text!r}: sequence() takes literal bounds of at most {MAX_SEQUENCE:,} elements")


@lru_cache(maxsize=4096)
def _parse(text: str) -> exp.Expression:
    if not text.strip():
        raise SqlProblem("empty expression")
    try:
        expressions = sqlglot.parse(text, dialect=DIALECT)
    except SqlglotError as error:
        first_line = str(error).splitlines()[0]
        raise SqlProblem(f"{text!r} does not parse: {first_line}") from None
    if len(expressions) != 1 or expressions[0] is None:
        raise SqlProblem(f"{text!r} must be a single expression")
    return expressions[0]


def parse_expression(text: str, *, aggregate: bool = False) -> exp.Expression:
    """Parse a row-level Spark SQL expression and return a private copy of its tree.

    With ``aggregate=True`` the expression must be one aggregate call instead.

    Raises :class:`SqlProblem` naming the text and the culprit when it does
    not parse, is a statement or subquery, contains anything not on
    :data:`ALLOWED` (a nondeterministic call, an amplifying call without a
    bounded literal size) or (for a row-level expression) an aggregate.

    >>> parse_expression("temp  >  30").sql("spark")
    'temp > 30'
    >>> parse_expression("reflect('java.lang.System', 'exit', 0) = 0")
    Traceback (most recent call last):
    ...
    runtime.operators.sql.SqlProblem: "reflect('java.lang.System', 'exit', 0) = 0": function reflect() is not allowed (allowed functions: docs/operators.md, "Expressions")
    """
    tree = _parse(text)
    for node in tree.walk():
        if isinstance(node, exp.Star) and aggregate and isinstance(node.parent, exp.Count):
            continue
        if isinstance(node, _FORBIDDEN):
            raise SqlProblem(f"{text!r}: only a plain expression is allowed here, not {node.sql(DIALECT)!r}")
        _check_allowed(text, node)
        if isinstance(node, exp.Column) and node.table:
            raise SqlProblem(f"{text!r}: qualified column {node.sql(DIALECT)!r}; name the column alone")
        if not aggregate and isinstance(node, exp.AggFunc):
            raise SqlProblem(f"{text!r}: aggregate {node.sql(DIALECT)!r} is not allowed here")
    return tree.copy()


def canonical_sql(text: str) -> str:
    """The canonical rendering of an expression (what signatures hash)."""
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
            raise SqlProblem(f"{text!r}: column {name!r} is not in the input (columns: {have})")


def infer_type(text: str, tree: exp.Expression, schema: Schema) -> str | None:
    """The canonical Spark type of the expression over ``schema``, or None if unknown.

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
    select = exp.select(tree.copy()).from_(_TABLE)
    for column in select.find_all(exp.Column):
        column.set("table", exp.to_identifier(_TABLE))
    try:
        typed = annotate_types(select, schema={_TABLE: column_types}, dialect=DIALECT)
    except SqlglotError:
        return None
    data_type = typed.expressions[0].type
    if data_type is None or data_type.this == exp.DataType.Type.UNKNOWN:
        return None
    try:
        return canonical_type(data_type.sql(DIALECT))
    except ValueError:
        return None


def typed_expression(text: str, schema: Schema, *, aggregate: bool = False) -> tuple[exp.Expression, str | None]:
    """Parse, check columns and infer the type: the common path of the operators."""
    tree = parse_expression(text, aggregate=aggregate)
    check_columns(text, tree, schema)
    return tree, infer_type(text, tree, schema)
