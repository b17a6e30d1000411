"""Where the release keeps its data: the in-release Kafka, Redis and the Spark checkpoints on claims.

Each stateful component's data path is followed from the process's own
setting (Redis's --dir, KAFKA_LOG_DIRS, SANA_CHECKPOINT_DIR) to the mount that
holds it and the volume behind that mount, so a path moved off its volume fails
here even when the volume is still declared.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from tests.helm.chart_fixtures import CHART_DIR, RELEASE, SCENARIOS

FULLNAME = f"{RELEASE}-sana"
DOCS = CHART_DIR.parents[1] / "docs" / "kubernetes.md"
ALL_OFF = SCENARIOS["persistence-off"]


def _container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    [container] = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return container


def _data_source(workload: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, dict[str, Any]]:
    """("claimTemplate" | "persistentVolumeClaim" | "emptyDir" | ..., its spec) of the volume holding ``path``."""
    holding = [
        m for m in container.get("volumeMounts", [])
        if PurePosixPath(path) == PurePosixPath(m["mountPath"]) or PurePosixPath(m["mountPath"]) in PurePosixPath(path).parents
    ]
    assert holding, f"{container['name']}: nothing is mounted at or above {path}: it is on the container's own filesystem"
    mount = max(holding, key=lambda m: len(PurePosixPath(m["mountPath"]).parts))
    assert not mount.get("subPath"), f"{container['name']}: {path} is a subPath mount"
    templates = {t["metadata"]["name"]: t for t in workload["spec"].get("volumeClaimTemplates", [])}
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    assert not (mount["name"] in templates and mount["name"] in volumes), f"{mount['name']}: both a volume and a claim template"
    if mount["name"] in templates:
        return "claimTemplate", templates[mount["name"]]
    volume = volumes[mount["name"]]
    [kind] = [key for key in volume if key != "name"]
    return kind, volume[kind]


def _redis(rendered) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    redis = rendered.get("StatefulSet", f"{FULLNAME}-redis")
    container = _container(redis, "redis")
    assert container["command"][:2] == ["/bin/sh", "-c"]
    script = container["command"][2]
    assert script.startswith("exec redis-server "), script
    return redis, container, shlex.split(script)[2:]


def _redis_option(argv: list[str], name: str) -> str:
    """The value of redis-server's ``--name`` option; the last one wins, as in Redis."""
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == f"--{name}"]
    assert values, f"redis-server is started without --{name}: {argv}"
    return values[-1]


def _kafka(rendered) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    kafka = rendered.get("StatefulSet", f"{FULLNAME}-kafka")
    container = _container(kafka, "kafka")
    return kafka, container, {item["name"]: item.get("value", "") for item in container["env"]}


def _kafka_data_dirs(env: dict[str, str]) -> list[str]:
    """Every directory the broker writes data to: its log dirs and the KRaft metadata log dir."""
    dirs = [d.strip() for d in (env.get("KAFKA_LOG_DIRS") or env.get("KAFKA_LOG_DIR", "")).split(",") if d.strip()]
    assert dirs, "the broker's log directory is not set: it would write under /tmp in the image"
    if env.get("KAFKA_METADATA_LOG_DIR"):
        dirs.append(env["KAFKA_METADATA_LOG_DIR"])
    return dirs


def _checkpoint_source(rendered) -> tuple[str, dict[str, Any]]:
    manager = rendered.manager()
    container = rendered.manager_container()
    return _data_source(manager, container, rendered.manager_env()["SANA_CHECKPOINT_DIR"]["value"])


def _claims(rendered) -> list[dict[str, Any]]:
    """Every claim the release creates or makes its StatefulSets create."""
    claims = list(rendered.of_kind("PersistentVolumeClaim"))
    for workload in rendered.of_kind("StatefulSet"):
        claims.extend(workload["spec"].get("volumeClaimTemplates", []))
    return claims


# --- with persistence (the default): every stateful component on a claim --------------------


