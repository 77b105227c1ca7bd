"""Leases through the whole runtime, on SQLite and PostgreSQL: work that nobody holds is found
by the sweeper while the process runs, and a holder whose lease was taken over never reaches a
peer again (fencing)."""

from __future__ import annotations

import threading
from datetime import timedelta

from tests.fakes import FakeJira, RecordingAction, issue
from tests.harness import assign, rule
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus
from ticket_dispatcher.domain.fanout import new_execution
from ticket_dispatcher.store.replicas import ReplicaBeat

ENGINEERS = ("a@example.com", "b@example.com")
GONE = "gone-host:1234:abcdef"  # a process that died holding leases


class StallingJira(FakeJira):
    """The first user search stalls until the test lets it go, like a thread stuck in a call
    (or a process paused by SIGSTOP)."""

    def __init__(self, *issues):
        super().__init__(*issues)
        self.stalled = threading.Event()
        self.release = threading.Event()
        self._first = True

    def find_user_by_email(self, email):
        if self._first:
            self._first = False
            self.stalled.set()
            assert self.release.wait(20), "the test never released the stalled call"
        return super().find_user_by_email(email)


def beyond_lease(h) -> float:
    return (h.config.leases.duration + timedelta(seconds=1)).total_seconds()


def behind_the_runtimes_back(h, noop: RecordingAction, key: str) -> int:
    """A ``created`` execution the running pool was never told about."""
    policy = h.policy(rule("test_noop"))
    h.jira.put(issue(key=key))
    trigger = h.store.triggers.create("jira_automation", key, policy_id=None, dryrun=None,
                                      now=h.clock.now())
    execution = new_execution(trigger, policy, issue(key=key), None, ActionRegistry([noop]),
                              h.clock.now())
    [execution_id] = h.store.executions.create(trigger.id, [execution], issue_key=key,
                                               ensure_context=True, now=h.clock.now())
    return execution_id


def test_a_created_execution_no_actor_holds_is_resumed_by_the_sweeper(make_harness):
    noop = RecordingAction()
    h = make_harness(noop)
    execution_id = behind_the_runtimes_back(h, noop, "TCID-7")

    h.advance(h.config.leases.heartbeat.total_seconds())

    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    status = h.runtime.status()
    assert status["pool"]["sweeper"]["reclaimed_total"] == 1
    assert status["pool"]["sweeper"]["recent"][0]["execution_id"] == execution_id


def test_an_execution_whose_holder_died_is_resumed_when_its_lease_expires(make_harness):
    noop = RecordingAction()
    h = make_harness(noop)
    execution_id = behind_the_runtimes_back(h, noop, "TCID-8")
    now = h.clock.now()
    assert h.store.executions.claim(execution_id, owner=GONE, now=now,
                                    expires_at=now + h.config.leases.duration)

    h.advance(h.config.leases.heartbeat.total_seconds())
    assert h.execution(execution_id).status is ExecutionStatus.CREATED  # its lease still runs
    h.advance(beyond_lease(h))

    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert [call for call in noop.calls if call[0] == "execute"] == [("execute", execution_id)]


def test_a_trigger_whose_holder_died_is_processed_when_its_lease_expires(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    trigger = h.store.triggers.create("jira_automation", "TCID-1", policy_id=None, dryrun=None,
                                      now=h.clock.now())
    now = h.clock.now()
    assert h.store.triggers.claim(trigger.id, now, owner=GONE,
                                  expires_at=now + h.config.leases.duration)

    h.advance(h.config.trigger_poll_interval.total_seconds())
    assert h.trigger(trigger.id).status is TriggerStatus.PROCESSING  # its lease still runs
    h.advance(beyond_lease(h))

    assert h.trigger(trigger.id).status is TriggerStatus.COMPLETED
    assert h.runtime.status()["trigger_actors"]["reclaimed_total"] == 1


def test_a_running_execution_keeps_its_lease_while_its_actor_makes_progress(make_harness):
    h = make_harness(RecordingAction("test_wait", park_for=120), RecordingAction())
    h.policy(rule("test_wait", "test_noop"))
    execution_id = h.post_trigger().execution_ids[0]

    for _ in range(30):  # parked: no lease held, and no sweep resumes it before its time
        h.advance(h.config.leases.heartbeat.total_seconds())
        if h.execution(execution_id).status is ExecutionStatus.SUCCEEDED:
            break

    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert h.runtime.status()["pool"]["sweeper"]["reclaimed_total"] == 0


def stalled_assignment(make_harness):
    """An assign execution whose first holder is stuck in Jira's user search: the harness,
    its StallingJira and the trigger."""
    jira = StallingJira(issue())
    h = make_harness(jira=jira)
    for email in ENGINEERS:
        h.store.engineers.put(email, dispatch_enabled=True, now=h.clock.now())
        jira.add_user(email)
    h.policy(rule(assign(*ENGINEERS)))
    trigger = h.post_trigger(settle=False)
    assert jira.stalled.wait(10), "the first holder never reached Jira"
    return h, jira, trigger


def test_a_hung_holder_is_replaced_and_only_one_of_the_two_reaches_jira(make_harness, caplog):
    h, jira, trigger = stalled_assignment(make_harness)
    # Its thread is stuck; time passes beyond its lease. The heartbeat does not renew a
    # holder that shows no progress, and the sweeper hands the execution to a new actor.
    h.clock.advance(beyond_lease(h))
    h.wait_until(lambda: bool(jira.assignments()))
    jira.release.set()  # the first holder wakes up and goes on from where it stalled
    h.wait_idle()

    [execution_id] = h.trigger(trigger.id).execution_ids
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert len(jira.assignments()) == 1  # the woken holder never wrote to Jira
    assert any(r.getMessage().startswith("execution lease lost") for r in caplog.records)
    assert h.runtime.status()["pool"]["sweeper"]["recent"][0]["reason"] == \
        "hung actor replaced"


def test_the_admin_view_shows_each_running_lease(make_harness):
    h, jira, _ = stalled_assignment(make_harness)
    try:
        status = h.runtime.status()
    finally:
        jira.release.set()
        h.wait_idle()

    [running] = status["executions"]
    assert running["lease"]["owner"] == status["leases"]["owner"] == h.runtime.deps.owner
    assert running["lease"]["epoch"] == 1
    assert running["lease"]["expires_at"] is not None
    assert status["leases"]["duration_seconds"] == 30


def test_the_admin_view_lists_this_replica_and_the_others_by_their_heartbeats(make_harness):
    h = make_harness(RecordingAction("test_wait", park_for=600))
    h.policy(rule("test_wait"))
    h.post_trigger()
    other = ReplicaBeat(owner=GONE, host="gone-host", pid=1234, version="0.0.9",
                        started_at=h.clock.now(), slots=10, busy=3, parked=0)
    h.store.replicas.beat(other, h.clock.now())

    h.advance(beyond_lease(h))  # this replica keeps beating; the other one is silent
    replicas = {r["owner"]: r for r in h.runtime.status()["replicas"]}

    me = replicas[h.runtime.deps.owner]
    assert (me["self"], me["alive"], me["parked"], me["slots"]) == (True, True, 1, 10)
    assert (replicas[GONE]["self"], replicas[GONE]["alive"]) == (False, False)
