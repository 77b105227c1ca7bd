"""The metric and alert names the service and its ops files agree on, and the names that the
alert rules and the Grafana dashboard use.

``PLANNED_METRICS`` is the contract between the code, ``ops/prometheus/alerts.yaml``,
``ops/grafana/dashboard.json`` and the runbook: names as the plan writes them (counters with
``_total``, histograms and gauges by their base name). ``alert_metric_names()`` and
``dashboard_metric_names()`` give the names those files reference in the same form, so a test
can check them against the plan here and against a running server's ``/metrics``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ALERTS_FILE = REPO / "ops" / "prometheus" / "alerts.yaml"
DASHBOARD_FILE = REPO / "ops" / "grafana" / "dashboard.json"

# name -> kind, as docs/operations.md, "Metrics" lists them
PLANNED_METRICS: dict[str, str] = {
    "ticket_manager_dispatch_assignment_notification_events_total": "counter",
    "ticket_manager_dispatch_assignment_action_total": "counter",
    "ticket_manager_dispatch_assignment_calls_total": "counter",
    "ticket_manager_dispatch_assignment_ack_total": "counter",
    "ticket_manager_dispatch_assignment_ack_wait_seconds": "histogram",
    "ticket_manager_dispatch_assignment_workflow_duration_seconds": "histogram",
    "ticket_manager_dispatch_created_executions": "gauge",
    "ticket_manager_dispatch_oldest_created_execution_age_seconds": "gauge",
    "ticket_manager_dispatch_executing_executions": "gauge",
    "ticket_manager_dispatch_oldest_executing_execution_age_seconds": "gauge",
    "ticket_manager_dispatch_triggers": "gauge",
    "ticket_manager_dispatch_oldest_trigger_age_seconds": "gauge",
    "ticket_manager_dispatch_trigger_intake_total": "counter",
    "ticket_manager_dispatch_trigger_results_total": "counter",
    "ticket_manager_dispatch_execution_outcomes_total": "counter",
    "ticket_manager_dispatch_pool_slots": "gauge",
    "ticket_manager_dispatch_pool_busy": "gauge",
    "ticket_manager_dispatch_pool_queued": "gauge",
    "ticket_manager_dispatch_pool_parked": "gauge",
    "ticket_manager_dispatch_lane_queued": "gauge",
    "ticket_manager_dispatch_integration_call_duration_seconds": "histogram",
    "ticket_manager_dispatch_client_queue_wait_seconds": "histogram",
    "ticket_manager_dispatch_metrics_job_failures_total": "counter",
    "ticket_manager_dispatch_instance_info": "gauge",
    "ticket_manager_dispatch_database_up": "gauge",
    "ticket_manager_dispatch_store_errors_total": "counter",
    "ticket_manager_dispatch_integration_rate_limited_seconds_total": "counter",
    "ticket_manager_dispatch_transient_retries_total": "counter",
    "ticket_manager_dispatch_calendar_feed_age_seconds": "gauge",
    "ticket_manager_dispatch_calendar_feed_refreshes_total": "counter",
    "ticket_manager_dispatch_maintenance_windows": "gauge",
    "ticket_manager_dispatch_maintenance_windows_overdue": "gauge",
    "ticket_manager_dispatch_interruptions_total": "counter",
}

# The alerts of the plan, in its order (group "ticket-dispatcher").
PLANNED_ALERTS: tuple[str, ...] = (
    "TicketDispatcherCardOrUrgentFailed",
    "TicketDispatcherOncallPageFailed",
    "TicketDispatcherTriggersFailed",
    "TicketDispatcherExecutionsFailed",
    "TicketDispatcherDeferredTriggerStuck",
    "TicketDispatcherWorkersSaturated",
    "TicketDispatcherLeaderEscalationFailed",
    "TicketDispatcherMoreThanOnePod",
    "TicketDispatcherExecutionRunningTooLong",
    "TicketDispatcherMetricsJobFailing",
    "TicketDispatcherDatabaseUnavailable",
    "TicketDispatcherJiraRateLimited",
    "TicketDispatcherNoEligibleCandidate",
    "TicketDispatcherMaintenanceWindowLong",
)

# A histogram is exported as NAME_bucket, NAME_sum and NAME_count; queries name those series.
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_KEYWORDS = frozenset({
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: not functions, keywords, label names, label
    values, durations or Grafana variables. Histogram suffixes are stripped."""
    text = _STRING.sub('""', expr)
    text = _GRAFANA_VARIABLE.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _LABEL_LISTS.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.groups()
        if call or name in _KEYWORDS:
            continue
        names.add(_family(name))
    return names


def _family(name: str) -> str:
    for suffix in _HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of ops/prometheus/alerts.yaml, across its groups."""
    document = yaml.safe_load(ALERTS_FILE.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def alert_metric_names() -> set[str]:
    """The metric names the alert rules' expressions use."""
    return set().union(*(promql_metric_names(rule["expr"]) for rule in alert_rules()))


def dashboard_expressions() -> list[str]:
    """Every PromQL ``expr`` in ops/grafana/dashboard.json (panels, rows, variables)."""
    dashboard = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    return list(_expressions(dashboard))


def _expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def dashboard_metric_names() -> set[str]:
    """The metric names the dashboard's queries use."""
    return set().union(*(promql_metric_names(expr) for expr in dashboard_expressions()))
