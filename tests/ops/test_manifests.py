"""ops/: the Kubernetes manifests, the Dockerfile, the alert rules and the dashboard
(docs/operations.md, "Deploy" and "Metrics"). Docker and a cluster are not needed: the
manifests are checked against the Kubernetes schemas and against the service's own
configuration loader, the rules with promtool.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.ops.metric_names import (
    ALERTS_FILE,
    DASHBOARD_FILE,
    PLANNED_ALERTS,
    PLANNED_METRICS,
    REPO,
    alert_metric_names,
    alert_rules,
    dashboard_expressions,
    dashboard_metric_names,
    promql_metric_names,
)
from ticket_dispatcher.config import CONFIG_ENV, ENV_PREFIX, Config, load_config
from ticket_dispatcher.errors import ConfigError

# The Kubernetes version the manifests are validated for (kubernetes-validate's schemas).
KUBERNETES_VERSION = "1.30.0"

OPS = REPO / "ops"
KUBERNETES = OPS / "kubernetes"
# The manifests themselves; ../ (single mode) and ../ha (shared mode) are built over them.
BASE = KUBERNETES / "base"
SECRET_TEMPLATE = BASE / "secret.template.yaml"
# README "Shutdown and restarts": the process exits within shutdown_timeout + 2 s.
SHUTDOWN_SLACK = timedelta(seconds=2)
# Kinds that would run a second pod next to the first (so no HPA); KEDA's makes an HPA.
AUTOSCALER_KINDS = {"HorizontalPodAutoscaler", "ScaledObject"}
PLANNED_FOR = {"TicketDispatcherDeferredTriggerStuck": "5m",
               "TicketDispatcherWorkersSaturated": "10m",
               "TicketDispatcherDatabaseUnavailable": "1m"}
SEVERITIES = {"warning", "critical"}
# Stand-ins for the values the Secret provides; any value of the right shape will do.
SECRET_STAND_INS = {
    "TICKET_DISPATCHER_DATABASE_URL": "postgresql://dispatcher:stand-in@db:5432/dispatcher",
    "TICKET_DISPATCHER_AUTH_API_KEYS": f"jira:automation:{'a' * 32},ops:operator:{'b' * 32}",
}
SECRET_STAND_IN = "stand-in-secret-value"


# --- reading the manifests ---------------------------------------------------------------------


def load_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def kustomization() -> dict:
    return load_documents(BASE / "kustomization.yaml")[0]


def manifest_files() -> list[Path]:
    """What ``kubectl apply -k`` applies, plus the Secret template the operator fills in."""
    return [BASE / name for name in kustomization()["resources"]] + [SECRET_TEMPLATE]


def one(kind: str, path: Path | None = None) -> dict:
    files = [path] if path else [BASE / name for name in kustomization()["resources"]]
    found = [doc for file in files for doc in load_documents(file) if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec() -> dict:
    return one("Deployment")["spec"]["template"]["spec"]


def container() -> dict:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    return containers[0]


def container_env() -> dict[str, dict]:
    return {entry["name"]: entry for entry in container().get("env", [])}


def secret_template() -> dict:
    return one("Secret", SECRET_TEMPLATE)


def environment(config_path: Path, secret_values: dict[str, str] | None = None, *,
                env: dict[str, dict] | None = None) -> dict[str, str]:
    """The container's environment as the service sees it: literal values as written, values
    from the Secret as ``secret_values`` has them (else stand-ins), the config file at
    ``config_path``. ``env``: the container's entries (the base Deployment's by default)."""
    environ = {}
    for name, entry in (container_env() if env is None else env).items():
        if "value" in entry:
            environ[name] = entry["value"]
        elif secret_values is not None:
            environ[name] = secret_values[entry["valueFrom"]["secretKeyRef"]["key"]]
        else:
            environ[name] = SECRET_STAND_INS.get(name, SECRET_STAND_IN)
    environ[CONFIG_ENV] = str(config_path)
    return environ


@pytest.fixture
def config_file(tmp_path) -> Path:
    """The ConfigMap's config.toml, where load_config can read it."""
    path = tmp_path / "config.toml"
    path.write_text(one("ConfigMap")["data"]["config.toml"], encoding="utf-8")
    return path


