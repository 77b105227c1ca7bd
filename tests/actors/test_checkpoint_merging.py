"""Checkpoints that guard nothing are written together with the next one that does, on the
real runtime and both databases: fewer transactions per dispatch, and still every change is
saved before anything leaves the process."""

from __future__ import annotations

from tests.actors.test_assign_runtime import ENGINEERS, staff
from tests.harness import assign, rule
from ticket_dispatcher.domain.execution import ExecutionStatus


def recorded(h) -> list[tuple]:
    """Every execution save and every Jira write, in the order they happened."""
    log: list[tuple] = []
    save = h.store.executions.save

    def saving(execution, rules, **fencing):
        save(execution, rules, **fencing)
        actions = [a for r in execution.rule_executions for a in r.action_executions]
        log.append(("save", execution.status.value, [a.status.value for a in actions],
                    [a.planned_at is not None for a in actions]))

    h.store.executions.save = saving
    assign_call = h.jira.assign_and_label  # the assignee with the auto-assign label

    def assigning(key, account_id, remove_labels=(), *, l2=False):
        log.append(("jira.assign", key))
        return assign_call(key, account_id, remove_labels, l2=l2)

    h.jira.assign_and_label = assigning
    return log


def test_an_assign_dispatch_saves_its_plan_before_the_write_in_two_checkpoints(make_harness):
    h = make_harness()
    staff(h)
    h.policy(rule(assign(*ENGINEERS)))
    log = recorded(h)

    execution = h.execution(h.post_trigger().execution_ids[0])

    assert execution.status is ExecutionStatus.SUCCEEDED
    saves = [entry for entry in log if entry[0] == "save"]
    # started + rule evaluated + action started + the plan (the round-robin turn is taken
    # before it, without writing them first), the end: seven writes when each step wrote its
    # own
    assert len(saves) == 2, log
    write = log.index(("jira.assign", "TCID-1"))
    before = [entry for entry in log[:write] if entry[0] == "save"]
    assert before[-1][1:] == ("executing", ["executing"], [True])  # planned, then written
    assert log[-1][1] == "succeeded"
