"""A static bound on the bytes an expression can make from one input record, whatever calls it nests.

Each call that can make its output bigger than its input is bounded on its own (``repeat`` at most 100
times, ``lpad`` at most 10,000 characters...: ``runtime/operators/sql.py``), but sizes multiply when such
calls nest: ``repeat(repeat(repeat(repeat(repeat('a', 100), 100), 100), 100), 100)`` is 10^10 characters.
This module bounds every node of the parsed tree by a linear form of the input: at most
``sum(c_i * |column_i|) + b`` bytes, where ``|column_i|`` is the size of an input column's value. The
columns of one record share it, so the sum of their sizes is at most the record's size R and a node's
value is at most ``max(c_i) * R + b``. With R = :data:`MAX_RECORD_BYTES` that must stay within
:data:`MAX_VALUE_BYTES` at every node (intermediate values are built whole too), else the expression is
refused naming the innermost node over the bound.

Rules by node kind: a column is ``|column|``; a literal its bytes; a number, boolean, date, timestamp or
interval at most :data:`SCALAR_BYTES` (as text too); ``concat`` sums; ``repeat(s, n)`` multiplies by n;
``lpad``/``rpad`` make at most 4 bytes per character of their literal length, ``space(n)`` n bytes;
``upper``/``lower``/``initcap`` at most triple (Java's case mapping can turn one character into three);
``replace(s, search, r)`` at most ``|s| * (1 + |r| / |search|)``; ``regexp_replace(s, p, r)`` at most
``|s| * (1 + |r| + |groups|)`` plus ``|r|``, since every position (an empty match too) can be replaced by
``r`` and each ``$n`` copies at most the match; ``concat_ws`` adds a separator per argument and per array
element; ``split`` makes at most one element (8 bytes of overhead, :data:`ELEMENT_BYTES`) per byte;
``hex`` doubles; ``to_json`` escapes (at most 6 bytes per byte: ``\\u0001``); ``get_json_object`` at most
doubles (wildcards add brackets and commas); ``date_format`` makes at most 64 bytes per pattern character;
arrays and structs sum their parts plus their overhead; a ``CASE`` or ``coalesce`` is its largest branch.
A product of two row-dependent sizes (``replace(s, 'a', t)`` with ``t`` a column) is quadratic in the
record and refused whatever its size. Every kind the allow-list accepts has a rule (a kind without one is
refused); the pass over the tree is a loop, not a recursion.

The bound is per expression, over the record its task reads: tasks that run in one Spark query without a
Kafka topic between them (a chain of selects) each stay within it, but their growth can still compose.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

MAX_RECORD_BYTES = 1 << 20  # Kafka's default max.message.bytes: no input record is larger
# 100 times the largest record is what repeat(s, 100), the largest per-call bound, always allowed; the rest
# leaves room for the constant parts around it. A value this big already takes a good share of an
# executor's heap, and a task holds several rows at once.
MAX_VALUE_BYTES = 128 << 20
SCALAR_BYTES = 64  # the longest number, boolean, date, timestamp or interval, also as text
ELEMENT_BYTES = 8  # what Spark keeps per array element or struct field besides the value (offset and size)
FIELD_NAME_BYTES = 128  # the longest column name, also a struct field's name


@dataclass(frozen=True)
class Size:
    """At most ``sum(columns[c] * |c|) + constant`` bytes."""

    columns: tuple[tuple[str, int], ...] = ()
    constant: int = 0

    @property
    def varies(self) -> bool:
        return any(coefficient for _, coefficient in self.columns)

    def at_most(self, record: int = MAX_RECORD_BYTES) -> int:
        """The bound for an input record of ``record`` bytes (its columns together are at most that)."""
        return max((coefficient for _, coefficient in self.columns), default=0) * record + self.constant

    def __add__(self, other: "Size") -> "Size":
        merged = dict(self.columns)
        for name, coefficient in other.columns:
            merged[name] = merged.get(name, 0) + coefficient
        return Size(tuple(sorted(merged.items())), self.constant + other.constant)

    def scaled(self, factor: int) -> "Size":
        return Size(tuple((name, coefficient * factor) for name, coefficient in self.columns), self.constant * factor)


def _largest(sizes: list[Size]) -> Size:
    merged: dict[str, int] = {}
    for size in sizes:
        for name, coefficient in size.columns:
            merged[name] = max(merged.get(name, 0), coefficient)
    return Size(tuple(sorted(merged.items())), max((size.constant for size in sizes), default=0))


class _Quadratic(ValueError):
    """A size is the product of two sizes that both depend on the row."""


def _times(one: Size, other: Size) -> Size:
    if one.varies and other.varies:
        raise _Quadratic
    if one.varies:
        return one.scaled(other.constant)
    return other.scaled(one.constant) if other.varies else Size((), one.constant * other.constant)


def _ceil_div(size: Size, divisor: int) -> Size:
    return Size(tuple((name, -(-coefficient // divisor)) for name, coefficient in size.columns), -(-size.constant // divisor))


SCALAR = Size((), SCALAR_BYTES)
NOTHING = Size()


def integer_literal(node: exp.Expression | None) -> int | None:
    """The value of an integer literal (or its negation), else None."""
    if isinstance(node, exp.Neg):
        value = integer_literal(node.this)
        return None if value is None else -value
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            return None
    return None


def _literal_text(node: exp.Expression | None) -> str | None:
    while isinstance(node, exp.Paren):
        node = node.this
    return node.this if isinstance(node, exp.Literal) and node.is_string else None


# Kinds whose value is one number, boolean, date, timestamp or interval, whatever their arguments.
_SCALAR_KINDS = {
    "Null", "Boolean", "Interval", "Add", "Sub", "Mul", "Div", "IntDiv", "Mod", "Neg", "BitwiseAnd", "BitwiseOr",
    "BitwiseXor", "BitwiseNot", "EQ", "NEQ", "NullSafeEQ", "NullSafeNEQ", "GT", "GTE", "LT", "LTE", "And", "Or", "Not",
    "Is", "In", "Between", "Like", "ILike", "RegexpLike", "Abs", "Ceil", "Floor", "Round", "Sqrt", "Cbrt", "Pow", "Exp",
    "Ln", "Log", "Sign", "Length", "StrPosition", "StartsWith", "EndsWith", "Contains", "Year", "Month", "Day",
    "DayOfMonth", "DayOfWeek", "DayOfYear", "Hour", "Minute", "Second", "Quarter", "WeekOfYear", "TimestampTrunc",
    "DateTrunc", "DateAdd", "DateSub", "DateDiff", "TimestampAdd", "TimestampDiff", "TsOrDsToDate", "StrToTime",
    "StrToUnix", "UnixToTime", "TimeToUnix", "UnixSeconds", "TsOrDsAdd", "TimeStrToTime", "Extract",
    "TimestampFromParts", "ArraySize", "ArrayContains", "Count", "Sum", "Avg",
}
# Parts of the syntax that are no value of their own.
_NO_VALUE_KINDS = {"Identifier", "Star", "DataType", "DataTypeParam", "Var", "JSONPath", "JSONPathRoot", "JSONPathKey",
                   "JSONPathSubscript"}
# Kinds whose value is at most the size of their first argument (``this``).
_AT_MOST_THIS = {"Trim", "Substring", "Left", "Right", "Reverse", "RegexpExtract", "Bracket", "Min", "Max", "Paren",
                 "PropertyEQ", "Nullif"}
# Kinds whose value is one of their value arguments.
_ONE_OF = {"Coalesce", "Greatest", "Least", "Case", "If"}
_TEXT_TYPES = {"STRING", "VARCHAR", "CHAR", "TEXT", "NCHAR", "NVARCHAR"}


def _value_children(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.If):
        return [child for key in ("true", "false") if (child := node.args.get(key)) is not None]
    if isinstance(node, exp.Case):
        return [*node.args.get("ifs", []), *([node.args["default"]] if node.args.get("default") is not None else [])]
    return list(node.iter_expressions())


def _rule(node: exp.Expression, sizes: dict[int, Size]) -> Size:
    """The size of ``node`` from its children's sizes (already in ``sizes``)."""
    kind = type(node).__name__
    size = lambda child: sizes[id(child)] if child is not None else NOTHING  # noqa: E731
    this = node.args.get("this")
    if kind in _NO_VALUE_KINDS:
        return NOTHING
    if kind == "Column":
        return Size(((node.name, 1),), 0)
    if kind == "Literal":
        return Size((), len(node.this.encode("utf-8", "surrogatepass"))) if node.is_string else SCALAR
    if kind in _SCALAR_KINDS:
        return SCALAR
    if kind in _AT_MOST_THIS:
        return size(this if kind != "PropertyEQ" else node.expression)
    if kind in _ONE_OF:
        return _largest([size(child) for child in _value_children(node)])
    if kind in ("Cast", "TryCast"):
        target = node.to.sql("spark").split("(", 1)[0].upper() if node.to is not None else ""
        if target in _TEXT_TYPES or target.startswith(("ARRAY", "STRUCT", "MAP", "BINARY")):
            return size(this) + SCALAR  # a scalar's text fits SCALAR_BYTES; a string or a collection keeps its size
        return SCALAR
    if kind in ("Lower", "Upper", "Initcap"):
        return size(this).scaled(3)
    if kind == "Concat":
        total = NOTHING
        for child in node.expressions:
            total = total + size(child)
        return total
    if kind == "ConcatWs":
        separator, *parts = node.expressions or [None]
        total = NOTHING
        for child in parts:
            total = total + size(child)
        slots = _ceil_div(total, ELEMENT_BYTES) + Size((), len(parts))  # a separator per argument or array element
        return total + _times(size(separator), slots)
    if kind == "Repeat":
        times = integer_literal(node.args.get("times"))
        return size(this).scaled(max(times or 0, 0))  # the per-call check requires a literal count
    if kind == "Pad":
        return Size((), 4 * max(integer_literal(node.expression) or 0, 0))
    if kind == "Space":
        return Size((), max(integer_literal(this) or 0, 0))
    if kind == "Replace":
        replacement = node.args.get("replacement")
        if replacement is None:
            return size(this)
        search = _literal_text(node.expression)
        if search == "":
            return size(this)  # Spark leaves the text as it is
        per_match = _ceil_div(size(replacement), len(search.encode("utf-8", "surrogatepass")) if search else 1)
        return size(this) + _times(size(this), per_match)
    if kind == "RegexpReplace":
        replacement = node.args.get("replacement")
        text = _literal_text(replacement)
        groups = text.count("$") if text is not None else 0
        matches = size(this) + Size((), 1)  # an empty match can occur before every character and at the end
        return size(this).scaled(1 + groups) + _times(matches, size(replacement))
    if kind == "RegexpSplit":
        return size(this).scaled(1 + ELEMENT_BYTES) + Size((), 2 * ELEMENT_BYTES)
    if kind in ("MD5", "SHA", "SHA2"):
        return Size((), 128)
    if kind == "Hex":
        return size(this).scaled(2) + SCALAR
    if kind in ("JSONExtract", "JSONExtractScalar"):
        return size(this).scaled(2) + SCALAR
    if kind == "JSONFormat":
        return size(this).scaled(6) + SCALAR
    if kind in ("TimeToStr", "UnixToStr"):
        return _times(size(node.args.get("format")), Size((), 64)) + SCALAR
    if kind == "Array":
        total = Size((), ELEMENT_BYTES * len(node.expressions))
        for child in node.expressions:
            total = total + size(child)
        return total
    if kind == "Struct":
        total = Size((), (ELEMENT_BYTES + FIELD_NAME_BYTES) * len(node.expressions))
        for child in node.expressions:
            total = total + size(child)
        return total
    if kind == "GenerateSeries":
        start, stop = integer_literal(node.args.get("start")), integer_literal(node.args.get("end"))
        step = integer_literal(node.args.get("step")) if node.args.get("step") is not None else 1
        count = abs(stop - start) // abs(step) + 1 if start is not None and stop is not None and step else 0
        return Size((), count * (SCALAR_BYTES + ELEMENT_BYTES))
    raise LookupError(kind)


