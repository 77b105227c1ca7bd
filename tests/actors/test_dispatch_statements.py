"""The SQL statements one ordinary dispatch sends, counted on both engines: a budget that a
change cannot raise silently (a change that saves one lowers it here, on purpose).

One trigger from its insert to its execution's end, in steady state: the engineers' Jira
account IDs already known, the active policies already read once (the second dispatch of
each engineer is the one counted). Transactions' BEGIN and COMMIT are not statements here
(tests/conftest.py's ``QueryCounter``)."""

from __future__ import annotations

import pytest

from tests.conftest import QueryCounter
from tests.fakes import issue
from tests.harness import Harness, assign, rule
from ticket_dispatcher.store.database import is_postgres

ENGINEERS = ("a@example.com", "b@example.com")
# The trigger inserted and claimed; the active versions, the issue's context, the lock keys;
# the execution, its rules, the context and the trigger's end written (PostgreSQL: one
# statement); the shadows; the execution claimed with its rules (PostgreSQL: one statement);
# the round robin's turn (read and mark); two checkpoints of the execution and its rules
# (PostgreSQL: one statement each), the plan and the end; the shadow decisions to settle.
BUDGET = {"sqlite": 19, "postgres": 13}


@pytest.fixture
def harness(store):
    harness = Harness(store).start()
    for email in ENGINEERS:
        harness.store.engineers.put(email, dispatch_enabled=True, now=harness.clock.now())
        harness.jira.add_user(email)
    harness.policy(rule(assign(*ENGINEERS)))
    yield harness
    harness.stop()


def test_one_ordinary_dispatch_sends_its_budget_of_statements(harness):
    for n in range(1, 4):
        harness.jira.put(issue(key=f"TCID-{n}"))
    harness.post_trigger(issue_key="TCID-1")
    harness.post_trigger(issue_key="TCID-2")  # each engineer's account is known now

    with QueryCounter(harness.store.db) as queries:
        harness.runtime.accept_trigger("jira_automation", "TCID-3")
        harness.wait_idle()

    assert harness.jira.issues["TCID-3"].assignee is not None
    engine = "postgres" if is_postgres(harness.store.db) else "sqlite"
    assert queries.count == BUDGET[engine], "\n".join(queries.statements)
