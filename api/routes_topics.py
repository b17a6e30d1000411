"""Reading a topic through the API: ``GET /topics/{topic}/records`` (``sana tail``; docs/runtime.md, "Reading a topic").

A long poll. The first call says where to begin (``from=now``, the default, or
``from=start``); its answer's ``next`` is a cursor, and a call with
``cursor=`` continues exactly after what was answered, nothing twice. An
answer holds every record up to the topic's end at the call (at most
``limit``); when there is none, the call waits up to ``wait_s`` for new ones
and answers as soon as some arrive (an empty list after ``wait_s``). Replayed
copies are left out (one record per ``sana.writer``, ``sana.batch``,
``sana.seq``) unless ``raw=true``; records without those headers are all kept.

Who may read (api/visibility.py): an admin any topic; a user the topics their
own dataflows read or write; any other topic answers 404 ``TOPIC_NOT_FOUND``
as a missing one does. Reads run on threads of their own (at most
:data:`READ_THREADS` at once; more wait their turn), so followers never hold
the threads other requests are served on; a call holds its connection at most
about ``wait_s`` (at most :data:`MAX_WAIT_S`), so a stopping server does not
wait on followers for longer. A dry run reads the broker ``SANA_KAFKA_BOOTSTRAP``
names; without one it has no topic (404).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Path, Query, Request

from api import schemas
from api.callers import PrincipalDep
from api.visibility import check_topic_visible
from runtime.broker import tail
from runtime.broker.topics import TOPIC_NAME
from runtime.exceptions import TopicNotFound
from sana.settings import Settings

router = APIRouter(prefix="/topics", tags=["topics"])

READ_THREADS = 8
MAX_WAIT_S = 30.0
MAX_LIMIT = 1000
_ERRORS = {status: {"model": schemas.ErrorOut} for status in (401, 404, 422, 429, 502, 503)}


@router.get("/{topic}/records", response_model=schemas.TopicRecordsOut, responses=_ERRORS)
async def records(
    topic: Annotated[str, Path(pattern=TOPIC_NAME.pattern)],
    request: Request,
    principal: PrincipalDep,
    start: Annotated[Literal["start", "now"], Query(alias="from", description="where a read without cursor begins")] = "now",
    cursor: Annotated[str | None, Query(max_length=16_000, description="the next of a previous answer")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    raw: Annotated[bool, Query(description="keep replayed copies")] = False,
    wait_s: Annotated[float, Query(ge=0, le=MAX_WAIT_S, description="how long to wait when no record is there")] = 0.0,
) -> dict[str, Any]:
    """The topic's next records: from its start or from now, or after a cursor; replayed copies left out."""
    services = request.app.state.services

    def read() -> dict[str, Any]:
        if not principal.admin:
            check_topic_visible(principal, topic, services.manager.snapshot())
        bootstrap = _broker(services.settings, topic)
        if cursor is None:
            position = tail.start(bootstrap, topic, from_start=start == "start", raw=raw)
        else:  # raw may change between calls: copies are dropped from the first call without it on
            position = tail.Position.from_token(topic, cursor)
            position.names = None if raw else position.names or tail.Names()
        found = tail.read(bootstrap, position, limit, wait_s)
        return {"topic": topic, "records": [record.to_dict() for record in found], "next": position.token()}

    return await anyio.to_thread.run_sync(read, limiter=_read_threads(request))


def _broker(settings: Settings, topic: str) -> str:
    """The broker to read: the configured one; a dry run without ``SANA_KAFKA_BOOTSTRAP`` has none, so no topic."""
    if settings.dry_run and settings.kafka_bootstrap is None:
        raise TopicNotFound(f"no topic {topic!r}: a dry run has no broker (SANA_KAFKA_BOOTSTRAP names one to read)",
                            culprit={"topic": topic})
    return settings.effective_kafka_bootstrap


def _read_threads(request: Request) -> anyio.CapacityLimiter:
    """The app's limiter of reading threads, made on first use inside the app's event loop."""
    state = request.app.state
    if getattr(state, "topic_read_threads", None) is None:
        state.topic_read_threads = anyio.CapacityLimiter(READ_THREADS)
    return state.topic_read_threads
