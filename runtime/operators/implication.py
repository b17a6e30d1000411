"""Does one filter's predicate imply another's? Decided by the Z3 SMT solver, under Spark's semantics.

A filter keeps the rows where its predicate is TRUE (not FALSE, not NULL). The
narrower filter ``new`` can read the wider filter ``running``'s output instead of
its input when every row on which ``new`` is TRUE makes ``running`` TRUE too:
:func:`implies` asks Z3 whether a row exists on which ``new`` is TRUE and
``running`` is not, and says yes only when Z3 proves none does (``unsat``
within the time budget). Anything else (a row found, a timeout, an expression
it cannot model) is *no*: a missed share costs a task, a wrong one would lose
records.

How Spark SQL becomes formulas. Every boolean expression gets two formulas,
"is TRUE" and "is FALSE" (SQL's three values: both false means NULL):

- ``AND``/``OR``/``NOT`` follow Kleene's logic (AND is FALSE when either side
  is, OR is TRUE when either side is, NOT swaps); ``IN`` is an OR of ``=``,
  ``BETWEEN`` an AND of ``>=`` and ``<=``; ``IS [NOT] NULL`` and ``<=>`` are
  never NULL;
- a comparison is NULL when either side is, else TRUE or FALSE;
- columns and literals are modelled exactly where Spark compares them
  exactly: integral columns as integers, decimal columns and literals as
  rationals, strings as strings (Spark orders them by UTF-8 bytes, which is
  code point order, Z3's order), booleans as booleans. A ``double`` carries a
  NaN flag, and NaN compares as Spark has it: equal to NaN, greater than every
  other value. A literal compared with a ``double`` becomes the double Spark
  makes of it (decimal literals of at most 15 digits, where Spark's conversion
  rounds as Python's does). Infinities need no model: with finitely many
  literals, a row with an infinity orders like one with a large finite value;
- whatever else (a function call, arithmetic, ``LIKE``, a cast, a comparison
  Spark makes through a lossy conversion such as ``bigint`` against
  ``double``) is an opaque atom named by its canonical text: the same text
  in both predicates is the same unknown value (expressions are deterministic:
  :mod:`runtime.operators.sql`), so ``lower(city) = 'x' AND temp > 30``
  implies ``lower(city) = 'x' AND temp > 20``, and nothing is assumed about it
  otherwise. A typed opaque term (``abs(x)``) is an unknown number, string or
  boolean of its type; an untyped one is an unknown boolean atom.

Every model of the formulas is a superset of the rows Spark can see (integers
without bounds, rationals for doubles), so ``unsat`` is a proof for Spark's
rows too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from sqlglot import exp

from runtime.operators.sql import DIALECT, SqlProblem, canonical_sql, infer_type, parse_expression
from runtime.operators.types import INTEGRAL, Schema

#: Milliseconds Z3 may spend on one question; past it the answer is "no".
BUDGET_MS = 50

_SMALL_INTEGRAL = frozenset({"tinyint", "smallint", "int"})  # exact as doubles too
_MAX_DOUBLE_DIGITS = 15
_lock = threading.Lock()  # Z3's default context is not thread-safe


def implies(new: str, running: str, schema: Schema, budget_ms: int = BUDGET_MS) -> bool:
    """Whether every row of ``schema`` on which ``new`` is TRUE makes ``running`` TRUE (proved, within budget).

    >>> schema = {"temp": "double", "city": "string", "n": "int"}
    >>> implies("temp > 30", "temp > 20", schema), implies("temp > 20", "temp > 30", schema)
    (True, False)
    >>> implies("city IN ('a', 'b') AND n BETWEEN 1 AND 5", "n >= 0 AND city <> 'c'", schema)
    True
    >>> implies("temp < 10", "temp < 20 OR temp IS NULL", schema), implies("NOT temp > 30", "temp <= 30", schema)
    (True, True)
    >>> implies("upper(city) = 'X' AND n > 3", "upper(city) = 'X'", schema), implies("upper(city) = 'X'", "city = 'x'", schema)
    (True, False)
    """
    return _implies(canonical_sql(new), canonical_sql(running), tuple(sorted(schema.items())), budget_ms)


@lru_cache(maxsize=65_536)
def _implies(new: str, running: str, columns: tuple[tuple[str, str], ...], budget_ms: int) -> bool:
    if new == running:
        return True
    import z3

    with _lock:
        model = _model(columns)
        try:
            true_new, constraints_new = model.formula(new)
            true_running, constraints_running = model.formula(running)
        except (SqlProblem, RecursionError):
            return False
        solver = z3.Solver()
        solver.set("timeout", budget_ms)
        solver.add(*constraints_new, *constraints_running, true_new, z3.Not(true_running))
        return solver.check() == z3.unsat


@lru_cache(maxsize=256)
def _model(columns: tuple[tuple[str, str], ...]) -> "_Model":
    """One model per input schema, shared by its questions: a predicate is translated once, and the same
    column (or opaque text) is the same variable in every question."""
    return _Model(dict(columns))


def conjuncts(text: str) -> list[str]:
    """The top-level ``AND`` operands of a predicate, each in canonical text.

    >>> conjuncts("(a > 1 AND b < 2) AND (c = 3 OR d = 4)")
    ['a > 1', 'b < 2', 'c = 3 OR d = 4']
    """
    pending = [parse_expression(text)]
    found: list[str] = []
    while pending:
        node = pending.pop()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.And):
            pending.extend([node.expression, node.this])
        else:
            found.append(node.sql(DIALECT))
    return found


def residual(new: str, running: str, schema: Schema, budget_ms: int = BUDGET_MS) -> str | None:
    """What ``new`` still has to test on ``running``'s output (``new`` implies ``running``): its conjuncts
    ``running`` does not imply. None when it implies them all (the two are equivalent: read ``running`` as is).

    >>> residual("temp > 30 AND city = 'x'", "temp > 30", {"temp": "double", "city": "string"})
    "city = 'x'"
    >>> residual("temp > 30", "30 < temp", {"temp": "double"}) is None
    True
    """
    return _residual(new, running, tuple(sorted(schema.items())), budget_ms)


@lru_cache(maxsize=16_384)
def _residual(new: str, running: str, columns: tuple[tuple[str, str], ...], budget_ms: int) -> str | None:
    schema = dict(columns)
    kept = [part for part in conjuncts(new) if not implies(running, part, schema, budget_ms)]
    if not kept:
        return None
    return canonical_sql(exp.and_(*(parse_expression(part) for part in kept)).sql(DIALECT))


@dataclass
class _Term:
    """A value in Z3: ``kind`` is ``int``, ``real``, ``double`` (a real with a NaN flag), ``string`` or ``boolean``;
    ``sql_type`` is Spark's type (for a literal: ``integral``, ``decimal`` or ``double literal``), which
    :func:`_numeric_pair` reads to tell whether Spark compares it exactly."""

    kind: str
    value: Any
    null: Any
    nan: Any = False
    sql_type: str = ""
    text: str = ""  # a literal's digits as written (no sign)
    number: Fraction | None = None  # a numeric literal's exact value


class _Model:
    """The variables, the translated predicates and the opaque atoms' side constraints of one input schema, built as
    predicates are translated and shared by every question over that schema (:func:`_model`)."""

    def __init__(self, schema: Schema):
        import z3

        self.z3 = z3
        self.schema = schema
        self._constraints: dict[str, Any] = {}  # opaque atom text -> its side constraint
        self._used: set[str] = set()
        self._formulas: dict[str, tuple[Any, tuple[Any, ...]]] = {}
        self._terms: dict[str, _Term] = {}
        self._atoms: dict[str, tuple[Any, Any]] = {}

    def formula(self, text: str) -> tuple[Any, tuple[Any, ...]]:
        """``text`` is TRUE, as a formula, and the side constraints of the opaque atoms it holds (cached)."""
        if text not in self._formulas:
            self._used = set()
            true = self.truth(parse_expression(text))[0]
            self._formulas[text] = (true, tuple(self._constraints[atom] for atom in sorted(self._used)))
        return self._formulas[text]

    # -- boolean expressions: (is TRUE, is FALSE) ------------------------------------------------

    def truth(self, node: exp.Expression) -> tuple[Any, Any]:
        z3 = self.z3
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.And):
            (t1, f1), (t2, f2) = self.truth(node.this), self.truth(node.expression)
            return z3.And(t1, t2), z3.Or(f1, f2)
        if isinstance(node, exp.Or):
            (t1, f1), (t2, f2) = self.truth(node.this), self.truth(node.expression)
            return z3.Or(t1, t2), z3.And(f1, f2)
        if isinstance(node, exp.Not):
            true, false = self.truth(node.this)
            return false, true
        if isinstance(node, exp.Boolean):
            return z3.BoolVal(bool(node.this)), z3.BoolVal(not node.this)
        if isinstance(node, exp.Null):
            return z3.BoolVal(False), z3.BoolVal(False)
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            term = self.term(node.this)
            if term is not None:
                return term.null, z3.Not(term.null)
        if isinstance(node, exp.In) and not node.args.get("query") and node.expressions:
            parts = [self.compare(exp.EQ, node.this, item) for item in node.expressions]
            if all(part is not None for part in parts):
                return z3.Or([t for t, _ in parts]), z3.And([f for _, f in parts])
        if isinstance(node, exp.Between):
            low, high = self.compare(exp.GTE, node.this, node.args["low"]), self.compare(exp.LTE, node.this, node.args["high"])
            if low is not None and high is not None:
                return z3.And(low[0], high[0]), z3.Or(low[1], high[1])
        if type(node) in _COMPARISONS:
            found = self.compare(type(node), node.this, node.expression)
            if found is not None:
                return found
        term = self.term(node)
        if term is not None and term.kind == "boolean":
            return z3.And(z3.Not(term.null), term.value), z3.And(z3.Not(term.null), z3.Not(term.value))
        return self._atom(node)

    def _atom(self, node: exp.Expression) -> tuple[Any, Any]:
        """An opaque boolean: TRUE, FALSE or NULL, the same for the same canonical text."""
        text = node.sql(DIALECT)
        if text not in self._atoms:
            index = len(self._atoms)
            true, false = self.z3.Bool(f"atom{index}.true"), self.z3.Bool(f"atom{index}.false")
            self._constraints[text] = self.z3.Not(self.z3.And(true, false))
            self._atoms[text] = (true, false)
        self._used.add(text)
        return self._atoms[text]

    # -- comparisons ------------------------------------------------------------------------------

    def compare(self, kind: type, left: exp.Expression, right: exp.Expression) -> tuple[Any, Any] | None:
        """(is TRUE, is FALSE) of ``left <kind> right``, or None when Spark's comparison is not modelled exactly."""
        z3 = self.z3
        a, b = self.term(left), self.term(right)
        if a is None or b is None or not _comparable(a, b):
            return None
        if a.kind in ("int", "real", "double"):
            pair = _numeric_pair(a, b)
            if pair is None:
                return None
            a, b = pair
        both = z3.And(z3.Not(a.null), z3.Not(b.null))
        equal, less = self._order(a, b)
        if kind is exp.NullSafeEQ or kind is exp.NullSafeNEQ:
            same = z3.Or(z3.And(a.null, b.null), z3.And(both, equal))
            return (same, z3.Not(same)) if kind is exp.NullSafeEQ else (z3.Not(same), same)
        if less is None and kind not in (exp.EQ, exp.NEQ):
            return None
        holds = {
            exp.EQ: lambda: equal,
            exp.NEQ: lambda: z3.Not(equal),
            exp.LT: lambda: less,
            exp.LTE: lambda: z3.Or(less, equal),
            exp.GT: lambda: z3.Not(z3.Or(less, equal)),
            exp.GTE: lambda: z3.Not(less),
        }[kind]()
        return z3.And(both, holds), z3.And(both, z3.Not(holds))

    def _order(self, a: _Term, b: _Term) -> tuple[Any, Any]:
        """(a = b, a < b) for non-null sides; NaN equals NaN and is above every other number."""
        z3 = self.z3
        if a.kind == "boolean":
            return a.value == b.value, None
        if a.kind == "string":
            return a.value == b.value, z3.StrLT(a.value, b.value) if hasattr(z3, "StrLT") else a.value < b.value
        numbers = z3.And(z3.Not(a.nan), z3.Not(b.nan))
        equal = z3.Or(z3.And(a.nan, b.nan), z3.And(numbers, a.value == b.value))
        less = z3.Or(z3.And(z3.Not(a.nan), b.nan), z3.And(numbers, a.value < b.value))
        return equal, less

    # -- values -----------------------------------------------------------------------------------

    def term(self, node: exp.Expression) -> _Term | None:
        """A column, a literal, or an opaque value of a known type; None when neither."""
        z3 = self.z3
        while isinstance(node, exp.Paren):
            node = node.this
        literal = _literal(node)
        if literal is not None:
            return literal
        if isinstance(node, exp.Column):
            sql_type = self.schema.get(node.name)
            key = f"column:{node.name}"
        else:
            try:
                sql_type = infer_type(node.sql(DIALECT), node, self.schema)
            except SqlProblem:
                return None
            key = f"term:{node.sql(DIALECT)}"
        if sql_type is None:
            return None
        if key not in self._terms:
            kind = _kind_of(sql_type)
            if kind is None:
                return None
            index = len(self._terms)
            null = z3.Bool(f"v{index}.null")
            value = {"int": z3.Int, "real": z3.Real, "double": z3.Real, "string": z3.String, "boolean": z3.Bool}[kind](f"v{index}")
            nan = z3.Bool(f"v{index}.nan") if kind == "double" else z3.BoolVal(False)
            self._terms[key] = _Term(kind, value, null, nan, sql_type)
        return self._terms[key]


