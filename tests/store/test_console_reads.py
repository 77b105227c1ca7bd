"""The execution reads the console's pages make, on both engines: every parked wait soonest
first, and the newest execution in which each of a set of rules matched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.store.test_executions_and_triggers import make_policy, new
from ticket_dispatcher.domain.execution import ExecutionStatus, RuleOutcome

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def created(store, policy, key: str) -> int:
    trigger, execution = new(store, policy, key)
    [execution_id] = store.executions.create(trigger.id, [execution], issue_key=key,
                                             ensure_context=False, now=NOW)
    return execution_id


def parked(store, execution_id: int, wake_in: float, status=ExecutionStatus.EXECUTING) -> None:
    execution = store.executions.get(execution_id)
    execution.status, execution.wake_at = status, NOW + timedelta(seconds=wake_in)
    store.executions.save(execution, [], parked=True)


def ended(store, execution_id: int, outcomes: list[RuleOutcome]) -> None:
    execution = store.executions.get(execution_id)
    for rule, outcome in zip(execution.rule_executions, outcomes, strict=True):
        rule.outcome = outcome
    execution.status, execution.completed_at = ExecutionStatus.SUCCEEDED, NOW
    execution.live_lock_key = None
    store.executions.save(execution, execution.rule_executions)


def test_parked_lists_every_unheld_wait_soonest_first_with_its_rules(store):
    policy = make_policy(store, rules=2)
    late, soon, tied, first_load, running, finished, queued = (
        created(store, policy, f"TCID-{n}") for n in range(1, 8))
    parked(store, late, 300)
    parked(store, soon, 60)
    parked(store, tied, 60)
    parked(store, first_load, 120, status=ExecutionStatus.CREATED)  # its issue load failed
    parked(store, running, 30)
    store.executions.claim(running, owner="replica-2", now=NOW,
                           expires_at=NOW + timedelta(minutes=1))  # woken: running again
    parked(store, finished, 10)
    ended(store, finished, [RuleOutcome.MATCHED, RuleOutcome.MATCHED])

    items, total, counted_all = store.executions.parked()

    assert [e.id for e in items] == [soon, tied, first_load, late]
    assert total == 4 and counted_all
    assert items[0].wake_at == NOW + timedelta(seconds=60)
    assert [len(e.rule_executions) for e in items] == [2, 2, 2, 2]
    assert queued not in [e.id for e in items]  # no wake_at: queued, not parked


def test_parked_pages_with_the_total(store, query_counter):
    policy = make_policy(store)
    ids = [created(store, policy, f"TCID-{n}") for n in range(1, 6)]
    for n, execution_id in enumerate(ids):
        parked(store, execution_id, 60 + n)

    with query_counter() as queries:
        page, total, counted_all = store.executions.parked(limit=2, offset=2)

    assert [e.id for e in page] == ids[2:4] and total == 5 and counted_all
    assert queries.count <= 3  # the page, the total, the rules
    assert store.executions.parked(limit=2, offset=4) == (
        [store.executions.get(ids[4])], 5, True)


def test_the_parked_count_stops_past_its_bound(store):
    policy = make_policy(store)
    ids = [created(store, policy, f"TCID-{n}") for n in range(1, 8)]
    for n, execution_id in enumerate(ids):
        parked(store, execution_id, 60 + n)

    def shown(**paging):
        page, total, counted_all = store.executions.parked(counted=3, **paging)
        return [e.id for e in page], total, counted_all

    assert shown(limit=2) == (ids[:2], 3, False)  # "more than 3"
    assert shown(limit=2, offset=2) == (ids[2:4], 5, False)  # counted from the page's start
    assert shown(limit=4, offset=3) == (ids[3:7], 7, True)  # exactly the bound: all counted
    assert shown(limit=5, offset=1) == (ids[1:6], 6, False)  # a page longer than the bound
    assert shown(limit=2, offset=6) == (ids[6:], 7, True)  # the last page needs no count


def test_latest_matched_is_the_newest_execution_each_rule_matched_in(store, query_counter):
    policy = make_policy(store, rules=2)
    first_rule, second_rule = (rule.id for rule in policy.ordered_rules)
    older, newer, unmatched = (created(store, policy, f"TCID-{n}") for n in range(1, 4))
    ended(store, older, [RuleOutcome.MATCHED, RuleOutcome.MATCHED])
    ended(store, newer, [RuleOutcome.MATCHED, RuleOutcome.NOT_MATCHED])
    ended(store, unmatched, [RuleOutcome.NOT_MATCHED, RuleOutcome.NOT_MATCHED])

    with query_counter() as queries:
        latest = store.executions.latest_matched([first_rule, second_rule, 999_999])

    assert {rule_id: e.id for rule_id, e in latest.items()} == {
        first_rule: newer, second_rule: older}
    assert latest[first_rule] == store.executions.get(newer)
    assert queries.count == 4  # the newest id, the rules' newest, the executions, their rules
    assert store.executions.latest_matched([]) == {}


def test_latest_matched_looks_back_only_so_far(store):
    policy = make_policy(store)
    [rule] = policy.ordered_rules
    matched = created(store, policy, "TCID-1")
    ended(store, matched, [RuleOutcome.MATCHED])
    for n in range(2, 5):
        ended(store, created(store, policy, f"TCID-{n}"), [RuleOutcome.NOT_MATCHED])

    assert store.executions.latest_matched([rule.id], lookback=4)[rule.id].id == matched
    assert store.executions.latest_matched([rule.id], lookback=3) == {}


def test_failed_since_counts_the_failures_created_in_the_window_up_to_a_cap(store):
    def trigger(key: str, at: datetime, failed: bool) -> None:
        made = store.triggers.create("jira_automation", key, policy_id=None, dryrun=None,
                                     now=at)
        if failed:
            store.triggers.fail(made.id, "issue load failed", at)

    trigger("TCID-1", NOW - timedelta(hours=2), failed=True)  # before the window
    for n in range(5):
        trigger(f"TCID-{n + 10}", NOW - timedelta(minutes=n), failed=True)
    trigger("TCID-20", NOW, failed=False)
    since = NOW - timedelta(hours=1)

    assert store.triggers.failed_since(since, 100) == 5
    assert store.triggers.failed_since(since, 3) == 3
    assert store.triggers.failed_since(NOW + timedelta(seconds=1), 100) == 0
