"""``page_assignment`` through the behavior with plain fakes: one page plus one parked ACK wait
per attempt, three attempts in a policy."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.clocks import ManualClock
from tests.domain.test_notification_card import (
    BOB,
    SEND,
    SEVERITY,
    ChangeOn,
    Crash,
    Crashing,
    World,
    notification_issue,
)
from tests.fakes import FakeOnCall
from ticket_dispatcher.domain.actions.notification_page import PageAssignment
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    Execution,
    ExecutionMode,
    ExecutionStatus,
    build_rule_executions,
)
from ticket_dispatcher.domain.model import Policy, PolicyStatus, PolicyTrigger, Rule
from ticket_dispatcher.domain.ports import PageOutcome, PageResult, Ports
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown
from ticket_dispatcher.timeutil import format_time

TIMEOUT, POLL = 30, 10  # seconds: three polls per attempt
PENDING = "WAITING FOR FIRST RESPONSE"
MESSAGE = "om_td-7-0-0"


def page(attempt: int) -> dict:
    return {"type": "page_assignment", "page_assignment": {
        "attempt": attempt, "ack_pending_statuses": [PENDING],
        "ack_timeout": f"{TIMEOUT}s", "poll_interval": f"{POLL}s"}}


class PageWorld(World):
    """The Severity Assignee workflow minus escalation: card, urgent, three pages."""

    def __init__(self, the_issue=None):
        super().__init__(the_issue or notification_issue(severity="S1"))
        self.registry.register(PageAssignment())  # the real one, not the stand-in
        self.oncall = FakeOnCall()
        self.execution = _execution()
        self.start = self.clock.now()

    def ports(self, **override) -> Ports:
        return super().ports(**{"oncall": self.oncall, **override})

    def advance(self, seconds: float, ex: Execution | None = None, **ports) -> Execution:
        self.clock.advance(seconds)
        return self.run(ex, **ports)

    def at(self, seconds: float) -> str:
        return format_time(self.start + timedelta(seconds=seconds))

    def paged_comments(self) -> list[str]:
        return [c for c in self.comments() if "Urgent: yes" in c]


def _execution() -> Execution:
    now = ManualClock().now()
    rules = (Rule(id=1, name="send", priority=10, when={"always": True}, then=[SEND],
                  on_success=OnSuccess.CONTINUE),
             Rule(id=2, name="urgent", priority=20, when=SEVERITY,
                  then=[{"type": "mark_assignment_message_urgent"}, page(1), page(2), page(3)],
                  on_success=OnSuccess.TERMINATE))
    policy = Policy(id=1, family_id="pf_TEST", version=1, status=PolicyStatus.ACTIVE,
                    name="p", description="", trigger=PolicyTrigger(), rules=rules,
                    created_at=now, updated_at=now)
    return Execution(id=7, trigger_id=1, issue_key="TCID-1", mode=ExecutionMode.LIVE,
                     policy_id=1, policy_family_id="pf_TEST", policy_version=1,
                     rule_executions=build_rule_executions(policy), live_lock_key="TCID-1#pf")


def page_context(ex: Execution, attempt: int = 1) -> dict:
    return ex.rule_executions[1].action_executions[attempt].context["page"]


def page_statuses(ex: Execution) -> list[ActionStatus]:
    return [a.status for a in ex.rule_executions[1].action_executions[1:]]


def set_issue(world: PageWorld, **changes) -> None:
    world.jira.put(replace(world.jira.issues["TCID-1"], **changes))


# -- one attempt -------------------------------------------------------------------------------


def test_accepted_page_saves_an_absolute_deadline_comments_and_parks_one_poll_later():
    world = PageWorld()

    ex = world.run()

    assert world.oncall.pages == [("alice@example.com", "Urgent TCID-1: you are the Assignee",
                                   "TCID-1 Payment page is down (attempt 1)", "TCID-1",
                                   "td-7-1-1")]
    context = page_context(ex)
    assert (context["page_status"], context["call_id"], context["deadline"]) == (
        "accepted", "call-1", world.at(TIMEOUT))
    assert world.paged_comments() == ["[ticket-manager] Assignment notification sent\n"
                                      "Target: Alice (alice@example.com)\nUrgent: yes\n"
                                      "Attempt: 1"]
    assert ex.status is ExecutionStatus.EXECUTING
    assert format_time(ex.wake_at) == world.at(POLL)


def test_deadline_and_started_phase_are_saved_before_the_oncall_call():
    world = PageWorld()
    world.oncall.outcomes = [Crash("page")]

    with pytest.raises(Crash):
        world.run()

    saved = page_context(world.checkpoints.last)
    assert (saved["page_phase"], saved["deadline"]) == ("started", world.at(TIMEOUT))


def test_the_wait_polls_every_interval_until_the_deadline_then_the_next_attempt_pages():
    world = PageWorld()
    ex = world.run()

    ex = world.advance(POLL)
    assert format_time(ex.wake_at) == world.at(2 * POLL)
    assert page_context(ex)["polls"] == 1 and len(world.oncall.pages) == 1
    ex = world.advance(POLL)
    ex = world.advance(POLL)  # the deadline: no ACK

    assert page_context(ex)["outcome"] == "timeout"
    assert len(world.oncall.pages) == 2
    assert page_context(ex, 2)["deadline"] == world.at(2 * TIMEOUT)
    # the urgent's guard, page 1's guard, its three polls, page 2's guard
    assert world.lark.reads.count(MESSAGE) == 1 + 1 + 3 + 1


def test_three_attempts_without_an_ack_are_three_pages_and_never_a_fourth():
    world = PageWorld()
    ex = world.run()

    for _ in range(3 * TIMEOUT // POLL):
        ex = world.advance(POLL)

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert [p[4] for p in world.oncall.pages] == ["td-7-1-1", "td-7-1-2", "td-7-1-3"]
    assert [c.rsplit("\n", 1)[-1] for c in world.paged_comments()] == [
        "Attempt: 1", "Attempt: 2", "Attempt: 3"]
    assert [page_context(ex, n)["outcome"] for n in (1, 2, 3)] == ["timeout"] * 3
    world.advance(TIMEOUT)
    assert len(world.oncall.pages) == 3


@pytest.mark.parametrize("answer,status,call_error", [
    (PageResult(PageOutcome.FAILED, call_error="no_phone_number"), "failed", "no_phone_number"),
    (PageResult(PageOutcome.FAILED, call_error="line busy"), "failed", "line busy"),
    (PageResult(PageOutcome.UNKNOWN), "unknown", ""),
    (OutcomeUnknown("oncall read timed out", service="oncall"), "unknown", None),
    (IntegrationError("oncall answered 500", status=500, service="oncall"), "failed", None)])
def test_a_page_not_accepted_uses_up_the_attempt_and_still_waits(answer, status, call_error):
    world = PageWorld()
    world.oncall.outcomes = [answer]

    ex = world.run()

    context = page_context(ex)
    assert context["page_status"] == status and context["warnings"]
    assert context.get("call_error") == call_error
    assert world.paged_comments() == []  # only an accepted page says "Urgent: yes"
    assert format_time(ex.wake_at) == world.at(POLL)
    ex = world.advance(TIMEOUT)
    assert page_context(ex)["outcome"] == "timeout" and len(world.oncall.pages) == 2


def test_no_phone_number_is_named_in_the_warning():
    world = PageWorld()
    world.oncall.outcomes = [PageResult(PageOutcome.FAILED, call_error="no_phone_number")]

    ex = world.run()

    assert page_context(ex)["warnings"] == ["page attempt 1: not accepted (no phone number)"]


# -- ACK and invalidation -----------------------------------------------------------------------


def test_a_read_ack_is_timed_by_the_read_as_lark_reports_it():
    world = PageWorld()
    ex = world.run()
    read = world.clock.now() + timedelta(seconds=3)
    world.lark.readers[MESSAGE] = ["ou_alice"]
    world.lark.read_at[MESSAGE] = {"ou_alice": read}

    ex = world.advance(POLL)

    assert page_context(ex)["ack_at"] == format_time(read)


def test_target_reading_the_card_mid_wait_is_an_ack_written_once_and_ends_the_workflow():
    world = PageWorld()
    ex = world.run()
    world.lark.readers[MESSAGE] = ["ou_alice"]

    ex = world.advance(POLL)

    context = page_context(ex)
    assert (context["outcome"], context["reason"]) == ("ack", "read")
    assert (context["ack_source"], context["ack_at"]) == ("card_read",
                                                        format_time(world.clock.now()))
    assert context["ack_comment_status"] == "written"
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert page_statuses(ex) == [ActionStatus.SUCCEEDED, ActionStatus.SKIPPED,
                                 ActionStatus.SKIPPED]
    world.advance(TIMEOUT)
    acks = [c for c in world.comments() if "acknowledged" in c]
    assert acks == ["[ticket-manager] Assignment notification acknowledged\n"
                    "Target: Alice (alice@example.com)"]
    assert len(world.oncall.pages) == 1


def test_status_leaving_the_pending_statuses_mid_wait_is_an_ack():
    world = PageWorld()
    ex = world.run()
    set_issue(world, status="In Progress")

    ex = world.advance(POLL)

    assert (page_context(ex)["outcome"], page_context(ex)["reason"]) == ("ack", "status")
    assert ex.status is ExecutionStatus.SUCCEEDED and len(world.oncall.pages) == 1


def test_a_status_change_ack_is_timed_by_the_change_in_jiras_changelog():
    world = PageWorld()
    ex = world.run()
    changed = world.clock.now() + timedelta(seconds=2)
    set_issue(world, status="In Progress", status_changed_at=changed)

    ex = world.advance(POLL)

    assert (page_context(ex)["ack_source"], page_context(ex)["ack_at"]) == (
        "status_change", format_time(changed))


@pytest.mark.parametrize("change", [
    {"status": None}, {"status": PENDING}], ids=["missing status", "pending status"])
def test_a_missing_or_pending_status_is_no_ack(change):
    world = PageWorld()
    ex = world.run()
    set_issue(world, **change)

    ex = world.advance(POLL)

    assert "outcome" not in page_context(ex) and ex.status is ExecutionStatus.EXECUTING


def test_someone_else_or_another_card_being_read_is_no_ack():
    world = PageWorld()
    ex = world.run()
    world.lark.readers[MESSAGE] = ["ou_bob"]
    world.lark.readers["om_an-older-card"] = ["ou_alice"]

    ex = world.advance(TIMEOUT)

    assert page_context(ex)["outcome"] == "timeout" and len(world.oncall.pages) == 2


@pytest.mark.parametrize("change,reason", [
    ({"assignee": BOB}, "target changed"), ({"assignee": None}, "target changed"),
    ({"severity": "S3"}, "urgency downgraded"), ({"project_key": "ST"}, "project changed")])
def test_invalidation_mid_wait_terminates_without_an_ack_comment(change, reason):
    world = PageWorld()
    ex = world.run()
    set_issue(world, **change)

    ex = world.advance(POLL)

    context = page_context(ex)
    assert (context["outcome"], context["reason"]) == ("invalidated", reason)
    assert "ack_comment_phase" not in context
    assert ex.status is ExecutionStatus.SUCCEEDED and len(world.oncall.pages) == 1


def test_an_ack_present_after_the_urgent_means_no_page_at_all():
    world = PageWorld()
    jira = ChangeOn(world.jira, after_loads=3, status="In Progress")  # after the urgent's guard

    ex = world.run(jira=jira)

    context = page_context(ex)
    assert (context["outcome"], context["reason"]) == ("ack", "status")
    assert "page_phase" not in context and world.oncall.pages == []
    assert context["ack_comment_status"] == "written"
    assert ex.status is ExecutionStatus.SUCCEEDED


def test_invalidation_before_the_page_means_no_page():
    world = PageWorld()
    jira = ChangeOn(world.jira, after_loads=3, assignee=BOB)

    ex = world.run(jira=jira)

    assert page_context(ex)["outcome"] == "invalidated" and world.oncall.pages == []
    assert [c for c in world.comments() if "acknowledged" in c] == []


# -- recovery -----------------------------------------------------------------------------------


def test_a_restart_mid_wait_keeps_the_original_deadline():
    world = PageWorld()
    world.run()
    world.clock.advance(POLL + 5)  # the restart comes late

    ex = world.run(world.restart())

    assert page_context(ex)["deadline"] == world.at(TIMEOUT)
    assert format_time(ex.wake_at) == world.at(2 * POLL + 5)
    world.clock.advance(TIMEOUT - POLL - 5)  # exactly the original deadline
    ex = world.run(world.restart())
    assert page_context(ex)["outcome"] == "timeout" and len(world.oncall.pages) == 2


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_page_started_without_a_result_is_never_repeated_and_waits_for_its_deadline(when):
    world = PageWorld()
    with pytest.raises(Crash):
        world.run(oncall=Crashing(world.oncall, "page", when))
    world.clock.advance(5)

    ex = world.run(world.restart())

    assert len(world.oncall.pages) == (1 if when == "after" else 0)
    context = page_context(ex)
    assert (context["page_status"], context["deadline"]) == ("unknown", world.at(TIMEOUT))
    assert world.paged_comments() == []
    assert format_time(ex.wake_at) == world.at(POLL + 5)


@pytest.mark.parametrize("when", ["before", "after"])
def test_the_urgent_yes_comment_started_without_a_result_is_never_written_again(when):
    world = PageWorld()
    with pytest.raises(Crash):  # the card's comment is the first, the page's the second
        world.run(jira=Crashing(world.jira, "add_internal_comment", when, nth=2))

    ex = world.run(world.restart())

    assert len(world.paged_comments()) == (1 if when == "after" else 0)
    assert page_context(ex)["notification_comment_status"] == "unknown"
    assert len(world.oncall.pages) == 1 and ex.status is ExecutionStatus.EXECUTING


def test_a_failed_urgent_yes_comment_is_a_warning_and_the_wait_goes_on():
    world = PageWorld()
    world.jira.failing_writes.add("add_internal_comment")

    ex = world.run()

    context = page_context(ex)
    assert context["notification_comment_status"] == "failed" and context["warnings"]
    assert ex.status is ExecutionStatus.EXECUTING and ex.wake_at is not None


def test_an_urgent_yes_comment_refused_by_a_rate_limit_is_written_at_the_next_poll():
    world = PageWorld()
    limited = IntegrationError("jira answered 429", status=429, service="jira", retry_after=5)
    world.jira.fail_writes("add_internal_comment", limited, limited)  # the card's, the page's

    ex = world.run()

    context = page_context(ex)
    assert "notification_comment_phase" not in context and context["warnings"]
    assert world.paged_comments() == [] and ex.status is ExecutionStatus.EXECUTING
    ex = world.advance(POLL, ex)
    assert page_context(ex)["notification_comment_status"] == "written"
    assert len(world.paged_comments()) == 1 and len(world.oncall.pages) == 1
