"""Reusable annotated types for operator configs (names, durations, SQL text)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from runtime.operators.sql import SqlProblem, canonical_sql, parse_expression
from runtime.operators.types import canonical_type

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,200}")
_DURATION = re.compile(r"\s*(\d+)\s*([a-z]+)\s*")
_UNIT_MS = {
    "millisecond": 1, "milliseconds": 1, "ms": 1,
    "second": 1000, "seconds": 1000, "sec": 1000, "secs": 1000, "s": 1000,
    "minute": 60_000, "minutes": 60_000, "min": 60_000, "mins": 60_000,
    "hour": 3_600_000, "hours": 3_600_000, "h": 3_600_000,
    "day": 86_400_000, "days": 86_400_000, "d": 86_400_000,
}


def _identifier(value: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a column name (letters, digits and _, not starting with a digit, 1-128 long)"
        )
    return value


def _topic(value: str) -> str:
    if not _TOPIC.fullmatch(value) or value.startswith("__") or value in {".", ".."}:
        raise ValueError(f"{value!r} is not a usable Kafka topic name (1-200 of A-Z a-z 0-9 . _ -, not starting with __)")
    return value


def duration_ms(value: str) -> int:
    """Milliseconds in a duration such as ``"10 seconds"`` or ``"1 minute"``.

    >>> duration_ms("1 minute"), duration_ms("250 ms")
    (60000, 250)
    """
    match = _DURATION.fullmatch(value.lower())
    if not match or match[2] not in _UNIT_MS or int(match[1]) <= 0:
        raise ValueError(
            f"{value!r} is not a duration like '10 seconds' (units: milliseconds, seconds, minutes, hours, days)"
        )
    return int(match[1]) * _UNIT_MS[match[2]]


def _canonical_duration(value: str) -> str:
    millis = duration_ms(value)
    return f"{millis // 1000} seconds" if millis % 1000 == 0 else f"{millis} milliseconds"


def _sql(value: str) -> str:
    try:
        parse_expression(value, aggregate=True)
    except SqlProblem as problem:
        raise ValueError(str(problem)) from None
    return canonical_sql(value)


def _column_type(value: str) -> str:
    return canonical_type(value)


Identifier = Annotated[str, AfterValidator(_identifier)]
TopicName = Annotated[str, AfterValidator(_topic)]
Duration = Annotated[str, AfterValidator(_canonical_duration)]
SqlText = Annotated[str, StringConstraints(min_length=1, max_length=10_000), AfterValidator(_sql)]
ColumnType = Annotated[str, AfterValidator(_column_type)]
