"""Errors of the planning vocabulary."""

from __future__ import annotations

from sana.exceptions import SanaError


class QueryMalformed(SanaError):
    """A query handed to the optimizer or the scheduler is not parents-first, or names an unknown input.

    A programming error of the caller: the manager validates dataflows first.
    """

    code = "QUERY_MALFORMED"
