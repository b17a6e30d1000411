"""Reading request bodies with the 1 MiB limit every JSON endpoint applies."""

from __future__ import annotations

from fastapi import Request

from sana.exceptions import SanaError

MAX_BODY = 1 << 20


class PayloadTooLarge(SanaError):
    """A request body is over the limit."""

    code = "PAYLOAD_TOO_LARGE"


async def read_body(request: Request) -> bytes:
    """The request body, refusing more than 1 MiB (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise PayloadTooLarge(f"the body has {declared} bytes; the limit is {MAX_BODY} (1 MiB)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise PayloadTooLarge(f"the body exceeds the limit of {MAX_BODY} bytes (1 MiB)")
        chunks.append(chunk)
    return b"".join(chunks)
