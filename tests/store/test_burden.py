"""The burden rows written with their checkpoints, and the report read from them, on both
engines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import QueryCounter
from tests.store.test_executions_and_triggers import make_policy, new
from ticket_dispatcher.domain.burden import BurdenQuery
from ticket_dispatcher.domain.execution import ExecutionMode, ExecutionStatus, RuleOutcome
from ticket_dispatcher.errors import Conflict, InvalidInput

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)  # a Monday, 01:00 UTC
TARGET = {"account_id": "acc-a", "email": "a@x.io", "display_name": "A", "active": True}
EXPECTED = {"role": "assignee", "project": "TCID", "target": TARGET, "message_id": "om_1",
            "target_lark_id": "ou_a"}


def _started(store, key="TCID-1", at=NOW, name="p"):
    policy = make_policy(store)
    if name != "p":
        with store.connection():
            store.db.execute_sql(f"UPDATE dispatch_policies SET name = {store.db.param} "
                                 f"WHERE id = {store.db.param}", (name, policy.id))
    trigger, execution = new(store, policy, key=key)
    store.executions.create(trigger.id, [execution], issue_key=key, ensure_context=False,
                            now=at)
    execution.status = ExecutionStatus.EXECUTING
    rule = execution.rule_executions[0]
    rule.outcome = RuleOutcome.MATCHED
    return policy, execution, rule


def assign(store, key="TCID-1", *, at=NOW, assignee="a@x.io", counts=None, hours=None,
           name="p"):
    policy, execution, rule = _started(store, key, at, name)
    action = rule.action_executions[0]
    if hours:
        action.action["assign"]["availability"] = {"working_hours": hours}
    action.context = {"assign": {
        "receiver": {"type": "group", "group": "sre"}, "assignee": assignee,
        "candidates": ["a@x.io", "b@x.io"], "jira_updated": True, "counts": counts}}
    execution.updated_at = at
    store.executions.save(execution, [rule])
    return policy, execution


def notify(store, key="TCID-1", *, at=NOW, page_at=None, ack=None):
    """A notification workflow: the card, then a page (when ``page_at``), then an ACK seen by
    the page's guard (``ack``: (source, time))."""
    _, execution, rule = _started(store, key, at)
    card, page = rule.action_executions[0], rule.action_executions[0].__class__(
        index=1, type="page_assignment", action={"type": "page_assignment"})
    rule.action_executions.append(page)
    card.type, card.action = "send_assignment_notification", {"type": "x"}
    card.context = {"notification": {
        "snapshot": {"role": "assignee", "label": "l", "project": "TCID", "target": TARGET,
                     "urgency": {"urgent": True}, "status": "Todo"},
        "card_phase": "finished", "card_status": "sent"}}
    execution.updated_at = at
    store.executions.save(execution, [rule])
    if page_at is not None:
        page.context = {"page": {"expected": EXPECTED, "attempt": 1, "page_phase": "finished",
                                 "page_status": "accepted"}}
        execution.updated_at = page_at
        store.executions.save(execution, [rule])
    if ack is not None:
        source, ack_at = ack
        page.context["page"].update(outcome="ack", reason="read", ack_source=source,
                                    ack_at=ack_at.isoformat())
        execution.updated_at = ack_at + timedelta(minutes=1)
        store.executions.save(execution, [rule])
    return execution


def report(store, **scope):
    return store.burden.report(BurdenQuery.of(NOW - timedelta(days=1), NOW + timedelta(days=2),
                                              NOW, **scope))


def test_an_assignment_is_recorded_with_its_checkpoint_and_counted(store):
    policy, _ = assign(store, counts={"a@x.io": 2, "b@x.io": 5})

    result = report(store)

    [a, b] = result["people"]
    assert (a["email"], a["assigned"], a["assigned_by_policy"]) == ("a@x.io", 1,
                                                                    {policy.name: 1})
    assert (a["open_now"], b["open_now"]) == (3, 5)  # the assignee holds one more now
    [rotation] = result["rotations"]
    assert rotation["rotation"] == "group:sre" and rotation["policy"] == policy.name
    assert [(m["email"], m["assigned"]) for m in rotation["members"]] == [("a@x.io", 1),
                                                                          ("b@x.io", 0)]
    assert [m["fair_share"] for m in rotation["members"]] == [0.5, 0.5]
    assert (rotation["max_over_fair"], rotation["min_over_fair"]) == (2.0, 0.0)
    assert rotation["cv"] == 1.0
    assert result["complete_from"] is not None


