"""ops/kubernetes/ha/: the overlay that runs three replicas in shared mode on one PostgreSQL
database (docs/operations.md, "High availability (several replicas)").

No cluster and no kustomize are needed: the overlay is built here with a small strategic merge
(the merge kustomize applies to a Deployment patch: maps merged key by key, lists of named
entries merged by name), and checked against ``kubectl kustomize`` when kubectl is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.ops import test_manifests as manifests
from tests.ops.test_manifests import (
    BASE,
    KUBERNETES,
    KUBERNETES_VERSION,
    SECRET_STAND_INS,
    SECRET_TEMPLATE,
    SHUTDOWN_SLACK,
    load_documents,
)
from ticket_dispatcher.config import Config, load_config
from ticket_dispatcher.errors import ConfigError

HA = KUBERNETES / "ha"
# A node may be drained or lost: the replicas must be able to sit on different nodes.
NODE_TOPOLOGY_KEY = "kubernetes.io/hostname"
# Volume kinds that would put a database file on storage several pods could share.
PERSISTENT_VOLUME_KINDS = {"persistentVolumeClaim", "hostPath", "nfs", "ephemeral"}


# --- building the overlay ----------------------------------------------------------------------


def overlay_kustomization() -> dict:
    return load_documents(HA / "kustomization.yaml")[0]


def _named(items: list) -> bool:
    return bool(items) and all(isinstance(item, dict) and "name" in item for item in items)


def strategic_merge(base: Any, patch: Any) -> Any:
    """``patch`` over ``base`` as a strategic merge patch of the kinds used here does it."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = strategic_merge(base[key], value) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        by_name = {item["name"]: item for item in patch}
        merged = [strategic_merge(item, by_name.pop(item["name"])) if item["name"] in by_name
                  else item for item in base]
        return merged + list(by_name.values())
    return patch


def _identity(document: dict) -> tuple[str, str]:
    return document["kind"], document["metadata"]["name"]


def load_resource(path: Path) -> list[dict]:
    """A resource entry: a manifest file, or a directory built from its own kustomization."""
    if not path.is_dir():
        return load_documents(path)
    kustomization = load_documents(path / "kustomization.yaml")[0]
    assert set(kustomization) == {"apiVersion", "kind", "resources"}, f"{path}: not a plain list"
    return [doc for name in kustomization["resources"] for doc in load_resource(path / name)]


def build_overlay() -> list[dict]:
    """What ``kustomize build`` makes of ops/kubernetes/ha."""
    kustomization = overlay_kustomization()
    documents = [doc for name in kustomization["resources"]
                 for doc in load_resource((HA / name).resolve())]
    for entry in kustomization.get("patches", []):
        patch = load_documents(HA / entry["path"])[0]
        matches = [i for i, doc in enumerate(documents) if _identity(doc) == _identity(patch)]
        assert len(matches) == 1, f"{entry['path']} patches {_identity(patch)}: not one match"
        documents[matches[0]] = strategic_merge(documents[matches[0]], patch)
    return documents


