"""``source`` and ``sink``: JSON records from and to Kafka topics."""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator, model_serializer

from runtime.operators.base import OperatorConfig, OperatorSpec, Port, field_problem, register
from runtime.operators.fields import ColumnType, Duration, Identifier, TopicName, describe_ms, duration_ms
from runtime.operators.types import Schema


class SourceConfig(OperatorConfig):
    """``{topic, schema}``: read JSON records with these columns from ``topic``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    topic: TopicName
    columns: dict[Identifier, ColumnType] = Field(alias="schema")

    @field_validator("columns")
    @classmethod
    def _not_empty(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("a source needs at least one column")
        return value


RUNTIME_KEYS = ("max_delay",)  # how a sink runs, not what it writes: left out of its signature

#: The longest a sink's records may wait for a micro-batch (``max_delay``): a bucket move of a keyed operator
#: upstream waits for the next batch, and gives up after a minute.
MAX_DELAY_MS = 30_000


class SinkConfig(OperatorConfig):
    """``{topic, max_delay?}``: write every record as JSON to ``topic``.

    ``max_delay`` (a duration, at most 30 seconds) lets the query computing the sink hold its input up to that long
    and process it in fewer, larger micro-batches, which cost less CPU at low rates; absent, every trigger runs a
    batch. A query holds only when every output it has allows it (the shortest delay wins). The delay is not part
    of the sink's signature: sinks differing only there are one task, which keeps the delay it was started with.
    """

    topic: TopicName
    max_delay: Duration | None = None

    @field_validator("max_delay", mode="before")
    @classmethod
    def _at_most(cls, value):
        try:
            millis = duration_ms(value) if isinstance(value, str) else 0
        except ValueError:
            return value  # Duration says what is wrong with it
        if millis > MAX_DELAY_MS:
            raise ValueError(f"{value!r} is longer than {describe_ms(MAX_DELAY_MS)}, the longest a sink's records "
                             "may wait for a micro-batch")
        return value

    @model_serializer(mode="wrap")
    def _without_absent_delay(self, handler):
        data = handler(self)
        if data.get("max_delay") is None:
            data.pop("max_delay", None)
        return data


def _source_schema(config: SourceConfig, inputs) -> Schema:
    return dict(config.columns)


def _sink_schema(config: SinkConfig, inputs) -> Schema:
    (schema,) = inputs["in"]
    if not schema:
        raise field_problem("", "a sink needs at least one column to write")
    return dict(schema)


SOURCE = register(
    OperatorSpec(
        type="source",
        config_model=SourceConfig,
        ports=(),
        has_output=True,
        derive=_source_schema,
        summary="JSON records from an existing Kafka topic",
    )
)
SINK = register(
    OperatorSpec(
        type="sink",
        config_model=SinkConfig,
        ports=(Port("in"),),
        has_output=False,
        derive=_sink_schema,
        summary="writes JSON records to a Kafka topic",
    )
)