@pytest.fixture
def effective_config(config_file) -> Config:
    return load_config(None, environ=environment(config_file))


# --- Kubernetes --------------------------------------------------------------------------------


def test_pinned_kubernetes_version_is_one_kubernetes_validate_knows():
    known = {kubernetes_validate.utils.major_minor(v)
             for v in kubernetes_validate.utils.all_versions()}
    assert kubernetes_validate.utils.major_minor(KUBERNETES_VERSION) in known


@pytest.mark.parametrize("path", manifest_files(), ids=lambda path: path.name)
def test_manifest_is_valid_for_the_pinned_kubernetes_version(path):
    documents = load_documents(path)

    assert documents
    for document in documents:
        # strict: an unknown or misspelt field (livenessprobe:) is an error, not ignored
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_kustomization_applies_every_manifest_except_the_secret_template():
    listed = set(kustomization()["resources"])
    present = {path.name for path in BASE.glob("*.yaml")}

    assert listed == present - {"kustomization.yaml", SECRET_TEMPLATE.name}


def test_kubectl_apply_k_ops_kubernetes_applies_the_base_unchanged():
    single = load_documents(KUBERNETES / "kustomization.yaml")[0]

    # the single mode is the base as it is; an image set there with `kustomize edit` is allowed
    assert set(single) - {"images"} == {"apiVersion", "kind", "resources"}
    assert single["resources"] == [BASE.name]
    # only the kustomization sits beside base/ and ha/: a manifest there would be applied by no one
    assert {path.name for path in KUBERNETES.glob("*.yaml")} == {"kustomization.yaml"}


