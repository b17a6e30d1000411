"""The dataflow document as users write it (docs/architecture.md, "Interfaces clients rely on"), as pydantic models.

This is the structural layer only: field names, kinds and id syntax. Graph
rules, operator configs and schemas are checked by :mod:`manager.validate`,
which also turns pydantic's errors into messages that name the task.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TASK_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
SITE_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"


class TaskDocument(BaseModel):
    """One task: ``{id, type, config?, site?}``."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=TASK_ID_PATTERN, description="Unique in the document; 1-64 of [A-Za-z0-9_.-].")
    type: str = Field(min_length=1, max_length=64, description="A registered operator type.")
    config: dict[str, Any] = Field(default_factory=dict, description="The operator's config.")
    site: str | None = Field(None, pattern=SITE_PATTERN, description="Where a source's stream originates, or a placement wish.")


class StreamDocument(BaseModel):
    """One stream: ``{from, to, port?}``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: str = Field(alias="from", min_length=1, max_length=64)
    to: str = Field(min_length=1, max_length=64)
    port: str = Field("in", min_length=1, max_length=64, description="Input port of `to`; a join has left and right.")


class DataflowDocument(BaseModel):
    """A whole dataflow: ``{name, tasks, streams, owner?, description?}``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    owner: str | None = Field(None, max_length=128, description="Who submitted it (shown in the inspector).")
    description: str | None = Field(None, max_length=2000)
    tasks: list[TaskDocument] = Field(min_length=1, max_length=10_000)
    streams: list[StreamDocument] = Field(default_factory=list, max_length=100_000)
