"""What the chart renders, for the defaults and each major option (SCENARIOS)."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess

import helm_python
import kubernetes_validate
import pytest
import yaml

from sana import __version__
from tests.helm.chart_fixtures import (
    CHART_DIR,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    SANA_SETTINGS_IN_POD,
    SCENARIOS,
    TOKENS_PATH,
    TOKENS_SECRET,
    WAN_CONFIG_PATH,
    WAN_EXAMPLE,
    expected_settings_in_pod,
)

FULLNAME = f"{RELEASE}-sana"
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding"}
EXECUTOR_RESOURCES = {"pods", "services", "configmaps", "persistentvolumeclaims"}


def _selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _executor_template(rendered) -> dict:
    config = rendered.get("ConfigMap", f"{FULLNAME}-spark")
    return yaml.safe_load(config["data"]["executor-pod-template.yaml"])


# --- every manifest is a valid Kubernetes 1.30 object -----------------------------------


def test_every_manifest_validates_against_kubernetes_schemas(scenario):
    name, rendered = scenario
    objects = list(rendered.manifests)
    if "executor-pod-template.yaml" in rendered.get("ConfigMap", f"{FULLNAME}-spark")["data"]:
        objects.append(_executor_template(rendered))
    assert objects, f"{name}: nothing rendered"
    for manifest in objects:
        where = f"{name}: {manifest['kind']}/{manifest['metadata'].get('name', '(template)')}"
        try:
            validated = kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            pytest.fail(f"{where} is not a valid Kubernetes {KUBE_VERSION} object at {path}: {error.message}")
        assert validated == KUBE_VERSION, where


def test_every_object_carries_the_release_labels(scenario):
    name, rendered = scenario
    for manifest in rendered.manifests:
        labels = manifest["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == RELEASE, f"{name}: {manifest['kind']} {manifest['metadata']['name']}"
        assert labels.get("app.kubernetes.io/name") == "sana"


# --- the manager ---------------------------------------------------------------------------


def test_manager_probes_call_healthz_on_the_api_port(scenario):
    name, rendered = scenario
    container = rendered.manager_container()
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["http"] == rendered.values["api"]["port"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, f"{name}: {probe}"


def test_manager_env_carries_every_sana_setting(scenario):
    name, rendered = scenario
    env = rendered.manager_env()
    values = rendered.values
    expected = expected_settings_in_pod(values)
    missing = expected - set(env)
    assert not missing, f"{name}: the manager's env lacks {sorted(missing)}"
    unset = (SANA_SETTINGS_IN_POD - expected) & set(env)
    assert not unset, f"{name}: the manager's env sets {sorted(unset)} though their values are unset"
    plain = {key: item.get("value") for key, item in env.items()}
    assert plain["SANA_STATE_PREFIX"] == values["statePrefix"]
    assert plain["SANA_DRY_RUN"] == ("1" if values["dryRun"] else "0")
    assert plain["SANA_SHARING"] == ("1" if values["sharing"] else "0")
    assert plain["SANA_CONTAINMENT"] == ("1" if values["containment"] else "0")
    assert plain["SANA_GC_FREEZE"] == ("1" if values["manager"]["gcFreeze"] else "0")
    assert float(plain["SANA_TRIGGER_S"]) == values["spark"]["triggerSeconds"]
    assert plain["SANA_DEFRAG_AFTER_REMOVALS"] == str(values["defrag"]["afterRemovals"])
    limits = values["limits"]
    assert (plain["SANA_MAX_TASKS_PER_DATAFLOW"], plain["SANA_MAX_DATAFLOWS_PER_OWNER"], plain["SANA_MAX_RUNNING_TASKS"],
            plain["SANA_MAX_QUERIES"]) == (
        str(limits["tasksPerDataflow"]), str(limits["dataflowsPerOwner"]), str(limits["runningTasks"]), str(limits["queries"]))
    rate = values["rateLimit"]
    assert (plain["SANA_RATE_LIMIT_WRITES_PER_S"], plain["SANA_RATE_LIMIT_WRITE_BURST"], plain["SANA_RATE_LIMIT_READS_PER_S"],
            plain["SANA_RATE_LIMIT_READ_BURST"], plain["SANA_RATE_LIMIT_ADMINS"]) == (
        str(rate["writesPerSecond"]), str(rate["writeBurst"]), str(rate["readsPerSecond"]), str(rate["readBurst"]),
        "1" if rate["admins"] else "0")
    assert plain["SANA_API_HOST"] == "0.0.0.0"
    assert plain["SANA_API_PORT"] == str(values["api"]["port"])
    assert plain["SANA_CHECKPOINT_DIR"] == values["checkpoints"]["dir"]
    assert plain["SANA_RUN_DIR"] == values["runDir"]
    reshape = values["keyed"]["reshape"]
    assert plain["SANA_KEYED_WORKERS"] == str(values["keyed"]["workers"])
    assert plain["SANA_RESHAPE_ENABLED"] == ("1" if reshape["enabled"] else "0")
    assert (plain["SANA_RESHAPE_SPLIT"], plain["SANA_RESHAPE_ETA"]) == (reshape["split"], str(reshape["eta"]))
    assert (plain["SANA_RESHAPE_TAU_MIN"], plain["SANA_RESHAPE_TAU_MAX"]) == (str(reshape["tauMin"]), str(reshape["tauMax"]))
    assert plain["SANA_RESHAPE_MAX_HELPERS"] == str(reshape["maxHelpers"])
    assert env["SANA_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"]
    if "SANA_WAN_CONFIG" in expected:
        assert plain["SANA_WAN_CONFIG"] == WAN_CONFIG_PATH


def test_sana_settings_all_have_a_value():
    """Helm values map one-to-one onto the settings: a new setting needs a value."""
    from sana.settings import Settings

    # only `sana up` starts an embedded broker and Valkey and keeps their data (or not) in its data
    # directory (in the chart they are StatefulSets on their own claims, values *.internal.persistence);
    # fail points are for recovery tests, never a deployment
    not_in_pod = {"SANA_EMBEDDED_KAFKA_PORT", "SANA_DATA_DIR", "SANA_EPHEMERAL", "SANA_FAILPOINTS",
                  "SANA_BROKER_OBJECT_STORE", "SANA_BROKER_RETENTION_BATCHES",  # the embedded broker's retention
                  "SANA_DEMO_LINGER_MS"}  # sana up --demo
    settings = {f"SANA_{name.upper()}" for name in Settings.model_fields}
    assert settings - not_in_pod == SANA_SETTINGS_IN_POD, (
        f"settings without a chart value: {sorted(settings - not_in_pod - SANA_SETTINGS_IN_POD)}; "
        f"chart values without a setting: {sorted(SANA_SETTINGS_IN_POD - settings)}"
    )


def test_sana_serve_binds_the_configured_host_and_port(render_chart):
    rendered = render_chart({"api": {"port": 9000}})
    container = rendered.manager_container()
    assert container["args"] == ["sana", "serve", "--host", "$(SANA_API_HOST)", "--port", "$(SANA_API_PORT)"]
    assert rendered.manager_env()["SANA_API_PORT"]["value"] == "9000"
    assert {"name": "http", "containerPort": 9000, "protocol": "TCP"} in container["ports"]


def test_manager_is_one_replica_replaced_with_recreate(scenario):
    name, rendered = scenario
    spec = rendered.manager()["spec"]
    assert spec["replicas"] == 1, name
    assert spec["strategy"] == {"type": "Recreate"}, name


def test_manager_runs_as_non_root_on_a_read_only_root_filesystem(scenario):
    name, rendered = scenario
    pod = rendered.manager()["spec"]["template"]["spec"]
    container = rendered.manager_container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], f"{name}: /tmp is not a writable emptyDir"
    assert "emptyDir" in volumes[mounts[rendered.values["runDir"]]]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, "persistentVolumeClaim"),
        ({"checkpoints": {"persistence": {"enabled": False}}}, "emptyDir"),
        ({"checkpoints": {"persistence": {"existingClaim": "ckpt-rwx"}}}, "persistentVolumeClaim"),
    ],
    ids=["claim", "emptydir", "existing-claim"],
)
def test_checkpoints_live_on_a_claim_or_an_emptydir(render_chart, values, expected):
    rendered = render_chart(values)
    pod = rendered.manager()["spec"]["template"]["spec"]
    mounts = {mount["mountPath"]: mount["name"] for mount in rendered.manager_container()["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v["name"] == mounts["/var/lib/sana/checkpoints"])
    assert expected in volume
    claims = rendered.of_kind("PersistentVolumeClaim")
    if values == {}:
        assert volume["persistentVolumeClaim"]["claimName"] == claims[0]["metadata"]["name"] == f"{FULLNAME}-checkpoints"
        assert claims[0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    elif expected == "emptyDir":
        assert claims == []
    else:
        assert volume["persistentVolumeClaim"]["claimName"] == "ckpt-rwx"
        assert claims == [], "an existing claim must not be created again"


def test_service_and_ingress_reach_the_manager(render_chart):
    rendered = render_chart(SCENARIOS["ingress"])
    service = rendered.get("Service", FULLNAME)
    pod_labels = rendered.manager()["spec"]["template"]["metadata"]["labels"]
    assert _selector_matches(service["spec"]["selector"], pod_labels)
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    ingress = rendered.get("Ingress", FULLNAME)
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"secretName": "sana-tls", "hosts": ["sana.corp.example"]}]
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "sana.corp.example"
    assert rule["http"]["paths"][0]["backend"] == {"service": {"name": FULLNAME, "port": {"name": "http"}}}
    assert "Ingress" not in render_chart({}).kinds()


# --- the WAN configuration (SANA_WAN_CONFIG) ---------------------------------------------


def _wan_volume(rendered) -> tuple[dict, dict]:
    """(volume mount, volume) of the WAN configuration in the manager pod."""
    pod = rendered.manager()["spec"]["template"]["spec"]
    [mount] = [m for m in rendered.manager_container()["volumeMounts"] if m["name"] == "wan-config"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "wan-config"]
    return mount, volume


def test_wan_config_is_a_configmap_mounted_read_only_and_named_by_sana_wan_config(render_chart):
    from wan.topology import parse_wan_config

    rendered = render_chart(SCENARIOS["wan-config"])
    config_map = rendered.get("ConfigMap", f"{FULLNAME}-wan")
    assert set(config_map["data"]) == {"wan.json"}
    document = json.loads(config_map["data"]["wan.json"])
    assert document == WAN_EXAMPLE
    parse_wan_config(config_map["data"]["wan.json"])  # what the manager reads at start
    mount, volume = _wan_volume(rendered)
    assert mount == {"name": "wan-config", "mountPath": os.path.dirname(WAN_CONFIG_PATH), "readOnly": True}
    assert volume["configMap"] == {
        "name": f"{FULLNAME}-wan",
        "items": [{"key": "wan.json", "path": os.path.basename(WAN_CONFIG_PATH)}],
    }
    assert rendered.manager_env()["SANA_WAN_CONFIG"] == {"name": "SANA_WAN_CONFIG", "value": WAN_CONFIG_PATH}


def test_the_values_schema_takes_every_field_of_a_wan_configuration_and_no_other():
    from wan.topology import WAN_DOCUMENT_FIELDS

    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    wan_config = schema["properties"]["wan"]["properties"]["config"]
    assert sorted(wan_config["propertyNames"]["enum"]) == sorted(WAN_DOCUMENT_FIELDS) == sorted(wan_config["properties"])


def test_changing_the_wan_config_restarts_the_manager(render_chart):
    def checksum(values):
        return render_chart(values).manager()["spec"]["template"]["metadata"]["annotations"]["checksum/wan-config"]

    changed = {**WAN_EXAMPLE, "selectivity": {"filter": 0.5}}
    assert checksum(SCENARIOS["wan-config"]) != checksum({"wan": {"config": changed}})


def test_no_wan_config_by_default(render_chart):
    rendered = render_chart({})
    assert rendered.values["wan"] == {"config": {}, "existingConfigMap": "", "existingConfigMapKey": "wan.json"}
    assert f"{FULLNAME}-wan" not in {m["metadata"]["name"] for m in rendered.of_kind("ConfigMap")}
    assert "SANA_WAN_CONFIG" not in rendered.manager_env()
    pod = rendered.manager()["spec"]["template"]["spec"]
    assert "wan-config" not in {v["name"] for v in pod["volumes"]}
    assert "checksum/wan-config" not in rendered.manager()["spec"]["template"]["metadata"]["annotations"]


def test_wan_config_from_an_existing_configmap(render_chart):
    rendered = render_chart({"wan": {"existingConfigMap": "ops-wan", "existingConfigMapKey": "topology.json"}})
    assert f"{FULLNAME}-wan" not in {m["metadata"]["name"] for m in rendered.of_kind("ConfigMap")}
    mount, volume = _wan_volume(rendered)
    assert mount["readOnly"] is True and mount["mountPath"] == os.path.dirname(WAN_CONFIG_PATH)
    assert volume["configMap"] == {
        "name": "ops-wan",
        "items": [{"key": "topology.json", "path": os.path.basename(WAN_CONFIG_PATH)}],
    }
    assert rendered.manager_env()["SANA_WAN_CONFIG"]["value"] == WAN_CONFIG_PATH
    kubernetes_validate.validate(rendered.manager(), KUBE_VERSION, strict=True)


def test_tokens_come_from_a_secret_mounted_read_only(render_chart):
    rendered = render_chart({"auth": {"existingSecret": "ops-tokens", "existingSecretKey": "principals.json"}})
    assert rendered.manager_env()["SANA_TOKENS_FILE"] == {"name": "SANA_TOKENS_FILE", "value": TOKENS_PATH}
    pod = rendered.manager()["spec"]["template"]["spec"]
    [mount] = [m for m in rendered.manager_container()["volumeMounts"] if m["name"] == "tokens"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "tokens"]
    assert mount == {"name": "tokens", "mountPath": os.path.dirname(TOKENS_PATH), "readOnly": True}
    assert volume["secret"] == {"secretName": "ops-tokens", "items": [{"key": "principals.json", "path": "tokens.json"}]}
    assert render_chart({})  # the fixture's default names a Secret
    assert render_chart({}).manager()["spec"]["template"]["spec"]["volumes"][-1]["secret"]["secretName"] == TOKENS_SECRET


def test_the_chart_refuses_to_run_without_tokens(render_chart):
    with pytest.raises(helm_python.HelmRenderError, match=r"auth\.existingSecret is required"):
        render_chart({"auth": {"existingSecret": ""}})


def test_wan_config_and_an_existing_configmap_exclude_each_other(render_chart):
    with pytest.raises(helm_python.HelmRenderError, match=r'wan\.config and wan\.existingConfigMap \("ops-wan"\) are both set'):
        render_chart({"wan": {"config": WAN_EXAMPLE, "existingConfigMap": "ops-wan"}})


# --- secrets -------------------------------------------------------------------------------

SECRET_LOOKING = re.compile(r"PASSWORD|SECRET|TOKEN|_URL$|AUTH")
MOUNTED_SECRET_PATHS = {"SANA_TOKENS_FILE": TOKENS_PATH}


def test_secrets_are_never_plain_env_values(scenario):
    name, rendered = scenario
    for owner, pod in rendered.pod_specs():
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            for item in container.get("env", []):
                if item["name"] in MOUNTED_SECRET_PATHS:  # the path of a file mounted from a Secret, not a secret
                    assert item["value"] == MOUNTED_SECRET_PATHS[item["name"]]
                elif SECRET_LOOKING.search(item["name"]):
                    assert "value" not in item, f"{name}: {owner}/{container['name']} sets {item['name']} as a plain value"
                    assert "secretKeyRef" in item["valueFrom"], f"{name}: {owner} {item['name']}"


@pytest.mark.parametrize(
    "scenario_name", ["default", "external-redis-url", "internal-redis-fixed-password", "all-external-dry-run"]
)
def test_secret_values_appear_nowhere_but_in_secrets(render_chart, scenario_name):
    rendered = render_chart(SCENARIOS[scenario_name])
    secrets = rendered.of_kind("Secret")
    assert secrets, scenario_name
    text = rendered.text_without_secrets()
    for secret in secrets:
        for key, encoded in secret["data"].items():
            plain = base64.b64decode(encoded).decode()
            assert plain not in text, f"{scenario_name}: {secret['metadata']['name']}[{key}] leaks outside the Secret"


def test_internal_redis_url_holds_the_password_and_the_service_address(render_chart):
    rendered = render_chart(SCENARIOS["internal-redis-fixed-password"])
    secret = rendered.get("Secret", f"{FULLNAME}-redis")
    decoded = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert decoded == {
        "redis-password": "hunter2-internal",
        "redis-url": f"redis://:hunter2-internal@{FULLNAME}-redis.{NAMESPACE}.svc.cluster.local:6379/2",
    }
    ref = rendered.manager_env()["SANA_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": f"{FULLNAME}-redis", "key": "redis-url"}


def test_generated_redis_password_is_long_and_random(render_chart):
    passwords = {
        base64.b64decode(render_chart({}).get("Secret", f"{FULLNAME}-redis")["data"]["redis-password"]).decode()
        for _ in range(2)
    }
    assert len(passwords) == 2
    assert all(re.fullmatch(r"[A-Za-z0-9]{32}", password) for password in passwords)


# --- Redis -----------------------------------------------------------------------------------


def test_internal_redis_is_a_statefulset_with_a_volume_and_a_secret_password(render_chart):
    rendered = render_chart({})
    redis = rendered.get("StatefulSet", f"{FULLNAME}-redis")
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    container = redis["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    password = {item["name"]: item for item in container["env"]}["REDIS_PASSWORD"]
    assert password["valueFrom"]["secretKeyRef"] == {"name": f"{FULLNAME}-redis", "key": "redis-password"}
    assert '--requirepass "$REDIS_PASSWORD"' in container["command"][-1]
    assert rendered.get("Service", f"{FULLNAME}-redis")["spec"]["ports"][0]["port"] == 6379


def test_internal_redis_without_persistence_uses_an_emptydir(render_chart):
    redis = render_chart(SCENARIOS["persistence-off"]).get("StatefulSet", f"{FULLNAME}-redis")
    assert "volumeClaimTemplates" not in redis["spec"]
    assert {"name": "data", "emptyDir": {}} in redis["spec"]["template"]["spec"]["volumes"]


@pytest.mark.parametrize(
    ("scenario_name", "secret", "key", "chart_secret"),
    [
        ("external-redis-url", f"{FULLNAME}-redis", "redis-url", True),
        ("external-redis-existing-secret", "ops-redis", "url", False),
        ("internal-redis-existing-secret", "ops-redis-internal", "redis-url", False),
    ],
)
def test_redis_url_comes_from_the_right_secret(render_chart, scenario_name, secret, key, chart_secret):
    rendered = render_chart(SCENARIOS[scenario_name])
    assert rendered.manager_env()["SANA_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": secret, "key": key}
    assert bool(rendered.of_kind("Secret")) is chart_secret
    internal = rendered.values["redis"]["mode"] == "internal"
    assert any(s["metadata"]["name"] == f"{FULLNAME}-redis" for s in rendered.of_kind("StatefulSet")) is internal


def test_external_redis_url_is_stored_verbatim(render_chart):
    rendered = render_chart(SCENARIOS["external-redis-url"])
    secret = rendered.get("Secret", f"{FULLNAME}-redis")
    assert base64.b64decode(secret["data"]["redis-url"]).decode() == "redis://:hunter2-redis@redis.data.svc:6379/3"
    assert {s["metadata"]["name"] for s in rendered.of_kind("StatefulSet")} == {f"{FULLNAME}-kafka"}


# --- Kafka -----------------------------------------------------------------------------------


def test_internal_kafka_is_a_single_kraft_broker_behind_the_bootstrap_service(render_chart):
    rendered = render_chart({})
    bootstrap = rendered.manager_env()["SANA_KAFKA_BOOTSTRAP"]["value"]
    assert bootstrap == f"{FULLNAME}-kafka.{NAMESPACE}.svc.cluster.local:9092"
    kafka = rendered.get("StatefulSet", f"{FULLNAME}-kafka")
    assert kafka["spec"]["replicas"] == 1
    pod = kafka["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    container = pod["containers"][0]
    assert container["image"].startswith("apache/kafka:")
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{bootstrap}"
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"])
    assert env["KAFKA_LOG_DIRS"].startswith("/var/lib/kafka/data/")
    assert kafka["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    service = rendered.get("Service", f"{FULLNAME}-kafka")
    assert _selector_matches(service["spec"]["selector"], kafka["spec"]["template"]["metadata"]["labels"])


def test_external_kafka_is_used_as_given_and_nothing_is_deployed_for_it(render_chart):
    rendered = render_chart(SCENARIOS["external-kafka"])
    assert rendered.manager_env()["SANA_KAFKA_BOOTSTRAP"]["value"] == "kafka-0.kafka.data.svc:9092,kafka-1.kafka.data.svc:9092"
    names = {m["metadata"]["name"] for m in rendered.manifests}
    assert not {n for n in names if "kafka" in n}, f"kafka objects rendered: {names}"


# --- NetworkPolicy ---------------------------------------------------------------------------


def test_only_manager_pods_reach_redis_and_kafka(render_chart):
    rendered = render_chart({})
    manager_labels = rendered.manager()["spec"]["template"]["metadata"]["labels"]
    policies = {p["metadata"]["name"]: p for p in rendered.of_kind("NetworkPolicy")}
    assert set(policies) == {f"{FULLNAME}-redis", f"{FULLNAME}-kafka"}
    for component, port in (("redis", 6379), ("kafka", 9092)):
        policy = policies[f"{FULLNAME}-{component}"]["spec"]
        target = rendered.get("StatefulSet", f"{FULLNAME}-{component}")["spec"]["template"]["metadata"]["labels"]
        assert _selector_matches(policy["podSelector"]["matchLabels"], target)
        assert policy["policyTypes"] == ["Ingress"]
        [rule] = policy["ingress"]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]
        [peer] = rule["from"]
        assert _selector_matches(peer["podSelector"]["matchLabels"], manager_labels)
        for other in ("redis", "kafka"):
            other_labels = rendered.get("StatefulSet", f"{FULLNAME}-{other}")["spec"]["template"]["metadata"]["labels"]
            assert not _selector_matches(peer["podSelector"]["matchLabels"], other_labels)


def test_spark_executors_may_reach_kafka_but_not_redis(render_chart):
    rendered = render_chart(SCENARIOS["spark-kubernetes"])
    executor_labels = _executor_template(rendered)["metadata"]["labels"]
    kafka_peers = rendered.get("NetworkPolicy", f"{FULLNAME}-kafka")["spec"]["ingress"][0]["from"]
    redis_peers = rendered.get("NetworkPolicy", f"{FULLNAME}-redis")["spec"]["ingress"][0]["from"]
    assert any(_selector_matches(p["podSelector"]["matchLabels"], executor_labels) for p in kafka_peers)
    assert not any(_selector_matches(p["podSelector"]["matchLabels"], executor_labels) for p in redis_peers)


@pytest.mark.parametrize("scenario_name", ["all-external-dry-run", "external-kafka", "external-redis-url"])
def test_network_policies_only_for_in_cluster_services(render_chart, scenario_name):
    rendered = render_chart(SCENARIOS[scenario_name])
    expected = {
        f"{FULLNAME}-{component}"
        for component in ("redis", "kafka")
        if rendered.values["networkPolicy"]["enabled"] and rendered.values[component]["mode"] == "internal"
    }
    assert {p["metadata"]["name"] for p in rendered.of_kind("NetworkPolicy")} == expected


# --- Spark -----------------------------------------------------------------------------------


def test_spark_local_mode_has_no_rbac_and_no_service_account_token(scenario):
    name, rendered = scenario
    kubernetes = rendered.values["spark"]["mode"] == "kubernetes"
    assert bool(RBAC_KINDS & rendered.kinds()) is kubernetes, f"{name}: RBAC objects {RBAC_KINDS & rendered.kinds()}"
    pod = rendered.manager()["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is kubernetes
    expected_master = "k8s://https://kubernetes.default.svc" if kubernetes else "local[*]"
    assert rendered.manager_env()["SANA_SPARK_MASTER"]["value"] == expected_master


def test_spark_on_kubernetes_grants_the_driver_what_executors_need(render_chart):
    rendered = render_chart(SCENARIOS["spark-kubernetes"])
    account = rendered.get("ServiceAccount", f"{FULLNAME}-spark")
    role = rendered.get("Role", f"{FULLNAME}-spark")
    binding = rendered.get("RoleBinding", f"{FULLNAME}-spark")
    granted = {resource for rule in role["rules"] for resource in rule["resources"]}
    assert granted == EXECUTOR_RESOURCES
    assert {"create", "get", "list", "watch", "delete"} <= set(role["rules"][0]["verbs"])
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}]
    pod = rendered.manager()["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_spark_on_kubernetes_configures_client_mode_executors(render_chart):
    rendered = render_chart(SCENARIOS["spark-kubernetes"])
    config = rendered.get("ConfigMap", f"{FULLNAME}-spark")["data"]
    defaults = dict(
        line.split(" ", 1) for line in config["spark-defaults.conf"].splitlines() if line and not line.startswith("#")
    )
    driver_service = rendered.get("Service", f"{FULLNAME}-driver")
    assert driver_service["spec"]["clusterIP"] == "None"
    assert defaults["spark.driver.host"] == f"{FULLNAME}-driver.{NAMESPACE}.svc.cluster.local"
    assert defaults["spark.driver.port"] == "7078"
    assert defaults["spark.kubernetes.namespace"] == NAMESPACE
    assert defaults["spark.kubernetes.container.image"] == f"sana:{__version__}"
    assert defaults["spark.executor.instances"] == "3"
    assert defaults["spark.executor.memory"] == "3g"
    assert defaults["spark.kubernetes.driver.pod.name"] == "${env:SANA_POD_NAME}"
    mounts = {m["name"]: m["mountPath"] for m in rendered.manager_container()["volumeMounts"]}
    assert defaults["spark.kubernetes.executor.podTemplateFile"] == f"{mounts['spark-conf']}/executor-pod-template.yaml"
    assert rendered.manager_env()["SPARK_CONF_DIR"]["value"] == mounts["spark-conf"]
    template = _executor_template(rendered)
    container = template["spec"]["containers"][0]
    assert container["name"] == defaults["spark.kubernetes.executor.podTemplateContainerName"]
    assert container["command"] == ["/bin/bash", "/opt/sana/spark-conf/executor.sh"]
    assert "KubernetesExecutorBackend" in config["executor.sh"]
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    claim = next(v for v in template["spec"]["volumes"] if v["name"] == "checkpoints")
    assert claim["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-checkpoints"
    assert rendered.get("PersistentVolumeClaim", f"{FULLNAME}-checkpoints")["spec"]["accessModes"] == ["ReadWriteMany"]


def test_spark_conf_values_land_in_spark_defaults(render_chart):
    rendered = render_chart({"spark": {"conf": {"spark.sql.shuffle.partitions": "8"}}})
    defaults = rendered.get("ConfigMap", f"{FULLNAME}-spark")["data"]["spark-defaults.conf"]
    assert "spark.sql.shuffle.partitions 8" in defaults.splitlines()
    assert "spark.driver.memory 2g" in defaults.splitlines()
    assert "executor.sh" not in rendered.get("ConfigMap", f"{FULLNAME}-spark")["data"]


# --- NOTES.txt -------------------------------------------------------------------------------


def test_notes_tell_how_to_reach_the_api_and_the_inspector(render_chart):
    notes = render_chart({}).notes
    assert f"kubectl --namespace {NAMESPACE} port-forward svc/{FULLNAME} 8000:8000" in notes
    assert "http://127.0.0.1:8000/docs" in notes
    assert "http://127.0.0.1:8000/ " in notes and "inspector" in notes
    assert "export SANA_API_URL=http://127.0.0.1:8000\n" in notes
    with_ingress = render_chart(SCENARIOS["ingress"]).notes
    assert "https://sana.corp.example/docs" in with_ingress
    assert "https://sana.corp.example/ " in with_ingress
    assert "export SANA_API_URL=https://sana.corp.example\n" in with_ingress


def test_notes_warn_when_executors_would_share_a_read_write_once_claim(render_chart):
    notes = render_chart({"spark": {"mode": "kubernetes"}}).notes
    assert "ReadWriteMany" in notes
    assert "WARNING" not in render_chart(SCENARIOS["spark-kubernetes"]).notes


def test_executor_script_starts_the_kubernetes_executor_backend(render_chart, tmp_path):
    """Run the executor script against a stand-in `java` that prints its arguments."""
    script = tmp_path / "executor.sh"
    script.write_text(render_chart(SCENARIOS["spark-kubernetes"]).get("ConfigMap", f"{FULLNAME}-spark")["data"]["executor.sh"])
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    java = fake_bin / "java"
    java.write_text('#!/bin/sh\nfor arg in "$@"; do printf "%s\\n" "$arg"; done\n')
    java.chmod(0o755)
    env = {
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "SPARK_HOME": "/opt/pyspark",
        "SPARK_JAVA_OPT_10": "-Dspark.tenth=1",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_2": "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "SPARK_EXECUTOR_MEMORY": "3g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@rel-sana-driver:7078",
        "SPARK_EXECUTOR_ID": "4",
        "SPARK_EXECUTOR_CORES": "2",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "rel-sana-exec-4",
    }
    # Spark appends the argument "executor" to the template's command.
    result = subprocess.run(["bash", str(script), "executor"], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "-Dspark.driver.port=7078",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "-Dspark.tenth=1",
        "-Xms3g",
        "-Xmx3g",
        "-cp",
        "/opt/pyspark/jars/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url", "spark://CoarseGrainedScheduler@rel-sana-driver:7078",
        "--executor-id", "4",
        "--cores", "2",
        "--app-id", "spark-app-1",
        "--hostname", "10.1.2.3",
        "--resourceProfileId", "0",
        "--podName", "rel-sana-exec-4",
    ]
