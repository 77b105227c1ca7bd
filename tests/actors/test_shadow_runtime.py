"""Shadow policies through the whole runtime, on SQLite and PostgreSQL: a draft in shadow is
evaluated beside each live trigger its family's active version handles, as a dry run that
writes nothing, and its decisions are judged against the live ones once those have ended."""

from __future__ import annotations

import threading

from tests.actors.test_notification_card_runtime import ASSIGNEE, put
from tests.domain.test_notification_page import PENDING
from tests.fakes import issue
from tests.harness import assign, rule
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.model import PolicySpec, PolicyStatus, RuleSpec
from ticket_dispatcher.store.models import ShadowDecisionRow

ENGINEERS = ("a@example.com", "b@example.com", "c@example.com")


def staff(h) -> None:
    for email in ENGINEERS:
        h.store.engineers.put(email, dispatch_enabled=True, now=h.clock.now())
        h.jira.add_user(email)


def shadow_of(h, live, *rules: dict):
    """A replacement draft of ``live``'s family with ``rules``, put in shadow."""
    draft = h.store.policies.create_replacement(live.id, PolicySpec(
        name="candidate", trigger=live.spec.trigger, rules=tuple(
            RuleSpec(r["name"], r["priority"], r["when"], r["then"], OnSuccess.TERMINATE)
            for r in rules)), now=h.clock.now())
    h.store.shadows.start(draft.id, now=h.clock.now())
    return draft


def report(h, draft) -> dict:
    return h.store.shadows.report(draft.id).to_json()


def test_a_shadow_that_decides_alike_agrees_and_writes_nothing(make_harness):
    h = make_harness()
    staff(h)
    live = h.policy(rule(assign("a@example.com"), name="everything"))
    draft = shadow_of(h, live, rule(assign("a@example.com"), name="everything"))
    h.jira.put(issue(key="TCID-1"))

    h.post_trigger("TCID-1")
    h.wait_idle()

    assert [e.status for e in h.executions()] == [ExecutionStatus.SUCCEEDED]  # the live one
    assert len(h.jira.assignments()) == 1  # the live assignment only
    seen = report(h, draft)
    assert (seen["seen"], seen["agreed"], seen["differed"], seen["pending"]) == (1, 1, 0, 0)
    exposition = h.runtime.deps.metrics.exposition()[0].decode()
    assert (f'ticket_manager_dispatch_shadow_decisions_total{{family="{draft.family_id}",'
            f'result="agreed"}} 1.0') in exposition
    assert "TCID-1" not in exposition  # no issue key in any label


def test_each_kind_of_difference_is_reported_with_both_decisions(make_harness):
    h = make_harness()
    staff(h)
    live = h.policy(rule(assign("a@example.com"), name="everything"))
    cases = {
        "other_assignee": rule(assign("b@example.com"), name="everything"),
        "other_rule": rule(assign("a@example.com"), name="renamed"),
        "other_actions": rule(assign("a@example.com", action_type="assign_l2"),
                              name="everything"),
        "no_match": rule(assign("a@example.com"), name="everything",
                         when={"field": "issue.priority", "operator": "in", "values": ["P0"]}),
    }
    for number, (kind, candidate) in enumerate(cases.items(), start=1):
        draft = shadow_of(h, live, candidate)
        key = f"TCID-{number}"
        h.jira.put(issue(key=key, priority="P3"))
        h.post_trigger(key)
        h.wait_idle()

        seen = report(h, draft)
        assert (seen["seen"], seen["differed"]) == (1, 1), seen
        assert seen["differences"][kind] == 1, seen
        [case] = seen["latest_differences"]
        assert (case["issue_key"], case["kind"]) == (key, kind)
        assert case["live"]["matched_rules"] == ["everything"]
        assert case["live"]["assignee"] == "a@example.com"
        h.store.shadows.stop(draft.id)
    assert len(h.jira.assignments()) == len(cases)  # one live assignment per trigger
    assert h.jira.calls("set_l2_assignee") == []  # the shadow's assign_l2 was only planned


