"""Operator declarations: config models and schema derivation (pure, no Spark)."""

from __future__ import annotations

import pytest

from runtime.exceptions import OperatorConfigInvalid, OperatorRegistryError, OperatorUnknown
from runtime.operators import get_operator, operator_types, register
from runtime.operators.types import canonical_type

BASE = {"sensor": "string", "temp": "double", "n": "int", "ts": "timestamp"}


def derive(type_name: str, config: dict, **inputs):
    spec = get_operator(type_name)
    return spec.output_schema(spec.config_model.model_validate(config), inputs)


def test_registry_knows_the_contract_operators():
    assert set(operator_types()) >= {"source", "sink", "filter", "select", "union", "window_aggregate", "join"}
    with pytest.raises(OperatorUnknown, match=r"unknown operator type 'nope' \(known: filter, join"):
        get_operator("nope")
    with pytest.raises(OperatorRegistryError, match="'filter' is registered twice"):
        register(get_operator("filter"))


def test_select_types_its_columns():
    assert derive("select", {"columns": {"f": "temp * 9 / 5 + 32", "s": "upper(sensor)", "m": "n + 1", "hot": "temp > 3"}},
                  **{"in": [BASE]}) == {"f": "double", "s": "string", "m": "int", "hot": "boolean"}
    with pytest.raises(OperatorConfigInvalid, match=r"cannot tell the type of .*CAST"):
        derive("select", {"columns": {"d": "date_trunc('hour', ts)"}}, **{"in": [BASE]})
    with pytest.raises(OperatorConfigInvalid, match="aggregate 'SUM\\(temp\\)' is not allowed here"):
        derive("select", {"columns": {"s": "sum(temp)"}}, **{"in": [BASE]})


def test_window_aggregate_schema_and_checks():
    config = {"keys": ["sensor"], "time_column": "ts", "window": "1 minute", "slide": "30 seconds", "watermark": "10 seconds",
              "aggregates": {"count": "count(*)", "total": "sum(n)", "mean": "avg(temp)", "top": "max(temp)"}}
    assert derive("window_aggregate", config, **{"in": [BASE]}) == {
        "sensor": "string", "window_start": "timestamp", "window_end": "timestamp",
        "count": "bigint", "total": "bigint", "mean": "double", "top": "double"}
    with pytest.raises(OperatorConfigInvalid, match="time column 'sensor' must be a timestamp column"):
        derive("window_aggregate", {**config, "time_column": "sensor"}, **{"in": [BASE]})
    with pytest.raises(OperatorConfigInvalid, match=r"sum needs a numeric column, 'sensor' is string"):
        derive("window_aggregate", {**config, "aggregates": {"x": "sum(sensor)"}}, **{"in": [BASE]})
    with pytest.raises(OperatorConfigInvalid, match=r"expected one of count\(col\)"):
        derive("window_aggregate", {**config, "aggregates": {"x": "temp + 1"}}, **{"in": [BASE]})
    with pytest.raises(ValueError, match="slide '2 minutes'|longer than window"):
        get_operator("window_aggregate").config_model.model_validate({**config, "slide": "2 minutes"})


def test_join_names_its_output_columns():
    left = {"k": "string", "x": "double", "ts": "timestamp"}
    right = {"k": "string", "x": "int", "y": "double", "ts": "timestamp"}
    assert derive("join", {"on": "k", "window": "5 seconds"}, left=[left], right=[right]) == {
        "k": "string", "x": "double", "ts": "timestamp", "right_x": "int", "y": "double", "right_ts": "timestamp"}
    with pytest.raises(OperatorConfigInvalid, match="join column 'k' is string on the left but int on the right"):
        derive("join", {"on": ["k"]}, left=[left], right=[{**right, "k": "int"}])
    with pytest.raises(OperatorConfigInvalid, match="needs time_column: the inputs share 0 timestamp columns"):
        derive("join", {"on": ["k"], "window": "5 seconds"}, left=[{"k": "string"}], right=[{"k": "string"}])


def test_union_needs_equal_schemas():
    assert derive("union", {}, **{"in": [BASE, dict(BASE)]}) == BASE
    with pytest.raises(OperatorConfigInvalid, match="union inputs differ"):
        derive("union", {}, **{"in": [BASE, {**BASE, "temp": "int"}]})


def test_column_types_are_canonical():
    assert canonical_type(" LONG ") == "bigint"
    assert canonical_type("Decimal(10, 2)") == "decimal(10,2)"
    with pytest.raises(ValueError, match="unknown column type 'int\\)'"):
        canonical_type("int)")
