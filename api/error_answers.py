"""How a :class:`~sana.exceptions.SanaError` answers over HTTP: its JSON and the headers that go with it.

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

from api.body import PayloadTooLarge
from api.exceptions import ContentTypeUnsupported, FragmentNotRunning, LoopbackOnly, OriginForbidden, RateLimited
from manager.exceptions import (DataflowDuplicate, DataflowInvalid, DataflowNotFound, DeployFailed, LimitExceeded,
                                ServiceFull, SinkTopicTaken, StateBusy, StateUnavailable)
from planning.exceptions import QueryMalformed
from runtime.exceptions import (BucketMoveInvalid, KeyedOperatorUnknown, OperatorConfigInvalid, OperatorUnknown,
                                RuntimeFailure, TailCursorInvalid, TopicNotFound)
from sana.exceptions import Forbidden, SanaError, TopicForbidden, Unauthenticated
from scheduler.exceptions import PlacementImpossible
from wan.exceptions import WanError, WanNotConfigured

#: The ``Retry-After`` of 503 SERVICE_FULL: when to look again whether removals made room.
SERVICE_FULL_RETRY_AFTER_S = 30


#: The HTTP status of each error class; a class not listed answers as its nearest listed base, and
#: :class:`~sana.exceptions.SanaError` itself (a bug, a corrupt state, a launch that failed) as 500.
#: The domain packages know nothing of HTTP: this is the one place that does.
STATUS: dict[type[SanaError], int] = {
    SanaError: 500,
    # the request
    Unauthenticated: 401, Forbidden: 403, TopicForbidden: 403, LoopbackOnly: 403, OriginForbidden: 403,
    PayloadTooLarge: 413, ContentTypeUnsupported: 415, RateLimited: 429, FragmentNotRunning: 404,
    # what it names
    DataflowInvalid: 422, SinkTopicTaken: 409, DataflowDuplicate: 409, DataflowNotFound: 404, LimitExceeded: 429,
    ServiceFull: 503, OperatorUnknown: 422, OperatorConfigInvalid: 422, PlacementImpossible: 422, QueryMalformed: 500,
    WanError: 422, WanNotConfigured: 404, TopicNotFound: 404, TailCursorInvalid: 422,
    # the parts behind it
    StateUnavailable: 503, StateBusy: 503, DeployFailed: 502,
    RuntimeFailure: 502, KeyedOperatorUnknown: 404, BucketMoveInvalid: 422,
}


def http_status(error: SanaError) -> int:
    """The status ``error`` answers with: its class's, or its nearest listed base's.

    >>> http_status(SinkTopicTaken("taken")), http_status(DataflowInvalid("bad")), http_status(SanaError("bug"))
    (409, 422, 500)
    """
    return next(STATUS[cls] for cls in type(error).__mro__ if cls in STATUS)


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
    return JSONResponse(status_code=http_status(error), content=error.to_dict(), headers=error_headers(error) or None)