def test_a_shadow_never_delays_the_live_execution(make_harness):
    """The shadow's Jira read is held; the live execution ends meanwhile, and the shadow's
    decision is judged when it comes."""
    h = make_harness()
    staff(h)
    live = h.policy(rule(assign("a@example.com"), name="everything"))
    draft = shadow_of(h, live, rule(assign(*ENGINEERS, strategy="balanced"),
                                    name="everything"))
    h.jira.put(issue(key="TCID-1"))
    held, release = threading.Event(), threading.Event()
    counts = h.jira.count_issues

    def slow_counts(jqls):
        held.set()
        release.wait(10)
        return counts(jqls)

    h.jira.count_issues = slow_counts
    h.post_trigger("TCID-1", settle=False)
    assert held.wait(10)
    h.wait_until(lambda: h.executions() and h.executions()[0].status.terminal)
    assert h.executions()[0].status is ExecutionStatus.SUCCEEDED
    assert report(h, draft)["seen"] == 0  # still being evaluated
    release.set()
    h.wait_idle()

    seen = report(h, draft)
    assert (seen["seen"], seen["pending"]) == (1, 0)


def test_shadows_are_dropped_and_counted_when_the_pool_is_busy(make_harness):
    h = make_harness(slots=1)
    staff(h)
    live = h.policy(rule(assign("a@example.com"), name="everything"))
    draft = shadow_of(h, live, rule(assign("a@example.com"), name="everything"))
    for n in range(1, 4):
        h.jira.put(issue(key=f"TCID-{n}"))
    gate = threading.Event()
    assign_call = h.jira.assign_and_label  # the assignee with the auto-assign label

    def held_assign(key, account_id, remove_labels=(), *, l2=False):
        gate.wait(10)
        return assign_call(key, account_id, remove_labels, l2=l2)

    h.jira.assign_and_label = held_assign
    for n in range(1, 4):  # the one slot is taken by the first: the others wait for it
        h.post_trigger(f"TCID-{n}", settle=False)
    h.wait_until(lambda: h.store.shadows.report(draft.id).dropped >= 1)
    gate.set()
    h.wait_idle()

    seen = report(h, draft)
    assert seen["dropped"] >= 1
    assert seen["seen"] + seen["dropped"] == 3
    assert all(e.status is ExecutionStatus.SUCCEEDED for e in h.executions())
    assert len(h.executions()) == 3


def test_a_notification_shadow_plans_its_steps_and_sends_nothing(urgent_world):
    """The live workflow sends its card, App-urgent and first page and waits for an ACK; the
    shadow (two pages instead of three) only plans, and nothing of it reaches Lark or Oncall."""
    h = urgent_world
    [live] = h.store.policies.page(status=PolicyStatus.ACTIVE)[0]
    send, urgent = live.spec.rules
    fewer_pages = RuleSpec(urgent.name, urgent.priority, urgent.when, urgent.then[:-1],
                           urgent.on_success)
    draft = h.store.policies.create_replacement(live.id, PolicySpec(
        name="two pages", trigger=live.spec.trigger, rules=(send, fewer_pages)),
        now=h.clock.now())
    h.store.shadows.start(draft.id, now=h.clock.now())

    put(h, severity="S1", status=PENDING)
    h.post_trigger(source=ASSIGNEE)
    h.wait_idle()

    assert (len(h.lark.sends), len(h.lark.urgents), len(h.oncall.pages)) == (1, 1, 1)
    with h.store.connection():
        [decision] = ShadowDecisionRow.select().where(ShadowDecisionRow.policy_id == draft.id)
    shadow = decision.shadow_json
    assert shadow["error"] == ""
    assert shadow["matched_rules"] == [send.name, urgent.name]
    assert shadow["notification_steps"] == [
        "send_assignment_notification", "mark_assignment_message_urgent",
        "page_assignment#1", "page_assignment#2"]
    assert report(h, draft)["pending"] == 1  # the live workflow still waits for its ACK
