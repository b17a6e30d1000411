"""The chart's values: strict lint, values.schema.json, and the settings they map onto."""

from __future__ import annotations

import re

import helm_python
import pytest
import yaml

from tests.helm.chart_fixtures import CHART_DIR, SANA_SETTINGS_IN_POD, SCENARIOS

WARNING = 2  # helm lint severities: 1 info, 2 warning, 3 error


@pytest.mark.parametrize("scenario_name", sorted(SCENARIOS))
def test_chart_lints_clean_in_strict_mode(scenario_name):
    report = helm_python.lint(
        CHART_DIR, SCENARIOS[scenario_name], strict=True, namespace="streams", kube_version="v1.30.0"
    )
    problems = [m for m in report["messages"] if m["severity"] >= WARNING]
    assert report["total_charts_linted"] == 1
    assert problems == [] and report["errors"] == [], f"{scenario_name}: {problems or report['errors']}"


def test_lint_reports_schema_violations():
    report = helm_python.lint(CHART_DIR, {"api": {"port": 0}}, strict=True)
    assert any("/api/port" in error for error in report["errors"]), report


def test_chart_metadata(chart):
    assert chart.metadata["apiVersion"] == "v2"
    assert chart.name == "sana"
    assert chart.schema is not None and chart.schema["additionalProperties"] is False
    chart.validate_schema(chart.values)


def test_values_yaml_documents_every_setting():
    text = (CHART_DIR / "values.yaml").read_text()
    for variable in sorted(SANA_SETTINGS_IN_POD):
        assert len(re.findall(rf"{variable}\b", text)) >= 2, f"values.yaml: {variable} is not documented at its value"


SCHEMA = "values don't meet the specifications of the schema"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"api": {"port": -1}}, r"at '/api/port': minimum: got -1, want 1"),
        ({"api": {"port": 70000}}, r"at '/api/port': maximum: got 70,000, want 65,535"),
        ({"api": {"host": "127.0.0.1"}}, r"at '/api/host': value must be one of '0\.0\.0\.0', '::'"),
        ({"redis": {"mode": "sentinel"}}, r"at '/redis/mode': value must be one of 'internal', 'external'"),
        ({"kafka": {"mode": "embedded"}}, r"at '/kafka/mode': value must be one of 'internal', 'external'"),
        ({"spark": {"mode": "yarn"}}, r"at '/spark/mode': value must be one of 'local', 'kubernetes'"),
        ({"redis": {"mode": "external"}}, r"at '/redis/external/url': minLength: got 0, want 1"),
        ({"kafka": {"mode": "external"}}, r"at '/kafka/external/bootstrap': minLength: got 0, want 1"),
        ({"kafka": {"mode": "external", "external": {"bootstrap": "kafka"}}}, r"at '/kafka/external/bootstrap': 'kafka' does not match pattern"),
        ({"redis": {"mode": "external", "external": {"url": "http://redis"}}}, r"at '/redis/external/url': 'http://redis' does not match pattern"),
        ({"statePrefix": "two words"}, r"at '/statePrefix': 'two words' does not match pattern"),
        ({"dryRun": "yes"}, r"at '/dryRun': got string, want boolean"),
        ({"sharing": "no"}, r"at '/sharing': got string, want boolean"),
        ({"defrag": {"afterRemovals": -1}}, r"at '/defrag/afterRemovals': minimum: got -1, want 0"),
        ({"rateLimit": {"writeBurst": 0}}, r"at '/rateLimit/writeBurst': minimum: got 0, want 1"),
        ({"rateLimit": {"readsPerSecond": -1}}, r"at '/rateLimit/readsPerSecond': minimum: got -1, want 0"),
        ({"rateLimit": {"admins": "no"}}, r"at '/rateLimit/admins': got string, want boolean"),
        ({"spark": {"triggerSeconds": 0}}, r"at '/spark/triggerSeconds': minimum: got 0, want 0.1"),
        ({"checkpoints": {"dir": "relative/dir"}}, r"at '/checkpoints/dir': 'relative/dir' does not match pattern"),
        ({"spark": {"local": {"master": "local[0]"}}}, r"at '/spark/local/master': 'local\[0\]' does not match pattern"),
        ({"spark": {"kubernetes": {"master": "https://kubernetes.default.svc"}}}, r"at '/spark/kubernetes/master': .* does not match pattern"),
        ({"spark": {"kubernetes": {"executor": {"instances": 0}}}}, r"at '/spark/kubernetes/executor/instances': minimum: got 0, want 1"),
        ({"spark": {"conf": {"shuffle.partitions": 8}}}, r"invalid propertyName 'shuffle\.partitions'"),
        ({"kafka": {"internal": {"clusterId": "not-a-uuid"}}}, r"at '/kafka/internal/clusterId': 'not-a-uuid' does not match pattern"),
        ({"service": {"type": "ExternalName"}}, r"at '/service/type': value must be one of"),
        ({"ingress": {"enabled": True, "hosts": []}}, r"at '/ingress/hosts': minItems: got 0, want 1"),
        ({"manager": {"extraEnv": [{"name": "SANA_REDIS_URL", "value": "redis://x"}]}}, r"at '/manager/extraEnv/0/name'"),
        ({"redis": {"mdoe": "external"}}, r"at '/redis': additional properties 'mdoe' not allowed"),
        ({"replicas": 2}, r"at '': additional properties 'replicas' not allowed"),
        ({"wan": {"config": "examples/wan/wan-config.json"}}, r"at '/wan/config': got string, want object"),
        ({"wan": {"config": [{"name": "virginia"}]}}, r"at '/wan/config': got array, want object"),
        ({"wan": {"config": {"links": []}}}, r"at '/wan/config': missing property 'sites'"),
        ({"wan": {"config": {"sites": ["a"], "site": ["b"]}}}, r"invalid propertyName 'site'"),
        ({"wan": {"existingConfigMap": "Ops_WAN"}}, r"at '/wan/existingConfigMap': 'Ops_WAN' does not match pattern"),
        ({"runDir": "/etc/sana/wan"}, r"at '/runDir'"),
    ],
    ids=lambda value: str(value)[:60] if isinstance(value, dict) else None,
)
def test_bad_values_fail_with_a_message_naming_the_value(render_chart, values, message):
    with pytest.raises(helm_python.HelmValuesError, match=message) as caught:
        render_chart(values)
    assert str(caught.value).startswith(SCHEMA)


