"""Hot statements (``Prepared``) run on PostgreSQL as prepared statements of their connection:
parsed and planned once per connection, answering as the plain text would, and prepared again
when the server can no longer use the plan."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg2
import pytest

from tests.conftest import _migrated
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.store import Store, unit_of_work, write_lock
from ticket_dispatcher.store.database import Prepared, _real

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(postgres_url) -> Iterator[Store]:
    store = _migrated(postgres_url)
    yield store
    store.close()


def sent(db, statement, params) -> tuple[list[tuple], str]:
    """What ``statement`` answers, and the query that went to the server for it."""
    queries: list[str] = []
    db.query_hooks.append(lambda event: queries.append(str(event.sql)))
    try:
        rows = db.execute_sql(statement, params).fetchall()
    finally:
        db.query_hooks.clear()
    return rows, queries[-1]


def prepared_here(db) -> list[str]:
    """The names of the statements this connection holds prepared."""
    return [name for (name,) in db.execute_sql("SELECT name FROM pg_prepared_statements")]


def test_a_statement_is_prepared_once_per_connection_and_answers_as_its_plain_text(store):
    statement = Prepared("SELECT %s::int + 1, %s || '%%', %s::timestamp IS NULL")
    with unit_of_work(store.db) as db:
        first, prepare = sent(db, statement, (1, "a", None))
        second, execute = sent(db, statement, (2, "b", None))
        plain, _ = sent(db, str(statement), (2, "b", None))
        held = prepared_here(db)

    assert first == [(2, "a%", True)]
    assert second == plain == [(3, "b%", True)]
    assert "PREPARE td_" in prepare and execute.startswith("EXECUTE td_")
    assert len(held) == 1


def test_hot_statements_of_a_dispatch_are_prepared_and_run_again_from_their_plan(store):
    # The same repository call twice: the second sends only EXECUTE, with the same answer.
    with unit_of_work(store.db) as db:
        before = len(prepared_here(db))
        found = [store.contexts.find("TCID-1"), store.contexts.find("TCID-1")]
        active = [store.policies.active_and_shadows(), store.policies.active_and_shadows()]
        held = prepared_here(db)

    assert found == [None, None] and active[0] == active[1] == ([], {})
    assert len(held) == before + 2


def test_a_table_that_gained_a_column_is_read_with_it(store):
    # Another replica's migration changes what ``SELECT *`` answers: the plan is made again
    # and, outside a transaction, the statement run again; inside one, the transaction is
    # lost and its caller is told to do it again.
    statement = Prepared("SELECT * FROM dispatch_contexts WHERE issue_key = %s")
    with unit_of_work(store.db) as db:
        db.execute_sql(statement, ("TCID-1",)).fetchall()
    add_column(store, "dispatch_contexts", "added_later")

    with unit_of_work(store.db) as db:
        cursor = db.execute_sql(statement, ("TCID-1",))
        columns = [column[0] for column in cursor.description]
    assert "added_later" in columns

    add_column(store, "dispatch_contexts", "added_again")
    with pytest.raises(StoreUnavailable) as refused:
        with write_lock(store.db) as db:
            db.execute_sql(statement, ("TCID-1",))
    assert refused.value.kind == "serialization"
    with write_lock(store.db) as db:
        columns = [column[0] for column in db.execute_sql(statement, ("TCID-1",)).description]
    assert "added_again" in columns


def test_a_statement_that_failed_on_its_first_run_is_prepared_anew(store):
    # Its statement may be left on the server: the next name never clashes with it.
    statement = Prepared("SELECT 10 / %s")
    with unit_of_work(store.db) as db:
        with pytest.raises(Exception, match="division by zero"):
            db.execute_sql(statement, (0,))
    with unit_of_work(store.db) as db:
        assert db.execute_sql(statement, (5,)).fetchall() == [(2,)]


def test_a_connection_forgets_its_statements_past_its_bound(store, monkeypatch):
    pool = _real(store.db)
    monkeypatch.setattr(pool, "PREPARED_PER_CONNECTION", 3)
    with unit_of_work(store.db) as db:
        answers = [db.execute_sql(Prepared(f"SELECT %s::int + {n}"), (1,)).fetchall()
                   for n in range(7)]
        held = prepared_here(db)
        again = db.execute_sql(Prepared("SELECT %s::int + 6"), (2,)).fetchall()

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
    options = dict(_real(store.db).connect_params)
    with psycopg2.connect(database=_real(store.db).database, **options) as connection:
        connection.cursor().execute(f"ALTER TABLE {table} ADD COLUMN {column} integer")