def test_a_dry_run_records_nothing(store):
    _, execution, rule = _started(store)
    execution.mode = ExecutionMode.DRY_RUN
    rule.action_executions[0].context = {"assign": {"assignee": "a@x.io", "jira_updated": True}}
    store.executions.save(execution, [rule])

    assert report(store)["people"] == []


def test_a_page_counts_in_its_band_and_the_ack_runs_from_the_card_to_the_read(store):
    assign(store)
    sent = NOW + timedelta(hours=2)  # 03:00 UTC on a Monday: sleep for someone in UTC
    notify(store, at=sent, page_at=sent + timedelta(minutes=5),
           ack=("card_read", sent + timedelta(minutes=7)))

    result = report(store)
    [a, _] = result["people"]

    assert (a["cards"], a["pages"]) == (1, 1)
    assert [(w["week"], w["pages"]) for w in result["weekly_pages"] if w["pages"]] == [
        ("2026-11-30T00:00:00.000Z", 1)]  # the Monday of its week
    assert a["interruptions"] == {"business": 0, "off": 0, "sleep": 1}
    assert a["ack_seconds"]["p50"] == 420.0
    assert a["ack_seconds"]["by_source"]["card_read"] == {"p50": 420.0, "p90": 420.0}
    assert a["ack_seconds"]["by_source"]["status_change"] == {"p50": None, "p90": None}


def test_the_band_is_the_persons_own_hours(store):
    store.engineers.put("a@x.io", dispatch_enabled=True, now=NOW, availability={
        "timezone": "Asia/Tokyo", "working_hours": {"mon": ["09:00-18:00"]}})
    notify(store, at=NOW, page_at=NOW)  # 10:00 on Monday in Tokyo: inside their hours

    [a] = report(store)["people"]

    assert a["interruptions"] == {"business": 1, "off": 0, "sleep": 0}


def test_a_scope_narrows_the_rows_and_one_naming_nothing_is_refused(store):
    assign(store, name="first line")
    assign(store, key="OPS-1", assignee="b@x.io")

    assert [p["email"] for p in report(store, project="OPS")["people"]
            if p["assigned"]] == ["b@x.io"]
    assert [(p["email"], p["assigned_by_policy"]) for p in
            report(store, policy="first line")["people"] if p["assigned"]] == [
        ("a@x.io", {"first line": 1})]
    with pytest.raises(InvalidInput):
        report(store, project="NOPE")
    with pytest.raises(InvalidInput):
        report(store, policy="no such policy")


def test_a_notification_takes_the_rotation_of_the_persons_assignment(store):
    assign(store)
    notify(store, at=NOW + timedelta(minutes=1), page_at=NOW + timedelta(minutes=2))

    [a, _] = report(store, rotation="group:sre")["people"]

    assert (a["assigned"], a["pages"]) == (1, 1)


def test_a_refused_checkpoint_writes_no_row(store):
    _, execution, rule = _started(store)
    ended = execution.copy()
    ended.status, ended.live_lock_key = ExecutionStatus.FAILED, None
    store.executions.save(ended, [])
    rule.action_executions[0].context = {"assign": {"assignee": "a@x.io", "jira_updated": True}}

    with pytest.raises(Conflict):
        store.executions.save(execution, [rule])

    assert report(store)["people"] == []


def test_an_ack_is_added_once_and_the_sent_time_stays_the_first(store):
    sent = NOW + timedelta(minutes=1)
    execution = notify(store, at=sent, page_at=sent, ack=("status_change",
                                                          sent + timedelta(minutes=2)))
    [rule] = execution.rule_executions
    rule.action_executions[1].context["page"]["ack_at"] = (sent + timedelta(hours=1)).isoformat()
    execution.updated_at = sent + timedelta(hours=2)
    store.executions.save(execution, [rule])

    [a] = report(store)["people"]

    assert a["cards"] == 1
    assert a["ack_seconds"]["by_source"]["status_change"]["p50"] == 120.0


