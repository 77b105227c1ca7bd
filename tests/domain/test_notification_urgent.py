"""``mark_assignment_message_urgent`` through the behavior with plain fakes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.domain.test_notification_card import (
    BOB,
    ChangeOn,
    Crash,
    Crashing,
    World,
    card_context,
    notification_issue,
)
from ticket_dispatcher.domain.execution import ActionStatus, Execution, ExecutionStatus
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown


def urgent_world(**overrides) -> World:
    return World(notification_issue(severity="S1", **overrides))


def urgent_context(ex: Execution) -> dict:
    return ex.rule_executions[1].action_executions[0].context["urgent"]


def page_status(ex: Execution) -> ActionStatus:
    return ex.rule_executions[1].action_executions[1].status


def test_urgent_marks_only_this_cards_message_for_the_target():
    world = urgent_world()

    ex = world.run()

    assert world.lark.urgents == [("om_td-7-0-0", "ou_alice")]
    context = urgent_context(ex)
    assert context["expected"] == {
        "role": "assignee", "project": "TCID", "message_id": "om_td-7-0-0",
        "target_lark_id": "ou_alice", "target": card_context(ex)["snapshot"]["target"]}
    assert (context["urgent_status"], context["outcome"]) == ("sent", "continued")
    assert page_status(ex) is ActionStatus.SUCCEEDED  # on to paging
    assert world.lark.reads == ["om_td-7-0-0"]  # the read ACK looked at this card only


@pytest.mark.parametrize("failure,status", [
    (IntegrationError("lark answered 500", status=500, service="lark"), "failed"),
    (OutcomeUnknown("lark read timed out", service="lark"), "unknown")])
def test_urgent_failure_is_a_warning_and_paging_goes_on(failure, status):
    world = urgent_world()
    world.lark.fail["urgent_app"] = [failure]

    ex = world.run()

    context = urgent_context(ex)
    assert context["urgent_status"] == status and context["warnings"]
    assert page_status(ex) is ActionStatus.SUCCEEDED
    assert ex.status is ExecutionStatus.SUCCEEDED


def test_target_rejected_by_lark_is_a_failed_urgent():
    world = urgent_world()
    world.lark.rejected.add("ou_alice")

    ex = world.run()

    assert urgent_context(ex)["urgent_status"] == "failed"
    assert page_status(ex) is ActionStatus.SUCCEEDED


def test_card_failure_skips_the_urgent_and_still_pages():
    world = urgent_world()
    world.lark.fail["send_card"] = [IntegrationError("lark answered 500", service="lark")]

    ex = world.run()

    assert urgent_context(ex)["urgent_status"] == "skipped"
    assert world.lark.urgents == [] and world.lark.reads == []
    assert page_status(ex) is ActionStatus.SUCCEEDED


def test_target_reading_the_card_is_an_ack_written_once_and_nothing_is_paged():
    world = urgent_world()
    world.lark.readers["om_td-7-0-0"] = ["ou_alice"]

    ex = world.run()

    context = urgent_context(ex)
    assert (context["outcome"], context["reason"]) == ("ack", "read")
    assert context["ack_comment_status"] == "written"
    assert world.comments()[-1] == ("[ticket-manager] Assignment notification acknowledged\n"
                                    "Target: Alice (alice@example.com)")
    assert world.lark.urgents == [] and page_status(ex) is ActionStatus.SKIPPED


def test_someone_else_reading_the_card_is_no_ack():
    world = urgent_world()
    world.lark.readers["om_td-7-0-0"] = ["ou_bob"]
    world.lark.readers["om_an-older-card"] = ["ou_alice"]

    ex = world.run()

    assert urgent_context(ex)["outcome"] == "continued"
    assert len(world.lark.urgents) == 1


@pytest.mark.parametrize("status,acked", [("In Progress", True), (None, False),
                                          ("WAITING FOR FIRST RESPONSE", False)])
def test_status_outside_the_pending_statuses_is_an_ack_and_a_missing_one_is_not(status,
                                                                                 acked):
    world = urgent_world()
    world.jira.put(replace(world.jira.issues["TCID-1"], status=status))

    ex = world.run()

    assert (urgent_context(ex)["outcome"] == "ack") is acked
    assert (page_status(ex) is ActionStatus.SKIPPED) is acked


@pytest.mark.parametrize("change,reason", [
    ({"assignee": BOB}, "target changed"), ({"assignee": None}, "target changed"),
    ({"severity": "S3"}, "urgency downgraded"), ({"project_key": "ST"}, "project changed")])
def test_invalidation_terminates_without_an_ack_comment(change, reason):
    world = urgent_world()
    jira = ChangeOn(world.jira, after_loads=2, **change)  # after rule 1's two label reads

    ex = world.run(jira=jira)

    context = urgent_context(ex)
    assert (context["outcome"], context["reason"]) == ("invalidated", reason)
    assert "ack_comment_phase" not in context
    assert world.lark.urgents == [] and page_status(ex) is ActionStatus.SKIPPED


@pytest.mark.parametrize("when", ["before", "after"])
def test_urgent_started_without_a_result_is_never_repeated_and_paging_goes_on(when):
    world = urgent_world()
    with pytest.raises(Crash):
        world.run(lark=Crashing(world.lark, "urgent_app", when))
    assert urgent_context(world.checkpoints.last)["urgent_phase"] == "started"

    ex = world.run(world.restart())

    assert len(world.lark.urgents) == (1 if when == "after" else 0)
    assert urgent_context(ex)["urgent_status"] == "unknown"
    assert page_status(ex) is ActionStatus.SUCCEEDED
    assert len(world.lark.sends) == 1


@pytest.mark.parametrize("when", ["before", "after"])
def test_ack_comment_started_without_a_result_is_never_written_again(when):
    world = urgent_world()
    world.lark.readers["om_td-7-0-0"] = ["ou_alice"]
    with pytest.raises(Crash):
        world.run(jira=Crashing(world.jira, "add_internal_comment", when, nth=2))

    ex = world.run(world.restart())

    acks = [c for c in world.comments() if "acknowledged" in c]
    assert len(acks) == (1 if when == "after" else 0)
    assert urgent_context(ex)["ack_comment_status"] == "unknown"
    assert page_status(ex) is ActionStatus.SKIPPED and ex.status is ExecutionStatus.SUCCEEDED


def test_unreadable_jira_in_the_guard_does_not_block_the_urgent():
    world = urgent_world()
    world.jira.fail_next("TCID-1", times=1, after=2)  # the card's two label guards read fine

    ex = world.run()

    context = urgent_context(ex)
    assert context["urgent_status"] == "sent" and context["warnings"]
