"""How much one task's config may multiply: records, state and Spark tasks, bounded at submit.

A sliding window repeats each record once per window holding it, every
logical worker of a keyed operator is one Spark task per micro-batch, a
Reshape helper receives copies of the other join side, a long window or
watermark keeps state for as long, every column is parsed and carried for
every record. :class:`OperatorLimits` holds the bounds; its defaults are the
settings' defaults (``SANA_MAX_WINDOW_S`` ...: one source, ``sana/settings.py``)
and the API passes the values the service runs with
(:meth:`OperatorLimits.from_settings`). The checks are pure: the same config
and limits always give the same answer, and nothing is read from the
environment here.

A refusal is an :class:`OperatorLimitExceeded`: an
:class:`~runtime.exceptions.OperatorConfigInvalid` (422
``OPERATOR_CONFIG_INVALID``) naming the config field and, in its message and
``limit``, the setting that bounds it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from runtime.exceptions import OperatorConfigInvalid
from runtime.operators.fields import describe_ms
from sana.settings import Settings


def _default(name: str) -> Any:
    return Settings.model_fields[name].default


@dataclass(frozen=True)
class OperatorLimits:
    """The bounds of :mod:`runtime.operators.limits`, named as the settings that set them."""

    max_window_s: int = _default("max_window_s")
    max_watermark_s: int = _default("max_watermark_s")
    max_windows_per_record: int = _default("max_windows_per_record")
    max_keyed_workers: int = _default("max_keyed_workers")
    max_reshape_helpers: int = _default("max_reshape_helpers")
    min_reshape_eta: float = _default("min_reshape_eta")
    min_reshape_tau: float = _default("min_reshape_tau")
    max_columns: int = _default("max_columns")
    max_union_inputs: int = _default("max_union_inputs")

    @classmethod
    def from_settings(cls, settings: Settings) -> "OperatorLimits":
        """The limits a service configured by ``settings`` enforces.

        >>> OperatorLimits.from_settings(Settings(max_window_s=60)).max_window_s
        60
        """
        return cls(**{item.name: getattr(settings, item.name) for item in fields(cls)})

    @classmethod
    def loosest(cls) -> "OperatorLimits":
        """The loosest limits any valid settings give: for checking again a document accepted before.

        A dataflow accepted under raised limits (or before a limit was lowered)
        still parses with them; a limit bounds submits, not what runs.

        >>> OperatorLimits.loosest().max_window_s, OperatorLimits.loosest().min_reshape_eta
        (315360000, 1.0)
        """
        values = {}
        for item in fields(cls):
            bounds = {type(bound).__name__: bound for bound in Settings.model_fields[item.name].metadata}
            values[item.name] = bounds["Le"].le if item.name.startswith("max_") else bounds["Gt"].gt
        return cls(**values)


class OperatorLimitExceeded(OperatorConfigInvalid):
    """A config value is over one of :class:`OperatorLimits`; ``limit`` is its ``SANA_*`` variable."""

    def __init__(self, field: str, message: str, limit: str) -> None:
        super().__init__(field, message)
        self.limit = limit
        self.culprit["limit"] = limit


def variable(name: str) -> str:
    """The environment variable of an :class:`OperatorLimits` field.

    >>> variable("max_window_s")
    'SANA_MAX_WINDOW_S'
    """
    return f"SANA_{name.upper()}"


def check_window(field: str, millis: int, limits: OperatorLimits) -> None:
    """Refuse a window (of a ``window_aggregate`` or a ``join``) longer than ``max_window_s``.

    >>> check_window("window", 86_400_000, OperatorLimits())
    >>> check_window("window", 8 * 86_400_000, OperatorLimits())
    Traceback (most recent call last):
    ...
    runtime.operators.limits.OperatorLimitExceeded: a window of 8 days is longer than 7 days, the longest allowed (SANA_MAX_WINDOW_S=604800)
    """
    _at_most(field, "a window", millis, limits, "max_window_s")


def check_watermark(field: str, millis: int, limits: OperatorLimits) -> None:
    """Refuse a watermark delay longer than ``max_watermark_s`` (state is kept that much longer).

    >>> check_watermark("watermark", 90_000_000, OperatorLimits())
    Traceback (most recent call last):
    ...
    runtime.operators.limits.OperatorLimitExceeded: a watermark of 25 hours is longer than 1 day, the longest allowed (SANA_MAX_WATERMARK_S=86400)
    """
    _at_most(field, "a watermark", millis, limits, "max_watermark_s")


def _at_most(field: str, what: str, millis: int, limits: OperatorLimits, name: str) -> None:
    bound = getattr(limits, name)
    if millis > bound * 1000:
        raise OperatorLimitExceeded(field, f"{what} of {describe_ms(millis)} is longer than {describe_ms(bound * 1000)}, "
                                           f"the longest allowed ({variable(name)}={bound})", variable(name))


def windows_per_record(window_ms: int, slide_ms: int) -> int:
    """How many windows of ``window_ms`` sliding by ``slide_ms`` hold each record: ceil(window / slide).

    >>> windows_per_record(60_000, 60_000), windows_per_record(60_000, 25_000)
    (1, 3)
    """
    return -(-window_ms // slide_ms)


def check_slide(field: str, window_ms: int, slide_ms: int, limits: OperatorLimits) -> None:
    """Refuse a slide that repeats each record in more than ``max_windows_per_record`` windows.

    The message gives the shortest slide the limit takes for this window.

    >>> check_slide("slide", 3_600_000, 60_000, OperatorLimits())
    >>> check_slide("slide", 100 * 86_400_000, 1, OperatorLimits())
    Traceback (most recent call last):
    ...
    runtime.operators.limits.OperatorLimitExceeded: a window of 100 days sliding by 1 millisecond puts every record in 8,640,000,000 windows; at most 100 (SANA_MAX_WINDOWS_PER_RECORD): slide by 1 day or more
    """
    count, bound = windows_per_record(window_ms, slide_ms), limits.max_windows_per_record
    if count > bound:
        shortest = -(-window_ms // bound)
        raise OperatorLimitExceeded(
            field, f"a window of {describe_ms(window_ms)} sliding by {describe_ms(slide_ms)} puts every record in "
                   f"{count:,} windows; at most {bound} ({variable('max_windows_per_record')}): slide by "
                   f"{describe_ms(shortest)} or more", variable("max_windows_per_record"))


def check_count(field: str, what: str, count: int, limits: OperatorLimits, name: str) -> None:
    """Refuse ``count`` (workers, helpers, columns, inputs...) over the limit ``name``.

    >>> check_count("workers", "workers", 65, OperatorLimits(), "max_keyed_workers")
    Traceback (most recent call last):
    ...
    runtime.operators.limits.OperatorLimitExceeded: 65 workers; at most 16 (SANA_MAX_KEYED_WORKERS)
    """
    bound = getattr(limits, name)
    if count > bound:
        raise OperatorLimitExceeded(field, f"{count:,} {what}; at most {bound:,} ({variable(name)})", variable(name))


def check_floor(field: str, what: str, value: float, limits: OperatorLimits, name: str) -> None:
    """Refuse ``value`` (a Reshape threshold) under the limit ``name``.

    >>> check_floor("reshape.eta", "eta", 1.01, OperatorLimits(), "min_reshape_eta")
    Traceback (most recent call last):
    ...
    runtime.operators.limits.OperatorLimitExceeded: eta 1.01 is below 1.1, the lowest allowed (SANA_MIN_RESHAPE_ETA)
    """
    bound = getattr(limits, name)
    if value < bound:
        raise OperatorLimitExceeded(field, f"{what} {value} is below {bound}, the lowest allowed ({variable(name)})",
                                    variable(name))
