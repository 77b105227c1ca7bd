"""Hot statements (``Prepared``) run on PostgreSQL as prepared statements of their connection
(psycopg's): parsed and planned once per connection, answering as the plain text would, and
planned afresh when the server can no longer use the plan; no other statement is prepared."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import _migrated
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.store import Store, unit_of_work, write_lock
from ticket_dispatcher.store.database import Prepared, _real, execute

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(postgres_url) -> Iterator[Store]:
    store = _migrated(postgres_url)
    yield store
    store.close()


def prepared_here(db) -> list[str]:
    """The statements this connection holds prepared (as the server received them)."""
    return [statement for (statement,) in db.execute_sql(
        "SELECT statement FROM pg_prepared_statements ORDER BY prepare_time")]


def test_a_statement_is_prepared_once_per_connection_and_answers_as_its_plain_text(store):
    statement = Prepared("SELECT %s::int + 1, %s || '%%', %s::timestamp IS NULL")
    with unit_of_work(store.db) as db:
        first = db.execute_sql(statement, (1, "a", None)).fetchall()
        second = db.execute_sql(statement, (2, "b", None)).fetchall()
        plain = db.execute_sql(str(statement), (2, "b", None)).fetchall()
        held = prepared_here(db)

    assert first == [(2, "a%", True)]
    assert second == plain == [(3, "b%", True)]
    assert held == ["SELECT $1::int + 1, $2 || '%', $3::timestamp IS NULL"]  # the plain: not


def test_hot_statements_of_a_dispatch_are_prepared_and_run_again_from_their_plan(store):
    # The same repository call twice: prepared the first time, run from its plan the second,
    # with the same answer.
    with unit_of_work(store.db) as db:
        before = len(prepared_here(db))
        found = [store.contexts.find("TCID-1"), store.contexts.find("TCID-1")]
        active = [store.policies.active_and_shadows(), store.policies.active_and_shadows()]
        held = prepared_here(db)

    assert found == [None, None] and active[0] == active[1] == ([], {})
    assert len(held) == before + 2


def test_a_write_that_need_not_wait_for_the_disk_is_prepared_too(store):
    statement = Prepared("SELECT current_setting('synchronous_commit'), %s::int")
    with unit_of_work(store.db) as db:
        answers = [execute(db, statement, (n,), wait_for_disk=False).fetchall() for n in (1, 2)]
        held = prepared_here(db)

    assert answers == [[("off", 1)], [("off", 2)]]
    assert "SELECT current_setting('synchronous_commit'), $1::int" in held


def test_a_table_that_gained_a_column_is_read_with_it(store):
    # Another replica's migration changes what ``SELECT *`` answers: outside a transaction
    # the statement is planned again and run again; inside one, the transaction is lost and
    # its caller is told to do it again, which then succeeds.
    statement = Prepared("SELECT * FROM dispatch_contexts WHERE issue_key = %s")
    with unit_of_work(store.db) as db:
        db.execute_sql(statement, ("TCID-1",)).fetchall()
    add_column(store, "dispatch_contexts", "added_later")

    with unit_of_work(store.db) as db:
        cursor = db.execute_sql(statement, ("TCID-1",))
        columns = [column[0] for column in cursor.description]
    assert "added_later" in columns

    with unit_of_work(store.db) as db:  # a connection that prepared it before the change
        db.execute_sql(statement, ("TCID-1",)).fetchall()
        add_column(store, "dispatch_contexts", "added_again")
        with pytest.raises(StoreUnavailable) as refused:
            with write_lock(db):
                db.execute_sql(statement, ("TCID-1",))
        with write_lock(db):  # done again, on the same connection
            columns = [column[0] for column in db.execute_sql(statement, ("TCID-1",)).description]
    assert refused.value.kind == "serialization"
    assert "added_again" in columns
    with unit_of_work(store.db) as db:  # the stale connection was not pooled again
        columns = [column[0] for column in db.execute_sql(statement, ("TCID-1",)).description]
        assert "added_again" in columns and prepared_here(db) == [
            "SELECT * FROM dispatch_contexts WHERE issue_key = $1"]


def test_a_write_that_need_not_wait_for_the_disk_is_planned_again_too(store):
    statement = Prepared("SELECT * FROM dispatch_contexts WHERE issue_key = %s")
    with unit_of_work(store.db) as db:
        execute(db, statement, ("TCID-1",), wait_for_disk=False).fetchall()
        add_column(store, "dispatch_contexts", "added_later")
        cursor = execute(db, statement, ("TCID-1",), wait_for_disk=False)
        columns = [column[0] for column in cursor.description]
        setting = db.execute_sql("SHOW synchronous_commit").fetchone()[0]

    assert "added_later" in columns and setting == "on"


def test_a_statement_that_failed_on_its_first_run_is_prepared_anew(store):
    statement = Prepared("SELECT 10 / %s")
    with unit_of_work(store.db) as db:
        with pytest.raises(Exception, match="division by zero"):
            db.execute_sql(statement, (0,))
    with unit_of_work(store.db) as db:
        assert db.execute_sql(statement, (5,)).fetchall() == [(2,)]


def test_a_connection_keeps_at_most_its_bound_of_statements(store):
    with unit_of_work(store.db) as db:
        db.connection().prepared_max = 3  # psycopg's bound (100 by default)
        answers = [db.execute_sql(Prepared(f"SELECT %s::int + {n}"), (1,)).fetchall()
                   for n in range(7)]
        again = db.execute_sql(Prepared("SELECT %s::int + 6"), (2,)).fetchall()
        held = prepared_here(db)

    assert answers == [[(1 + n,)] for n in range(7)] and again == [(8,)]
    assert len(held) <= 3


def test_a_connection_the_pool_closes_takes_its_statements_with_it(store):
    statement = Prepared("SELECT %s::int")
    with unit_of_work(store.db) as db:
        db.execute_sql(statement, (1,))
        db.connection().close()  # as a server that hung up would leave it
    # The pool discards the dead connection; a new one prepares the statement again.
    with unit_of_work(store.db) as db:
        assert db.execute_sql(statement, (2,)).fetchall() == [(2,)]


def add_column(store: Store, table: str, column: str) -> None:
    """What a newer replica's migration does, on a connection of its own."""
    with _real(store.db).open_connection() as connection:
        connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} integer")


def test_the_driver_is_psycopg_3(store):
    with unit_of_work(store.db) as db:
        assert isinstance(db.connection(), psycopg.Connection)
