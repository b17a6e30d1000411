"""Column names a task's output may have: checked once per output schema, whatever the operator.

The runtime works on frames where user columns sit next to its own: the
keyed shuffle adds ``__sana_pkey``, ``__sana_bucket`` and ``__sana_side``, a
window's workers ``__sana_ts``, ``__sana_start``, ``__sana_end``,
``__p_<part>`` and ``__agg_<aggregate>__<part>``, a join's workers hold each
side's columns as ``__l_<name>`` and ``__r_<name>`` (runtime/spark/shuffle.py,
window.py, window_worker.py, join_worker.py). Every name starting with
:data:`RESERVED_PREFIX` is Sana's, so no user column can meet one of them.

Spark resolves column names case-insensitively (``spark.sql.caseSensitive``
is false), so ``Temp`` and ``temp`` in one schema are one ambiguous column
at run time (and ``Window_End`` next to a window's ``window_end``): two
names of one output schema must differ in more than case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runtime.operators.base import field_problem
from runtime.operators.limits import OperatorLimits, check_count
from runtime.operators.types import Schema

RESERVED_PREFIX = "__"


def check_output(schema: Schema, inputs: Iterable[Schema], config: Mapping[str, Any], limits: OperatorLimits) -> None:
    """Refuse an output schema the runtime cannot carry; each refusal names the config field that named the column.

    ``inputs``: the schemas arriving at the task (a column among them was
    named upstream); ``config``: the task's canonical config (by alias), where
    the columns the task adds are named. Raises
    :class:`~runtime.exceptions.OperatorConfigInvalid`: a name with the
    reserved prefix, two names differing only in case, or more columns than
    ``limits.max_columns``.

    >>> limits = OperatorLimits()
    >>> check_output({"sensor": "string", "temp": "double"}, [], {"schema": {"sensor": "string", "temp": "double"}}, limits)
    >>> check_output({"k": "string", "__sana_end": "bigint"}, [{"k": "string"}], {"aggregates": {"__sana_end": "count(*)"}}, limits)
    Traceback (most recent call last):
    ...
    runtime.exceptions.OperatorConfigInvalid: column name '__sana_end' starts with '__', which Sana reserves for the columns its runtime adds (such as __sana_bucket)
    >>> try:
    ...     check_output({"Temp": "double", "temp": "double"}, [], {"schema": {"Temp": "double", "temp": "double"}}, limits)
    ... except Exception as error:
    ...     print(error.culprit["field"], "|", error)
    config.schema.temp | columns 'Temp' and 'temp' differ only in case; Spark resolves column names case-insensitively, so either would be an ambiguous reference: rename one
    """
    inherited = {name for schema_in in inputs for name in schema_in}
    seen: dict[str, str] = {}
    for name in schema:
        if name.startswith(RESERVED_PREFIX):
            raise field_problem(named_at(name, config),
                                f"column name {name!r} starts with {RESERVED_PREFIX!r}, which Sana reserves for the "
                                "columns its runtime adds (such as __sana_bucket)")
        other = seen.setdefault(name.lower(), name)
        if other != name:
            added_first = sorted((name, other), key=lambda column: column in inherited)  # stable: name first
            raise field_problem(
                next((field for field in (named_at(column, config) for column in added_first) if field), ""),
                f"columns {other!r} and {name!r} differ only in case; Spark resolves column names case-insensitively, "
                "so either would be an ambiguous reference: rename one")
    if len(schema) > limits.max_columns:
        first_over = list(schema)[limits.max_columns]
        field = named_at(first_over, config) if first_over not in inherited else ""
        check_count(field, "columns in the output", len(schema), limits, "max_columns")


def named_at(name: str, config: Mapping[str, Any]) -> str:
    """The config field (dotted, inside ``config``) that names output column ``name``, or "" if none does.

    A task names its columns as the keys of a mapping (a source's ``schema``,
    a select's ``columns``, a window's ``aggregates``) or in a list (a
    window's ``keys``).

    >>> named_at("f", {"columns": {"f": "temp * 2"}}), named_at("k", {"keys": ["s", "k"]}), named_at("x", {"on": "x"})
    ('columns.f', 'keys.1', '')
    """
    for key, value in config.items():
        if isinstance(value, Mapping) and name in value:
            return f"{key}.{name}"
        if isinstance(value, list) and name in value:
            return f"{key}.{value.index(name)}"
    return ""
