"""Projection containment: computing one ``select``'s columns from another ``select``'s output.

A ``select`` over stream X can read a running ``select`` over X instead when each
of its expressions can be written over the running one's output columns:
:func:`rebase` replaces every subexpression equal (in canonical text) to one of
the running select's expressions by that output column, largest first, and
succeeds only if no reference to X's own columns is left and every column keeps
its type. Expressions are deterministic (:mod:`runtime.operators.sql`), so the
rebased select gives the same values row for row.
"""

from __future__ import annotations

from functools import lru_cache

from sqlglot import exp

from runtime.operators.sql import DIALECT, SqlProblem, canonical_sql, infer_type, parse_expression
from runtime.operators.types import Schema


def rebase(new: dict[str, str], running: dict[str, str], schema: Schema, running_schema: Schema) -> dict[str, str] | None:
    """``new``'s columns written over ``running``'s output, or None when one of them cannot be.

    ``schema`` is the input both read; ``running_schema`` the running select's output.

    >>> schema = {"temp": "double", "city": "string", "id": "int"}
    >>> running = {"id": "id", "f": "temp * 1.8 + 32", "c": "upper(city)"}
    >>> out = {"id": "int", "f": "double", "c": "string"}
    >>> rebase({"f": "temp * 1.8 + 32", "hot": "temp * 1.8 + 32 > 100"}, running, schema, out)
    {'f': 'f', 'hot': 'f > 100'}
    >>> rebase({"k": "temp"}, running, schema, out) is None   # temp is not in the running output
    True
    """
    arguments = (tuple(new.items()), tuple(running.items()), tuple(schema.items()), tuple(running_schema.items()))
    small = sum(len(text) for text in (*new.values(), *running.values())) <= _REMEMBERED_CHARS
    found = (_remembered_rebase if small else _rebase)(*arguments)
    return None if found is None else dict(found)


# Pairs of selects whose expressions total up to this many characters have their answer remembered (the same
# pairs come back submit after submit); the bound keeps what the cache holds small whatever clients send.
_REMEMBERED_CHARS = 4_000


def _rebase(new: tuple[tuple[str, str], ...], running: tuple[tuple[str, str], ...], schema: tuple[tuple[str, str], ...],
            running_schema: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...] | None:
    """:func:`rebase` on hashable arguments (so that it can be remembered)."""
    new, running, schema, running_schema = dict(new), dict(running), dict(schema), dict(running_schema)
    by_text = {canonical_sql(text): name for name, text in running.items()}
    rebased: dict[str, str] = {}
    for name, text in new.items():
        try:
            tree = parse_expression(text)
            before = infer_type(text, tree, schema)
        except SqlProblem:
            return None
        replaced = _replace(tree, by_text)
        if replaced is None:
            return None
        written = replaced.sql(DIALECT)
        try:
            after = infer_type(written, replaced, running_schema)
        except SqlProblem:
            return None
        if before is None or after != before:
            return None
        rebased[name] = canonical_sql(written)
    return tuple(rebased.items())


_remembered_rebase = lru_cache(maxsize=16_384)(_rebase)


def _replace(tree: exp.Expression, by_text: dict[str, str]) -> exp.Expression | None:
    """``tree`` with its largest subexpressions found in ``by_text`` made columns; None if an input column is left."""
    name = by_text.get(tree.sql(DIALECT))
    if name is not None:
        return exp.column(name, quoted=not name.isidentifier())
    if isinstance(tree, exp.Column):
        return None
    for key, value in list(tree.args.items()):
        if isinstance(value, exp.Expression):
            replaced = _replace(value, by_text)
            if replaced is None:
                return None
            tree.set(key, replaced)
        elif isinstance(value, list):
            items = []
            for item in value:
                if isinstance(item, exp.Expression):
                    item = _replace(item, by_text)
                    if item is None:
                        return None
                items.append(item)
            tree.set(key, items)
    return tree
