"""Arrow types of Sana schemas: what the keyed operators' worker tasks exchange with Spark."""

from __future__ import annotations

import re

import pyarrow as pa

from runtime.operators.types import Schema

_ARROW = {
    "string": pa.string(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
def arrow_type(kind: str) -> pa.DataType:
    match = _DECIMAL.fullmatch(kind)
    if match:
        return pa.decimal128(int(match[1]), int(match[2]))
    return _ARROW[kind]


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type(kind)) for name, kind in schema.items()])
