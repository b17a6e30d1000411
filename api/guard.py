"""The request guard: what the app refuses before routing, whatever server runs it.

In single-user mode (no ``SANA_TOKENS_FILE``) every caller is the admin
``local``, so the app serves only this machine, checked on every request:

* the client's address (ASGI ``scope["client"]``) is loopback; a server bound
  beyond loopback (``uvicorn api.app:app --host 0.0.0.0``) still serves no one
  else;
* the ``Host`` header names loopback (127.0.0.1, localhost, [::1]): a page of a
  name that resolves to 127.0.0.1 (DNS rebinding) gets nothing;
* an ``Origin`` header, which browsers send with the requests of a page, is the
  service's own: a page elsewhere cannot drive it through the user's browser.

Each refusal is 403 (``LOOPBACK_ONLY``, ``ORIGIN_FORBIDDEN``). In every mode, a
POST, PUT, PATCH or DELETE that carries a body must declare it
``Content-Type: application/json`` (or a ``+json`` type): else 415
``CONTENT_TYPE_UNSUPPORTED``. A page elsewhere can send ``text/plain`` or a
typeless body without asking the browser first (no CORS preflight), not JSON.
Requests without a body (``POST /runtime/defrag``, ``DELETE``) need no type.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from api.error_answers import error_response
from api.exceptions import ContentTypeUnsupported, LoopbackOnly, OriginForbidden
from api.loopback import host_and_port, is_loopback
from sana.exceptions import SanaError

WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SINGLE_USER = "single-user mode (no SANA_TOKENS_FILE)"


class RequestGuard:
    """ASGI middleware refusing what :mod:`api.guard` describes, with the API's error answers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        error = refusal(scope, single_user(scope))
        if error is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
        else:
            await error_response(error)(scope, receive, send)


def single_user(scope: Scope) -> bool:
    """Whether the app serving ``scope`` runs without tokens (an app whose services did not start counts as such)."""
    services = getattr(getattr(scope.get("app"), "state", None), "services", None)
    return services is None or not services.principals.enabled


def refusal(scope: Scope, single_user: bool) -> SanaError | None:
    """Why the request of ``scope`` is refused, or None."""
    headers = Headers(scope=scope)
    if single_user:
        error = _not_local(scope, headers)
        if error is not None:
            return error
    if scope["type"] == "http" and scope["method"].upper() in WITH_BODY and _has_body(headers):
        declared = headers.get("content-type")
        if not _is_json(declared):
            what = f"of type {declared!r}" if declared else "without a Content-Type"
            return ContentTypeUnsupported(
                f"{scope['method'].upper()} {scope['path']} carries a body {what}; the API takes JSON bodies only "
                "(Content-Type: application/json)", culprit={"header": "content-type"})
    return None


def _not_local(scope: Scope, headers: Headers) -> SanaError | None:
    client = scope.get("client")
    address = client[0] if client else None
    if not is_loopback(address):
        return LoopbackOnly(f"{SINGLE_USER} serves loopback clients only, not {address or 'an unknown address'}; "
                            "configure tokens (sana token new NAME) to serve others", culprit={"client": address})
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    host = headers.get("host")
    target = host_and_port(host, scheme) if host else None
    if target is None or not is_loopback(target[0]):
        return LoopbackOnly(f"{SINGLE_USER} answers requests addressed to loopback only (127.0.0.1, localhost, "
                            f"[::1]), not Host {host!r}", culprit={"header": "host"})
    origin = headers.get("origin")
    if origin is not None and _origin(origin) != target:
        return OriginForbidden(f"{SINGLE_USER} takes requests from its own pages only, not from a page of {origin!r}",
                               culprit={"header": "origin"})
    return None


def _origin(origin: str) -> tuple[str, int] | None:
    """An ``Origin`` header's host and port (None for ``null`` or anything else that is no origin)."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or parts.path or parts.query:
        return None
    return host_and_port(parts.netloc, parts.scheme)


def _has_body(headers: Headers) -> bool:
    if "transfer-encoding" in headers:
        return True
    length = headers.get("content-length")
    return length is not None and length.strip() != "0"


def _is_json(declared: str | None) -> bool:
    """
    >>> [_is_json(v) for v in ("application/json", "Application/JSON; charset=utf-8", "application/merge-patch+json")]
    [True, True, True]
    >>> [_is_json(v) for v in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "", None)]
    [False, False, False, False, False]
    """
    media = (declared or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
