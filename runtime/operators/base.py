"""Operator declarations and the registry keyed by ``type``.

Each operator declares, in one place, the model of its config (unknown keys
rejected), its input ports, whether it has an output, and how it derives its
output schema from the schemas arriving on its ports. What runs each type on
Spark is one table, :mod:`runtime.spark.operators`, whose builders cast every
output column to the type declared here, so validation and execution agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from runtime.exceptions import OperatorConfigInvalid, OperatorRegistryError, OperatorUnknown
from runtime.operators.limits import OperatorLimits
from runtime.operators.sql import SqlProblem
from runtime.operators.types import Schema


class OperatorConfig(BaseModel):
    """Base of every operator config model: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def check_limits(self, limits: OperatorLimits) -> None:
        """Raise :class:`~runtime.operators.limits.OperatorLimitExceeded` naming the field over ``limits``.

        Called at submit only (the runtime runs what was accepted, whatever the limits are by then); an
        operator whose config multiplies records, state or Spark tasks overrides it.
        """


@dataclass(frozen=True)
class Port:
    """An input port; ``many`` ports accept any number (>= ``min_streams``) of streams."""

    name: str
    many: bool = False
    min_streams: int = 1


Derive = Callable[[Any, Mapping[str, list[Schema]]], Schema]


@dataclass(frozen=True)
class OperatorSpec:
    """What the system knows about one operator type.

    ``derive(config, inputs)`` returns the output schema given the validated
    config and, per port, the schemas of the streams arriving there (in a
    deterministic order). It raises :class:`OperatorConfigInvalid` naming the
    config field at fault; :class:`SqlProblem` raised inside is converted.
    """

    type: str
    config_model: type[OperatorConfig]
    ports: tuple[Port, ...]
    has_output: bool
    derive: Derive
    summary: str
    keyed: bool = False

    @property
    def is_source(self) -> bool:
        return not self.ports

    @property
    def is_sink(self) -> bool:
        return not self.has_output

    def port(self, name: str) -> Port | None:
        return next((port for port in self.ports if port.name == name), None)

    def output_schema(self, config: OperatorConfig, inputs: Mapping[str, list[Schema]]) -> Schema:
        """Derive the output schema; every failure becomes :class:`OperatorConfigInvalid`."""
        try:
            return self.derive(config, inputs)
        except SqlProblem as problem:
            raise OperatorConfigInvalid("", str(problem)) from None


_REGISTRY: dict[str, OperatorSpec] = {}


def register(spec: OperatorSpec) -> OperatorSpec:
    """Add an operator to the registry; a name registered twice is an error."""
    if spec.type in _REGISTRY:
        raise OperatorRegistryError(f"operator type {spec.type!r} is registered twice")
    _REGISTRY[spec.type] = spec
    return spec


def get_operator(type_name: str) -> OperatorSpec:
    """Look an operator up by type; raises :class:`OperatorUnknown` listing the known ones."""
    try:
        return _REGISTRY[type_name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise OperatorUnknown(f"unknown operator type {type_name!r} (known: {known})") from None


def operator_types() -> list[str]:
    """Every registered type, sorted."""
    return sorted(_REGISTRY)


def field_problem(field_path: str, problem: SqlProblem | str) -> OperatorConfigInvalid:
    """Shorthand for an :class:`OperatorConfigInvalid` at ``config.<field_path>``."""
    return OperatorConfigInvalid(field_path, str(problem))
