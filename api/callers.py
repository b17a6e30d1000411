"""Who calls: the principal of a request's bearer token, as a FastAPI dependency, and the admin-only one.

In their own module so that route modules (``api/routes_*.py``) take the caller
as the app's handlers do, without importing the app.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from sana.auth import Principal
from sana.exceptions import Forbidden


async def get_principal(request: Request) -> Principal:
    """Who calls: the principal of the bearer token (single-user mode: the admin ``local``); spends one
    request of their budget (api/ratelimit.py). A coroutine, as the dependencies below: both are lookups in
    memory, and FastAPI would run a plain function on a worker thread, a thread hop per dependency per request."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    principal = request.app.state.services.principals.authenticate(token.strip() if scheme.lower() == "bearer" else None)
    request.app.state.rate_limiter.charge(principal, request.method)
    return principal


async def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if not principal.admin:
        raise Forbidden(f"{principal.name!r} is a user; this needs an admin (it shows or changes every owner's work)")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(require_admin)]
