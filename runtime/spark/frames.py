"""Moving micro-batch data between Spark and pandas for the driver-side keyed operators."""

from __future__ import annotations

import re

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

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
_NULLABLE_INTS = {
    pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def arrow_type(kind: str) -> pa.DataType:
    match = _DECIMAL.fullmatch(kind)
    if match:
        return pa.decimal128(int(match[1]), int(match[2]))
    return _ARROW[kind]


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type(kind)) for name, kind in schema.items()])


def to_pandas(df: DataFrame) -> pd.DataFrame:
    """Collect a (small) DataFrame to pandas; integers stay integers when they hold nulls."""
    table = df.toArrow()
    return table.to_pandas(types_mapper=_NULLABLE_INTS.get)


def to_spark(spark: SparkSession, frame: pd.DataFrame, schema: Schema) -> DataFrame:
    """A DataFrame with exactly ``schema`` from a pandas frame holding (at least) its columns."""
    target = arrow_schema(schema)
    if frame is None or len(frame) == 0:
        return spark.createDataFrame(target.empty_table())
    arrays = []
    for field in target:
        column = frame[field.name]
        array = pa.array(column, from_pandas=True)
        arrays.append(array.cast(field.type, safe=False) if array.type != field.type else array)
    return spark.createDataFrame(pa.Table.from_arrays(arrays, schema=target))