def built(kind: str) -> dict:
    found = [doc for doc in build_overlay() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def deployment() -> dict:
    return built("Deployment")


def pod_spec() -> dict:
    return deployment()["spec"]["template"]["spec"]


def container() -> dict:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    return containers[0]


def container_env() -> dict[str, dict]:
    return {entry["name"]: entry for entry in container()["env"]}


def environment(config_path: Path, secret_values: dict[str, str] | None = None) -> dict[str, str]:
    """The replica's environment as the service sees it (see test_manifests.environment)."""
    return manifests.environment(config_path, secret_values, env=container_env())


@pytest.fixture
def config_file(tmp_path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(built("ConfigMap")["data"]["config.toml"], encoding="utf-8")
    return path


@pytest.fixture
def replica_config(config_file) -> Config:
    return load_config(None, environ=environment(config_file))


def normalized(value: Any) -> Any:
    """Named lists as maps, so that the order kustomize puts merged entries in does not count."""
    if isinstance(value, dict):
        return {key: normalized(inner) for key, inner in value.items()}
    if isinstance(value, list):
        if _named(value):
            return {item["name"]: normalized(item) for item in value}
        return [normalized(item) for item in value]
    return value


# --- the build itself --------------------------------------------------------------------------


def test_overlay_builds_on_the_same_base_as_the_single_mode():
    single = load_documents(KUBERNETES / "kustomization.yaml")[0]
    resources = overlay_kustomization()["resources"]

    # the base as a whole, as ops/kubernetes takes it: never its files one by one, so whatever
    # base/kustomization.yaml comes to do reaches both modes
    assert [name for name in resources if "/" in name] == ["../" + BASE.name]
    assert single["resources"] == [BASE.name]
    assert SECRET_TEMPLATE.name not in load_documents(BASE / "kustomization.yaml")[0]["resources"]


def test_overlay_uses_every_file_in_its_directory():
    kustomization = overlay_kustomization()
    used = {name for name in kustomization["resources"] if "/" not in name}
    used |= {entry["path"] for entry in kustomization["patches"]}

    assert used == {path.name for path in HA.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("path", sorted(HA.glob("*.yaml")), ids=lambda path: path.name)
def test_overlay_files_name_no_autoscaler(path):
    kinds = {doc.get("kind") for doc in load_documents(path)}

    assert not kinds & {"HorizontalPodAutoscaler", "ScaledObject"}


def test_overlay_result_is_valid_for_the_pinned_kubernetes_version():
    documents = build_overlay()

    assert {doc["kind"] for doc in documents} == {
        "ConfigMap", "Service", "Deployment", "PodDisruptionBudget"}
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_strategic_merge_merges_maps_and_named_lists_and_replaces_the_rest():
    base = {"a": {"b": 1, "c": 2}, "env": [{"name": "X", "value": "1"}], "args": ["serve"]}
    patch = {"a": {"c": 3}, "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "9"}],
             "args": ["version"]}

    assert strategic_merge(base, patch) == {
        "a": {"b": 1, "c": 3}, "env": [{"name": "X", "value": "9"}, {"name": "Y", "value": "2"}],
        "args": ["version"]}


def test_overlay_built_here_is_what_kubectl_kustomize_builds():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed; the merge above is checked by its own test")
    result = subprocess.run(
        [kubectl, "kustomize", str(HA)],  # as `kubectl apply -k` builds it: no flags
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr

    theirs = {_identity(doc): normalized(doc) for doc in yaml.safe_load_all(result.stdout)}
    ours = {_identity(doc): normalized(doc) for doc in build_overlay()}

    assert ours == theirs


# --- what the overlay must say -----------------------------------------------------------------


def test_overlay_runs_three_replicas_replaced_one_at_a_time_without_a_gap():
    spec = deployment()["spec"]

    assert spec["replicas"] == 3
    # a new pod first, then an old one stops: never fewer ready replicas than asked for
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    # a new pod must stay ready a while before an old one is taken away
    assert spec["minReadySeconds"] >= 5


def test_disruption_budget_selects_the_replicas_and_keeps_two_running():
    budget = built("PodDisruptionBudget")["spec"]
    selector = deployment()["spec"]["selector"]["matchLabels"]
    pod_labels = deployment()["spec"]["template"]["metadata"]["labels"]
    replicas = deployment()["spec"]["replicas"]

    assert budget["selector"]["matchLabels"] == selector
    assert selector.items() <= pod_labels.items()
    allowed_down = budget["maxUnavailable"] if "maxUnavailable" in budget else (
        replicas - budget["minAvailable"])
    assert allowed_down == 1


def test_readiness_gate_asks_readyz_often_and_turns_false_on_the_first_failure():
    probe = container()["readinessProbe"]
    ports = {port["name"]: port["containerPort"] for port in container()["ports"]}

    assert probe["httpGet"]["path"] == "/readyz"
    assert probe["httpGet"]["port"] in ports
    assert probe["periodSeconds"] <= 2
    assert probe["failureThreshold"] == 1
    # liveness stays on /healthz, which never touches the database
    assert container()["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_replicas_run_shared_mode_with_a_drain(replica_config):
    env = container_env()

    assert env["TICKET_DISPATCHER_CLUSTER_MODE"]["value"] == "shared"
    assert replica_config.cluster.shared
    assert replica_config.cluster.drain > timedelta(0)
    assert replica_config.cluster.drain < replica_config.shutdown_timeout


def test_grace_period_outlasts_shutdown_timeout_and_drain(replica_config):
    grace = timedelta(seconds=pod_spec()["terminationGracePeriodSeconds"])

    assert replica_config.shutdown_timeout != Config().shutdown_timeout  # the ConfigMap's
    assert grace > replica_config.shutdown_timeout + replica_config.cluster.drain + SHUTDOWN_SLACK


def test_database_url_comes_from_the_secret_and_is_postgresql(config_file):
    template = load_documents(SECRET_TEMPLATE)[0]["stringData"]
    reference = container_env()["TICKET_DISPATCHER_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    environ = environment(config_file, template)
    environ["TICKET_DISPATCHER_AUTH_API_KEYS"] = SECRET_STAND_INS["TICKET_DISPATCHER_AUTH_API_KEYS"]

    config = load_config(None, environ=environ)

    assert reference["key"] in template
    assert config.database_url.startswith("postgresql://")
    assert config.cluster.shared


def test_replicas_refuse_to_start_on_a_sqlite_database(config_file):
    environ = {**environment(config_file),
               "TICKET_DISPATCHER_DATABASE_URL": "sqlite:////var/lib/ticket-dispatcher/td.db"}

    with pytest.raises(ConfigError) as refused:
        load_config(None, environ=environ)

    assert "TICKET_DISPATCHER_CLUSTER_MODE" in refused.value.message
    assert "PostgreSQL" in refused.value.message


def test_no_replica_keeps_a_database_on_a_volume():
    volumes = pod_spec()["volumes"]
    mounts = {mount["mountPath"] for mount in container()["volumeMounts"]}

    assert not [volume["name"] for volume in volumes if set(volume) & PERSISTENT_VOLUME_KINDS]
    # the config (read-only) and /tmp (an emptyDir of each pod) only
    assert {volume["name"]: sorted(set(volume) - {"name"}) for volume in volumes} == {
        "config": ["configMap"], "tmp": ["emptyDir"]}
    assert mounts == {"/etc/ticket-dispatcher", "/tmp"}


def test_replicas_are_spread_over_nodes_when_the_cluster_allows():
    pod_labels = deployment()["spec"]["template"]["metadata"]["labels"]
    spreads = {spread["topologyKey"]: spread for spread in pod_spec()["topologySpreadConstraints"]}
    by_node = spreads[NODE_TOPOLOGY_KEY]

    assert by_node["maxSkew"] == 1
    assert by_node["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    # preferred: a cluster with fewer nodes than replicas still runs them all
    assert {spread["whenUnsatisfiable"] for spread in spreads.values()} == {"ScheduleAnyway"}


def test_base_manifests_stay_one_replica_replaced_by_recreate():
    base = next(doc for doc in load_documents(BASE / "deployment.yaml")
                if doc["kind"] == "Deployment")
    base_env = {entry["name"] for entry in base["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert base["spec"]["replicas"] == 1
    assert base["spec"]["strategy"] == {"type": "Recreate"}
    assert "TICKET_DISPATCHER_CLUSTER_MODE" not in base_env  # single, the default
