"""The operator registry: importing this package registers every built-in operator."""

from runtime.operators import io, join, relational, window  # noqa: F401  (registration)
from runtime.operators.base import (
    OperatorConfig,
    OperatorSpec,
    Port,
    get_operator,
    operator_types,
    register,
)
from runtime.operators.types import Schema

__all__ = [
    "OperatorConfig",
    "OperatorSpec",
    "Port",
    "Schema",
    "get_operator",
    "operator_types",
    "register",
]
