"""WAN endpoints for the inspector's WAN panel and for operators (docs/wan.md, "REST API").

- ``GET /wan``: the configuration, every link with its load, spare bandwidth,
  utilization and the streams crossing it; 404 ``WAN_NOT_CONFIGURED`` without one.
- ``PUT /wan``: set the configuration (validated; 422 naming the field); it
  governs the submits that follow, running tasks stay where they are.
- ``DELETE /wan``: remove it (every equivalent task is shared again).
- ``GET /wan/links``: the links only; each says whether its load is measured (the runtime counted the
  crossing streams' writes), estimated (configured rates) or mixed.
- ``GET /wan/replacement?utilization=U``: what re-placement would do now (Sana section 6): the links at
  or above utilization U and, for each dataflow with a stream over one, the tasks that would move or
  stop sharing. A plan only: ``executed`` is false, nothing changes (docs/wan.md, "Re-placement").
- ``POST /wan/replacement?utilization=U``: carry that plan out now: the runtime hands the moved work
  over at a cut (nothing lost or written twice), the dataflows keep their ids; ``executed`` is true.
  502 ``DEPLOY_FAILED`` if the runtime could not (nothing changed).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from api.body import read_body
from manager.service import Manager

router = APIRouter(tags=["wan"])

_ERRORS = {404: {"description": "No WAN configuration"}, 422: {"description": "Invalid WAN configuration"},
           503: {"description": "State unavailable"}}


def _manager(request: Request) -> Manager:
    return request.app.state.services.manager


@router.get("/wan", responses=_ERRORS)
def get_wan(request: Request) -> dict[str, Any]:
    """The WAN configuration and the load of every link."""
    return _manager(request).wan()


@router.put("/wan", responses=_ERRORS,
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}})
async def put_wan(request: Request) -> dict[str, Any]:
    """Replace the WAN configuration (sites, links, sources, sinks, selectivity)."""
    body = await read_body(request)
    manager = _manager(request)
    await run_in_threadpool(manager.set_wan, body)
    return await run_in_threadpool(manager.wan)


@router.delete("/wan", responses=_ERRORS)
def delete_wan(request: Request) -> dict[str, Any]:
    """Remove the WAN configuration: every equivalent task is shared again."""
    _manager(request).set_wan(None)
    return {"configured": False}


@router.get("/wan/links", responses=_ERRORS)
def get_wan_links(request: Request) -> dict[str, Any]:
    """Every link: capacity, latency, load, spare bandwidth, utilization and crossing streams."""
    return _manager(request).wan_links()


@router.get("/wan/replacement", responses=_ERRORS)
def get_wan_replacement(request: Request, utilization: float = Query(0.95, gt=0, le=10)) -> dict[str, Any]:
    """The dataflows re-placement would re-plan at this utilization threshold, and what would move (a plan only)."""
    return _manager(request).replacement(utilization)


@router.post("/wan/replacement", responses={**_ERRORS, 502: {"description": "The runtime failed; nothing changed"}})
def post_wan_replacement(request: Request, utilization: float = Query(0.95, gt=0, le=10)) -> dict[str, Any]:
    """Re-place now: the dataflows crossing links at or above this utilization are re-planned and their work handed over."""
    return _manager(request).replace(utilization)
