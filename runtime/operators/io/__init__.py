"""``source`` and ``sink``: JSON records from and to Kafka topics."""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator

from runtime.operators.base import OperatorConfig, OperatorSpec, Port, field_problem, register
from runtime.operators.fields import ColumnType, Identifier, TopicName
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


class SinkConfig(OperatorConfig):
    """``{topic}``: write every record as JSON to ``topic``."""

    topic: TopicName


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
