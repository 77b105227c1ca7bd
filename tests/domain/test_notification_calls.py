"""The card, App-urgent and page calls are counted through ``ports.calls`` as they happen
(docs/operations.md, "Metrics"): once each, right after the checkpoint that saved the result,
while the workflow is still running; a call whose result was lost counts ``unknown`` once,
after the restart that finds it; nothing counts twice; a dry run counts nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.domain.test_notification_card import Crash, Crashing
from tests.domain.test_notification_page import POLL, TIMEOUT, PageWorld, page_context
from tests.fakes import FakeCalls
from ticket_dispatcher.domain.execution import Execution, ExecutionMode, ExecutionStatus
from ticket_dispatcher.domain.ports import PageOutcome, PageResult, Ports, UncountedCalls
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown

CARD = ("card", "succeeded", "assignee", "")
URGENT = ("urgent", "succeeded", "assignee", "")


def saved_calls(ex: Execution) -> dict[str, tuple[str | None, str | None]]:
    """``(phase, status)`` of each call as this saved execution has it."""
    card = ex.rule_executions[0].action_executions[0].context.get("notification", {})
    urgent = ex.rule_executions[1].action_executions[0].context.get("urgent", {})
    calls = {"card": (card.get("card_phase"), card.get("card_status")),
             "urgent": (urgent.get("urgent_phase"), urgent.get("urgent_status"))}
    for attempt in (1, 2, 3):
        page = ex.rule_executions[1].action_executions[attempt].context.get("page", {})
        calls[f"page{attempt}"] = (page.get("page_phase"), page.get("page_status"))
    return calls


class CountingWorld(PageWorld):
    """The card, urgent and three pages, with the counted calls recorded; each count sees
    what the last checkpoint had saved by then."""

    def __init__(self, the_issue=None):
        super().__init__(the_issue)
        self.calls = FakeCalls(seen=lambda: saved_calls(self.checkpoints.last))

    def ports(self, **override) -> Ports:
        return super().ports(**{"calls": self.calls, **override})


def test_each_call_is_counted_once_right_after_its_result_is_saved_while_the_wait_runs():
    world = CountingWorld()

    ex = world.run()

    assert ex.status is ExecutionStatus.EXECUTING  # parked in attempt 1's ACK wait
    assert world.calls.counted == [CARD, URGENT, ("page", "succeeded", "assignee", "1")]
    card_seen, urgent_seen, page_seen = world.calls.witnessed
    assert card_seen["card"] == ("finished", "sent")
    assert urgent_seen["urgent"] == ("finished", "sent")
    assert page_seen["page1"] == ("finished", "accepted")


def test_the_waits_polls_and_later_attempts_add_only_their_own_pages():
    world = CountingWorld()
    world.oncall.outcomes = [PageResult(PageOutcome.FAILED, call_error="no_phone_number"),
                             PageResult(PageOutcome.ACCEPTED, call_id="call-2"),
                             OutcomeUnknown("oncall read timed out", service="oncall")]
    ex = world.run()
    assert world.calls.counted[-1] == ("page", "failed", "assignee", "1")

    for _ in range(3 * TIMEOUT // POLL):
        ex = world.advance(POLL, ex)

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert world.calls.counted == [CARD, URGENT, ("page", "failed", "assignee", "1"),
                                   ("page", "succeeded", "assignee", "2"),
                                   ("page", "unknown", "assignee", "3")]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_page_whose_result_was_lost_counts_unknown_once_after_the_restart(when):
    world = CountingWorld()
    with pytest.raises(Crash):
        world.run(oncall=Crashing(world.oncall, "page", when))
    assert world.calls.counted == [CARD, URGENT]  # the crash came before any result

    ex = world.run(world.restart())
    assert world.calls.counted == [CARD, URGENT, ("page", "unknown", "assignee", "1")]
    assert world.calls.witnessed[-1]["page1"] == ("finished", "unknown")

    world.run(world.restart())  # and again: the unknown is saved, nothing is counted twice
    assert len(world.calls.counted) == 3
    assert page_context(ex)["page_status"] == "unknown"


def test_a_restart_after_the_result_was_saved_counts_nothing_again():
    world = CountingWorld()
    world.run()
    counted = list(world.calls.counted)

    ex = world.run(world.restart())
    ex = world.advance(POLL, world.restart())

    assert ex.status is ExecutionStatus.EXECUTING
    assert world.calls.counted == counted


@pytest.mark.parametrize("failure,result", [
    (IntegrationError("lark answered 500", status=500, service="lark"), "failed"),
    (OutcomeUnknown("lark read timed out", service="lark"), "unknown")])
def test_a_failed_or_lost_card_counts_by_its_result_and_the_skipped_urgent_not_at_all(
        failure, result):
    world = CountingWorld()
    world.lark.fail["send_card"] = [failure]

    world.run()

    assert world.calls.counted == [("card", result, "assignee", ""),
                                   ("page", "succeeded", "assignee", "1")]


def test_a_card_that_cannot_be_addressed_counts_failed_like_a_refused_send():
    world = CountingWorld()
    world.lark.open_ids.clear()  # Lark and Core know no open_id for Alice

    world.run()

    assert world.calls.counted[0] == ("card", "failed", "assignee", "")
    assert world.lark.sends == []


def test_an_urgent_lark_refuses_for_the_target_counts_failed():
    world = CountingWorld()
    world.lark.rejected.add("ou_alice")

    world.run()

    assert world.calls.counted[1] == ("urgent", "failed", "assignee", "")


def test_the_l2_role_is_counted_under_its_own_label():
    world = CountingWorld()
    world.execution.rule_executions[0].action_executions[0].config.update(
        role="l2_assignee", label="notify-l2-assignee")
    world.jira.put(replace(world.jira.issues["TCID-1"], l2_assignee=world.jira.issues[
        "TCID-1"].assignee, labels=("notify-l2-assignee",)))

    world.run()

    assert {role for _, _, role, _ in world.calls.counted} == {"l2_assignee"}


def test_a_dry_run_counts_nothing():
    world = CountingWorld()
    world.execution = replace(world.execution, mode=ExecutionMode.DRY_RUN)

    ex = world.run()

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert world.calls.counted == [] and world.lark.sends == [] and world.oncall.pages == []


def test_ports_built_bare_count_nothing_and_do_not_fail():
    world = PageWorld()

    ex = world.run()

    assert isinstance(world.ports().calls, UncountedCalls)
    assert page_context(ex)["page_status"] == "accepted"