KINDS_WITH_RULES = (_SCALAR_KINDS | _NO_VALUE_KINDS | _AT_MOST_THIS | _ONE_OF | {
    "Column", "Literal", "Cast", "TryCast", "Lower", "Upper", "Initcap", "Concat", "ConcatWs", "Repeat", "Pad", "Space",
    "Replace", "RegexpReplace", "RegexpSplit", "MD5", "SHA", "SHA2", "Hex", "JSONExtract", "JSONExtractScalar",
    "JSONFormat", "TimeToStr", "UnixToStr", "Array", "Struct", "GenerateSeries"})


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MiB" if size >= 1 << 20 else f"{size:,} bytes"


def _culprit(node: exp.Expression) -> str:
    text = node.sql("spark")
    return text if len(text) <= 120 else text[:117] + "..."


def size_problem(tree: exp.Expression) -> str | None:
    """Why ``tree`` could make a value over :data:`MAX_VALUE_BYTES` from one record, or None.

    Pure; names the innermost node over the bound (or the node whose size is quadratic in the record).

    >>> import sqlglot
    >>> size_problem(sqlglot.parse_one("concat(repeat(name, 100), lpad(name, 12, '0'))", dialect="spark")) is None
    True
    >>> size_problem(sqlglot.parse_one("repeat(repeat(repeat(name, 100), 100), 100)", dialect="spark"))
    "'REPEAT(REPEAT(name, 100), 100)' can make a value of up to 10,000 MiB from an input record of at most 1 MiB; an expression may make at most 128 MiB (sizes multiply when size-increasing calls nest: repeat(repeat(s, 10), 10) is 100 times s)"
    """
    sizes: dict[int, Size] = {}
    pending: list[tuple[exp.Expression, bool]] = [(tree, False)]
    while pending:
        node, children_done = pending.pop()
        if not children_done:
            pending.append((node, True))
            pending.extend((child, False) for child in node.iter_expressions())
            continue
        try:
            size = _rule(node, sizes)
        except _Quadratic:
            return (f"{_culprit(node)!r} grows with the square of the input record: a size taken from the row multiplies "
                    "another one; give the replacement or separator as a literal")
        except LookupError:
            return f"{type(node).__name__} has no size rule, so its output cannot be bounded"
        sizes[id(node)] = size
        bound = size.at_most()
        if bound > MAX_VALUE_BYTES:
            return (f"{_culprit(node)!r} can make a value of up to {_mib(bound)} from an input record of at most "
                    f"{_mib(MAX_RECORD_BYTES)}; an expression may make at most {_mib(MAX_VALUE_BYTES)} (sizes multiply "
                    "when size-increasing calls nest: repeat(repeat(s, 10), 10) is 100 times s)")
    return None
