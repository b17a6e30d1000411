"""Errors of the API layer itself: what the service refuses before any handler runs, the request rate limit, a fragment no query runs."""

from __future__ import annotations

from typing import Any

from sana.exceptions import SanaError


class LoopbackOnly(SanaError):
    """Single-user mode (no tokens) met a client, or a ``Host``, beyond loopback."""

    code = "LOOPBACK_ONLY"


class OriginForbidden(SanaError):
    """Single-user mode met a request a page of another origin sent (the ``Origin`` header)."""

    code = "ORIGIN_FORBIDDEN"


class ContentTypeUnsupported(SanaError):
    """A state-changing request carries a body that is not declared ``application/json``."""

    code = "CONTENT_TYPE_UNSUPPORTED"


class RateLimited(SanaError):
    """A principal spent its request budget; ``retry_after_s`` says when its next request passes."""

    code = "RATE_LIMITED"

    def __init__(self, message: str, *, retry_after_s: int, culprit: dict[str, Any] | None = None) -> None:
        super().__init__(message, culprit=culprit)
        self.retry_after_s = retry_after_s


class FragmentNotRunning(SanaError):
    """A runtime view names a fragment no query runs."""

    code = "FRAGMENT_NOT_RUNNING"
