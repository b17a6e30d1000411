"""The FastAPI application: ``api.app:app`` is the whole service (the README's "REST API").

Handlers stay thin: they read the request, call the manager and shape the
answer. Every :class:`~sana.exceptions.SanaError` becomes ``{"detail", "code",
"culprit"}`` with the error's status in one handler.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from api import routes_runtime, routes_topics, routes_wan, schemas
from api.body import read_body
from api.callers import AdminDep, PrincipalDep, require_admin
from api.collector import FreezeSurvivors
from api.error_answers import error_response
from api.guard import RequestGuard
from api.health import check_redis
from api.ratelimit import RateLimiter
from api.services import Services, build_services
from api.visibility import check_visible, cost_answer, removal_answer, submit_answer, visible_shares
from manager.document import DataflowDocument
from manager.service import Manager, task_wan_fields
from manager.state import SubmittedDataflow
from manager.validate import parse_dataflow
from runtime.operators.limits import OperatorLimits
from sana.auth import check_topics
from sana import __version__
from sana.exceptions import Forbidden, SanaError
from sana.settings import Settings, get_settings

log = logging.getLogger("sana.api")

STATIC = Path(__file__).parent / "static"


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; settings are read when it starts, not at import."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        services = build_services(settings or get_settings())
        app.state.services = services
        app.state.rate_limiter = RateLimiter.from_settings(services.settings)
        # Before the state is loaded, so that it leaves the collector's full passes as it comes (api/collector.py).
        collector = app.state.collector = FreezeSurvivors().install() if services.settings.gc_freeze else None
        try:
            await run_in_threadpool(services.manager.start)
        except SanaError as error:
            # Redis or the runtime is down: serve anyway (/healthz says what is degraded);
            # the manager finishes starting on the next submit or remove.
            log.error("%s; the manager finishes starting on the next change", error.message)
        try:
            yield
        finally:
            if collector is not None:
                collector.uninstall()
            services.close()

    app = FastAPI(
        title="Sana",
        version=__version__,
        summary="Shared streaming dataflows: reuse what already runs.",
        lifespan=lifespan,
    )

    @app.exception_handler(SanaError)
    async def sana_error(request: Request, error: SanaError) -> JSONResponse:
        return error_response(error)

    app.add_middleware(RequestGuard)  # single-user mode: this machine only; bodies: JSON only (api/guard.py)
    _routes(app)
    app.include_router(routes_runtime.router, dependencies=[Depends(require_admin)])
    app.include_router(routes_wan.router, dependencies=[Depends(require_admin)])
    app.include_router(routes_topics.router)  # each caller reads what api/visibility.py lets them
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    @app.get("/inspector", include_in_schema=False)
    def inspector() -> FileResponse:
        """The admin inspector page."""
        return FileResponse(STATIC / "index.html")

    app.openapi = lambda: _openapi(app)
    return app


async def get_services(request: Request) -> Services:
    return request.app.state.services


async def get_manager(request: Request) -> Manager:
    return request.app.state.services.manager


ServicesDep = Annotated[Services, Depends(get_services)]
ManagerDep = Annotated[Manager, Depends(get_manager)]


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_ERRORS = {status: {"model": schemas.ErrorOut} for status in (401, 403, 404, 409, 413, 415, 422, 429, 502, 503)}


def _routes(app: FastAPI) -> None:
    @app.post("/dataflows", status_code=201, response_model=schemas.SubmitResponse, responses=_ERRORS,
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DataflowDocument"}}}}})
    async def submit_dataflow(request: Request, manager: ManagerDep, principal: PrincipalDep,
                              unique: bool = False) -> dict[str, Any]:
        """Submit a dataflow; returns once everything it needs is running. With tokens, the caller owns it
        (an admin may name another ``owner``).

        A dataflow identical to one its owner already runs (the same sinks writing the same topics, whatever
        the name or task ids) is accepted with ``duplicate_of`` naming that one and a line in ``warnings``;
        with ``unique=true`` it is refused instead, 409 ``DATAFLOW_DUPLICATE`` naming it, and nothing changes."""
        body = await read_body(request)
        services: Services = request.app.state.services

        def submit() -> dict[str, Any]:
            flow = parse_dataflow(body, limits=OperatorLimits.from_settings(services.settings))
            if services.principals.enabled:
                if flow.owner not in (None, principal.name) and not principal.admin:
                    raise Forbidden(f"owner {flow.owner!r}: a user submits dataflows as themselves ({principal.name!r})",
                                    culprit={"field": "owner"})
                check_topics(principal, flow.tasks)
                flow = replace(flow, owner=flow.owner or principal.name)
            return submit_answer(principal, manager.submit_validated(flow, unique=unique))

        return await run_in_threadpool(submit)

    @app.get("/dataflows", response_model=schemas.DataflowList, responses=_ERRORS)
    def list_dataflows(manager: ManagerDep, principal: PrincipalDep) -> dict[str, Any]:
        """Every submitted dataflow the caller may see (an admin: all; a user: their own), oldest first."""
        state = manager.snapshot()
        flows = sorted(list(state.dataflows.values()) if principal.admin else state.of_owner(principal.name),
                       key=lambda flow: (flow.submitted_at, flow.id))
        statuses = manager.statuses(flows, details=principal.admin)
        return {
            "dataflows": [
                {"id": flow.id, "name": flow.name, "owner": flow.owner, "submitted_at": _iso(flow.submitted_at),
                 "tasks": flow.document_tasks(), "contained": visible_shares(principal, flow, state),
                 **statuses[flow.id]}
                for flow in flows
            ]
        }

    @app.get("/dataflows/{dataflow_id}", responses=_ERRORS)
    def get_dataflow(dataflow_id: str, manager: ManagerDep, principal: PrincipalDep) -> dict[str, Any]:
        """The submitted document's fields plus ``id``, ``tasks`` and ``sinks`` as in POST.

        ``tasks`` is the mapping submitted task id -> running task id (as POST
        answers); the document exactly as submitted is under ``document``.
        """
        flow = manager.dataflow(dataflow_id)
        check_visible(principal, flow.owner, dataflow_id)
        return {**flow.document, "id": flow.id, "submitted_at": _iso(flow.submitted_at), "tasks": flow.document_tasks(),
                "sinks": flow.sinks, "document": flow.document,
                "contained": visible_shares(principal, flow, manager.snapshot()),
                **manager.statuses([flow], details=principal.admin)[flow.id]}

    @app.get("/dataflows/{dataflow_id}/cost", response_model=schemas.DataflowCostOut, responses=_ERRORS)
    def dataflow_cost(dataflow_id: str, manager: ManagerDep, principal: PrincipalDep) -> dict[str, Any]:
        """What the dataflow costs: its share of each task it uses, its cost alone, what sharing saves it."""
        check_visible(principal, manager.dataflow(dataflow_id).owner, dataflow_id)
        return cost_answer(principal, manager.cost(dataflow_id))

    @app.get("/costs", response_model=schemas.CostsOut, responses=_ERRORS)
    def costs(manager: ManagerDep, admin: AdminDep) -> dict[str, Any]:
        """Every dataflow's cost; the shares add up to ``total``."""
        return manager.costs()

    @app.delete("/dataflows/{dataflow_id}", response_model=schemas.RemoveResponse, responses=_ERRORS)
    def remove_dataflow(dataflow_id: str, manager: ManagerDep, principal: PrincipalDep) -> dict[str, Any]:
        """Remove a dataflow (its owner or an admin); returns once its unshared work has stopped."""
        def visible(flow: SubmittedDataflow) -> None:
            check_visible(principal, flow.owner, dataflow_id)

        return removal_answer(principal, manager.remove(dataflow_id, check=visible))

    @app.get("/running", response_model=schemas.RunningOut, response_model_by_alias=True, responses=_ERRORS)
    def running(manager: ManagerDep, admin: AdminDep) -> dict[str, Any]:
        """The running DAGs: tasks (with site, fragment and users) and streams."""
        state = manager.snapshot()
        dags = []
        for dag_id in sorted(state.dag_members, key=_dag_order):
            members = sorted(state.dag_members[dag_id])
            tasks = [state.tasks[task_id] for task_id in members]
            dags.append({
                "id": dag_id,
                "dataflows": sorted(state.dag_dataflows(dag_id), key=_dag_order),
                "tasks": [
                    {"id": t.id, "type": t.type, "config": t.config, "site": t.site, "fragment": t.fragment,
                     "dataflows": sorted(state.users[t.id], key=_dag_order), "signature": t.signature, "schema": t.schema,
                     **task_wan_fields(state, t.id)}
                    for t in tasks
                ],
                "streams": [{"from": parent, "to": t.id, "port": port} for t in tasks for port, parent in t.inputs],
            })
        return {"dags": dags}

    @app.get("/stats", response_model=schemas.StatsOut, responses=_ERRORS)
    def stats(manager: ManagerDep, principal: PrincipalDep) -> dict[str, Any]:
        """Counts of what is submitted and what runs, and the saving."""
        return manager.stats()

    @app.get("/healthz", response_model=schemas.HealthOut, responses={503: {"model": schemas.HealthOut}})
    def healthz(services: ServicesDep, request: Request) -> JSONResponse:
        """The service's own parts (Redis, Kafka, Spark, the manager); 503 when one is not ok.

        ``work`` counts the dataflows that run, failed at run time or stalled: one tenant's failing
        dataflow is shown there and never turns the service's status (which readiness probes read).
        """
        components: dict[str, dict[str, Any]] = {"redis": check_redis(services.redis)}
        if services.kafka is None:
            components["kafka"] = {"status": "ok", "note": "not used in dry-run"}
        else:
            components["kafka"] = services.kafka.check()
        if services.retention is not None:  # the durable embedded broker's (api/retention.py); never turns the status
            components["kafka"]["retention"] = services.retention.summary()
        try:
            runtime = services.manager.runtime.health()
        except Exception as error:  # a runtime that cannot report is down, whatever the reason
            runtime = {"status": "down", "error": str(error)}
        if services.runtime_note:
            runtime["note"] = services.runtime_note
        components["runtime"] = runtime
        work: dict[str, Any] = {}
        try:
            counts = services.manager.stats()
            components["manager"] = {"status": "ok", "dataflows": counts["submitted_dataflows"], "running_tasks": counts["running_tasks"]}
            collector = getattr(request.app.state, "collector", None)
            if collector is not None:
                components["manager"]["collector"] = collector.summary()
            work = services.manager.work()
        except SanaError as error:
            components["manager"] = {"status": "down", "error": error.message}
        healthy = all(part.get("status") == "ok" for part in components.values())
        return JSONResponse(
            status_code=200 if healthy else 503,
            content={"status": "ok" if healthy else "degraded", "components": components, "work": work},
        )


def _dag_order(identifier: str) -> tuple[str, int]:
    prefix, _, number = identifier.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (identifier, 0)


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        spec = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        document = DataflowDocument.model_json_schema(ref_template="#/components/schemas/{model}", by_alias=True)
        components = spec.setdefault("components", {}).setdefault("schemas", {})
        components.update(document.pop("$defs", {}))
        components["DataflowDocument"] = document
        app.openapi_schema = spec
    return app.openapi_schema


app = create_app()