def test_the_reports_read_takes_the_index_of_its_scope(sqlite_store):
    assign(sqlite_store)

    everyone = " ".join(sqlite_store.burden.explain(BurdenQuery.of(None, None, NOW)))
    rotation = " ".join(sqlite_store.burden.explain(
        BurdenQuery.of(None, None, NOW, rotation="group:sre")))

    year = " ".join(sqlite_store.burden.explain(BurdenQuery.of(NOW - timedelta(days=365), NOW,
                                                               NOW)))

    assert "USING COVERING INDEX ix_burden_events_tallies" in everyone
    assert "USING INDEX ix_burden_events_rotation" in rotation
    assert "SEARCH burden_months USING PRIMARY KEY (scope=? AND scope_value=? AND month>? " \
           "AND month<?)" in year
    assert "USING COVERING INDEX ix_burden_events_acks" in year


def test_a_checkpoint_after_the_send_writes_no_burden_row_again(store):
    execution = notify(store, page_at=NOW)
    execution.updated_at = NOW + timedelta(minutes=1)

    with QueryCounter(store.db) as queries:
        store.executions.save(execution, execution.rule_executions)

    assert queries.statements and not any("burden_events" in s for s in queries.statements)
    [a] = report(store)["people"]
    assert (a["cards"], a["pages"]) == (1, 1)


def test_whole_months_count_from_their_tallies_and_the_ends_from_the_rows(store):
    """A period of one whole month (November) and parts of October and December: every event
    inside counts once, whichever read it comes from, and none outside."""
    since, until = datetime(2026, 10, 20, 12, tzinfo=UTC), datetime(2026, 12, 2, 12, tzinfo=UTC)
    for n, at in enumerate((since - timedelta(seconds=1), since, datetime(2026, 11, 1, tzinfo=UTC),
                            datetime(2026, 11, 30, 23, 59, tzinfo=UTC), until - timedelta(hours=1),
                            until)):
        key = f"TCID-{n}"
        assign(store, key, at=at)
        notify(store, key, at=at, page_at=at, ack=("card_read", at + timedelta(minutes=n)))

    def between(**scope):
        return store.burden.report(BurdenQuery.of(since, until, until, **scope))

    [a, b] = between()["people"]
    assert (a["assigned"], a["cards"], a["pages"], sum(a["interruptions"].values())) == (
        4, 4, 4, 4)
    assert sum(a["assigned_by_policy"].values()) == 4
    assert a["ack_seconds"]["by_source"]["card_read"]["p50"] == 150.0  # of 1, 2, 3, 4 minutes
    assert b["email"] == "b@x.io" and b["assigned"] == 0
    assert sum(w["pages"] for w in between()["weekly_pages"]) == 4
    [rotation] = between(rotation="group:sre")["rotations"]
    assert [(m["email"], m["assigned"]) for m in rotation["members"]] == [
        ("a@x.io", 4), ("b@x.io", 0)]
    assert [p["pages"] for p in between(project="TCID")["people"]] == [4, 0]
    assert [p["assigned"] for p in between(policy="p")["people"]] == [4, 0]


def test_the_tallies_of_events_recorded_before_them_are_filled_when_made(db_url):
    from ticket_dispatcher.store import Store
    from ticket_dispatcher.store.migrations import migrate
    from ticket_dispatcher.store.models import BurdenEventRow

    store = Store.for_url(db_url)
    try:
        migrate(store.db, upto=17)
        sent = datetime(2026, 10, 10, 3, tzinfo=UTC)
        with store.connection():
            BurdenEventRow.insert(
                version=1, execution_id=1, rule_sequence=0, action_index=0, kind="card",
                email="a@x.io", issue_key="TCID-1", project="TCID", policy_id=1,
                policy_family_id="pf_1", hours_required=False, sent_at=sent,
                ack_source="status_change", ack_at=sent + timedelta(minutes=3)).execute()
        store.migrate()

        [a] = store.burden.report(BurdenQuery.of(datetime(2026, 10, 1, tzinfo=UTC),
                                                 datetime(2026, 11, 1, tzinfo=UTC),
                                                 NOW))["people"]
        assert a["cards"] == 1
        assert a["ack_seconds"]["by_source"]["status_change"]["p50"] == 180.0
    finally:
        store.close()
