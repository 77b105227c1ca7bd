"""A webhook delivery's issue as its dispatch's snapshot: kept only when it arrived fresh, and
taken only when still fresh and carrying every field the active policies read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.domain.test_matching import make_policy
from tests.factories import jira_delivery
from ticket_dispatcher.domain.model import PolicySpec, RuleSpec
from ticket_dispatcher.domain.webhooks import (
    fields_read,
    fresh_snapshot,
    parse_delivery,
    snapshot_of,
)

L2, SEVERITY = "customfield_10053", "customfield_10076"
EVENT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MAX_AGE = timedelta(seconds=10)


def delivered(**fields) -> tuple[dict, object]:
    raw = jira_delivery(key="TCID-1", timestamp=int(EVENT.timestamp() * 1000), **fields)
    return raw, parse_delivery(raw, l2_field_id=L2, severity_field_id=SEVERITY)


def snapshot(raw: dict, delivery, received: datetime) -> dict | None:
    return snapshot_of(raw, delivery, received, MAX_AGE, l2_field_id=L2,
                       severity_field_id=SEVERITY)


def policy_reading(field: str):
    when = {"field": field, "operator": "exists"}
    return make_policy(spec=PolicySpec("p", rules=(RuleSpec("r", 1, {"all": [when]}, []),)))


def fresh(trigger_input: dict, policies, now: datetime):
    return fresh_snapshot(trigger_input, policies, now, MAX_AGE, l2_field_id=L2,
                          severity_field_id=SEVERITY)


def test_a_delivery_that_arrived_fresh_is_kept_with_only_the_fields_a_dispatch_reads():
    raw, delivery = delivered(labels=("auto-dispatch",))

    kept = snapshot(raw, delivery, EVENT + timedelta(seconds=3))

    assert kept["at"] == "2026-12-01T09:00:00.000Z"
    assert "description" not in kept["issue"]["fields"]  # nothing a dispatch reads
    issue = fresh({"snapshot": kept}, [], EVENT + timedelta(seconds=4))
    assert issue is not None and issue.key == "TCID-1" and issue.labels == ("auto-dispatch",)


def test_a_delivery_that_arrived_late_or_undated_is_not_kept():
    raw, delivery = delivered()

    assert snapshot(raw, delivery, EVENT + timedelta(seconds=11)) is None
    del raw["timestamp"]
    undated = parse_delivery(raw, l2_field_id=L2, severity_field_id=SEVERITY)
    assert snapshot(raw, undated, EVENT) is None


def test_a_snapshot_processed_past_its_age_is_read_again():
    raw, delivery = delivered()
    kept = snapshot(raw, delivery, EVENT + timedelta(seconds=1))

    assert fresh({"snapshot": kept}, [], EVENT + timedelta(seconds=11)) is None


def test_a_snapshot_missing_a_field_the_policies_read_or_the_status_is_read_again():
    raw, delivery = delivered(severity="S1")
    kept = snapshot(raw, delivery, EVENT)
    now = EVENT + timedelta(seconds=1)
    assert fresh({"snapshot": kept}, [policy_reading("issue.custom_fields.severity")], now)

    del kept["issue"]["fields"][SEVERITY]
    assert fresh({"snapshot": kept}, [policy_reading("issue.custom_fields.severity")],
                 now) is None
    assert fresh({"snapshot": kept}, [policy_reading("issue.priority")], now) is not None
    del kept["issue"]["fields"]["status"]
    assert fresh({"snapshot": kept}, [], now) is None


def test_the_fields_read_are_the_conditions_and_who_holds_the_issue():
    assert fields_read([policy_reading("issue.primary_component"), policy_reading("now")],
                       l2_field_id=L2, severity_field_id=SEVERITY) == {
        "components", "project", "assignee", L2, "status", "labels"}
