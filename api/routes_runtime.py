"""Runtime endpoints for the inspector: per-fragment and per-query metrics of the Spark runtime.

``GET /runtime/fragments``: every running fragment with its query, status
(``running`` or ``degraded``: its query is down or restarting, with Spark's
``error`` and its ``restarts``), input rows/s, batch duration, source lag per
topic partition (empty until the query reports progress), state rows and
per-worker load of its keyed operators.
``GET /runtime/fragments/{id}``: one of them (404 if it does not run).
``GET /runtime/queries``: the Spark queries behind them (a query can host
several fragments). Under ``--dry-run`` nothing runs: the lists are empty.
``POST /runtime/defrag``: run every group of queries linked by taps at one
site as one query (``sana defrag``; docs/reuse.md, "Defragmentation").
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from api.exceptions import FragmentNotRunning

router = APIRouter(prefix="/runtime", tags=["runtime"])


async def _metrics(request: Request) -> dict[str, Any]:
    runtime = request.app.state.services.manager.runtime
    return {"kind": runtime.kind, **(await run_in_threadpool(runtime.fragment_metrics))}


@router.get("/fragments")
async def fragments(request: Request) -> dict[str, Any]:
    """Metrics of every running fragment."""
    metrics = await _metrics(request)
    return {"kind": metrics["kind"], "fragments": list(metrics["fragments"].values())}


@router.get("/fragments/{fragment_id}", responses={404: {"description": "the fragment does not run"}})
async def fragment(fragment_id: str, request: Request) -> dict[str, Any]:
    """Metrics of one running fragment."""
    metrics = await _metrics(request)
    try:
        return metrics["fragments"][fragment_id]
    except KeyError:
        raise FragmentNotRunning(f"no running fragment {fragment_id!r}", culprit={"fragment": fragment_id}) from None


@router.post("/defrag")
async def defrag(request: Request) -> dict[str, Any]:
    """Recompact the running queries: fewer queries, the same tasks, nothing lost or repeated."""
    manager = request.app.state.services.manager
    return await run_in_threadpool(manager.defragment)


@router.get("/queries")
async def queries(request: Request) -> dict[str, Any]:
    """The Spark queries and what each hosts, reads and writes."""
    metrics = await _metrics(request)
    return {"kind": metrics["kind"], "queries": list(metrics["queries"].values())}
