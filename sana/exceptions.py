"""Errors of the ``sana`` package (principals and tokens, :mod:`sana.auth`); ``api/`` maps them to HTTP."""

from __future__ import annotations

from sana.errors import SanaError


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