def test_redis_keeps_its_append_only_file_on_a_claim_template(render_chart):
    redis, container, argv = _redis(render_chart({}))
    assert _redis_option(argv, "appendonly") == "yes"
    assert _redis_option(argv, "appendfsync") == "always"
    kind, template = _data_source(redis, container, _redis_option(argv, "dir"))
    assert kind == "claimTemplate"
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert template["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert "storageClassName" not in template["spec"], "an empty storageClass must leave the cluster's default class"


def test_redis_fsyncs_every_second_when_asked(render_chart):
    _, _, argv = _redis(render_chart({"redis": {"internal": {"persistence": {"appendfsync": "everysec"}}}}))
    assert _redis_option(argv, "appendonly") == "yes"
    assert _redis_option(argv, "appendfsync") == "everysec"


def test_kafka_keeps_its_log_and_metadata_on_a_claim_template(render_chart):
    kafka, container, env = _kafka(render_chart({}))
    for directory in _kafka_data_dirs(env):
        kind, template = _data_source(kafka, container, directory)
        assert kind == "claimTemplate", f"{directory} is on {kind}"
        # Below the mount point, never the volume's root, which may hold lost+found.
        mount = next(m for m in container["volumeMounts"] if m["name"] == template["metadata"]["name"])
        assert PurePosixPath(directory) != PurePosixPath(mount["mountPath"])
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert template["spec"]["resources"]["requests"]["storage"] == "10Gi"
    # The image formats the log dir with CLUSTER_ID once and keeps what it finds after that,
    # so the id must be fixed by the release, not drawn at each start.
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"])


def test_the_broker_keeps_nothing_in_memory_only(render_chart):
    """A broker whose storage engine is memory:// (Tansu's default) loses every topic with its
    pod whatever volume it mounts; none of the release's containers is started with one."""
    rendered = render_chart({})
    for name, pod in rendered.pod_specs():
        for container in pod.get("initContainers", []) + pod["containers"]:
            started = yaml.safe_dump([container.get("command"), container.get("args"), container.get("env")])
            assert "memory://" not in started, f"{name}/{container['name']} keeps data in memory only"


def test_checkpoints_are_on_the_claim_the_release_creates_and_keeps(render_chart):
    rendered = render_chart({})
    kind, source = _checkpoint_source(rendered)
    assert kind == "persistentVolumeClaim"
    claim = rendered.get("PersistentVolumeClaim", source["claimName"])
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


@pytest.mark.parametrize(
    ("values", "annotations"),
    [
        ({"keepOnUninstall": False}, None),
        ({"keepOnUninstall": False, "annotations": {"backup.example/daily": "yes"}}, {"backup.example/daily": "yes"}),
        ({"annotations": {"backup.example/daily": "yes"}}, {"backup.example/daily": "yes", "helm.sh/resource-policy": "keep"}),
    ],
    ids=["not-kept", "not-kept-own-annotations", "kept-own-annotations"],
)
def test_checkpoint_claim_annotations(render_chart, values, annotations):
    rendered = render_chart({"checkpoints": {"persistence": values}})
    claim = rendered.get("PersistentVolumeClaim", f"{FULLNAME}-checkpoints")
    assert claim["metadata"].get("annotations") == annotations


@pytest.mark.parametrize("component", ["redis", "kafka"])
def test_statefulset_claims_outlive_the_statefulset(render_chart, component):
    workload = render_chart({}).get("StatefulSet", f"{FULLNAME}-{component}")
    assert workload["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}


@pytest.mark.parametrize("component", ["redis", "kafka", "checkpoints"])
def test_storage_class_and_size_reach_the_claim(render_chart, component):
    storage = {"storageClass": "fast-ssd", "size": "37Gi"}
    if component == "checkpoints":
        rendered = render_chart({"checkpoints": {"persistence": storage}})
        claim = rendered.get("PersistentVolumeClaim", f"{FULLNAME}-checkpoints")
    else:
        rendered = render_chart({component: {"internal": {"persistence": storage}}})
        [claim] = rendered.get("StatefulSet", f"{FULLNAME}-{component}")["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "37Gi"


def test_every_claim_is_selected_by_the_release_label_the_docs_delete_with(render_chart):
    """docs/kubernetes.md deletes the kept claims with one label selector; it must catch them all
    (a claim made from a volumeClaimTemplate carries the template's labels)."""
    selectors = set(re.findall(r"kubectl -n sana delete pvc -l (\S+)", DOCS.read_text()))
    assert selectors == {"app.kubernetes.io/instance=sana"}, selectors
    rendered = render_chart({})
    claims = _claims(rendered)
    assert len(claims) == 3
    for claim in claims:
        assert claim["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE, claim["metadata"]["name"]


# --- every scenario: persistence on <=> the data is on a claim -----------------------------


def test_each_stateful_component_is_on_a_claim_exactly_when_its_persistence_is_on(scenario):
    name, rendered = scenario
    values = rendered.values
    expected = "persistentVolumeClaim" if values["checkpoints"]["persistence"]["enabled"] else "emptyDir"
    assert _checkpoint_source(rendered)[0] == expected, f"{name}: checkpoints"
    if values["redis"]["mode"] == "internal":
        redis, container, argv = _redis(rendered)
        persistent = values["redis"]["internal"]["persistence"]["enabled"]
        assert _data_source(redis, container, _redis_option(argv, "dir"))[0] == ("claimTemplate" if persistent else "emptyDir")
        assert _redis_option(argv, "appendonly") == ("yes" if persistent else "no"), f"{name}: redis"
    if values["kafka"]["mode"] == "internal":
        kafka, container, env = _kafka(rendered)
        persistent = values["kafka"]["internal"]["persistence"]["enabled"]
        for directory in _kafka_data_dirs(env):
            assert _data_source(kafka, container, directory)[0] == ("claimTemplate" if persistent else "emptyDir"), name


# --- persistence off: throwaway installs on emptyDirs ----------------------------------------


def test_persistence_off_renders_emptydirs_and_no_claim(render_chart):
    rendered = render_chart(ALL_OFF)
    assert _claims(rendered) == []
    assert _checkpoint_source(rendered) == ("emptyDir", {})
    redis, container, argv = _redis(rendered)
    assert _data_source(redis, container, _redis_option(argv, "dir")) == ("emptyDir", {})
    assert _redis_option(argv, "appendonly") == "no"
    assert "--appendfsync" not in argv
    kafka, container, env = _kafka(rendered)
    for directory in _kafka_data_dirs(env):
        assert _data_source(kafka, container, directory) == ("emptyDir", {})
    for component in ("redis", "kafka"):
        assert "persistentVolumeClaimRetentionPolicy" not in rendered.get("StatefulSet", f"{FULLNAME}-{component}")["spec"]
    assert "lost when the pod goes" in rendered.notes


@pytest.mark.parametrize("component", ["redis", "kafka", "checkpoints"])
def test_persistence_turns_off_one_component_at_a_time(render_chart, component):
    off = {"checkpoints": ALL_OFF["checkpoints"]} if component == "checkpoints" else {component: ALL_OFF[component]}
    rendered = render_chart(off)
    claims = _claims(rendered)
    assert len(claims) == 2
    owners = {"checkpoints" if c["metadata"]["name"] == f"{FULLNAME}-checkpoints" else c["metadata"]["labels"]["app.kubernetes.io/component"] for c in claims}
    assert owners == {"redis", "kafka", "checkpoints"} - {component}


def test_notes_name_the_claims_that_hold_the_data(render_chart):
    notes = render_chart({}).notes
    for claim in (f"data-{FULLNAME}-redis-0", f"data-{FULLNAME}-kafka-0", f"{FULLNAME}-checkpoints"):
        assert f"claim {claim}" in notes


# --- the docs --------------------------------------------------------------------------------


def test_docs_say_where_the_data_lives_and_what_uninstall_keeps():
    text = DOCS.read_text()
    section = text[text.index("## Where the data lives"):]
    section = section[: section.index("\n## ", 1)]
    for needle in ("data-sana-redis-0", "data-sana-kafka-0", "sana-checkpoints", "helm uninstall", "volumeClaimTemplates",
                   "persistence.enabled", "appendonly", "emptyDir"):
        assert needle in section, f"docs/kubernetes.md, 'Where the data lives', does not mention {needle}"