def _kind_of(sql_type: str) -> str | None:
    if sql_type in INTEGRAL:
        return "int"
    if sql_type == "double":
        return "double"
    if sql_type.startswith("decimal("):
        return "real"
    if sql_type in ("string", "boolean"):
        return sql_type
    return None  # float (Spark widens it to double, rounding differently), dates and timestamps: not modelled


def _literal(node: exp.Expression) -> _Term | None:
    """A numeric, string or boolean literal as a term (``sql_type`` tells Spark's literal type)."""
    import z3

    if isinstance(node, exp.Boolean):
        return _Term("boolean", z3.BoolVal(bool(node.this)), z3.BoolVal(False), sql_type="boolean")
    if isinstance(node, exp.Literal) and node.is_string:
        return _Term("string", z3.StringVal(node.this), z3.BoolVal(False), sql_type="string")
    sign, suffix_type = 1, None
    while isinstance(node, exp.Neg):
        sign, node = -sign, node.this
    if isinstance(node, exp.TryCast) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        suffix_type = node.to.sql(DIALECT).lower()  # 30L, 2.5D
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    text = node.this
    try:
        value = Fraction(text) * sign
    except (ValueError, ZeroDivisionError):
        return None
    if suffix_type == "double" or (suffix_type is None and "e" in text.lower()):
        sql_type = "double literal"
    elif suffix_type in ("bigint", "int", "smallint", "tinyint") or (suffix_type is None and value.denominator == 1 and "." not in text):
        sql_type = "integral literal"
    elif suffix_type is None:
        sql_type = "decimal literal"
    else:
        return None
    return _Term("real", z3.RealVal(value), z3.BoolVal(False), sql_type=sql_type, text=text, number=value)


