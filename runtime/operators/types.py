"""Column types a Sana schema may use, and their canonical Spark SQL names.

Records travel as JSON, so schemas use the scalar types JSON can carry and Spark
can read back. A schema is a plain ``dict`` column -> canonical type name.
"""

from __future__ import annotations

import re

Schema = dict[str, str]

_ALIASES = {
    "string": "string",
    "str": "string",
    "varchar": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "smallint": "smallint",
    "short": "smallint",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "float": "float",
    "real": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
}
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)")

NUMERIC = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double"})
INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})


def canonical_type(name: str) -> str:
    """Return the canonical Spark SQL name of a column type, or raise ``ValueError``.

    >>> canonical_type("Long"), canonical_type("decimal(10, 2)")
    ('bigint', 'decimal(10,2)')
    """
    text = name.strip().lower()
    if text in _ALIASES:
        return _ALIASES[text]
    match = _DECIMAL.fullmatch(text)
    if match:
        precision, scale = int(match[1]), int(match[2])
        if 1 <= precision <= 38 and scale <= precision:
            return f"decimal({precision},{scale})"
    supported = ", ".join(sorted(set(_ALIASES.values()))) + ", decimal(p,s)"
    raise ValueError(f"unknown column type {name!r} (supported: {supported})")


def is_numeric(type_name: str) -> bool:
    """True for the integral, floating and decimal types."""
    return type_name in NUMERIC or type_name.startswith("decimal(")
