"""Values that come from the clock instead of the row: the strings Spark turns into the current date or time.

Spark reads a *constant* string that becomes a date or timestamp as the current date or time when it is one
of its special values, ``now``, ``today``, ``yesterday`` or ``tomorrow`` (any case, blanks around, a zone
after: ``' Now '``, ``'today UTC'``; ``epoch`` is a fixed date). That happens in typed literals
(``TIMESTAMP 'now'``), casts (``CAST('today' AS DATE)``, ``to_timestamp('now')``), the implicit casts of
comparisons and date functions (``ts > 'tomorrow'``, ``date_add('today', 1)``, ``'now' - INTERVAL 1 DAY``)
and any constant composition (``CAST(concat('no', 'w') AS TIMESTAMP)``, ``lower('NOW')``). It also gives a
string holding only a time of day (``'12:30:00'``, ``'T12'``) today's date when it becomes a TIMESTAMP --
constant or not. Measured on Spark 4.3 (``local[1]``, session zone UTC, ANSI on):

- over a *column* holding ``'now'``, ``try_cast(s AS TIMESTAMP)`` is NULL and ``CAST`` fails
  (CAST_INVALID_INPUT): since Spark 3.2 special values apply to constant strings only;
- over a column holding ``'12:34:56'`` or ``'T12'``, ``try_cast(s AS TIMESTAMP)`` (and ``TIMESTAMP_LTZ``,
  ``to_timestamp(s)``, ``hour(s)``, ``date_trunc('DAY', s)``, ``s > ts``) is *today* at 12:34:56 / 12:00;
  to ``DATE`` or ``TIMESTAMP_NTZ`` it is NULL; ``to_timestamp(s, 'HH:mm:ss')`` is 1970-01-01 12:34:56 (a
  format fills missing fields from 1970-01-01, not from the clock); ``unix_timestamp(s)`` uses a format too.

So :func:`clock_problem` refuses, wherever Spark converts a string to a date or timestamp (a cast, a date
function's argument, the common type of a comparison, ``IN``, ``BETWEEN``, ``CASE``, ``coalesce``..., or
arithmetic with an interval): a constant that is a special value; where it becomes a timestamp, a constant
that does not start with a date (digits, then ``-``, ``T``, a blank or nothing); a constant whose value it
cannot compute; and a string from the row becoming a timestamp. Where both sides of a comparison are text
(``word = 'today'`` over a string column) nothing is converted and nothing is refused. The types come from
sqlglot's annotation with the input schema; without a schema (``typed=False``) only what does not depend on
column types is decided, the rest waits for the typed check.
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

SPECIAL_VALUES = ("now", "today", "yesterday", "tomorrow")  # epoch is a fixed date
_SPARK_BLANKS = "".join(chr(code) for code in range(33))  # what Spark trims around a date or time string
_LEADING_LETTERS = re.compile(r"[A-Za-z]*")
_DATE_FIRST = re.compile(r"[+-]?[0-9]+(?:[-T ].*)?", re.S)


def is_special_value(text: str) -> bool:
    """Whether Spark may read ``text`` as the current date or time when it becomes a date or timestamp.

    >>> [is_special_value(text) for text in (" Now ", "today UTC", "TOMORROW", "epoch", "nowhere", "2026-01-01")]
    [True, True, True, False, False, False]
    """
    return _LEADING_LETTERS.match(text.strip(_SPARK_BLANKS)).group(0).lower() in SPECIAL_VALUES


def starts_with_date(text: str) -> bool:
    """Whether ``text`` becomes a timestamp without Spark taking anything from the clock.

    >>> [starts_with_date(text) for text in ("2026-01-01 12:00", " 2026", "epoch", "12:30", "T12", "now")]
    [True, True, True, False, False, False]
    """
    trimmed = text.strip(_SPARK_BLANKS)
    return trimmed.lower() == "epoch" or bool(_DATE_FIRST.fullmatch(trimmed))


class _Unknown:
    def __repr__(self) -> str:
        return "unknown"


UNKNOWN = _Unknown()

_TIMESTAMP_TYPES = {exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ,
                    exp.DataType.Type.DATETIME}
_KIND_OF_TYPE = {
    **{kind: "string" for kind in exp.DataType.TEXT_TYPES},
    **{kind: "timestamp" for kind in _TIMESTAMP_TYPES},
    exp.DataType.Type.TIMESTAMPNTZ: "ntz",
    exp.DataType.Type.DATE: "date",
    exp.DataType.Type.INTERVAL: "interval",
    exp.DataType.Type.NULL: "null",
}
# Parts of the syntax that are no value: never converted.
_NOT_VALUES = (exp.Identifier, exp.Var, exp.DataType, exp.DataTypeParam, exp.Star, exp.JSONPath, exp.JSONPathPart)

# Where Spark converts an argument (by its name in sqlglot's node) to a timestamp or a date.
TIMESTAMP_ARGUMENTS = {"Hour": {"this"}, "Minute": {"this"}, "Second": {"this"}, "TimeToStr": {"this"},
                       "TimeStrToTime": {"this"}, "TimestampTrunc": {"this"}, "Extract": {"expression"},
                       "UnixSeconds": {"this"}, "TimestampAdd": {"this"}, "TimestampDiff": {"this", "expression"},
                       "TimeToUnix": {"this"}}
DATE_ARGUMENTS = {"Year": {"this"}, "Month": {"this"}, "Day": {"this"}, "DayOfMonth": {"this"}, "DayOfWeek": {"this"},
                  "DayOfYear": {"this"}, "Quarter": {"this"}, "WeekOfYear": {"this"}, "DateAdd": {"this"},
                  "DateSub": {"this"}, "TsOrDsAdd": {"this"}, "DateTrunc": {"this"}}
# Converted by their own rule: casts by their type, datediff by its unit, to_date and to_timestamp by their format.
OWN_RULE = {"Cast", "TryCast", "DateDiff", "TsOrDsToDate", "StrToTime"}
# Operands converted to the common type of the other operands (and arithmetic with an interval: a timestamp).
COMMON_TYPE = {"EQ", "NEQ", "NullSafeEQ", "NullSafeNEQ", "GT", "GTE", "LT", "LTE", "In", "Between", "Coalesce", "Case",
               "If", "Nullif", "Greatest", "Least", "Array", "ArrayContains", "Add", "Sub"}
# Kinds that never convert an argument to a date or timestamp (a format, a pattern, a number, text...).
NO_CONVERSION = {
    "Column", "Identifier", "Literal", "Null", "Boolean", "Paren", "Star", "DataType", "DataTypeParam", "Var",
    "Interval", "Bracket", "Mul", "Div", "IntDiv", "Mod", "Neg", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "And", "Or", "Not", "Is", "Like", "ILike", "RegexpLike", "Abs", "Ceil", "Floor", "Round", "Sqrt", "Cbrt", "Pow",
    "Exp", "Ln", "Log", "Sign", "Lower", "Upper", "Length", "Substring", "Trim", "Concat", "ConcatWs", "StrPosition",
    "Left", "Right", "Initcap", "Reverse", "Replace", "RegexpExtract", "RegexpReplace", "StartsWith", "EndsWith",
    "Contains", "MD5", "SHA", "SHA2", "Hex", "Repeat", "Pad", "Space", "StrToUnix", "UnixToTime", "UnixToStr",
    "TimestampFromParts", "JSONExtract", "JSONExtractScalar", "JSONPath", "JSONPathRoot", "JSONPathKey",
    "JSONPathSubscript", "JSONFormat", "Struct", "PropertyEQ", "ArraySize", "RegexpSplit", "GenerateSeries", "Count",
    "Sum", "Avg", "Min", "Max",
}
CLASSIFIED = set(TIMESTAMP_ARGUMENTS) | set(DATE_ARGUMENTS) | OWN_RULE | COMMON_TYPE | NO_CONVERSION
# What Spark's functions return where sqlglot's annotation may say otherwise (it types date_trunc as text).
RESULT_KINDS = {"TimestampTrunc": "timestamp", "TimestampAdd": "timestamp", "TimestampFromParts": "timestamp",
                "StrToTime": "timestamp", "TimeStrToTime": "timestamp", "UnixToTime": "timestamp", "TsOrDsToDate": "date",
                "TsOrDsAdd": "date", "DateAdd": "date", "DateSub": "date", "DateTrunc": "date"}
# Kinds whose value is one of their operands, of the operands' common type: a timestamp if one is (Spark's
# coercion), where sqlglot's annotation says text.
_ONE_OF = (exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif, exp.Case, exp.If)


def _type_kind(data_type: exp.DataType | None) -> str | None:
    if data_type is None or data_type.this == exp.DataType.Type.UNKNOWN:
        return None
    return _KIND_OF_TYPE.get(data_type.this, "other")


def _cast_target(to: exp.DataType | None) -> str:
    if to is None:
        return "unknown"
    kinds = {_type_kind(node) for node in to.find_all(exp.DataType)} - {None}
    if to.expressions and kinds & {"timestamp", "date", "ntz"}:
        return "timestamp"  # an array or struct of timestamps: its strings take the same road
    kind = _type_kind(to)
    return kind if kind in ("timestamp", "date", "ntz") else "none"


def _culprit(node: exp.Expression) -> str:
    text = node.sql("spark")
    return text if len(text) <= 100 else text[:97] + "..."


class _Check:
    """One pass over a tree: which nodes are constant, their values, their kinds, what Spark converts them to."""

    def __init__(self, tree: exp.Expression, typed: bool) -> None:
        self.typed = typed
        self.constant: dict[int, bool] = {}
        self.value: dict[int, object] = {}
        self._kinds: dict[int, str] = {}
        order: list[exp.Expression] = []
        pending = [tree]
        while pending:  # a pre-order, read backwards below: children before parents
            node = pending.pop()
            order.append(node)
            pending.extend(node.iter_expressions())
        for node in reversed(order):
            children = list(node.iter_expressions())
            constant = not isinstance(node, (exp.Column, exp.Star)) and all(self.constant[id(child)] for child in children)
            self.constant[id(node)] = constant
            self.value[id(node)] = self._evaluate(node) if constant else UNKNOWN
        self.order = order

    def _evaluate(self, node: exp.Expression) -> object:
        """The value of a constant node when it is text this module can compute: str, None (NULL) or UNKNOWN."""
        values = lambda nodes: [self.value[id(child)] for child in nodes]  # noqa: E731
        if isinstance(node, exp.Literal):
            return node.this if node.is_string else UNKNOWN
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Paren):
            return self.value[id(node.this)]
        if isinstance(node, (exp.Concat, exp.ConcatWs)):
            parts = values(node.expressions)
            if isinstance(node, exp.ConcatWs):
                separator, parts = (parts[0], [part for part in parts[1:] if part is not None]) if parts else (None, [])
            else:
                separator = ""
            if separator is None or (isinstance(node, exp.Concat) and None in parts):
                return None
            known = isinstance(separator, str) and all(isinstance(part, str) for part in parts)
            return separator.join(parts) if known else UNKNOWN
        if isinstance(node, (exp.Lower, exp.Upper)):
            text = self.value[id(node.this)]
            if isinstance(text, str) and text.isascii():
                return text.lower() if isinstance(node, exp.Lower) else text.upper()
            return None if text is None else UNKNOWN
        if isinstance(node, exp.Trim) and not node.args.get("expression") and node.args.get("position") in (None, "BOTH"):
            text = self.value[id(node.this)]
            return text.strip(" ") if isinstance(text, str) else None if text is None else UNKNOWN
        if isinstance(node, (exp.Cast, exp.TryCast)) and _type_kind(node.to) == "string":
            text = self.value[id(node.this)]
            return text if isinstance(text, str) or text is None else UNKNOWN
        return UNKNOWN

    def kind(self, node: exp.Expression) -> str:
        """string, timestamp, ntz, date, interval, null, other, unknown, or deferred (a column without its type)."""
        key = id(node)
        if key not in self._kinds:
            self._kinds[key] = self._kind(node)
        return self._kinds[key]

    def _kind(self, node: exp.Expression) -> str:
        if isinstance(node, exp.Literal):
            return "string" if node.is_string else "other"
        if isinstance(node, exp.Null):
            return "null"
        if isinstance(node, exp.Paren):
            return self.kind(node.this)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return _type_kind(node.to) or "unknown"
        if type(node).__name__ in RESULT_KINDS:
            return RESULT_KINDS[type(node).__name__]
        if isinstance(node, _ONE_OF):
            operands = [self.kind(value) for value in self._values(node)]
            for kind in ("timestamp", "ntz", "date"):
                if kind in operands:
                    return kind
        if self.typed:
            return _type_kind(node.type) or "unknown"
        if not self.constant[id(node)]:
            return "deferred"
        try:  # a constant part: its type does not depend on the schema
            typed = annotate_types(exp.select(node.copy()), dialect="spark").expressions[0]
        except Exception:  # noqa: BLE001 - sqlglot could not type it; the caller treats it as unknown
            return "unknown"
        return _type_kind(typed.type) or "unknown"

    @staticmethod
    def _values(node: exp.Expression) -> list[exp.Expression]:
        """The operands a CASE, IF, coalesce, greatest, least or nullif can return."""
        if isinstance(node, exp.Case):
            values = [branch.args.get("true") for branch in node.args.get("ifs", [])] + [node.args.get("default")]
        elif isinstance(node, exp.If):
            values = [node.args.get("true"), node.args.get("false")]
        elif isinstance(node, exp.Nullif):
            values = [node.this]
        else:
            values = [node.this, *node.expressions]
        return [value for value in values if value is not None]

    def _siblings(self, parent: exp.Expression, child: exp.Expression) -> list[exp.Expression] | None:
        """The operands whose common type ``child`` is converted to, or None if it is in no such position."""
        key = child.arg_key
        if isinstance(parent, exp.If):
            case = parent.parent if isinstance(parent.parent, exp.Case) else None
            if key == "this":  # a condition, or a WHEN value compared with CASE's operand
                if case is None or case.this is None:
                    return None
                return [case.this, *(branch.this for branch in case.args.get("ifs", []) if branch is not parent)]
            if case is None:
                return [value for name in ("true", "false") if name != key and (value := parent.args.get(name)) is not None]
            return [*(branch.args.get("true") for branch in case.args.get("ifs", []) if branch is not parent),
                    *([case.args["default"]] if case.args.get("default") is not None else [])]
        if isinstance(parent, exp.Case):
            ifs = parent.args.get("ifs", [])
            if key == "this":
                return [branch.this for branch in ifs]
            return [branch.args.get("true") for branch in ifs]
        if isinstance(parent, exp.ArrayContains):
            return [parent.this] if key == "expression" else None
        operands = [value for value in parent.iter_expressions()]
        return [operand for operand in operands if operand is not child]

    def target(self, parent: exp.Expression, child: exp.Expression) -> tuple[str, exp.Expression | None]:
        """What Spark converts ``child`` to: timestamp, ntz, date, none, unknown or deferred; and the operand deciding it."""
        name, key = type(parent).__name__, child.arg_key
        if name in ("Cast", "TryCast"):
            return (_cast_target(parent.to) if key == "this" else "none"), None
        if name in TIMESTAMP_ARGUMENTS:
            return ("timestamp" if key in TIMESTAMP_ARGUMENTS[name] else "none"), None
        if name in DATE_ARGUMENTS:
            return ("date" if key in DATE_ARGUMENTS[name] else "none"), None
        if name == "DateDiff":  # datediff(unit, a, b) is timestampdiff
            return ("timestamp" if parent.args.get("unit") else "date") if key in ("this", "expression") else "none", None
        if name == "TsOrDsToDate":
            if key != "this" or parent.args.get("format") is not None:
                return "none", None
            grand = parent.parent
            return ("timestamp" if isinstance(grand, exp.DateDiff) and grand.args.get("unit") else "date"), None
        if name == "StrToTime":
            return ("timestamp" if key == "this" and parent.args.get("format") is None else "none"), None
        if name in COMMON_TYPE:
            return self._common(parent, child)
        if name in NO_CONVERSION:
            return "none", None
        return "unknown", None

    def _common(self, parent: exp.Expression, child: exp.Expression) -> tuple[str, exp.Expression | None]:
        siblings = [sibling for sibling in self._siblings(parent, child) or [] if sibling is not None]
        if isinstance(parent, exp.ArrayContains) and siblings:
            array = siblings[0]
            element = array.type.expressions[0] if self.typed and array.type is not None and array.type.expressions else None
            kind = (_type_kind(element.this if isinstance(element, exp.ColumnDef) else element) if element is not None
                    else "deferred" if not self.typed and not self.constant[id(array)] else None) or "unknown"
            return ("none" if kind in ("string", "other", "null") else kind), array
        kinds = [(self.kind(sibling), sibling) for sibling in siblings]
        for wanted, result in (("interval", "timestamp"), ("timestamp", "timestamp"), ("ntz", "ntz"), ("date", "date"),
                               ("unknown", "unknown"), ("deferred", "deferred")):
            if wanted == "interval" and not isinstance(parent, (exp.Add, exp.Sub)):
                continue
            for kind, sibling in kinds:
                if kind == wanted:
                    return result, sibling
        return "none", None

    def problem(self) -> str | None:
        for node in reversed(self.order):  # the innermost culprit first
            if isinstance(node, exp.StrToUnix) and node.this is None:
                return ("unix_timestamp() without an argument reads the clock: it is nondeterministic; a replayed "
                        "micro-batch or a task shared with another dataflow would not give the records a private first "
                        "run gives")
            parent = node.parent if node is not self.order[0] else None  # the tree may sit in a SELECT
            if parent is None or isinstance(node, _NOT_VALUES) or (isinstance(node, exp.If) and isinstance(parent, exp.Case)):
                continue  # not a value (a WHEN ... THEN of a CASE is judged by its parts)
            target, decider = self.target(parent, node)
            if target in ("none", "deferred"):
                continue
            kind = self.kind(node)
            if kind not in ("string", "unknown"):
                continue
            found = self._judge(node, parent, target, decider)
            if found:
                return found
        return None

    def _judge(self, node: exp.Expression, parent: exp.Expression, target: str, decider: exp.Expression | None) -> str | None:
        if isinstance(parent, (exp.TsOrDsToDate, exp.TimeStrToTime)) and isinstance(parent.parent, exp.Func):
            parent = parent.parent  # year(x), date_format(x, f), datediff(...): sqlglot's conversion is not rendered
        what, context = _culprit(node), _culprit(parent)
        becomes = {"timestamp": "timestamp", "ntz": "timestamp", "date": "date"}.get(target, "date or timestamp")
        if not self.constant[id(node)]:
            if not self.typed:
                return None
            if target == "timestamp":
                return (f"{what!r} is text from the row that becomes a timestamp in {context!r}: Spark gives a text "
                        "holding only a time of day (such as '12:30:00') today's date, so the value could depend on "
                        f"the clock, not on the row. Parse it with a format, e.g. to_timestamp({what}, "
                        "'yyyy-MM-dd HH:mm:ss') (missing fields then default to 1970-01-01), or compare it as text")
            if target == "unknown" and self.kind(node) == "string":
                return self._unknown(what, context, decider)
            return None
        value = self.value[id(node)]
        if value is None:
            return None
        if isinstance(value, str):
            if is_special_value(value):
                return (f"{what!r} is the string {value!r}, which Spark turns into the current date or time when it "
                        f"becomes a {becomes}, as it does in {context!r}: the value would depend on the clock, not on "
                        "the row. Use the record's own time column, or a fixed literal such as "
                        "TIMESTAMP '2026-01-01 00:00:00'")
            if target in ("date", "ntz") or starts_with_date(value):
                return None
            if target == "timestamp":
                return (f"{what!r} is the string {value!r}, which does not start with a date: Spark gives it today's "
                        f"date, read from the clock, when it becomes a timestamp, as it does in {context!r}. Write a "
                        "full date and time, such as TIMESTAMP '2026-01-01 12:30:00'")
            return self._unknown(what, context, decider)
        if target == "unknown":
            return self._unknown(what, context, decider)
        return (f"cannot tell at submit what {what!r} is, and it becomes a {becomes} in {context!r}, where Spark turns "
                "strings such as 'now', 'today' or '12:30' into the current date or time. Write a date or timestamp "
                "literal instead, such as DATE '2026-01-01' or TIMESTAMP '2026-01-01 00:00:00'")

    def _unknown(self, what: str, context: str, decider: exp.Expression | None) -> str:
        other = f"the type of {_culprit(decider)!r}" if decider is not None else "how Spark converts it"
        return (f"cannot tell {other} in {context!r}: if it is a date or timestamp, Spark converts {what!r} to it, and "
                "'now', 'today' or a bare time of day would read the clock. CAST the operands to the type you mean")


def clock_problem(tree: exp.Expression, *, typed: bool) -> str | None:
    """Why ``tree``'s value could depend on the clock through a string Spark turns into a date or time, or None.

    With ``typed=True`` the nodes carry sqlglot's type annotation over the input schema and every rule is
    decided; with ``typed=False`` what depends on a column's type is left to the typed check. Pure.

    >>> import sqlglot
    >>> print(clock_problem(sqlglot.parse_one("CAST(lower('NOW') AS TIMESTAMP)", dialect="spark"), typed=False))
    "LOWER('NOW')" is the string 'now', which Spark turns into the current date or time when it becomes a timestamp, as it does in "CAST(LOWER('NOW') AS TIMESTAMP)": the value would depend on the clock, not on the row. Use the record's own time column, or a fixed literal such as TIMESTAMP '2026-01-01 00:00:00'
    >>> clock_problem(sqlglot.parse_one("word = 'today'", dialect="spark"), typed=False) is None
    True
    """
    return _Check(tree, typed).problem()