def _comparable(a: _Term, b: _Term) -> bool:
    numeric = ("int", "real", "double")
    return (a.kind in numeric and b.kind in numeric) or a.kind == b.kind


def _numeric_pair(a: _Term, b: _Term) -> tuple[_Term, _Term] | None:
    """The two sides as Spark compares them, or None when its conversion loses precision.

    With a ``double`` (column, value or literal) on either side Spark compares doubles: the other side must be
    exact as a double (a small integral column, or a literal of at most 15 digits, taken as the double it
    becomes). Otherwise integers and decimals compare exactly.
    """
    if not any(side.kind == "double" or side.sql_type == "double literal" for side in (a, b)):
        return a, b
    converted = []
    for side in (a, b):
        if side.kind == "double" or side.sql_type in _SMALL_INTEGRAL:
            converted.append(side)
        elif side.sql_type.endswith("literal") and _exact_as_double(side):
            import z3

            converted.append(_Term("real", z3.RealVal(Fraction(float(side.number))), side.null, sql_type="double literal",
                                   text=side.text, number=Fraction(float(side.number))))
        else:
            return None  # bigint, decimal: Spark's conversion to double rounds
    return converted[0], converted[1]


def _exact_as_double(literal: _Term) -> bool:
    """Whether Spark's double of ``literal`` is Python's ``float`` of its text: a double literal (Java parses it
    correctly rounded, as Python does), an integer of at most 15 digits (exact as a double), or a decimal of at most
    15 digits (Spark divides its unscaled value by a power of ten, both exact doubles, and the division rounds
    correctly)."""
    if literal.sql_type == "double literal":
        return True
    digits = literal.text.replace(".", "").lstrip("0")
    if literal.sql_type == "integral literal":
        return len(digits) <= 15
    scale = len(literal.text.partition(".")[2])
    return len(digits) <= _MAX_DOUBLE_DIGITS and scale <= 22


_COMPARISONS = {exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ}
