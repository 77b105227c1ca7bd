"""Fault injection on the real runtime and both databases (docs/design.md, "Checkpoints and
at-most-once"): the process dies right before or right after each checkpoint of the
assignment-notification workflow, a new actor system boots on the same database, and the
workflow is driven to its end.

The crash hook is ``tests/faults.py``: it dies once at an execution save whose in-memory state
matches the checkpoint (before the write, or after it committed), at a role-slot write of the
escalation (inside its transaction, or after it committed), or around a named port call (the
escalation's Jira write, the label add, the reserved-trigger ensure). Dying freezes the runtime
(its ``stopping`` flag, so the crashed actor is not restarted in-process and nothing more is
saved), the test stops it, lets ``DOWNTIME`` pass and boots a new one: a real restart with boot
recovery, so a deadline recomputed from the restart time would show.

Policy: Rule 1 ``send_assignment_notification`` (continue), Rule 2 on Severity:
``mark_assignment_message_urgent``, ``page_assignment`` ×3, ``escalate_assignment_to_leader``.
Scenarios: no ACK (three timeouts → escalation to Alice's leader Bob, whose own workflow the
wake-up starts), a read ACK during attempt 2 (the ACK comment path), and a reassignment racing
the label delete (restore + reserved-trigger ensure, non-urgent).

Each case asserts: every card, App urgent, page and internal comment of the first execution
happened exactly as often as without the crash, minus what the crash lost for good (a call
whose ``started`` was saved but which never ran, and what depended on its answer) — never
twice; a phase found ``started`` ends ``unknown``; every deadline equals its page's time plus
the timeout and what was persisted before the crash; a timed-out wait ended at its original
deadline (plus the downtime at most); nothing that was finished before the crash changed; the
execution succeeds; no fourth page; one escalation write, never to the Grand Leader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pytest

from tests.domain.test_notification_card import ALICE, BOB, LABEL, SEND, SEVERITY
from tests.fakes import FakeLark, issue
from tests.faults import AFTER, BEFORE, SAVE, SLOT, Checkpoint, Injector
from tests.harness import Harness, rule
from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.domain.execution import ActionStatus, Execution, ExecutionStatus
from ticket_dispatcher.domain.model import JiraUser
from ticket_dispatcher.domain.ports import DirectoryUser, Ports
from ticket_dispatcher.timeutil import parse_rfc3339

ASSIGNEE = "jira_assignment_assignee"
PENDING = "WAITING FOR FIRST RESPONSE"
CAROL = JiraUser("acc-carol", "carol@example.com", "Carol")  # Bob's leader: the Grand Leader
TIMEOUT, POLL = 20, 10  # seconds: one mid-wait poll per attempt
DOWNTIME = 3  # seconds the process stays down before the restart
MAX_STEPS = 30
URGENT = {"type": "mark_assignment_message_urgent"}
ESCALATE = {"type": "escalate_assignment_to_leader"}
ONCE = ("card", "notification_comment", "urgent", "page", "ack_comment")  # each at most once
LABEL_ORDER = ("pending", "remove_started", "removed", "restored")


def page(attempt: int) -> dict:
    return {"type": "page_assignment", "page_assignment": {
        "attempt": attempt, "ack_pending_statuses": [PENDING],
        "ack_timeout": f"{TIMEOUT}s", "poll_interval": f"{POLL}s"}}


class FaultHarness(Harness):
    """The harness with Lark, Core people and leaders, the store's trigger intake and role
    slots, every port and the execution saves behind one crash hook."""

    def __init__(self, store, checkpoint: Checkpoint, when: str):
        super().__init__(store, NOTIFICATIONS_ENABLED="true")
        self.lark = FakeLark({u.email: f"ou_{u.display_name.lower()}"
                              for u in (ALICE, BOB, CAROL)})
        for user in (ALICE, BOB, CAROL):
            self.jira.users[user.account_id] = user
            self.directory.users[user.email] = DirectoryUser(user.email, user.display_name)
        self.directory.leaders.update({ALICE.email: BOB.email, BOB.email: CAROL.email})
        self.injector = Injector(checkpoint, when, on_death=self._freeze)
        self.injector.wrap_save(self.store.executions)
        self.page_times: dict[str, datetime] = {}  # dedup key -> when Oncall was called
        self.persisted: Execution | None = None  # the first execution as the crash left it
        self._record_page_times()

    def start(self) -> FaultHarness:
        hook = self.injector.port
        ports = Ports(jira=hook("jira", self.jira), lark=hook("lark", self.lark),
                      oncall=hook("oncall", self.oncall), core=hook("core", self.directory),
                      engineers=self.store.engineers,
                      triggers=hook("triggers", self.store.triggers),
                      contexts=hook("contexts", self.store.contexts))
        # one Metrics across the restart, like the sum of both processes' counters
        self.runtime = Runtime(self.config, self.store, self.clock, ports=ports,
                               registry=self.registry, metrics=self.metrics)
        self.runtime.start()
        return self

    def _freeze(self) -> None:
        self.runtime.deps.stopping.set()  # the dead process starts and saves nothing more

    def _record_page_times(self) -> None:
        real = self.oncall.page

        def paged(email, title, message, issue_key, dedup_key):
            self.page_times[dedup_key] = self.clock.now()
            return real(email, title, message, issue_key, dedup_key)

        self.oncall.page = paged

    def recover(self, execution_id: int) -> None:
        """After a death: keep what the store holds, stay down ``DOWNTIME``, boot again."""
        if not self.injector.dead:
            return
        self.wait_idle()
        self.persisted = self.execution(execution_id)
        self.stop()
        self.clock.advance(DOWNTIME)
        self.injector.revive()
        self.start()
        self.wait_idle()


# -- where the first execution's contexts live --------------------------------------------------


def card(ex: Execution) -> dict:
    return ex.rule_executions[0].action_executions[0].context.get("notification", {})


def urgent(ex: Execution) -> dict:
    return ex.rule_executions[1].action_executions[0].context.get("urgent", {})


def paging(attempt: int) -> Callable[[Execution], dict]:
    return lambda ex: ex.rule_executions[1].action_executions[attempt].context.get("page", {})


def escalation(ex: Execution) -> dict:
    return ex.rule_executions[1].action_executions[4].context.get("escalation", {})


STATUS_OF: dict[str, Callable[[Execution], str | None]] = {
    "card": lambda ex: card(ex).get("card_status"),
    "card_comment": lambda ex: card(ex).get("notification_comment_status"),
    "urgent": lambda ex: urgent(ex).get("urgent_status"),
    **{f"page{n}": lambda ex, n=n: paging(n)(ex).get("page_status") for n in (1, 2, 3)},
    **{f"page{n}_comment": lambda ex, n=n: paging(n)(ex).get("notification_comment_status")
       for n in (1, 2, 3)},
    "ack_comment": lambda ex: paging(2)(ex).get("ack_comment_status"),
}
# What needs the answer of a call: no message ID, no comment and no App urgent;
# a page not known accepted writes no Urgent: yes comment.
NEEDS_ANSWER = {"card": ("card_comment", "urgent"), **{f"page{n}": (f"page{n}_comment",)
                                                        for n in (1, 2, 3)}}


# -- scenarios and checkpoints ------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    severity: str
    effects: dict[str, int]  # how often each side effect happens without a crash
    ack_in: int | None = None  # the attempt during whose wait Alice reads the card
    reassign_on_consume: bool = False  # Bob becomes the assignee right after the label delete
    wakes_bob: bool = False  # the workflow ends by starting Bob's own


NOTHING = dict.fromkeys([*STATUS_OF, "escalation_write", "grand_leader_write"], 0)
NO_ACK = Scenario("no-ack", "S1", {**NOTHING, **dict.fromkeys(
    ["card", "card_comment", "urgent", "page1", "page2", "page3", "page1_comment",
     "page2_comment", "page3_comment", "escalation_write"], 1)}, wakes_bob=True)
READ_ACK = Scenario("read-ack", "S1", {**NOTHING, **dict.fromkeys(
    ["card", "card_comment", "urgent", "page1", "page2", "page1_comment", "page2_comment",
     "ack_comment"], 1)}, ack_in=2)
STALE = Scenario("stale", "S3", {**NOTHING, "card": 1, "card_comment": 1},
                 reassign_on_consume=True, wakes_bob=True)


@dataclass(frozen=True)
class Case:
    scenario: Scenario
    checkpoint: Checkpoint
    effect: str = ""  # the at-most-once side effect this phase guards
    phase: str = ""  # "started" or "result"

    def lost(self, when: str) -> set[str]:
        """The effects this crash loses for good: a call saved ``started`` that never ran
        (died after the save), and what needs an answer that was never saved."""
        if self.phase == "started" and when == AFTER:
            return {self.effect, *NEEDS_ANSWER.get(self.effect, ())}
        if self.phase == "result" and when == BEFORE:
            return set(NEEDS_ANSWER.get(self.effect, ()))
        return set()

    def unknown(self, when: str) -> bool:
        """The crash left the phase ``started`` without a result: it must end ``unknown``."""
        return (self.phase, when) in (("started", AFTER), ("result", BEFORE))


def saved(name: str, probe: Callable[[Execution], bool]) -> Checkpoint:
    return Checkpoint(name, SAVE, probe)


def phases(scenario: Scenario, name: str, effect: str, context: Callable[[Execution], dict],
           key: str) -> Iterator[Case]:
    yield Case(scenario, saved(f"{name}-started",
                               lambda ex: context(ex).get(key) == "started"), effect, "started")
    yield Case(scenario, saved(f"{name}-result",
                               lambda ex: context(ex).get(key) == "finished"), effect, "result")


def slot_state(state: str) -> Callable[[dict | None], bool]:
    return lambda slot: ((slot or {}).get("escalation_intent") or {}).get("state") == state


def adds_label(args: tuple, kwargs: dict) -> bool:
    return bool(kwargs.get("add"))


def any_call(args: tuple, kwargs: dict) -> bool:
    return True


def terminal(ex: Execution) -> bool:
    return ex.status.terminal


def no_ack_cases() -> Iterator[Case]:
    s = NO_ACK
    yield from phases(s, "card", "card", card, "card_phase")
    yield from phases(s, "card-comment", "card_comment", card, "notification_comment_phase")
    yield Case(s, saved("label-remove-started",
                        lambda ex: card(ex).get("label_phase") == "remove_started"))
    yield Case(s, saved("label-removed", lambda ex: card(ex).get("label_phase") == "removed"))
    yield Case(s, saved("label-post-check",
                        lambda ex: "after_delete" in card(ex).get("label_check", {})))
    yield from phases(s, "urgent", "urgent", urgent, "urgent_phase")
    for n in (1, 2, 3):
        context = paging(n)
        yield from phases(s, f"page{n}", f"page{n}", context, "page_phase")
        if n == 2:  # the comment and the wait work alike in every attempt; counted for all
            yield from phases(s, "page2-comment", "page2_comment", context,
                              "notification_comment_phase")
            yield Case(s, saved("page2-mid-wait", lambda ex: paging(2)(ex).get("polls") == 1))
        yield Case(s, saved(f"page{n}-deadline",
                            lambda ex, c=context: c(ex).get("outcome") == "timeout"))
    yield Case(s, Checkpoint("escalation-intent-prepared", SLOT, slot_state("prepared")))
    yield Case(s, saved("escalation-intent-saved",
                        lambda ex: escalation(ex).get("intent", {}).get("state") == "prepared"))
    yield Case(s, Checkpoint("escalation-jira-update", "jira.assign", any_call))
    yield Case(s, Checkpoint("escalation-applied-marker", SLOT, slot_state("applied")))
    yield Case(s, saved("escalation-applied-saved",
                        lambda ex: escalation(ex).get("outcome") == "escalated"))
    yield Case(s, Checkpoint("escalation-wakeup-label", "jira.edit_labels", adds_label))
    yield Case(s, Checkpoint("escalation-wakeup-trigger", "triggers.ensure_reserved_trigger",
                             any_call))
    yield Case(s, saved("escalation-wakeup-saved",
                        lambda ex: escalation(ex).get("wakeup_phase") == "done"))
    yield Case(s, saved("terminate", terminal))


def read_ack_cases() -> Iterator[Case]:
    s, context = READ_ACK, paging(2)
    yield Case(s, saved("ack-found", lambda ex: context(ex).get("outcome") == "ack"))
    yield from phases(s, "ack-comment", "ack_comment", context, "ack_comment_phase")
    yield Case(s, saved("ack-terminate", terminal))


def stale_cases() -> Iterator[Case]:
    s = STALE
    yield Case(s, Checkpoint("stale-label-restore", "jira.edit_labels", adds_label))
    yield Case(s, saved("stale-label-restored",
                        lambda ex: card(ex).get("label_phase") == "restored"))
    yield Case(s, Checkpoint("stale-trigger-ensure", "triggers.ensure_reserved_trigger",
                             any_call))
    yield Case(s, saved("stale-trigger-ensured",
                        lambda ex: card(ex).get("trigger_phase") == "ensured"))


CASES = [*no_ack_cases(), *read_ack_cases(), *stale_cases()]


# -- driving ------------------------------------------------------------------------------------


@pytest.fixture
def make(store):
    started: list[FaultHarness] = []

    def build(case: Case, when: str) -> FaultHarness:
        harness = FaultHarness(store, case.checkpoint, when).start()
        started.append(harness)
        harness.policy(rule(SEND, name="send", priority=10, on_success="continue"),
                       rule(URGENT, page(1), page(2), page(3), ESCALATE, name="urgent",
                            priority=20, when=SEVERITY),
                       source_in=(ASSIGNEE,), labels=(LABEL,))
        return harness

    yield build
    for harness in started:
        harness.stop()


def reassign_after_first_delete(h: FaultHarness) -> None:
    """Automation reassigns to Bob right after our label delete."""
    real, done = h.jira.edit_labels, []

    def edit(key, add=(), remove=()):
        real(key, add=add, remove=remove)
        if remove and not done:
            done.append(True)
            h.jira.put(replace(h.jira.issues[key], assignee=BOB))

    h.jira.edit_labels = edit


def run_workflow(h: FaultHarness, scenario: Scenario) -> int:
    """Post the trigger and drive the first execution to its end, one wake-up at a time,
    restarting wherever the process died; its ID."""
    h.jira.put(issue(assignee=ALICE, labels=(LABEL,), severity=scenario.severity,
                     priority=None, status=PENDING))
    if scenario.reassign_on_consume:
        reassign_after_first_delete(h)
    execution_id = h.post_trigger(source=ASSIGNEE).execution_ids[0]
    for _ in range(MAX_STEPS):
        h.recover(execution_id)
        ex = h.execution(execution_id)
        if ex.status.terminal:
            return execution_id
        if scenario.ack_in and f"td-{execution_id}-1-{scenario.ack_in}" in h.page_times:
            h.lark.readers[f"om_td-{execution_id}-0-0"] = ["ou_alice"]
        assert ex.wake_at is not None, f"stuck: {ex.status.value}, neither parked nor finished"
        h.advance((ex.wake_at - h.clock.now()).total_seconds())
    raise AssertionError("the workflow never finished")


def wake_ups(h: FaultHarness) -> list[Execution]:
    """Let the trigger poll (and a family defer) pick up a reserved-source wake-up."""
    for _ in range(4):
        if len(h.executions()) > 1:
            break
        h.advance(h.config.trigger_poll_interval.total_seconds())
    return h.executions()


def effects(h: FaultHarness, execution_id: int) -> dict[str, int]:
    """How often each side effect of the first execution reached a fake."""
    uuid = f"td-{execution_id}-0-0"
    alice = [text for _, _, text in h.jira.calls("add_internal_comment")
             if f"Target: Alice ({ALICE.email})" in text]
    counts = {
        "card": sum(uuid == sent_uuid for _, _, sent_uuid in h.lark.sends),
        "card_comment": sum("Urgent: no" in text for text in alice),
        "urgent": sum(message == f"om_{uuid}" for message, _ in h.lark.urgents),
        "ack_comment": sum("acknowledged" in text for text in alice),
        "escalation_write": h.jira.calls("assign").count(("assign", "TCID-1", BOB.account_id)),
        "grand_leader_write": sum(w[2] == CAROL.account_id
                                  for w in h.jira.calls("assign")),
    }
    for n in (1, 2, 3):
        counts[f"page{n}"] = sum(p[4] == f"td-{execution_id}-1-{n}" for p in h.oncall.pages)
        counts[f"page{n}_comment"] = sum(text.endswith(f"Urgent: yes\nAttempt: {n}")
                                         for text in alice)
    return counts


# -- the assertions -----------------------------------------------------------------------------


def assert_boundary_kept(before: Execution, after: Execution) -> None:
    """Nothing finished before the crash moved back or changed."""
    if before.status.terminal:
        assert (after.status, after.completed_at) == (before.status, before.completed_at)
    for rule_before, rule_after in zip(before.rule_executions, after.rule_executions,
                                       strict=True):
        for was, now in zip(rule_before.action_executions, rule_after.action_executions,
                            strict=True):
            where = f"rule {rule_before.sequence} action {was.index} ({was.type})"
            if was.status in (ActionStatus.SUCCEEDED, ActionStatus.SKIPPED):
                assert (now.status, now.result, now.context) == (
                    was.status, was.result, was.context), where
            for key, context in was.context.items():
                if isinstance(context, dict):
                    assert_context_kept(context, now.context[key], f"{where} {key}")


def assert_context_kept(was: dict, now: dict, where: str) -> None:
    for name in ONCE:
        phase, status = was.get(f"{name}_phase"), f"{name}_status"
        if phase == "finished":  # a confirmed result stays what it was
            assert now.get(status) == was.get(status), f"{where}: {status}"
        elif phase == "started":  # interrupted: unknown, never redone
            assert (now.get(f"{name}_phase"), now.get(status)) == ("finished", "unknown"), \
                f"{where}: {name} started before the crash"
    for key in ("deadline", "message_id", "target_lark_id", "card_uuid", "snapshot"):
        if key in was:
            assert now.get(key) == was[key], f"{where}: {key} changed"
    if was.get("outcome"):
        assert now.get("outcome") == was["outcome"], f"{where}: outcome changed"
    if was.get("label_phase") in LABEL_ORDER and now.get("label_phase") in LABEL_ORDER:
        assert LABEL_ORDER.index(now["label_phase"]) >= LABEL_ORDER.index(was["label_phase"]), \
            f"{where}: label phase went back"


def assert_deadlines(h: FaultHarness, ex: Execution) -> None:
    """Each deadline is its page's time plus the timeout, and a timed-out wait ended at it
    (late by the downtime at most): never a fresh full timeout after a restart."""
    for attempt in (1, 2, 3):
        context = paging(attempt)(ex)
        if "deadline" not in context:
            continue
        deadline = parse_rfc3339(context["deadline"])
        paged_at = h.page_times.get(f"td-{ex.id}-1-{attempt}")
        if paged_at is not None:
            assert deadline == paged_at + timedelta(seconds=TIMEOUT), f"attempt {attempt}"
        if context.get("outcome") == "timeout":
            finished = ex.rule_executions[1].action_executions[attempt].finished_at
            assert deadline <= finished <= deadline + timedelta(seconds=DOWNTIME), \
                f"attempt {attempt} waited from {deadline} until {finished}"


def assert_scenario_end(h: FaultHarness, scenario: Scenario, ex: Execution) -> None:
    actions = ex.rule_executions[1].action_executions
    if scenario is NO_ACK:
        assert [paging(n)(ex).get("outcome") for n in (1, 2, 3)] == ["timeout"] * 3
        assert escalation(ex).get("outcome") == "escalated", escalation(ex)
        slot = h.store.contexts.get("TCID-1").assignment_notification_state["assignee"]
        assert slot["auto_escalated_to_account_id"] == BOB.account_id
        assert slot["escalation_intent"]["state"] == "applied"
        assert h.jira.issues["TCID-1"].assignee == BOB
    if scenario is READ_ACK:
        assert (paging(2)(ex).get("outcome"), paging(2)(ex).get("reason")) == ("ack", "read")
        assert [a.status for a in actions[3:]] == [ActionStatus.SKIPPED] * 2
    if scenario is STALE:
        assert card(ex).get("outcome") == "stale"
        assert card(ex).get("trigger_phase") == "ensured"
    if scenario.wakes_bob:  # the same-role wake-up ran Bob's own workflow, exactly one
        executions = wake_ups(h)
        assert len(executions) == 2, "the same-role wake-up was lost"
        assert card(executions[1])["snapshot"]["target"]["account_id"] == BOB.account_id
        assert sum(open_id == "ou_bob" for open_id, _, _ in h.lark.sends) == 1


@pytest.mark.parametrize("case,when", [
    pytest.param(case, when, id=f"{case.checkpoint.name}-{when}")
    for case in CASES for when in (BEFORE, AFTER)])
def test_a_crash_at_the_checkpoint_repeats_nothing_and_keeps_deadlines(make, case, when):
    h = make(case, when)

    execution_id = run_workflow(h, case.scenario)

    assert h.injector.fired, f"the workflow never reached {case.checkpoint.name}"
    ex = h.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED, (ex.failure_code, ex.failure_reason)
    expected = {name: 0 if name in case.lost(when) else count
                for name, count in case.scenario.effects.items()}
    assert effects(h, execution_id) == expected
    if case.unknown(when):
        assert STATUS_OF[case.effect](ex) == "unknown"
    assert_boundary_kept(h.persisted, ex)
    assert_deadlines(h, ex)
    assert_scenario_end(h, case.scenario, ex)