def test_run_dir_and_checkpoint_dir_must_differ(render_chart):
    with pytest.raises(helm_python.HelmRenderError, match=r'runDir and checkpoints\.dir are both "/var/lib/sana/ckpt"'):
        render_chart({"runDir": "/var/lib/sana/ckpt", "checkpoints": {"dir": "/var/lib/sana/ckpt"}})


@pytest.mark.parametrize(
    "values",
    [
        {"redis": {"mode": "external", "external": {"existingSecret": "ops-redis"}}},
        {"kafka": {"mode": "external", "external": {"bootstrap": "10.0.0.5:9092,[fd00::5]:9092"}}},
        {"spark": {"local": {"master": "local[4]"}}},
        {"api": {"host": "::", "port": 65535}},
        {"wan": {"existingConfigMap": "ops-wan"}},
        {"wan": {"config": {"sites": ["a", {"name": "b", "compute": False}], "default_link": {"bandwidth_mbps": 20, "latency_ms": 150}}}},
    ],
    ids=["redis-existing-secret", "kafka-ip-list", "local-4", "ipv6-any", "wan-existing-configmap", "wan-minimal"],
)
def test_good_values_pass_the_schema(render_chart, values):
    render_chart(values)


def _docs_value_blocks() -> list[str]:
    text = (CHART_DIR.parents[1] / "docs" / "kubernetes.md").read_text()
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)


@pytest.mark.parametrize("block", _docs_value_blocks(), ids=lambda block: block.split(":")[0])
def test_values_shown_in_the_docs_install(render_chart, block):
    values = yaml.safe_load(block)
    rendered = render_chart(values)
    assert rendered.manager()["spec"]["replicas"] == 1


def test_docs_show_the_helm_install_command():
    text = (CHART_DIR.parents[1] / "docs" / "kubernetes.md").read_text()
    assert "helm install sana ./helm/sana" in text
    assert len(_docs_value_blocks()) >= 2
