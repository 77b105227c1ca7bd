"""The SQL statements one ordinary dispatch sends, counted on both engines: a budget that a
change cannot raise silently (a change that saves one lowers it here, on purpose).

One trigger from its insert to its execution's end, in steady state: the engineers' Jira
account IDs already known, the active policies already read once (the second dispatch of
each engineer is the one counted). Transactions' BEGIN and COMMIT are not statements here
(tests/conftest.py's ``QueryCounter``)."""

from __future__ import annotations

import pytest

from tests.conftest import QueryCounter
from tests.fakes import RecordingAction, issue
from tests.harness import Harness, assign, rule
from ticket_dispatcher.domain.execution import ExecutionStatus, Trigger, TriggerStatus
from ticket_dispatcher.store.connect import is_postgres

ENGINEERS = ("a@example.com", "b@example.com")
# The trigger inserted and claimed; the active versions with their families' shadows; the
# maintenance windows in effect (one may hold the trigger); the issue's context; the
# execution, its rules, the context and the trigger's end written (PostgreSQL: one
# statement), with no read of the lock keys before it (the pool knows that none is held); the
# execution claimed with its rules (PostgreSQL: one statement); who may take the issue (the
# dispatch-enabled candidates with their time off, one read); the round robin's turn (read
# and mark; PostgreSQL: one statement); two checkpoints of the execution and its rules
# (PostgreSQL: one statement each), the plan and the end, the end writing the assignment's
# burden row too (PostgreSQL: in the same statement). No shadow decision is looked for at the
# end: the trigger found no shadow.
BUDGET = {"sqlite": 19, "postgres": 11}


@pytest.fixture
def harness(store):
    harness = Harness(store).start()
    for email in ENGINEERS:
        harness.store.engineers.put(email, dispatch_enabled=True, now=harness.clock.now())
        harness.jira.add_user(email)
    harness.policy(rule(assign(*ENGINEERS)))
    yield harness
    harness.stop()


def steady_dispatch(harness) -> list[str]:
    """The statements of one dispatch in steady state: TCID-3's, after TCID-1 and TCID-2 made
    each engineer's account known and read the active policies once."""
    for n in range(1, 4):
        harness.jira.put(issue(key=f"TCID-{n}"))
    harness.post_trigger(issue_key="TCID-1")
    harness.post_trigger(issue_key="TCID-2")

    with QueryCounter(harness.store.db) as queries:
        harness.runtime.accept_trigger("jira_automation", "TCID-3")
        harness.wait_idle()
    assert harness.jira.issues["TCID-3"].assignee is not None
    return queries.statements


def test_one_ordinary_dispatch_sends_its_budget_of_statements(harness):
    statements = steady_dispatch(harness)

    engine = "postgres" if is_postgres(harness.store.db) else "sqlite"
    assert len(statements) == BUDGET[engine], "\n".join(statements)


def test_only_writes_made_again_after_a_crash_skip_the_wait_for_the_disk(harness, monkeypatch):
    # PostgreSQL: the claims, the creation and the round robin's turn are made again (or
    # were flushed by a later commit) when the server loses them; the trigger's insert, which
    # its 202 answers for, and every checkpoint wait for the disk.
    if not is_postgres(harness.store.db):
        pytest.skip("SQLite has no such setting")
    db = harness.store.db
    run, skipped = db.execute_sql, []

    def recording(sql, params=None, *, wait_for_disk=True):
        if not wait_for_disk:
            skipped.append(sql)
        return run(sql, params, wait_for_disk=wait_for_disk)

    monkeypatch.setattr(db, "execute_sql", recording)
    statements = steady_dispatch(harness)

    waiting = [" ".join(sql.split()[:3]) for sql in statements
               if sql.startswith(("INSERT", "UPDATE", "WITH moved")) and sql not in skipped]
    skipping = [" ".join(sql.split()[:2]) for sql in statements if sql in skipped]
    assert waiting == ["INSERT INTO dispatch_triggers", "WITH moved AS", "WITH moved AS"]
    assert skipping == [
        "UPDATE dispatch_triggers",  # the trigger's claim
        "WITH id0",  # the execution created, the trigger ended
        "WITH claimed",  # the execution's claim
        "WITH candidates",  # the round robin's turn
    ]


LOCK_KEYS_READ = "SELECT live_lock_key FROM"
EXECUTION_INSERT = "INSERT INTO dispatch_executions "


def test_the_lock_keys_are_read_only_while_one_of_the_issue_is_held(make_harness):
    # The pool knows the keys of the live executions, the recovered ones too, and reads the
    # held ones before it decides; a key whose execution ended is free without a read.
    h = make_harness(RecordingAction("test_wait", park_for=60))
    policy = h.policy(rule("test_wait"))
    first = h.post_trigger()

    def lock_keys_read() -> tuple[bool, Trigger]:
        """Whether the keys were read; and never an insert the key's index refused."""
        with QueryCounter(h.store.db) as queries:
            trigger = h.post_trigger()
        inserts = sum(EXECUTION_INSERT in sql for sql in queries.statements)
        assert inserts == len(trigger.execution_ids), queries.statements
        return any(LOCK_KEYS_READ in sql for sql in queries.statements), trigger

    read, busy = lock_keys_read()
    assert read and busy.status is TriggerStatus.COMPLETED and busy.execution_ids == []
    h.restart()  # the wait is recovered, its key with it
    read, busy = lock_keys_read()
    assert read and busy.status is TriggerStatus.COMPLETED and busy.execution_ids == []

    h.advance(60)
    assert h.execution(first.execution_ids[0]).status is ExecutionStatus.SUCCEEDED
    read, free = lock_keys_read()
    assert not read and len(free.execution_ids) == 1
    assert [e.policy_id for e in h.executions()] == [policy.id, policy.id]


def test_only_the_live_executions_without_a_shadow_are_noted_until_they_end(make_harness):
    # Their end looks for no shadow decision; an execution not created (its key held) is not
    # kept, nor one that ended, so the note never grows past the live executions.
    h = make_harness(RecordingAction("test_wait", park_for=60))
    policy = h.policy(rule("test_wait"))
    first = h.post_trigger()
    busy = h.post_trigger()

    assert busy.execution_ids == []
    assert h.runtime.deps.cluster.unshadowed.noted == {(first.id, policy.family_id)}
    h.advance(60)
    assert h.execution(first.execution_ids[0]).status is ExecutionStatus.SUCCEEDED
    assert h.runtime.deps.cluster.unshadowed.noted == set()
