"""``POST /dispatch/executions/{id}/replay``: an operator posts a failed execution's trigger
again on the live issue, for that execution's policy; 202 with the new trigger's id. An
execution that did not fail is a 409, an unknown one a 404, a viewer's request a 403."""

from __future__ import annotations

from tests.harness import rule
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus


def failed_execution(harness) -> tuple[int, int]:
    """(policy id, execution id) of an execution whose action failed."""
    policy = harness.policy(rule("test_plan_fails"))
    trigger = harness.post_trigger("TCID-1")
    [execution_id] = trigger.execution_ids
    assert harness.execution(execution_id).status is ExecutionStatus.FAILED
    return policy.id, execution_id


def test_a_failed_execution_is_replayed_as_a_new_trigger_for_its_policy(live_api, harness):
    policy_id, execution_id = failed_execution(harness)

    answer = live_api.post(f"/dispatch/executions/{execution_id}/replay")
    harness.wait_idle()

    assert answer.status_code == 202, answer.json
    replay = harness.trigger(answer.json["trigger_id"])
    assert answer.headers["Location"].endswith(f"/dispatch/triggers/{replay.id}")
    assert set(answer.json) == {"trigger_id"}
    assert (replay.source, replay.issue_key, replay.policy_id) == (
        "jira_automation", "TCID-1", policy_id)
    assert replay.status is TriggerStatus.COMPLETED and replay.execution_failed
    [again] = replay.execution_ids
    assert again != execution_id
    shown = live_api.get(f"/dispatch/triggers/{replay.id}").json
    assert shown["execution_failed"] is True


def test_only_a_failed_execution_is_replayed(live_api, harness):
    harness.policy(rule("test_noop"))
    [succeeded] = harness.post_trigger("TCID-1").execution_ids

    answer = live_api.post(f"/dispatch/executions/{succeeded}/replay")

    assert answer.status_code == 409, answer.json
    assert answer.json["description"] == (f"execution {succeeded} is succeeded; only a failed "
                                          "execution is replayed")
    assert live_api.post("/dispatch/executions/999/replay").status_code == 404


def test_replay_is_for_operators(live_api, harness):
    _, execution_id = failed_execution(harness)

    for role, status in (("viewer", 403), ("automation", 403), (None, 401)):
        answer = live_api.as_role(role).post(f"/dispatch/executions/{execution_id}/replay")
        assert answer.status_code == status, (role, answer.json)
    assert harness.store.triggers.page()[0][0].execution_ids == [execution_id]
