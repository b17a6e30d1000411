"""Fixture factories for the chart tests: render helm/sana offline with Helm's Go SDK.

``render_chart(values)`` renders the chart as ``helm install`` would (the
values are checked against values.schema.json first) and returns a
:class:`Rendered` with every manifest parsed. No cluster, no network.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "helm" / "sana"
RELEASE = "rel"
NAMESPACE = "streams"
KUBE_VERSION = "1.30"
# The example WAN configuration (docs/wan.md), given to the chart as wan.config.
WAN_EXAMPLE: dict[str, Any] = json.loads((REPO / "examples" / "wan" / "wan-config.json").read_text())

# The major options of the chart, each as the values an operator would pass.
SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "external-redis-url": {
        "redis": {"mode": "external", "external": {"url": "redis://:hunter2-redis@redis.data.svc:6379/3"}},
    },
    "external-redis-existing-secret": {
        "redis": {"mode": "external", "external": {"existingSecret": "ops-redis", "existingSecretKey": "url"}},
    },
    "internal-redis-existing-secret": {
        "redis": {"internal": {"existingSecret": "ops-redis-internal"}},
    },
    "internal-redis-fixed-password": {
        "redis": {"internal": {"password": "hunter2-internal", "database": 2}},
    },
    "external-kafka": {
        "kafka": {"mode": "external", "external": {"bootstrap": "kafka-0.kafka.data.svc:9092,kafka-1.kafka.data.svc:9092"}},
    },
    "spark-kubernetes": {
        "imagePullSecrets": [{"name": "regcred"}],
        "spark": {"mode": "kubernetes", "kubernetes": {"executor": {"instances": 3, "memory": "3g"}}},
        "checkpoints": {"persistence": {"accessModes": ["ReadWriteMany"], "storageClass": "nfs"}},
    },
    "ingress": {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "hosts": [{"host": "sana.corp.example", "paths": [{"path": "/", "pathType": "Prefix"}]}],
            "tls": [{"secretName": "sana-tls", "hosts": ["sana.corp.example"]}],
        },
    },
    "persistence-off": {
        "checkpoints": {"persistence": {"enabled": False}},
        "redis": {"internal": {"persistence": {"enabled": False}}},
        "kafka": {"internal": {"persistence": {"enabled": False}}},
    },
    "all-external-dry-run": {
        "dryRun": True,
        "sharing": False,
        "defrag": {"afterRemovals": 10},
        "limits": {"tasksPerDataflow": 50, "dataflowsPerOwner": 20, "runningTasks": 5000},
        "rateLimit": {"writesPerSecond": 0.5, "writeBurst": 4, "readsPerSecond": 0, "admins": True},
        "redis": {"mode": "external", "external": {"url": "rediss://:pw@redis.example:6380/0"}},
        "kafka": {"mode": "external", "external": {"bootstrap": "broker.example:9093"}},
        "networkPolicy": {"enabled": False},
        "service": {"type": "LoadBalancer"},
        "api": {"port": 9000},
    },
    "wan-config": {
        "wan": {"config": WAN_EXAMPLE},
    },
}


@dataclass
class Rendered:
    """The manifests of one render, parsed, plus NOTES.txt."""

    values: dict[str, Any]
    manifests: list[dict[str, Any]]
    notes: str
    sources: dict[str, str] = field(repr=False)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def kinds(self) -> set[str]:
        return {m["kind"] for m in self.manifests}

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [m for m in self.of_kind(kind) if m["metadata"]["name"] == name]
        if len(found) != 1:
            names = sorted(m["metadata"]["name"] for m in self.of_kind(kind))
            raise AssertionError(f"expected one {kind} named {name!r}, the render has {names}")
        return found[0]

    def manager(self) -> dict[str, Any]:
        return self.get("Deployment", f"{RELEASE}-sana")

    def manager_container(self) -> dict[str, Any]:
        return self.manager()["spec"]["template"]["spec"]["containers"][0]

    def manager_env(self) -> dict[str, dict[str, Any]]:
        return {item["name"]: item for item in self.manager_container()["env"]}

    def pod_specs(self) -> list[tuple[str, dict[str, Any]]]:
        """(object name, pod spec) of every workload and bare pod in the render."""
        specs = []
        for m in self.manifests:
            if m["kind"] in {"Deployment", "StatefulSet"}:
                specs.append((m["metadata"]["name"], m["spec"]["template"]["spec"]))
            elif m["kind"] == "Pod":
                specs.append((m["metadata"]["name"], m["spec"]))
        return specs

    def text_without_secrets(self) -> str:
        """Every rendered file except the Secrets, as one string."""
        return "\n".join(yaml.safe_dump(m) for m in self.manifests if m["kind"] != "Secret") + self.notes


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@pytest.fixture(scope="session")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render_chart(chart: helm_python.Chart) -> Callable[..., Rendered]:
    """Factory: ``render_chart(values)`` -> :class:`Rendered`; raises what Helm raises."""

    def render(values: dict[str, Any] | None = None) -> Rendered:
        values = {"auth": {"existingSecret": TOKENS_SECRET}, **(values or {})}  # the chart requires tokens
        sources = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        manifests: list[dict[str, Any]] = []
        notes = ""
        for path, text in sorted(sources.items()):
            if path.endswith("NOTES.txt"):
                notes = text
                continue
            manifests.extend(doc for doc in yaml.safe_load_all(text) if doc)
        return Rendered(chart.merge_values(values), manifests, notes, sources)

    return render


@pytest.fixture(scope="session", params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest, render_chart: Callable[..., Rendered]) -> tuple[str, Rendered]:
    """Each major option of the chart, rendered once per session."""
    return request.param, render_chart(SCENARIOS[request.param])

# Every SANA_* setting the chart maps onto the manager pod (SANA_EMBEDDED_KAFKA_PORT is only for `sana up`).
SANA_SETTINGS_IN_POD = {
    "SANA_REDIS_URL",
    "SANA_STATE_PREFIX",
    "SANA_KAFKA_BOOTSTRAP",
    "SANA_SPARK_MASTER",
    "SANA_DRY_RUN",
    "SANA_SHARING",
    "SANA_CONTAINMENT",
    "SANA_GC_FREEZE",
    "SANA_DEFRAG_AFTER_REMOVALS",
    "SANA_TRIGGER_S",
    "SANA_KEEP_IDLE_QUERIES_S",
    "SANA_ANSI_SQL",
    "SANA_API_HOST",
    "SANA_API_PORT",
    "SANA_CHECKPOINT_DIR",
    "SANA_RUN_DIR",
    "SANA_KEYED_WORKERS",
    "SANA_RESHAPE_ENABLED",
    "SANA_RESHAPE_SPLIT",
    "SANA_RESHAPE_ETA",
    "SANA_RESHAPE_TAU_MIN",
    "SANA_RESHAPE_TAU_MAX",
    "SANA_RESHAPE_MAX_HELPERS",
    "SANA_RESHAPE_MIN_EXCESS_ROWS",
    "SANA_WAN_CONFIG",
    "SANA_TOKENS_FILE",
    "SANA_RATE_LIMIT_WRITES_PER_S",
    "SANA_RATE_LIMIT_WRITE_BURST",
    "SANA_RATE_LIMIT_READS_PER_S",
    "SANA_RATE_LIMIT_READ_BURST",
    "SANA_RATE_LIMIT_ADMINS",
    "SANA_MAX_TASKS_PER_DATAFLOW",
    "SANA_MAX_DATAFLOWS_PER_OWNER",
    "SANA_MAX_RUNNING_TASKS",
    "SANA_MAX_QUERIES",
    "SANA_MAX_WINDOW_S",
    "SANA_MAX_WATERMARK_S",
    "SANA_MAX_WINDOWS_PER_RECORD",
    "SANA_MAX_KEYED_WORKERS",
    "SANA_MAX_RESHAPE_HELPERS",
    "SANA_MIN_RESHAPE_ETA",
    "SANA_MIN_RESHAPE_TAU",
    "SANA_MAX_COLUMNS",
    "SANA_MAX_UNION_INPUTS",
}

# Optional settings: the pod carries them only when their value is set (else the
# setting keeps its default, None). Each maps to a predicate on the merged values.
OPTIONAL_SETTINGS_IN_POD: dict[str, Callable[[dict[str, Any]], bool]] = {
    "SANA_WAN_CONFIG": lambda values: bool(values["wan"]["config"] or values["wan"]["existingConfigMap"]),
}

# The Secret of tokens every render names unless a test gives its own auth values.
TOKENS_SECRET = "sana-tokens"
TOKENS_PATH = "/etc/sana/tokens/tokens.json"

# Where the chart mounts the WAN configuration file in the manager pod.
WAN_CONFIG_PATH = "/etc/sana/wan/wan.json"


def expected_settings_in_pod(values: dict[str, Any]) -> set[str]:
    """The SANA_* variables the manager's env must carry for these (merged) values."""
    return {
        name
        for name in SANA_SETTINGS_IN_POD
        if name not in OPTIONAL_SETTINGS_IN_POD or OPTIONAL_SETTINGS_IN_POD[name](values)
    }
