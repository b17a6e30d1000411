"""How a :class:`~sana.errors.SanaError` answers over HTTP: its JSON and the headers that go with it.

Every answer is ``{"detail", "code", "culprit"}`` with the error's status. A 401
says which scheme to use (``WWW-Authenticate``); ``Retry-After`` (whole seconds)
goes with the refusals that waiting clears by itself: a spent request budget
(429 ``RATE_LIMITED``, the exact time its next request passes) and a full
service (503 ``SERVICE_FULL``, a hint: room comes back as other dataflows are
removed). 429 ``LIMIT_EXCEEDED`` gets none: a dataflow too big stays too big,
and an owner at their dataflow count stays there until they remove one.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from api.exceptions import RateLimited
from manager.exceptions import ServiceFull
from sana.errors import SanaError
from sana.exceptions import Unauthenticated

#: The ``Retry-After`` of 503 SERVICE_FULL: when to look again whether removals made room.
SERVICE_FULL_RETRY_AFTER_S = 30


def error_headers(error: SanaError) -> dict[str, str]:
    """The headers that go with ``error``'s answer.

    >>> error_headers(RateLimited("slow down", retry_after_s=3))
    {'Retry-After': '3'}
    >>> error_headers(ServiceFull("full")), error_headers(SanaError("x"))
    ({'Retry-After': '30'}, {})
    """
    if isinstance(error, Unauthenticated):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(error, RateLimited):
        return {"Retry-After": str(error.retry_after_s)}
    if isinstance(error, ServiceFull):
        return {"Retry-After": str(SERVICE_FULL_RETRY_AFTER_S)}
    return {}


def error_response(error: SanaError) -> JSONResponse:
    """The whole answer to ``error``."""
    return JSONResponse(status_code=error.status, content=error.to_dict(), headers=error_headers(error) or None)
