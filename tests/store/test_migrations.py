"""Migrations: versioned, idempotent, safe on an older database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ticket_dispatcher.store import Store, unit_of_work
from ticket_dispatcher.store.migrations import MIGRATIONS, current_version, latest_version, migrate
from ticket_dispatcher.store.models import ContextRow

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
TABLES = {
    "dispatch_policies", "dispatch_rules", "dispatch_triggers", "dispatch_executions",
    "dispatch_rule_executions", "dispatch_contexts", "engineers", "schema_migrations",
}


@pytest.fixture
def empty_store(db_url):
    store = Store.for_url(db_url)
    yield store
    store.close()


def test_versions_are_consecutive_from_one():
    assert [version for version, _, _ in MIGRATIONS] == list(range(1, latest_version() + 1))


def test_migrate_applies_everything_once_then_nothing(empty_store):
    assert current_version(empty_store.db) == 0

    first = empty_store.migrate()
    second = empty_store.migrate()

    assert first == [version for version, _, _ in MIGRATIONS]
    assert second == []
    assert current_version(empty_store.db) == latest_version()
    with unit_of_work(empty_store.db):
        assert TABLES <= set(empty_store.db.get_tables())


def test_older_database_gets_only_the_missing_migrations_and_keeps_its_rows(empty_store):
    assert migrate(empty_store.db, upto=1) == [1]
    with unit_of_work(empty_store.db):
        # A context written before migration 2 knew the notification state column.
        ContextRow.insert(issue_key="TCID-1", assignee="a@x.com", created_at=T0,
                          updated_at=T0).execute()

    applied = empty_store.migrate()

    context = empty_store.contexts.get("TCID-1")
    assert applied == list(range(2, latest_version() + 1))
    assert context.assignee == "a@x.com"
    assert context.assignment_notification_state == {}  # historical NULL reads empty
    assert not context.holds_notification_state
    empty_store.contexts.delete("TCID-1")


def test_rerunning_a_migration_whose_record_was_lost_is_harmless(store):
    store.contexts.ensure_default("TCID-1", T0)
    with unit_of_work(store.db):
        store.db.execute_sql("DELETE FROM schema_migrations")

    applied = store.migrate()

    assert applied == [version for version, _, _ in MIGRATIONS]
    assert store.contexts.get("TCID-1").issue_key == "TCID-1"
    assert store.migrate() == []


def test_ping_answers_true_on_a_reachable_database(store):
    assert store.ping() is True
