"""Every error Sana raises on purpose: the root, :class:`SanaError`, and the ``sana`` package's own.

Each package has an ``exceptions.py`` with subclasses of :class:`SanaError`
whose names say what went wrong. Every class carries a stable ``code`` (like
PySpark's error classes); none knows HTTP: ``api/error_answers.py`` maps each
class to its status at the edge. The ``sana`` package's own are about
principals and tokens (:mod:`sana.auth`).
"""

from __future__ import annotations

from typing import Any


class SanaError(Exception):
    """Base class of all Sana errors.

    ``culprit`` names what is at fault, e.g. ``{"task": "hot", "field":
    "config.expr"}``; it is echoed to API clients so a user interface can
    highlight the offending part.
    """

    code: str = "SANA_ERROR"

    def __init__(self, message: str, *, culprit: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.culprit = dict(culprit or {})

    def to_dict(self) -> dict[str, Any]:
        """The error as the API reports it (``detail`` is the message)."""
        return {"detail": self.message, "code": self.code, "culprit": self.culprit}


class Unauthenticated(SanaError):
    """A request without a valid bearer token."""

    code = "UNAUTHENTICATED"


class Forbidden(SanaError):
    """The caller may not do this (not the owner, or not an admin)."""

    code = "FORBIDDEN"


class TokensFileInvalid(SanaError):
    """The tokens file (``SANA_TOKENS_FILE``) cannot be read or breaks a rule; the entry is named."""

    code = "TOKENS_FILE_INVALID"


class TopicForbidden(SanaError):
    """A source or sink uses a topic outside what its principal may read or write."""

    code = "TOPIC_FORBIDDEN"
