"""The chart tests' fixtures live in tests/helm/chart_fixtures.py."""

from tests.helm.chart_fixtures import chart, render_chart, scenario  # noqa: F401
