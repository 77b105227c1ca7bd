"""Listing triggers (``TriggerRepository.page``): newest first, filtered, paged below an id, in
one query, on both engines; the indexes that keep the filters from walking the table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.fakes import issue
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus
from ticket_dispatcher.domain.fanout import new_execution
from ticket_dispatcher.domain.model import PolicySpec, PolicyTrigger
from ticket_dispatcher.store import unit_of_work

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def _create(store, issue_key="TCID-1", source="jira_automation", minute=0):
    return store.triggers.create(source, issue_key, policy_id=None, dryrun=None,
                                 now=T0 + timedelta(minutes=minute)).id


@pytest.fixture
def history(store) -> dict[str, int]:
    """Five triggers a minute apart: two failed, one completed, one processing, one pending."""
    ids = {
        "failed_old": _create(store, "TCID-1", minute=0),
        "completed": _create(store, "TCID-2", minute=1),
        "failed_new": _create(store, "GTOC-1", "jira_assignment_assignee", minute=2),
        "processing": _create(store, "TCID-1", minute=3),
        "pending": _create(store, "TCID-3", "jira_assignment_assignee", minute=4),
    }
    later = T0 + timedelta(minutes=10)
    store.triggers.fail(ids["failed_old"], "issue load failed: HTTP 404", later)
    store.triggers.fail(ids["failed_new"], "issue load failed: HTTP 401", later)
    store.triggers.complete(ids["completed"], [], later)
    assert store.triggers.claim(ids["processing"], later, owner="me") is not None
    return ids


def ids_of(result) -> list[int]:
    items, _ = result
    return [trigger.id for trigger in items]


def test_every_trigger_newest_first_without_a_filter(store, history):
    items, following = store.triggers.page()

    assert [t.id for t in items] == sorted(history.values(), reverse=True)
    assert following is None
    failed = next(t for t in items if t.id == history["failed_old"])
    assert failed.status is TriggerStatus.FAILED
    assert failed.failure_reason == "issue load failed: HTTP 404"
    assert failed.to_json() == store.triggers.get(failed.id).to_json()


@pytest.mark.parametrize("filters,expected", [
    ({"status": TriggerStatus.FAILED}, ["failed_new", "failed_old"]),
    ({"status": TriggerStatus.PENDING}, ["pending"]),
    ({"status": TriggerStatus.PROCESSING}, ["processing"]),
    ({"source": "jira_assignment_assignee"}, ["pending", "failed_new"]),
    ({"issue_key": "TCID-1"}, ["processing", "failed_old"]),
    ({"issue_key": "TCID-1", "status": TriggerStatus.FAILED}, ["failed_old"]),
    ({"source": "nobody"}, []),
])
def test_filters_are_combined(store, history, filters, expected):
    assert ids_of(store.triggers.page(**filters)) == [history[name] for name in expected]


def test_the_time_range_is_at_or_after_and_strictly_before(store, history):
    listed = ids_of(store.triggers.page(created_after=T0 + timedelta(minutes=1),
                                        created_before=T0 + timedelta(minutes=3)))

    assert listed == [history["failed_new"], history["completed"]]


def test_the_time_range_compares_instants_whatever_the_offset(store, history):
    shanghai = T0.astimezone(ZoneInfo("Asia/Shanghai"))  # 09:00 there

    listed = ids_of(store.triggers.page(created_before=shanghai + timedelta(minutes=1)))

    assert listed == [history["failed_old"]]


def test_pages_follow_below_the_last_id_until_none(store, history):
    first, after_first = store.triggers.page(limit=2)
    second, after_second = store.triggers.page(limit=2, before_id=after_first)
    third, after_third = store.triggers.page(limit=2, before_id=after_second)

    assert [t.id for t in first + second + third] == sorted(history.values(), reverse=True)
    assert after_first == first[-1].id and after_second == second[-1].id
    assert after_third is None


def test_a_page_that_ends_exactly_at_the_last_row_has_no_next(store, history):
    items, following = store.triggers.page(limit=len(history))

    assert len(items) == len(history) and following is None


def test_a_filtered_page_follows_under_the_same_filter(store, history):
    first, following = store.triggers.page(status=TriggerStatus.FAILED, limit=1)
    second, last = store.triggers.page(status=TriggerStatus.FAILED, limit=1,
                                       before_id=following)

    assert [t.id for t in first + second] == [history["failed_new"], history["failed_old"]]
    assert last is None


def test_a_page_costs_one_query_whatever_the_filters(store, history, query_counter):
    with query_counter() as queries:
        store.triggers.page(status=TriggerStatus.FAILED, source="jira_automation",
                            issue_key="TCID-1", created_after=T0, execution_failed=True,
                            created_before=T0 + timedelta(hours=1), before_id=99, limit=1)

    assert queries.count == 1


def test_listing_indexes_exist_after_migration(store):
    with unit_of_work(store.db):
        indexes = {index.name: index.columns
                   for index in store.db.get_indexes("dispatch_triggers")}

    assert indexes["ix_dispatch_triggers_status_id"] == ["status", "id"]
    assert indexes["ix_dispatch_triggers_source_id"] == ["source", "id"]
    assert indexes["ix_dispatch_triggers_created"] == ["created_at"]
    assert indexes["ix_dispatch_triggers_issue_source"] == ["issue_key", "source"]


def _ended(store, trigger_id: int, status: ExecutionStatus) -> int:
    """An execution of ``trigger_id`` (which completes it), ended with ``status``."""
    spec = PolicySpec(name="p", trigger=PolicyTrigger(project_key_in=("TCID",)), rules=())
    policy = store.policies.create(spec, now=T0)
    trigger = store.triggers.get(trigger_id)
    execution = new_execution(trigger, policy, issue(key=trigger.issue_key), None,
                              ActionRegistry(), T0)
    [execution_id] = store.executions.create(trigger_id, [execution],
                                             issue_key=trigger.issue_key,
                                             ensure_context=False, now=T0)
    execution.id, execution.status, execution.live_lock_key = execution_id, status, None
    execution.completed_at = T0 + timedelta(minutes=5)
    store.executions.save(execution, [])
    return execution_id


def test_a_trigger_one_of_whose_executions_failed_says_so_and_filters(store):
    failed_one, succeeded_one, none_yet = (_create(store, f"TCID-{n}") for n in (1, 2, 3))
    _ended(store, failed_one, ExecutionStatus.FAILED)
    _ended(store, succeeded_one, ExecutionStatus.SUCCEEDED)

    assert ids_of(store.triggers.page(execution_failed=True)) == [failed_one]
    assert ids_of(store.triggers.page(execution_failed=False)) == [none_yet, succeeded_one]
    failed = store.triggers.get(failed_one)
    assert failed.status is TriggerStatus.COMPLETED and failed.to_json()["execution_failed"]
    assert store.triggers.get(succeeded_one).to_json()["execution_failed"] is False
    [listed] = store.triggers.page(execution_failed=True)[0]
    assert listed.to_json() == failed.to_json()


def test_retrying_lists_the_pending_triggers_waiting_for_their_next_try(store):
    retrying, deferred, plain = (_create(store, f"TCID-{n}") for n in (1, 2, 3))
    later = T0 + timedelta(minutes=1)
    for trigger_id in (retrying, deferred):
        store.triggers.claim(trigger_id, later, owner="me")
        store.triggers.retry(trigger_id, later + timedelta(seconds=5), "HTTP 503", later,
                             since=later)
    store.triggers.claim(deferred, later + timedelta(seconds=5), owner="me")
    store.triggers.defer(deferred, later + timedelta(minutes=1), later)  # loaded: no retry

    [listed] = store.triggers.page(retrying=True)[0]

    assert listed.id == retrying and listed.retrying
    assert listed.to_json()["status"] == "pending"
    assert listed.to_json()["retries"]["next_at"] == listed.to_json()["available_at"]
    assert store.triggers.get(deferred).to_json()["retries"]["next_at"] is None
    assert ids_of(store.triggers.page(status=TriggerStatus.PENDING)) == [plain, deferred,
                                                                        retrying]
