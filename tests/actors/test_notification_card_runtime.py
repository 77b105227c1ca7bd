"""The card and App-urgent actions on the real runtime and database: a reserved-source trigger
goes all the way to a card, a comment and a consumed label."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.domain.test_notification_card import ALICE, BOB, LABEL, PAGE, SEND, SEVERITY
from tests.fakes import FakeLark, RecordingAction, StoreTriggers, issue
from tests.harness import Harness, rule
from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.domain.actions.notification import validate_page_config
from ticket_dispatcher.domain.execution import ActionStatus, ExecutionStatus
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.store.card_presses import ExecutionPresses

ASSIGNEE = "jira_assignment_assignee"


class NotificationHarness(Harness):
    """The harness with Lark and the trigger outbox wired in as well."""

    def __init__(self, store, *actions, **config):
        super().__init__(store, *actions, NOTIFICATIONS_ENABLED="true", **config)
        self.lark = FakeLark({"alice@example.com": "ou_alice", "bob@example.com": "ou_bob"})
        self.triggers = StoreTriggers(self.store.triggers)

    def start(self) -> NotificationHarness:
        ports = Ports(jira=self.jira, core=self.directory, oncall=self.oncall,
                      engineers=self.store.engineers, lark=self.lark, triggers=self.triggers,
                      contexts=self.store.contexts, maintenance=self.maintenance(),
                      presses=ExecutionPresses(self.store.card_presses,
                                               buttons=self.config.lark.callbacks))
        self.runtime = Runtime(self.config, self.store, self.clock, ports=ports,
                               registry=self.registry, metrics=self.metrics)
        self.runtime.start()
        return self


@pytest.fixture
def world(store):
    page = RecordingAction("page_assignment", config_check=validate_page_config)
    harness = NotificationHarness(store, page).start()
    harness.page = page
    harness.policy(rule(SEND, name="send", priority=10, on_success="continue"),
                   rule({"type": "mark_assignment_message_urgent"}, PAGE, name="urgent",
                        priority=20, when=SEVERITY),
                   source_in=(ASSIGNEE,), labels=(LABEL,))
    yield harness
    harness.stop()


def put(h, **changes):
    values = dict(assignee=ALICE, labels=(LABEL,), severity="S3", priority=None,
                  status="WAITING FOR FIRST RESPONSE")
    values.update(changes)
    return h.jira.put(issue(**values))


def contexts(ex):
    return [[a.context for a in r.action_executions] for r in ex.rule_executions]


def test_normal_assignment_sends_one_card_comments_and_consumes_the_label(world):
    put(world)

    trigger = world.post_trigger(source=ASSIGNEE)

    ex = world.execution(trigger.execution_ids[0])
    assert ex.status is ExecutionStatus.SUCCEEDED
    card = contexts(ex)[0][0]["notification"]
    assert (card["card_status"], card["notification_comment_status"], card["outcome"]) == (
        "sent", "written", "sent")
    assert len(world.lark.sends) == 1 and world.lark.urgents == []
    assert LABEL not in world.jira.issues["TCID-1"].labels
    assert len(world.jira.calls("add_internal_comment")) == 1


def test_urgent_assignment_marks_the_card_urgent_then_pages(world):
    put(world, severity="S1")

    trigger = world.post_trigger(source=ASSIGNEE)

    ex = world.execution(trigger.execution_ids[0])
    assert world.lark.urgents == [(f"om_td-{ex.id}-0-0", "ou_alice")]
    assert [a.status for a in ex.rule_executions[1].action_executions] == [
        ActionStatus.SUCCEEDED, ActionStatus.SUCCEEDED]
    assert world.page.calls[-1] == ("execute", ex.id)


def test_a_crash_after_the_card_left_never_sends_it_twice(world):
    put(world)

    class DiesAfterSending(FakeLark):
        def send_card(self, open_id, card, uuid):
            super().send_card(open_id, card, uuid)
            raise RuntimeError("the process died with the answer in flight")

    lark = DiesAfterSending({"alice@example.com": "ou_alice"})
    world.lark.send_card = lark.send_card  # the first send dies; the actor is restarted
    trigger = world.post_trigger(source=ASSIGNEE)
    world.advance(60)  # let the supervisor's restart run

    ex = world.execution(trigger.execution_ids[0])
    assert len(lark.sends) == 1  # at most once
    assert contexts(ex)[0][0]["notification"]["card_status"] == "unknown"
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert world.jira.calls("add_internal_comment") == []


def test_reassignment_racing_the_label_delete_restores_it_and_wakes_the_family(world):
    put(world)
    original_edit = world.jira.edit_labels

    def edit_then_reassign(key, add=(), remove=()):
        original_edit(key, add=add, remove=remove)
        if remove:  # Automation reassigns and re-adds the label right after our delete
            world.jira.put(replace(world.jira.issues[key], assignee=BOB))

    world.jira.edit_labels = edit_then_reassign
    first = world.post_trigger(source=ASSIGNEE)

    card = contexts(world.execution(first.execution_ids[0]))[0][0]["notification"]
    assert (card["label_phase"], card["trigger_phase"]) == ("restored", "ensured")
    assert LABEL in world.jira.issues["TCID-1"].labels
    world.jira.edit_labels = original_edit
    world.advance(60)  # the trigger poll finds the ensured wake-up
    executions = world.executions()
    assert len(executions) == 2
    assert [s[0] for s in world.lark.sends] == ["ou_alice", "ou_bob"]  # the new target
