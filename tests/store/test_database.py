"""Database URLs, connections per unit of work and UTC times (SPEC §9, §13)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import peewee
import pytest

from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.store import Store, is_postgres, open_database, unit_of_work, write_lock
from ticket_dispatcher.store.models import EngineerRow

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root:hunter2@db/app",
        "hunter2",
        "sqlite://",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite://host/path.db",
        "postgresql://user:hunter2@db/app/extra",
        "sqlite:///no/such/directory/x.db",
        "postgresql://user:hunter2@db:notaport/app",
        "postgresql://user:hunter2@db:5432/",
    ],
)
def test_bad_urls_name_database_url_and_never_the_password(url):
    with pytest.raises(ConfigError) as raised:
        open_database(url)

    assert raised.value.message.startswith("database_url:")
    assert "hunter2" not in raised.value.message


def test_urls_pick_the_engine_without_connecting(tmp_path):
    sqlite = open_database(f"sqlite:///{tmp_path / 'x.db'}")
    postgres = open_database("postgresql://u:p%40ss@127.0.0.1:1/app?sslmode=disable")

    assert not is_postgres(sqlite) and sqlite.is_closed()
    assert is_postgres(postgres)
    assert postgres.connect_params["password"] == "p@ss"
    assert postgres.connect_params["sslmode"] == "disable"
    assert postgres.connect_params["port"] == 1


def test_ping_is_false_when_the_database_is_unreachable():
    store = Store.open("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")

    assert store.ping() is False


def test_sqlite_connections_carry_the_pragmas(sqlite_store):
    with unit_of_work(sqlite_store.db) as db:
        pragmas = {name: db.execute_sql(f"PRAGMA {name}").fetchone()[0]
                   for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")}

    assert pragmas == {"journal_mode": "wal", "busy_timeout": 5000, "foreign_keys": 1,
                       "synchronous": 1}


def test_a_unit_of_work_closes_the_connection_it_opened(store):
    assert store.db.is_closed()
    with unit_of_work(store.db):
        with unit_of_work(store.db):
            store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)
        assert not store.db.is_closed()  # the outer unit owns it
    assert store.db.is_closed()


def test_queries_outside_a_unit_of_work_fail_instead_of_leaking_a_connection(store):
    with pytest.raises(peewee.InterfaceError):
        EngineerRow.select().count()


def test_each_thread_uses_its_own_connection(store):
    seen = []

    def work():
        with unit_of_work(store.db) as db:
            seen.append(id(db.connection()))

    with unit_of_work(store.db) as db:
        mine = id(db.connection())
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()

    assert len(seen) == 1 and seen[0] != mine


def test_write_lock_rolls_back_everything_on_error(store):
    with pytest.raises(RuntimeError), write_lock(store.db):
        store.engineers.put("a@x.com", dispatch_enabled=True, now=T0)
        store.contexts.ensure_default("TCID-1", T0)
        raise RuntimeError("boom")

    assert store.engineers.list() == ([], 0)
    assert store.db.is_closed()


def test_times_come_back_as_the_same_instant_in_utc(store):
    shanghai = datetime(2026, 11, 30, 9, 0, 0, 123456, tzinfo=timezone(timedelta(hours=8)))

    store.engineers.put("a@x.com", dispatch_enabled=True, now=shanghai)

    engineer = store.engineers.get("a@x.com")
    assert engineer.created_at == shanghai
    assert engineer.created_at.tzinfo is UTC and engineer.created_at.microsecond == 123456


def test_naive_times_are_refused_by_the_column(store):
    with unit_of_work(store.db), pytest.raises(ValueError, match="naive"):
        EngineerRow.insert(email="a@x.com", dispatch_enabled=True,
                           created_at=datetime(2026, 1, 1), updated_at=T0).execute()
