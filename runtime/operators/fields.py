"""Reusable annotated types for operator configs (names, durations, SQL text)."""

from __future__ import annotations

import re
from functools import lru_cache
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


# The longest duration any config may give, whatever the settings allow: the keyed workers compute in
# microseconds in int64 (numpy, Arrow, pandas' Timedelta tops out at 106,751 days), adding a window or a
# watermark to event times up to year 9999 (2.5e17 us); 3650 days (3.2e17 us) keeps every sum far from 2**63.
MAX_DURATION_MS = 3650 * 86_400_000
_MAX_DIGITS = 20  # more digits cannot be under MAX_DURATION_MS; checked before int() (Python refuses 4,300+ digits)


def duration_ms(value: str) -> int:
    """Milliseconds in a duration such as ``"10 seconds"`` or ``"1 minute"``.

    Raises ``ValueError`` naming the value when it is not a positive duration
    or is longer than :data:`MAX_DURATION_MS` (3650 days).

    >>> duration_ms("1 minute"), duration_ms("250 ms")
    (60000, 250)
    >>> duration_ms("9000000000000000 days")
    Traceback (most recent call last):
    ...
    ValueError: '9000000000000000 days' is longer than 3650 days, the longest duration a config may give
    """
    match = _DURATION.fullmatch(value.lower())
    if not match or match[2] not in _UNIT_MS or not match[1].strip("0"):
        raise ValueError(
            f"{value!r} is not a duration like '10 seconds' (units: milliseconds, seconds, minutes, hours, days)"
        )
    digits = match[1].lstrip("0")
    if len(digits) > _MAX_DIGITS or int(digits) * _UNIT_MS[match[2]] > MAX_DURATION_MS:
        raise ValueError(f"{value!r} is longer than {describe_ms(MAX_DURATION_MS)}, the longest duration a config may give")
    return int(digits) * _UNIT_MS[match[2]]


def describe_ms(millis: int) -> str:
    """A duration in its largest whole unit, as a message shows it.

    >>> describe_ms(86_400_000), describe_ms(7_200_000), describe_ms(1), describe_ms(1500)
    ('1 day', '2 hours', '1 millisecond', '1500 milliseconds')
    """
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000), ("millisecond", 1)):
        if millis % size == 0:
            count = millis // size
            return f"{count} {unit}" + ("" if count == 1 else "s")
    raise ValueError(f"{millis!r} is not a whole number of milliseconds")


def _canonical_duration(value: str) -> str:
    millis = duration_ms(value)
    return f"{millis // 1000} seconds" if millis % 1000 == 0 else f"{millis} milliseconds"


# Expressions up to this long have their checks remembered (the same few come back in submit after submit);
# the bound keeps what the cache can hold small whatever a client sends.
_REMEMBERED_SQL_CHARS = 2_000


def _sql(value: str) -> str:
    return _checked_sql(value) if len(value) <= _REMEMBERED_SQL_CHARS else _check_sql(value)


def _check_sql(value: str) -> str:
    try:
        parse_expression(value, aggregate=True)
    except SqlProblem as problem:
        raise ValueError(str(problem)) from None
    return canonical_sql(value)


_checked_sql = lru_cache(maxsize=8_192)(_check_sql)  # a refused text raises again each time: nothing cached


def _column_type(value: str) -> str:
    return canonical_type(value)


Identifier = Annotated[str, AfterValidator(_identifier)]
TopicName = Annotated[str, AfterValidator(_topic)]
Duration = Annotated[str, AfterValidator(_canonical_duration)]
SqlText = Annotated[str, StringConstraints(min_length=1, max_length=10_000), AfterValidator(_sql)]
ColumnType = Annotated[str, AfterValidator(_column_type)]