def test_kubectl_kustomize_builds_ops_kubernetes_as_the_base_files_say():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed; the kustomization is read by the tests above")
    result = subprocess.run([kubectl, "kustomize", str(KUBERNETES)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr

    built = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    files = [doc for path in manifest_files() if path != SECRET_TEMPLATE
             for doc in load_documents(path)]

    assert sorted(built, key=repr) == sorted(files, key=repr)


def test_deployment_runs_one_replica_replaced_by_recreate():
    spec = one("Deployment")["spec"]

    # one pod only: two would both send the card and page the engineer
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_no_autoscaler_anywhere_in_ops():
    kinds = {
        document.get("kind")
        for path in [*OPS.rglob("*.yaml"), *OPS.rglob("*.yml")]
        for document in load_documents(path)
        if isinstance(document, dict)
    }

    assert "Deployment" in kinds  # the scan sees the manifests
    assert not kinds & AUTOSCALER_KINDS


def test_config_file_is_mounted_where_ticket_dispatcher_config_points():
    mount = next(m for m in container()["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == "config")
    item = next(i for i in volume["configMap"]["items"] if i["key"] == "config.toml")

    assert volume["configMap"]["name"] == one("ConfigMap")["metadata"]["name"]
    assert container_env()[CONFIG_ENV]["value"] == f"{mount['mountPath']}/{item['path']}"


def test_every_ticket_dispatcher_variable_is_a_real_setting(config_file):
    environ = environment(config_file)

    config = load_config(None, environ=environ)  # an unknown name raises ConfigError

    assert set(SECRET_STAND_INS) | {CONFIG_ENV} <= set(environ)
    assert all(name.startswith(ENV_PREFIX) for name in environ)
    assert config.database_url == SECRET_STAND_INS["TICKET_DISPATCHER_DATABASE_URL"]
    assert [key.name for key in config.auth.api_keys] == ["jira", "ops"]
    assert [config.jira.api_token, config.lark.app_secret, config.oncall.token,
            config.core.token] == [SECRET_STAND_IN] * 4


def test_secrets_come_from_keys_of_the_secret_template():
    template = secret_template()
    references = [entry["valueFrom"]["secretKeyRef"] for entry in container_env().values()
                  if "valueFrom" in entry]

    assert references
    for reference in references:
        assert reference["name"] == template["metadata"]["name"]
        assert reference["key"] in template["stringData"]
    # every key of the template is used, and none is set anywhere else
    assert {reference["key"] for reference in references} == set(template["stringData"])


def test_secret_template_cannot_start_the_service_unchanged(config_file):
    placeholders = secret_template()["stringData"]
    assert all("CHANGE-ME" in value for value in placeholders.values())

    with pytest.raises(ConfigError) as refused:
        load_config(None, environ=environment(config_file, placeholders))

    # the placeholder API keys are shorter than 24 characters, and the message shows no value
    assert "TICKET_DISPATCHER_AUTH_API_KEYS" in refused.value.message
    assert "CHANGE-ME" not in refused.value.message


def test_service_links_are_off_because_they_would_stop_the_start(config_file):
    service = one("Service")
    # What the kubelet adds for a Service of this name when enableServiceLinks is on.
    prefix = service["metadata"]["name"].upper().replace("-", "_")
    port = service["spec"]["ports"][0]["port"]
    links = {f"{prefix}_SERVICE_HOST": "10.0.0.1", f"{prefix}_SERVICE_PORT": str(port),
             f"{prefix}_PORT": f"tcp://10.0.0.1:{port}"}

    assert pod_spec()["enableServiceLinks"] is False
    with pytest.raises(ConfigError, match=f"{prefix}_SERVICE_HOST: unknown setting"):
        load_config(None, environ={**environment(config_file), **links})


def test_termination_grace_period_outlasts_the_shutdown_timeout(effective_config):
    grace = timedelta(seconds=pod_spec()["terminationGracePeriodSeconds"])

    assert effective_config.shutdown_timeout != Config().shutdown_timeout  # set in the ConfigMap
    assert grace > effective_config.shutdown_timeout + SHUTDOWN_SLACK


def test_probes_ask_readyz_and_healthz_on_the_port_the_service_listens_on(effective_config):
    ports = {port["name"]: port["containerPort"] for port in container()["ports"]}
    probes = {kind: container()[kind]["httpGet"]
              for kind in ("readinessProbe", "livenessProbe", "startupProbe")}

    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert ports.get(probe["port"], probe["port"]) == effective_config.http.port
    assert effective_config.http.host == "0.0.0.0"  # 127.0.0.1 is unreachable from the kubelet


def test_service_sends_traffic_to_the_pod_and_its_http_port():
    service = one("Service")["spec"]
    pod_labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    port_names = {port["name"] for port in container()["ports"]}

    assert service["selector"].items() <= pod_labels.items()
    assert service["ports"][0]["targetPort"] in port_names


def test_container_runs_as_non_root_on_a_read_only_root_filesystem():
    pod_security = pod_spec()["securityContext"]
    security = container()["securityContext"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container()["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod_spec()["volumes"]}

    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] != 0
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "emptyDir" in volumes[mounts["/tmp"]]  # the one writable path


def test_container_has_cpu_and_memory_requests_and_limits():
    resources = container()["resources"]

    for bound in ("requests", "limits"):
        assert set(resources[bound]) == {"cpu", "memory"}


# --- the image ---------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    lines = (line.strip() for line in text.splitlines())
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def test_image_matches_the_deployment_user_port_and_command():
    instructions = dockerfile_instructions()
    values = {}
    for keyword, argument in instructions:
        values[keyword] = argument  # the last one counts (the runtime stage)
    entrypoint = json.loads(values["ENTRYPOINT"]) + json.loads(values["CMD"])

    assert values["FROM"].startswith("python:3.11-slim")
    assert values["USER"] == f"{pod_spec()['securityContext']['runAsUser']}:" \
                             f"{pod_spec()['securityContext']['runAsGroup']}"
    assert values["EXPOSE"] == str(container()["ports"][0]["containerPort"])
    assert entrypoint == ["ticket-dispatcher", "serve"]
    assert json.loads(values["ENTRYPOINT"]) + container()["args"] == entrypoint
    assert any("pip install '.[postgres]'" in argument for keyword, argument in instructions
               if keyword == "RUN")


def test_dockerignore_keeps_everything_the_image_copies():
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    copied = [name for keyword, argument in dockerfile_instructions() if keyword == "COPY"
              and not argument.startswith("--from") for name in argument.split()[:-1]]

    assert copied
    for name in copied:
        assert (REPO / name).exists(), name
        assert not [pattern for pattern in ignored if fnmatch.fnmatch(name, pattern)], name


# --- Prometheus alert rules --------------------------------------------------------------------


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing; .ci/run installs it (Debian package prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus); CI installs it")
    return path


def test_alert_rules_pass_promtool_check_rules():
    result = subprocess.run([promtool(), "check", "rules", str(ALERTS_FILE)],
                            capture_output=True, text=True, timeout=30)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(PLANNED_ALERTS)} rules found" in result.stdout


def test_every_planned_alert_exists_with_severity_summary_and_runbook():
    document = yaml.safe_load(ALERTS_FILE.read_text(encoding="utf-8"))
    rules = alert_rules()

    assert [group["name"] for group in document["groups"]] == ["ticket-dispatcher"]
    assert [rule["alert"] for rule in rules] == list(PLANNED_ALERTS)
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert rule["annotations"]["runbook_url"] == f"docs/runbook.md#{name.lower()}"
        assert rule.get("for") == PLANNED_FOR.get(name), name


def test_alerts_use_only_planned_metric_names():
    assert alert_metric_names() <= set(PLANNED_METRICS)


def alert_expression(name: str) -> str:
    return next(rule["expr"] for rule in alert_rules() if rule["alert"] == name)


P = "ticket_manager_dispatch_"


def call(name: str, result: str, role: str = "assignee", attempt: str = "") -> str:
    """An ``assignment_calls_total`` series (counted as the call happens)."""
    return (f'{P}assignment_calls_total{{call="{name}",result="{result}",role="{role}",'
            f'attempt="{attempt}"}}')


HEALTHY_SERIES = [
    (call("card", "failed"), "3+0x30"),
    (call("page", "failed", attempt="1"), "1+0x30"),
    (call("page", "unknown", attempt="2"), "0x5 1+0x25"),  # 14 minutes ago: over
    (call("page", "succeeded", attempt="1"), "0+1x30"),
    # late terminal counts of those old failures, as their workflows end: no new alert
    (f'{P}assignment_notification_events_total{{event="card_failed"}}', "0x17 1+0x12"),
    (f'{P}assignment_notification_events_total{{event="page_failed"}}', "0x17 1+0x12"),
    (f'{P}trigger_results_total{{outcome="failed"}}', "2+0x30"),
    (f'{P}trigger_results_total{{outcome="completed"}}', "0+5x30"),
    (f'{P}execution_outcomes_total{{mode="live",status="failed",failure_code="x",policy="p"}}',
     "4+0x30"),
    (f'{P}execution_outcomes_total{{mode="live",status="succeeded",failure_code="",policy="p"}}',
     "0+5x30"),
    (f'{P}oldest_trigger_age_seconds{{status="pending"}}', "30x30"),
    (f"{P}pool_slots", "10x30"),
    (f"{P}pool_busy", "10x30"),
    (f"{P}pool_queued", "0x30"),
    (f'{P}assignment_action_total{{action="escalate_assignment_to_leader",result="failed",'
     f'role="assignee",attempt=""}}', "1+0x30"),
    (f'{P}instance_info{{version="0.1.0"}}', "1x30"),
    # three replicas in shared mode beside it: meant to be several
    *[(f'{P}instance_info{{version="0.1.0",mode="shared",instance="{pod}"}}', "1x30")
      for pod in ("r1", "r2", "r3")],
    (f'{P}oldest_executing_execution_age_seconds{{mode="live"}}', "600x30"),
    (f"{P}metrics_job_failures_total", "2+0x30"),
    (f"{P}database_up", "1x30"),
    # a 429 now and then: 30 s held back in the last 10 minutes
    (f'{P}integration_rate_limited_seconds_total{{client="jira"}}', "0+0.5x30"),
    # a window current for a while, within maintenance.max_duration
    (f"{P}maintenance_windows", "1x30"),
    (f"{P}maintenance_windows_overdue", "0x30"),
]
# For each alert: series that must fire it and series next to them that must not, and how many
# alerts (one per firing series) the expression gives 20 minutes in.
FIRING_CASES = {
    "TicketDispatcherCardOrUrgentFailed": ([
        (call("card", "failed"), "0x17 1+0x12"),
        (call("urgent", "unknown", role="l2_assignee"), "0+1x30"),
        (call("card", "succeeded"), "0+1x30"),
        (call("page", "failed", attempt="1"), "0+1x30"),
        (f'{P}assignment_notification_events_total{{event="card_failed"}}', "0+1x30"),
    ], 2),
    "TicketDispatcherOncallPageFailed": ([
        (call("page", "failed", attempt="1"), "0+1x30"),
        (call("page", "unknown", role="l2_assignee", attempt="2"), "0x17 1+0x12"),
        (call("page", "succeeded", attempt="1"), "0+1x30"),
        (call("card", "failed"), "0+1x30"),
        (f'{P}assignment_notification_events_total{{event="page_failed"}}', "0+1x30"),
    ], 2),
    "TicketDispatcherTriggersFailed": ([
        (f'{P}trigger_results_total{{outcome="failed"}}', "0+1x30"),
        (f'{P}trigger_results_total{{outcome="deferred"}}', "0+1x30"),
    ], 1),
    "TicketDispatcherExecutionsFailed": ([
        (f'{P}execution_outcomes_total{{mode="live",status="failed",failure_code="x",'
         f'policy="p"}}', "0+1x30"),
        (f'{P}execution_outcomes_total{{mode="dryrun",status="failed",failure_code="x",'
         f'policy="p"}}', "0+1x30"),
        (f'{P}execution_outcomes_total{{mode="live",status="succeeded",failure_code="",'
         f'policy="p"}}', "0+1x30"),
    ], 1),
    # Every replica exports the same backlog gauges: one alert, not one per replica.
    "TicketDispatcherDeferredTriggerStuck": ([
        (f'{P}oldest_trigger_age_seconds{{status="pending",instance="a",pod="a"}}', "901x30"),
        (f'{P}oldest_trigger_age_seconds{{status="pending",instance="b",pod="b"}}', "901x30"),
        (f'{P}oldest_trigger_age_seconds{{status="processing"}}', "5000x30"),
    ], 1),
    "TicketDispatcherWorkersSaturated": ([
        (f'{P}pool_slots{{instance="a"}}', "10x30"),
        (f'{P}pool_busy{{instance="a"}}', "10x30"),
        (f'{P}pool_queued{{instance="a"}}', "3x30"),
        (f'{P}pool_slots{{instance="b"}}', "10x30"),
        (f'{P}pool_busy{{instance="b"}}', "9x30"),
        (f'{P}pool_queued{{instance="b"}}', "3x30"),
    ], 1),
    "TicketDispatcherLeaderEscalationFailed": ([
        (f'{P}assignment_action_total{{action="escalate_assignment_to_leader",result="failed",'
         f'role="assignee",attempt=""}}', "0+1x30"),
        (f'{P}assignment_action_total{{action="escalate_assignment_to_leader",result="unknown",'
         f'role="l2_assignee",attempt=""}}', "0+1x30"),
        (f'{P}assignment_action_total{{action="escalate_assignment_to_leader",'
         f'result="succeeded",role="assignee",attempt=""}}', "0+1x30"),
        (f'{P}assignment_action_total{{action="page_assignment",result="failed",'
         f'role="assignee",attempt="1"}}', "0+1x30"),
    ], 2),
    "TicketDispatcherMoreThanOnePod": ([
        (f'{P}instance_info{{version="0.1.0",instance="a"}}', "1x30"),
        (f'{P}instance_info{{version="0.1.0",mode="single",instance="b"}}', "1x30"),
        (f'{P}instance_info{{version="0.1.0",mode="shared",instance="c"}}', "1x30"),
    ], 1),
    "TicketDispatcherExecutionRunningTooLong": ([
        (f'{P}oldest_executing_execution_age_seconds{{mode="live",instance="a"}}', "1201x30"),
        (f'{P}oldest_executing_execution_age_seconds{{mode="live",instance="b"}}', "1201x30"),
        (f'{P}oldest_executing_execution_age_seconds{{mode="dryrun"}}', "5000x30"),
    ], 1),
    "TicketDispatcherMetricsJobFailing": ([
        (f"{P}metrics_job_failures_total", "0+1x30"),
    ], 1),
    # An outage since minute 10 on one instance; a blip of under a minute on another.
    "TicketDispatcherDatabaseUnavailable": ([
        (f'{P}database_up{{instance="a"}}', "1x10 0x20"),
        (f'{P}database_up{{instance="b"}}', "1x10 0 1x19"),
    ], 1),
    # held back for 40 s of each minute on one instance; a one-minute limit long ago on
    # another; Lark's own limit is no Jira alert
    "TicketDispatcherJiraRateLimited": ([
        (f'{P}integration_rate_limited_seconds_total{{client="jira",instance="a"}}', "0+40x30"),
        (f'{P}integration_rate_limited_seconds_total{{client="jira",instance="b"}}',
         "0 60+0x29"),
        (f'{P}integration_rate_limited_seconds_total{{client="lark",instance="a"}}', "0+60x30"),
    ], 1),
    # nobody eligible for one policy; another policy's other failure is the other alert's
    "TicketDispatcherNoEligibleCandidate": ([
        (f'{P}execution_outcomes_total{{mode="live",status="failed",'
         f'failure_code="no_eligible_candidate",policy="p"}}', "0+1x30"),
        (f'{P}execution_outcomes_total{{mode="dryrun",status="failed",'
         f'failure_code="no_eligible_candidate",policy="q"}}', "0+1x30"),
        (f'{P}execution_outcomes_total{{mode="live",status="failed",failure_code="x",'
         f'policy="q"}}', "0+1x30"),
    ], 1),
    # Every replica exports the same count: one alert, not one per replica.
    "TicketDispatcherMaintenanceWindowLong": ([
        (f'{P}maintenance_windows_overdue{{instance="a"}}', "0x10 1x20"),
        (f'{P}maintenance_windows_overdue{{instance="b"}}', "0x10 1x20"),
        (f'{P}maintenance_windows{{instance="a"}}', "2x30"),
    ], 1),
}


def expression_test(series: list[tuple[str, str]], expected: dict[str, int],
                    at: str = "20m") -> dict:
    """A promtool unit test: ``count(<alert expression>)`` for each alert at ``at`` (after
    20 minutes unless told)."""
    return {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in series],
        "promql_expr_test": [
            {"expr": f"count({alert_expression(alert)})", "eval_time": at,
             "exp_samples": [{"labels": "{}", "value": count}] if count else []}
            for alert, count in expected.items()
        ],
    }


def run_promtool_tests(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    unit_tests = tmp_path / "alerts_test.yaml"
    unit_tests.write_text(yaml.safe_dump({
        "rule_files": [str(ALERTS_FILE)], "evaluation_interval": "1m", "tests": tests,
    }))
    return subprocess.run([promtool(), "test", "rules", str(unit_tests)],
                          capture_output=True, text=True, timeout=60)


def test_alerts_fire_on_their_series_and_stay_quiet_on_a_healthy_service(tmp_path):
    tests = [expression_test(series, {alert: count})
             for alert, (series, count) in FIRING_CASES.items()]
    # Old failures that stopped counting, a full but unqueued pool, one process: no alert.
    tests.append(expression_test(HEALTHY_SERIES, dict.fromkeys(PLANNED_ALERTS, 0)))

    result = run_promtool_tests(tmp_path, tests)

    assert set(FIRING_CASES) == set(PLANNED_ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr


# Page attempt 1 fails at minute 2; its workflow waits out three ACK windows and ends at
# minute 17, when the terminal families count it. The alert fires from the call on, for the
# five minutes of its window, and not again when the workflow ends. The card alert likewise.
LATE_TERMINAL_SERIES = [
    (call("page", "failed", attempt="1"), "0 0 1+0x28"),
    (call("card", "failed"), "0 0 1+0x28"),
    (f'{P}assignment_notification_events_total{{event="page_failed"}}', "0x16 1+0x13"),
    (f'{P}assignment_notification_events_total{{event="card_failed"}}', "0x16 1+0x13"),
    (f'{P}assignment_action_total{{action="page_assignment",result="failed",role="assignee",'
     f'attempt="1"}}', "0x16 1+0x13"),
]
PROMPT_ALERTS = ("TicketDispatcherOncallPageFailed", "TicketDispatcherCardOrUrgentFailed")


@pytest.mark.parametrize("minute,firing", [(1, 0), (2, 1), (3, 1), (6, 1), (8, 0), (17, 0),
                                           (20, 0)])
def test_page_and_card_alerts_fire_when_the_call_fails_not_when_the_workflow_ends(
        tmp_path, minute, firing):
    result = run_promtool_tests(tmp_path, [expression_test(
        LATE_TERMINAL_SERIES, dict.fromkeys(PROMPT_ALERTS, firing), at=f"{minute}m")])

    assert result.returncode == 0, result.stdout + result.stderr


# --- Grafana dashboard -------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))


def panels(node: dict) -> list[dict]:
    found = []
    for panel in node.get("panels", []):
        found += [panel, *panels(panel)]
    return found


def test_dashboard_uses_only_planned_metric_names():
    names = dashboard_metric_names()

    assert names <= set(PLANNED_METRICS)
    assert len(dashboard_expressions()) > len(PLANNED_ALERTS)


def test_dashboard_queries_the_prometheus_chosen_in_its_datasource_variable():
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    queries = [panel for panel in panels(board) if panel["type"] != "row"]

    assert board["schemaVersion"] >= 39
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == (
        "datasource", "prometheus")
    assert queries
    for panel in queries:
        assert panel["targets"], panel["title"]
        for target in [panel, *panel["targets"]]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_dashboard_panels_have_unique_ids_and_fit_the_grid():
    all_panels = panels(dashboard())
    ids = [panel["id"] for panel in all_panels]

    assert len(ids) == len(set(ids))
    for panel in all_panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_dashboard_has_a_row_for_each_part_of_the_dispatch_path():
    rows = {panel["title"] for panel in panels(dashboard()) if panel["type"] == "row"}

    assert {"Trigger intake", "Executions", "Execution pool saturation", "Parked waits",
            "Notification funnel", "Integrations", "Backlog", "Burden"} <= rows


def test_notification_funnel_follows_card_urgent_pages_ack_escalation():
    funnel = next(panel for panel in panels(dashboard())
                  if panel["title"] == "Funnel over the range")
    steps = [target["legendFormat"] for target in funnel["targets"]]

    assert steps == ["card sent", "urgent", "page 1", "page 2", "page 3", "ACK: read",
                     "ACK: status changed", "escalated to leader"]


# --- metric_names ------------------------------------------------------------------------------


def test_promql_metric_names_skips_functions_labels_strings_and_durations():
    expr = ('histogram_quantile(0.95, sum by (le, client) (rate(a_seconds_bucket'
            '{client=~"jira|lark_x"}[$__rate_interval] offset 1h))) / on (job) '
            'group_left(version) b_total and sum(c) without (le) > bool 1e3'
            ' unless d_seconds_count{outcome!="ok"}')

    assert promql_metric_names(expr) == {"a_seconds", "b_total", "c", "d_seconds"}


def test_planned_metric_names_follow_the_prometheus_conventions():
    for name, kind in PLANNED_METRICS.items():
        assert name.startswith(P)
        assert re.fullmatch(r"[a-z_]+", name)
        assert name.endswith("_total") == (kind == "counter"), name
