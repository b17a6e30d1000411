"""The chart's limits.operators values: each onto its SANA_* setting, as a number the settings read back."""

from __future__ import annotations

import helm_python
import pytest

from runtime.operators.limits import OperatorLimits
from sana.settings import Settings

# value under limits.operators -> the OperatorLimits field (and setting) it sets
VALUES = {
    "windowSeconds": "max_window_s",
    "watermarkSeconds": "max_watermark_s",
    "windowsPerRecord": "max_windows_per_record",
    "keyedWorkers": "max_keyed_workers",
    "reshapeHelpers": "max_reshape_helpers",
    "minReshapeEta": "min_reshape_eta",
    "minReshapeTau": "min_reshape_tau",
    "columns": "max_columns",
    "unionInputs": "max_union_inputs",
}


def _limits_in_pod(rendered) -> OperatorLimits:
    env = {name: item.get("value") for name, item in rendered.manager_env().items()}
    settings = Settings(**{field: env[f"SANA_{field.upper()}"] for field in VALUES.values()})
    return OperatorLimits.from_settings(settings)


def test_the_default_values_are_the_settings_defaults(render_chart):
    assert _limits_in_pod(render_chart()) == OperatorLimits()


def test_every_value_reaches_its_setting_even_past_a_million(render_chart):
    """Helm reads numbers as floats: 2592000 must reach the pod as "2592000", not "2.592e+06"."""
    given = {"windowSeconds": 2_592_000, "watermarkSeconds": 1_209_600, "windowsPerRecord": 1_000,
             "keyedWorkers": 64, "reshapeHelpers": 3, "minReshapeEta": 1.25, "minReshapeTau": 0.2, "columns": 1_000,
             "unionInputs": 2}
    limits = _limits_in_pod(render_chart({"limits": {"operators": given}}))
    assert {value: getattr(limits, field) for value, field in VALUES.items()} == given


@pytest.mark.parametrize(("values", "message"), [
    ({"windowSeconds": 315_360_001}, r"at '/limits/operators/windowSeconds': maximum"),
    ({"keyedWorkers": 65}, r"at '/limits/operators/keyedWorkers': maximum"),
    ({"minReshapeEta": 1}, r"at '/limits/operators/minReshapeEta': exclusiveMinimum"),
    ({"unionInputs": 1}, r"at '/limits/operators/unionInputs': minimum"),
    ({"windowSecs": 60}, r"at '/limits/operators': additional properties 'windowSecs' not allowed"),
])
def test_a_value_the_settings_would_refuse_fails_at_install(render_chart, values, message):
    with pytest.raises(helm_python.HelmValuesError, match=message):
        render_chart({"limits": {"operators": values}})
