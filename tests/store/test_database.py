"""Database URLs, pooled connections per unit of work and UTC times."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import peewee
import pytest

from ticket_dispatcher.config import Config, HttpConfig
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.store import (
    Store,
    connection_budget,
    database,
    models,
    open_database,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.connect import is_postgres
from ticket_dispatcher.store.database import bind, pool_size, read_rows
from ticket_dispatcher.store.engine import ServerLimit
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
    store = Store.for_url("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")

    assert store.ping() is False


def test_sqlite_connections_carry_the_pragmas(sqlite_store):
    with unit_of_work(sqlite_store.db) as db:
        pragmas = {name: db.execute_sql(f"PRAGMA {name}").fetchone()[0]
                   for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous",
                                "mmap_size")}

    assert pragmas == {"journal_mode": "wal", "busy_timeout": 5000, "foreign_keys": 1,
                       "synchronous": 1, "mmap_size": 256 * 1024 * 1024}


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

    assert store.engineers.page() == ([], 0)
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


# --- one pool per engine -----------------------------------------------------------------------


def _config(slots: int = 10, trigger_actors: int = 4, threads: int = 8) -> Config:
    return Config(execution_slots=slots, trigger_actors=trigger_actors,
                  http=HttpConfig(threads=threads))


class PragmaCounter:
    """Counts ``_set_pragmas``, which peewee calls once for each new physical SQLite
    connection (``SqliteDatabase._connect``), and remembers those connections."""

    def __init__(self, db: peewee.Database, monkeypatch):
        self.connections: list[object] = []
        original = db._set_pragmas

        def counting(conn):
            self.connections.append(conn)
            original(conn)

        monkeypatch.setattr(db, "_set_pragmas", counting)


@pytest.fixture
def sqlite_url(sqlite_store) -> str:
    """The URL of a migrated SQLite database nobody holds a connection to."""
    url = f"sqlite:///{sqlite_store.db.database}"
    sqlite_store.close()
    return url


def _unit(db: peewee.Database) -> object:
    """One unit of work with one query; the physical connection it used."""
    with unit_of_work(db):
        db.execute_sql("SELECT count(*) FROM engineers").fetchone()
        return db.connection()


def test_sqlite_units_of_work_on_one_thread_reuse_one_connection(sqlite_url, monkeypatch):
    db = open_database(sqlite_url)
    pragmas = PragmaCounter(db, monkeypatch)

    used = {id(_unit(db)) for _ in range(50)}

    assert len(used) == 1
    assert len(pragmas.connections) == 1  # the pragmas were set once, on the first connect
    assert db.is_closed()  # each unit returned the connection


def test_sqlite_reused_connection_keeps_its_pragmas(sqlite_url):
    db = open_database(sqlite_url)
    first = _unit(db)

    with unit_of_work(db):
        again = db.connection()
        pragmas = {name: db.execute_sql(f"PRAGMA {name}").fetchone()[0]
                   for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")}

    assert again is first
    assert pragmas == {"journal_mode": "wal", "busy_timeout": 5000, "foreign_keys": 1,
                       "synchronous": 1}


def test_sqlite_connection_returned_by_one_thread_serves_the_next(sqlite_url, monkeypatch):
    db = open_database(sqlite_url)
    pragmas = PragmaCounter(db, monkeypatch)
    used, errors = [], []

    def work(n: int):
        try:
            with write_lock(db):  # a write, on a connection another thread opened
                EngineerRow.insert(email=f"e{n}@x.com", dispatch_enabled=True,
                                   created_at=T0, updated_at=T0).execute()
            used.append(_unit(db))
        except Exception as exc:  # collected: an assert in a thread would go unseen
            errors.append(exc)

    bind(db)
    for n in range(5):  # short-lived threads, like execution actors
        thread = threading.Thread(target=work, args=(n,))
        thread.start()
        thread.join()

    assert errors == []
    assert len({id(conn) for conn in used}) == 1
    assert len(pragmas.connections) == 1
    with unit_of_work(db):
        assert EngineerRow.select().count() == 5


def test_sqlite_opens_only_as_many_connections_as_were_used_at_once(sqlite_url, monkeypatch):
    db = open_database(sqlite_url)
    pragmas = PragmaCounter(db, monkeypatch)
    together = 4
    barrier = threading.Barrier(together)
    errors = []

    def overlapping():
        try:
            with unit_of_work(db):
                db.execute_sql("SELECT 1").fetchone()
                barrier.wait(timeout=10)  # all four hold a connection at this point
            for _ in range(10):
                _unit(db)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=overlapping) for _ in range(together)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _ in range(10):
        _unit(db)

    assert errors == []
    assert len(pragmas.connections) == together


def test_pool_is_sized_from_the_configuration(db_url):
    config = _config(slots=40)

    sized = Store.for_url(db_url, max_connections=connection_budget(config))
    default = Store.for_url(db_url)

    assert pool_size(sized.db) == 8 + 4 + 40 + 6
    assert pool_size(default.db) == connection_budget(Config()) == 28


@pytest.mark.parametrize(
    ("config", "budget"),
    [
        (Config(), 8 + 4 + 10 + 2 + 4),
        (_config(slots=1, trigger_actors=1, threads=1), 9),
        (_config(slots=100, trigger_actors=32, threads=64), 202),
    ],
)
def test_connection_budget_is_threads_trigger_actors_slots_and_the_runtime(config, budget):
    assert connection_budget(config) == budget


def test_sqlite_accepts_any_configuration(sqlite_store):
    sqlite_store.check_capacity(_config(slots=100, trigger_actors=32, threads=64))

    assert sqlite_store.engine.server_limit(sqlite_store.db) is None


@pytest.mark.postgres
def test_postgres_limit_is_read_from_the_server(postgres_url):
    store = Store.for_url(postgres_url)
    with unit_of_work(store.db) as db:
        shown = [int(db.execute_sql(f"SHOW {name}").fetchone()[0])
                 for name in ("max_connections", "superuser_reserved_connections")]
        autovacuum = db.execute_sql("SHOW autovacuum").fetchone()[0]

    limit = store.engine.server_limit(store.db)
    store.close()

    assert limit.autovacuum == (autovacuum == "on")
    assert limit.max_connections == shown[0]
    assert limit.reserved >= shown[1]  # plus reserved_connections on PostgreSQL 16+
    assert limit.allowed == limit.max_connections - limit.reserved


@pytest.mark.postgres
def test_postgres_accepts_the_default_configuration(postgres_url):
    store = Store.for_url(postgres_url)

    store.check_capacity(Config())  # raises if the server cannot serve 28 connections
    store.close()


@pytest.mark.postgres
def test_the_start_warns_of_a_server_without_autovacuum(postgres_url, caplog):
    store = Store.for_url(postgres_url)
    with unit_of_work(store.db) as db:
        running = db.execute_sql("SHOW autovacuum").fetchone()[0] == "on"

    with caplog.at_level("WARNING", logger="ticket_dispatcher.store.database"):
        store.check_capacity(Config())
    store.close()

    warned = [r.getMessage() for r in caplog.records if "autovacuum off" in r.getMessage()]
    assert len(warned) == (0 if running else 1)


@pytest.mark.postgres
def test_postgres_sessions_neither_compile_nor_start_workers(postgres_url):
    store = Store.for_url(postgres_url)
    with unit_of_work(store.db) as db:
        settings = {name: db.execute_sql(f"SHOW {name}").fetchone()[0]
                    for name in ("jit", "max_parallel_workers_per_gather", "search_path")}
    store.close()

    assert settings["jit"] == "off"
    assert settings["max_parallel_workers_per_gather"] == "0"
    assert settings["search_path"].startswith("td_")  # the URL's own options still apply


@pytest.mark.postgres
def test_a_write_without_flush_wait_changes_only_its_own_commit(postgres_url):
    store = Store.for_url(postgres_url)
    hot = database.Prepared("SELECT current_setting('synchronous_commit'), %s::int")
    with unit_of_work(store.db) as db:
        during = database.execute(db, "SELECT current_setting('synchronous_commit')",
                                  wait_for_disk=False).fetchone()[0]
        after = db.execute_sql("SHOW synchronous_commit").fetchone()[0]
        # a hot statement, the first time (prepared) and the next (run from its plan)
        hot_runs = [database.execute(db, hot, (n,), wait_for_disk=False).fetchone()
                    for n in (1, 2)]
        after_hot = db.execute_sql("SHOW synchronous_commit").fetchone()[0]
    store.close()

    assert (during, after) == ("off", "on")
    assert hot_runs == [("off", 1), ("off", 2)] and after_hot == "on"


@pytest.mark.postgres
def test_postgres_refuses_a_configuration_above_the_server_limit(postgres_url, monkeypatch):
    store = Store.for_url(postgres_url)
    monkeypatch.setattr(store.engine, "server_limit",
                        lambda db: ServerLimit(max_connections=50, reserved=3))

    store.check_capacity(_config(slots=28))  # 8 + 4 + 28 + 7 = 47: exactly what is allowed
    with pytest.raises(ConfigError) as refused:
        store.check_capacity(_config(slots=40))
    store.close()

    assert refused.value.message.startswith(
        "database: the configuration needs up to 59 connections (http.threads 8 + "
        "trigger_actors 4 + execution_slots 40 + 7 for the runtime), but the PostgreSQL server "
        "allows 47 (max_connections 50 - 3 reserved)"
    )


def test_a_burst_of_the_whole_budget_never_exceeds_the_pool(db_url):
    """Every thread the budget counts holds a connection at the same moment; 58 is also more
    than the pool of 32 this replaced. On PostgreSQL each is its own server backend."""
    config = _config(slots=40)
    budget = connection_budget(config)
    store = Store.for_url(db_url, max_connections=budget)
    store.migrate()
    store.check_capacity(config)
    barrier = threading.Barrier(budget)
    held, errors = [], []

    def burst(n: int):
        try:
            with write_lock(store.db):
                store.engineers.put(f"e{n}@x.com", dispatch_enabled=True, now=T0)
            with unit_of_work(store.db):
                held.append(id(store.db.connection()))
                barrier.wait(timeout=30)  # all hold one here: none is left to spare
                store.engineers.get(f"e{n}@x.com")
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(budget)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = store.engineers.page(limit=1)[1]
    store.close()

    assert errors == []
    assert len(set(held)) == budget and total == budget


def test_read_rows_gives_each_column_as_a_model_instance_would(store):
    """The written-out reads skip peewee's model instances: each column must still come back
    converted by its field (aware UTC times, decoded JSON, booleans), a foreign key under its
    ``…_id`` name, whatever order the SELECT names the columns in."""
    from tests.store.test_executions_and_triggers import make_policy, new

    policy = make_policy(store, rules=2)
    trigger, execution = new(store, policy)
    [execution_id] = store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                             ensure_context=True, now=T0)
    store.engineers.put("ana@example.com", display_name="Ana", dispatch_enabled=True, now=T0)
    store.engineers.take_turn(["ana@example.com"], issue_key="TCID-1", now=T0)
    param = store.db.param
    cases = [
        (models.ExecutionRow, f"SELECT * FROM dispatch_executions WHERE id = {param}",
         execution_id),
        (models.RuleExecutionRow, "SELECT action_executions_json, execution_id, sequence, "
         f"evaluation_json, id FROM dispatch_rule_executions WHERE execution_id = {param} "
         "ORDER BY sequence", execution_id),
        (EngineerRow, f"SELECT * FROM engineers WHERE email = {param}", "ana@example.com"),
        (models.ContextRow, f"SELECT * FROM dispatch_contexts WHERE issue_key = {param}",
         "TCID-1"),
    ]
    for model, sql, key in cases:
        with unit_of_work(store.db):
            rows = read_rows(store.db, model, sql, key)
            instances = list(model.raw(sql, key))
        assert rows and len(rows) == len(instances), model.__name__
        for row, instance in zip(rows, instances, strict=True):
            assert vars(row) == {name: getattr(instance, name) for name in vars(row)}
    with unit_of_work(store.db):
        [engineer] = read_rows(store.db, EngineerRow, cases[2][1], "ana@example.com")
        [first, _] = read_rows(store.db, models.RuleExecutionRow, cases[1][1], execution_id)
    assert engineer.dispatch_enabled is True and engineer.last_dispatched_at.tzinfo is UTC
    assert first.execution_id == execution_id
    assert isinstance(first.action_executions_json, list)


def test_read_rows_keeps_a_column_the_model_does_not_know(store):
    with unit_of_work(store.db):
        [row] = read_rows(store.db, EngineerRow, "SELECT 1 AS answer, 'x' AS email")
    assert (row.answer, row.email) == (1, "x")
