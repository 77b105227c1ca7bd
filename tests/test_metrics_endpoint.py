"""``GET /metrics`` of a real server: every metric an alert or the dashboard uses is
exported, the endpoint is public or viewer-only as ``auth.metrics_public`` says, and a dispatch
shows up in the intake and integration families without any issue key in a label."""

from __future__ import annotations

import threading

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.ops.metric_names import alert_metric_names, dashboard_metric_names
from ticket_dispatcher import __version__
from ticket_dispatcher.config import load_config
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.service import Service

BASE = "/api/v1/ticketmanager"
VIEWER_KEY = "viewer-key-0123456789abcdef"


def serve(tmp_path, **settings: str):
    environ = {"TICKET_DISPATCHER_DATABASE_URL": f"sqlite:///{tmp_path / 'td.db'}",
               **{f"TICKET_DISPATCHER_{k}": v for k, v in settings.items()}}
    service = Service(load_config(None, environ=environ), port=0, sandbox=True)
    thread = threading.Thread(target=service.run, name="waitress", daemon=True)
    thread.start()
    return service, thread


@pytest.fixture
def server(tmp_path):
    started = []

    def start(**settings: str) -> tuple[Service, str]:
        service, thread = serve(tmp_path, **settings)
        started.append((service, thread))
        return service, f"http://127.0.0.1:{service.port}"

    yield start
    for service, thread in started:
        service.stop_serving()
        thread.join(timeout=10)
        service.close()


def exported(text: str) -> set[str]:
    """Names as PromQL uses them: a counter with ``_total``, others by their family name."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def samples(text: str) -> list:
    return [sample for family in text_string_to_metric_families(text)
            for sample in family.samples]


def test_every_metric_an_alert_or_the_dashboard_uses_is_exported(server):
    _, url = server()

    response = requests.get(f"{url}/metrics", timeout=10)

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    used = alert_metric_names() | dashboard_metric_names()
    assert used and used <= exported(response.text), used - exported(response.text)


def instance_info(text: str) -> list[dict[str, str]]:
    return [s.labels for s in samples(text) if s.name == "ticket_manager_dispatch_instance_info"]


def test_instance_info_names_the_version_and_the_single_mode_by_default(server):
    _, url = server()

    text = requests.get(f"{url}/metrics", timeout=10).text

    assert instance_info(text) == [{"version": __version__, "mode": "single"}]


def test_instance_info_of_a_shared_replica_carries_mode_shared():
    text = Metrics(version="1.2.3", mode="shared").exposition()[0].decode()

    # what the alert on more than one single-mode process leaves out
    assert instance_info(text) == [{"version": "1.2.3", "mode": "shared"}]


def test_metrics_need_a_viewer_key_when_they_are_not_public(server):
    _, url = server(AUTH_METRICS_PUBLIC="false", AUTH_API_KEYS=f"grafana:viewer:{VIEWER_KEY}")

    anonymous = requests.get(f"{url}/metrics", timeout=10)
    viewer = requests.get(f"{url}/metrics", headers={"X-API-KEY": VIEWER_KEY}, timeout=10)

    assert anonymous.status_code == 401
    assert viewer.status_code == 200 and "ticket_manager_dispatch_pool_slots" in viewer.text


def test_a_dispatch_is_counted_without_any_issue_key_in_a_label(server):
    service, url = server()

    accepted = requests.post(f"{url}{BASE}/dispatch/triggers", timeout=10, json={
        "source": "jira_automation", "input": {"issue_key": "TCID-2"}})
    refused = requests.post(f"{url}{BASE}/dispatch/triggers", timeout=10, json={
        "source": "jira_automation", "input": {"issue_key": "not a key"}})
    assert (accepted.status_code, refused.status_code) == (202, 400)
    assert service.runtime.wait_idle(30)
    text = requests.get(f"{url}/metrics", timeout=10).text

    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples(text)}
    intake = "ticket_manager_dispatch_trigger_intake_total"
    assert values[(intake, (("outcome", "accepted"), ("source", "jira_automation")))] == 1
    assert values[(intake, (("outcome", "invalid"), ("source", "unknown")))] == 1
    assert values[("ticket_manager_dispatch_execution_outcomes_total",
                   (("failure_code", ""), ("mode", "live"), ("policy", "Assign TCID tickets"),
                    ("status", "succeeded")))] == 1
    jira_calls = [s for s in samples(text)
                  if s.name == "ticket_manager_dispatch_integration_call_duration_seconds_count"
                  and s.labels["client"] == "jira"]
    assert {s.labels["operation"] for s in jira_calls} >= {"load_issue", "assign_and_label"}
    labels = " ".join(str(s.labels) for s in samples(text))
    assert "TCID-2" not in labels, [s.labels for s in samples(text) if "TCID-2" in str(s.labels)]
