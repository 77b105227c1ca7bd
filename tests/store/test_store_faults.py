"""Database faults at the store's boundary: one typed error, bounded waits, connections that
heal, and the outage signal. Real faults where a test can make them: another process holding
SQLite's write lock, a PostgreSQL connection cut or stalled by a relay, a backend terminated by
the server, a statement or lock wait outlasting its timeout."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from datetime import UTC, datetime, timedelta

import peewee
import psycopg
import pytest
from playhouse.pool import MaxConnectionsExceeded

from tests.process import wait_until
from tests.relay import Relay, relayed_url, target_of
from ticket_dispatcher import metrics as metrics_module
from ticket_dispatcher.config import DatabaseConfig
from ticket_dispatcher.errors import Conflict, StoreUnavailable
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.store import Store, StoreFaultKind, StoreHealth, unit_of_work, write_lock
from ticket_dispatcher.store import health as health_module
from ticket_dispatcher.store import migrations as migrations_module
from ticket_dispatcher.store import postgres as postgres_module
from ticket_dispatcher.store.connect import open_database
from ticket_dispatcher.store.database import pool_wait
from ticket_dispatcher.store.faults import store_error
from ticket_dispatcher.store.models import EngineerRow

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
BUSY = timedelta(milliseconds=300)
SHORT = DatabaseConfig(busy_timeout=BUSY, connect_timeout=timedelta(seconds=1),
                       statement_timeout=timedelta(milliseconds=300),
                       pool_wait=timedelta(milliseconds=300))
# What a bounded wait may add to its timeout on a busy test machine.
SLACK = 1.5
SECRET = "hunter2-secret"


class SqliteWriteLock:
    """Another process holding SQLite's write lock (``BEGIN EXCLUSIVE``) until ``release``.

    The child says "locked" on stdout once it holds the lock and releases it when a line
    arrives on its stdin, so the test waits on a pipe, never on time."""

    SCRIPT = ("import sqlite3, sys\n"
              "connection = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
              "connection.execute('BEGIN EXCLUSIVE')\n"
              "print('locked', flush=True)\n"
              "sys.stdin.readline()\n"
              "connection.execute('ROLLBACK')\n")

    def __init__(self, path: str):
        self.path = path
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> SqliteWriteLock:
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, self.path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "locked"
        return self

    def release(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=10) == 0

    def __exit__(self, *exc) -> None:
        try:
            self.release()
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)


class Recorder:
    """A ``StoreHealthListener`` that remembers what it was told."""

    def __init__(self):
        self.available: list[bool] = []
        self.failed: list[str] = []

    def database_available(self, available: bool) -> None:
        self.available.append(available)

    def store_failed(self, kind: str) -> None:
        self.failed.append(kind)


class FakeMonotonic:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elapsed(since: float) -> float:
    return time.monotonic() - since


def assert_shows_nothing_private(error: StoreUnavailable, *private: str) -> None:
    """Neither the error nor what a logged traceback prints of its chain names them (the
    driver's error stays reachable as ``__context__`` but is never printed)."""
    shown = "".join(traceback.format_exception_only(error))
    assert error.__cause__ is None and error.__suppress_context__
    for text in private:
        assert text not in shown


def _put(store: Store, email: str = "a@x.com") -> None:
    store.engineers.put(email, dispatch_enabled=True, now=T0)


@pytest.fixture
def short_sqlite(tmp_path):
    """A migrated SQLite store whose waits are short (busy_timeout 300 ms)."""
    store = Store.for_url(f"sqlite:///{tmp_path / 'td.db'}", database=SHORT)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def relayed(postgres_url):
    """A migrated PostgreSQL store reached through a relay the test can cut."""
    with Relay(*target_of(postgres_url)) as relay:
        store = Store.for_url(relayed_url(postgres_url, relay), database=SHORT)
        store.migrate()
        yield store, relay
        relay.restore()
        store.close()


# --- the typed error -------------------------------------------------------------------------


class DriverError(Exception):
    """Stands for a psycopg error: what the classification reads is ``sqlstate`` and the
    text."""

    def __init__(self, text: str, sqlstate: str | None = None):
        super().__init__(text)
        self.sqlstate = sqlstate


def _as_peewee(cls: type, error: Exception) -> Exception:
    return cls(error, *error.args)  # how peewee re-raises a driver's error (kept as .orig)


@pytest.mark.parametrize(("error", "kind"), [
    (DriverError("terminating connection due to administrator command", "57P01"), "connection"),
    (DriverError("the database system is starting up", "57P03"), "connection"),
    (DriverError("connection failure", "08006"), "connection"),
    (DriverError("canceling statement due to lock timeout", "55P03"), "locked"),
    (DriverError("canceling statement due to statement timeout", "57014"), "timeout"),
    (DriverError("could not serialize access", "40001"), "serialization"),
    (DriverError("deadlock detected", "40P01"), "serialization"),
    (DriverError("sorry, too many clients already", "53300"), "too_many_connections"),
    (DriverError("server closed the connection unexpectedly\n\tThis probably means"),
     "connection"),
    (DriverError('connection to server at "db.internal" (10.0.0.5), port 5432 failed: FATAL: '
                 "sorry, too many clients already"), "too_many_connections"),
    (DriverError('connection to server at "db.internal", port 5432 failed: Connection refused'),
     "connection"),
    (DriverError("timeout expired"), "connection"),
    (DriverError("consuming input failed: server closed the connection unexpectedly"),
     "connection"),
    (DriverError("the connection is lost"), "connection"),
    (DriverError("the connection is closed"), "connection"),
    (sqlite3.OperationalError("database is locked"), "locked"),
    (DriverError("disk I/O error"), "other"),
])
def test_operational_driver_errors_become_store_unavailable_of_their_kind(error, kind):
    typed = store_error(_as_peewee(peewee.OperationalError, error))

    assert isinstance(typed, StoreUnavailable)
    assert typed.kind == kind
    assert typed.message == str(typed)
    assert "db.internal" not in typed.message and "10.0.0.5" not in typed.message


def test_sqlite_busy_is_locked_by_its_error_name():
    busy = sqlite3.OperationalError("a message that says nothing")
    busy.sqlite_errorname = "SQLITE_BUSY_SNAPSHOT"

    assert store_error(_as_peewee(peewee.OperationalError, busy)).kind == "locked"


@pytest.mark.parametrize(("error", "kind"), [
    (peewee.InterfaceError("connection already closed"), "connection"),
    (MaxConnectionsExceeded("Max connections exceeded, timed out attempting to connect."),
     "pool_exhausted"),
    (psycopg.OperationalError("server closed the connection unexpectedly"), "connection"),
    (psycopg.OperationalError("the connection is closed"), "connection"),
])
def test_interface_errors_and_an_exhausted_pool_are_unavailable(error, kind):
    assert store_error(error).kind == kind


def test_integrity_errors_become_conflict_and_bugs_stay_what_they_are():
    conflict = store_error(_as_peewee(peewee.IntegrityError,
                                      DriverError("duplicate key value violates unique "
                                                  "constraint \"engineers_pkey\"", "23505")))

    assert isinstance(conflict, Conflict)
    assert "engineers_pkey" not in conflict.message
    assert store_error(_as_peewee(peewee.ProgrammingError,
                                  DriverError('relation "nope" does not exist', "42P01"))) is None
    assert store_error(ValueError("not a database error")) is None
    assert store_error(StoreUnavailable("already typed", "locked")) is None


def test_integrity_violation_in_a_unit_of_work_is_conflict(store):
    _put(store)

    with pytest.raises(Conflict) as raised, write_lock(store.db):
        EngineerRow.insert(email="a@x.com", dispatch_enabled=True, created_at=T0,
                           updated_at=T0).execute()

    assert raised.value.message == "the change conflicts with data already stored"
    assert store.engineers.page()[1] == 1  # nothing else changed, the store still works
    assert store.health.available


def test_nested_units_translate_once_and_pass_the_typed_error_through(sqlite_store):
    recorder = Recorder()
    sqlite_store.health.subscribe(recorder)

    with pytest.raises(StoreUnavailable) as raised:
        with unit_of_work(sqlite_store.db), write_lock(sqlite_store.db):
            with unit_of_work(sqlite_store.db):
                raise peewee.OperationalError("database is locked")

    assert raised.value.kind == "locked"
    assert recorder.failed == ["locked"]  # one failure, however many units it crossed
    assert sqlite_store.db.is_closed()


def test_unreachable_postgres_is_connection_kind_without_host_user_or_password():
    store = Store.for_url(f"postgresql://svc_user:{SECRET}@127.0.0.1:1/td", database=SHORT)

    with pytest.raises(StoreUnavailable) as raised:
        store.engineers.page()

    assert raised.value.kind == "connection"
    assert_shows_nothing_private(raised.value, "127.0.0.1", "svc_user", SECRET, "port 1")
    assert store.ping() is False


# --- bounded waits: configuration -------------------------------------------------------------


def test_postgres_connections_get_the_configured_timeouts():
    db = open_database("postgresql://u@127.0.0.1:1/app?options=-c%20search_path%3Dx"
                       "&keepalives_idle=30", database=DatabaseConfig(
                           connect_timeout=timedelta(milliseconds=2500),
                           statement_timeout=timedelta(seconds=15),
                           busy_timeout=timedelta(seconds=4),
                           pool_wait=timedelta(seconds=3)))

    assert {name: db.connect_params[name] for name in (
        "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
        "keepalives_count", "tcp_user_timeout", "options")} == {
        "connect_timeout": "3", "keepalives": "1", "keepalives_idle": "30",  # the URL's wins
        "keepalives_interval": "1", "keepalives_count": "3", "tcp_user_timeout": "3000",
        "options": "-c statement_timeout=15000 -c lock_timeout=4000 "
                   "-c idle_in_transaction_session_timeout=15000 "
                   "-c jit=off -c max_parallel_workers_per_gather=0 -c search_path=x"}
    assert pool_wait(db) == 3


def test_sqlite_waits_come_from_the_configuration(short_sqlite):
    with unit_of_work(short_sqlite.db) as db:
        busy = db.execute_sql("PRAGMA busy_timeout").fetchone()[0]

    assert busy == 300
    assert short_sqlite.db.writers_turn.busy_timeout == 0.3  # the wait for this process's turn
    assert pool_wait(short_sqlite.db) == 0.3  # a free pooled connection


@pytest.mark.postgres
def test_postgres_sessions_run_with_the_configured_timeouts(postgres_url):
    store = Store.for_url(postgres_url, database=SHORT)
    with unit_of_work(store.db) as db:
        shown = [db.execute_sql(f"SHOW {name}").fetchone()[0]
                 for name in ("statement_timeout", "lock_timeout",
                              "idle_in_transaction_session_timeout", "search_path")]
    store.close()

    assert shown[:3] == ["300ms", "300ms", "300ms"]
    assert shown[3].startswith("td_")  # the test URL's own options still apply


@pytest.mark.postgres
def test_a_transaction_its_client_stopped_answering_gives_its_row_locks_back(postgres_url):
    """A paused process (SIGSTOP) in the middle of a transaction: the server ends its session
    after the statement timeout, so another replica can claim the rows it had locked."""
    store = Store.for_url(postgres_url)
    store.migrate()
    store.engineers.put("a@example.com", dispatch_enabled=True, now=datetime.now(UTC))
    # A connection as the service opens them (its options), of a process that then pauses.
    paused = open_database(postgres_url, database=SHORT).open_connection()
    paused.autocommit = False
    with paused.cursor() as cursor:  # locked, then the client goes silent
        cursor.execute("SELECT email FROM engineers FOR UPDATE")

    def lockable() -> bool:
        try:
            with unit_of_work(store.db) as db:
                db.execute_sql("SELECT email FROM engineers FOR UPDATE NOWAIT")
            return True
        except StoreUnavailable:
            return False

    try:
        wait_until(lockable, 10, "the server ends the silent transaction")
        with pytest.raises(psycopg.Error), paused.cursor() as cursor:  # its session is gone
            cursor.execute("SELECT 1")
    finally:
        paused.close()
        store.close()


# --- SQLite: another process holds the write lock ---------------------------------------------


def test_sqlite_write_is_locked_within_busy_timeout_and_works_once_released(short_sqlite):
    with SqliteWriteLock(short_sqlite.db.database) as lock:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as raised:
            _put(short_sqlite)
        waited = elapsed(started)
        lock.release()

    assert raised.value.kind == "locked"
    assert BUSY.total_seconds() * 0.9 <= waited < BUSY.total_seconds() + SLACK
    _put(short_sqlite)
    assert short_sqlite.engineers.page()[1] == 1
    assert short_sqlite.db.is_closed()


def test_sqlite_writers_waiting_together_are_each_locked_within_busy_timeout(short_sqlite):
    # This process's writers take turns before SQLite's lock: the ones queued behind the
    # first still give up within busy_timeout of asking, not after their turn came.
    waits: dict[str, float] = {}
    kinds: dict[str, str] = {}

    def write(email: str) -> None:
        started = time.monotonic()
        try:
            _put(short_sqlite, email)
        except StoreUnavailable as exc:
            kinds[email] = exc.kind
        waits[email] = elapsed(started)

    writers = [threading.Thread(target=write, args=(f"w{n}@x.com",)) for n in range(4)]
    with SqliteWriteLock(short_sqlite.db.database):
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(timeout=10)

    assert kinds == {f"w{n}@x.com": "locked" for n in range(4)}
    assert max(waits.values()) < BUSY.total_seconds() + SLACK
    for n in range(4):
        _put(short_sqlite, f"w{n}@x.com")
    assert short_sqlite.engineers.page()[1] == 4


def test_sqlite_ping_is_not_ready_within_busy_timeout_while_writes_are_locked(short_sqlite):
    with SqliteWriteLock(short_sqlite.db.database):
        started = time.monotonic()
        ready = short_sqlite.ping()
        waited = elapsed(started)

    assert ready is False
    assert waited < BUSY.total_seconds() + SLACK
    assert short_sqlite.ping() is True


def test_a_locked_sqlite_outage_ends_with_a_write_not_with_a_read(short_sqlite):
    with SqliteWriteLock(short_sqlite.db.database):
        with pytest.raises(StoreUnavailable):
            _put(short_sqlite)
        assert short_sqlite.engineers.page() == ([], 0)  # readers go on under WAL
        still_out = short_sqlite.health.available is False
    assert short_sqlite.engineers.page() == ([], 0)
    after_a_read = short_sqlite.health.available

    with unit_of_work(short_sqlite.db):  # an autocommit INSERT, outside any write_lock
        EngineerRow.insert(email="a@x.com", dispatch_enabled=True, created_at=T0,
                           updated_at=T0).execute()

    assert still_out and after_a_read is False
    assert short_sqlite.health.available is True


def test_a_real_outage_logs_one_warning_and_one_info(short_sqlite, caplog):
    caplog.set_level(logging.INFO, logger=health_module.__name__)
    with SqliteWriteLock(short_sqlite.db.database):
        for _ in range(4):
            assert short_sqlite.ping() is False
    _put(short_sqlite)
    _put(short_sqlite, "b@x.com")

    assert _records(caplog) == [("WARNING", "database unavailable"),
                                ("INFO", "database available again")]
    assert caplog.records[-1].failures == 4


def test_metrics_follow_a_real_outage(short_sqlite):
    metrics = Metrics()
    short_sqlite.health.subscribe(metrics)

    def sample(name: str, **labels) -> float:
        return metrics.registry.get_sample_value(f"ticket_manager_dispatch_{name}", labels)

    with SqliteWriteLock(short_sqlite.db.database):
        for _ in range(2):
            with pytest.raises(StoreUnavailable):
                _put(short_sqlite)
        during = sample("database_up")
    _put(short_sqlite)

    assert during == 0
    assert sample("database_up") == 1
    assert sample("store_errors_total", kind="locked") == 2
    assert sample("store_errors_total", kind="connection") == 0


# --- PostgreSQL: the network between the service and the server breaks ------------------------


@pytest.mark.postgres
def test_postgres_cut_fails_at_once_and_the_pool_heals_after_restore(relayed):
    store, relay = relayed
    _put(store)  # the pool now holds an idle connection, which the cut kills

    relay.cut()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as raised:
        store.engineers.page()
    failed_after = elapsed(started)
    relay.restore()

    assert raised.value.kind == "connection"
    assert failed_after < SLACK
    assert store.engineers.page()[1] == 1  # the same store, no reopening
    assert store.health.available


@pytest.mark.postgres
def test_postgres_connection_lost_inside_a_unit_is_discarded_not_pooled(relayed):
    store, relay = relayed
    with pytest.raises(StoreUnavailable) as raised, unit_of_work(store.db) as db:
        lost = db.connection()
        store.engineers.page()
        relay.cut()
        store.engineers.page()
    relay.restore()

    assert raised.value.kind == "connection"
    assert lost.closed and store.db.is_closed()
    assert store.db._in_use == {}
    assert all(conn is not lost for _, _, conn in store.db._connections)
    with unit_of_work(store.db) as db:
        assert db.connection() is not lost
        assert store.engineers.page() == ([], 0)


@pytest.mark.postgres
def test_postgres_server_that_never_answers_fails_within_connect_timeout(relayed):
    store, relay = relayed
    relay.stall()
    started = time.monotonic()

    with pytest.raises(StoreUnavailable) as raised:
        store.engineers.page()

    assert raised.value.kind == "connection"
    assert elapsed(started) < SHORT.connect_timeout.total_seconds() + SLACK
    relay.restore()
    assert store.engineers.page() == ([], 0)


@pytest.mark.postgres
def test_postgres_messages_never_name_the_host_user_or_password(postgres_url):
    with Relay(*target_of(postgres_url)) as relay:
        url = relayed_url(postgres_url, relay).replace("postgres@", f"postgres:{SECRET}@")
        store = Store.for_url(url, database=SHORT)
        relay.cut()
        with pytest.raises(StoreUnavailable) as raised:
            store.engineers.page()
        store.close()

    assert_shows_nothing_private(raised.value, "127.0.0.1", str(relay.port), "postgres", SECRET)


@pytest.mark.postgres
def test_postgres_backend_terminated_by_the_server_is_replaced(postgres_url):
    store = Store.for_url(postgres_url, database=SHORT)
    store.migrate()
    admin = psycopg.connect(postgres_url.split("?")[0])
    admin.autocommit = True
    try:
        with pytest.raises(StoreUnavailable) as raised, unit_of_work(store.db) as db:
            pid = db.connection().info.backend_pid
            admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
            store.engineers.page()
        assert raised.value.kind == "connection"
        assert store.engineers.page() == ([], 0)
    finally:
        admin.close()
        store.close()


def _terminate_pooled_backend(store: Store, admin) -> None:
    """Kill, from the server's side, the backend of the connection the pool holds idle."""
    with unit_of_work(store.db) as db:
        pid = db.connection().info.backend_pid
    admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_until(lambda: not _backend_alive(admin, pid), 5, "the backend to end")


def _backend_alive(admin, pid: int) -> bool:
    cursor = admin.cursor()
    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
    return cursor.fetchone()[0] > 0


@pytest.mark.postgres
def test_postgres_connection_idle_in_the_pool_is_checked_before_reuse(postgres_url, monkeypatch):
    monkeypatch.setattr(postgres_module, "PG_PING_IDLE_SECONDS", 0)
    store = Store.for_url(postgres_url, database=SHORT)
    store.migrate()
    admin = psycopg.connect(postgres_url.split("?")[0])
    admin.autocommit = True
    try:
        _terminate_pooled_backend(store, admin)
        assert store.engineers.page() == ([], 0)  # the dead one was found and replaced
    finally:
        admin.close()
        store.close()


@pytest.mark.postgres
def test_postgres_connection_just_returned_is_reused_without_a_round_trip(postgres_url,
                                                                          monkeypatch):
    # Under load a connection comes back and goes out again within milliseconds; asking the
    # server each time queued every thread behind one round trip. One the server dropped in
    # that window fails its first statement, is discarded, and the next unit gets a new one.
    monkeypatch.setattr(postgres_module, "PG_PING_IDLE_SECONDS", 3600)
    store = Store.for_url(postgres_url, database=SHORT)
    store.migrate()
    admin = psycopg.connect(postgres_url.split("?")[0])
    admin.autocommit = True
    try:
        _terminate_pooled_backend(store, admin)
        with pytest.raises(StoreUnavailable) as raised:
            store.engineers.page()
        assert raised.value.kind == "connection"
        assert store.engineers.page() == ([], 0)
    finally:
        admin.close()
        store.close()

@pytest.mark.postgres
def test_postgres_statement_beyond_statement_timeout_is_timeout(postgres_url):
    store = Store.for_url(postgres_url, database=SHORT)
    started = time.monotonic()

    with pytest.raises(StoreUnavailable) as raised, unit_of_work(store.db) as db:
        db.execute_sql("SELECT pg_sleep(30)")
    store.close()

    assert raised.value.kind == "timeout"
    assert elapsed(started) < SHORT.statement_timeout.total_seconds() + SLACK


@pytest.mark.postgres
def test_postgres_lock_wait_beyond_busy_timeout_is_locked(postgres_url):
    store = Store.for_url(postgres_url, database=DatabaseConfig(busy_timeout=BUSY))
    store.migrate()
    holder = psycopg.connect(postgres_url)
    try:
        holder.cursor().execute("LOCK TABLE engineers IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as raised:
            _put(store)
        waited = elapsed(started)
        holder.rollback()
        _put(store)
    finally:
        holder.close()
        store.close()

    assert raised.value.kind == "locked"
    assert waited < BUSY.total_seconds() + SLACK


# --- the outage signal ------------------------------------------------------------------------


@pytest.fixture
def clock():
    return FakeMonotonic()


@pytest.fixture
def health(clock):
    return StoreHealth(monotonic=clock)


def _records(caplog) -> list[tuple[str, str]]:
    return [(record.levelname, record.getMessage()) for record in caplog.records
            if record.name == health_module.__name__]


def test_an_outage_logs_one_warning_and_one_info_however_many_failures(health, clock, caplog):
    caplog.set_level(logging.INFO, logger=health_module.__name__)

    for _ in range(50):
        health.failed("connection")
        clock.now += 0.5
    health.succeeded()
    health.succeeded()

    assert _records(caplog) == [("WARNING", "database unavailable"),
                                ("INFO", "database available again")]
    warning, info = [r for r in caplog.records if r.name == health_module.__name__]
    assert warning.reason == "connection"
    assert (info.failures, info.outage_seconds) == (50, 25.0)


def test_a_long_outage_logs_a_summary_at_most_once_a_minute(health, clock, caplog):
    caplog.set_level(logging.INFO, logger=health_module.__name__)

    for _ in range(181):  # one failure a second for three minutes
        health.failed("timeout")
        clock.now += 1

    assert _records(caplog) == [("WARNING", "database unavailable")] + [
        ("WARNING", "database still unavailable")] * 3


def test_an_outage_soon_after_a_warning_is_quiet_until_a_minute_has_passed(health, clock,
                                                                            caplog):
    caplog.set_level(logging.INFO, logger=health_module.__name__)
    health.failed("connection")
    health.succeeded()
    clock.now += 10

    health.failed("connection")  # flapping: no second WARNING within the minute
    health.succeeded()  # nor an INFO for an outage nobody was told about
    clock.now += 60
    health.failed("connection")

    assert _records(caplog) == [("WARNING", "database unavailable"),
                                ("INFO", "database available again"),
                                ("WARNING", "database unavailable")]


def test_serialization_failures_and_an_exhausted_pool_are_counted_not_outages(health):
    recorder = Recorder()
    health.subscribe(recorder)

    health.failed("serialization")
    health.failed("pool_exhausted")

    assert health.available
    assert recorder.failed == ["serialization", "pool_exhausted"]
    assert recorder.available == [True]  # the state on subscription, never changed


def test_listeners_follow_outages_and_a_broken_one_does_not_stop_the_others(health):
    class Broken:
        def database_available(self, available):
            raise RuntimeError("broken listener")

        def store_failed(self, kind):
            raise RuntimeError("broken listener")

    recorder = Recorder()
    health.subscribe(Broken())
    health.subscribe(recorder)

    health.failed("connection")
    health.failed("connection")
    health.succeeded()

    assert recorder.available == [True, False, True]
    assert recorder.failed == ["connection", "connection"]


def test_a_success_while_the_database_answers_takes_no_lock(health):
    class NoLock:
        def __enter__(self):
            raise AssertionError("the hot path took the lock")

        def __exit__(self, *exc):
            return False

    health._lock = NoLock()

    health.succeeded()
    health.succeeded(wrote=True)

    assert health.available


def test_metrics_know_every_kind_of_store_failure():
    assert metrics_module.STORE_ERROR_KINDS == tuple(kind.value for kind in StoreFaultKind)


@pytest.mark.postgres
def test_postgres_migrations_run_without_the_request_timeouts(postgres_url):
    store = Store.for_url(postgres_url, database=SHORT)
    original = migrations_module.MIGRATIONS

    def slow(db):
        db.execute_sql("SELECT pg_sleep(0.5)")  # longer than SHORT's statement_timeout

    try:
        migrations_module.MIGRATIONS = [*original, (len(original) + 1, "slow", slow)]
        applied = store.migrate()
    finally:
        migrations_module.MIGRATIONS = original
    with unit_of_work(store.db) as db:
        restored = db.execute_sql("SHOW statement_timeout").fetchone()[0]
    store.close()

    assert applied[-1] == len(original) + 1
    assert restored == "300ms"  # the pooled connection got its timeouts back
