"""Database setup: the URL picks the engine, one proxy binds the models.

Connections have one owner per engine: a pool. Every repository method runs
inside ``unit_of_work``, which takes a connection from the pool for this thread when none is
open and hands it back when the outermost unit ends, so a waitress worker or an actor thread
never holds a connection between units of work. An HTTP request holds one for the whole request
(``http/middleware.py``); the units of work of its handler reuse it. ``autoconnect`` is off: a
query outside a unit of work fails loudly instead of leaking a connection. A caller that needs
several repository calls in one transaction wraps them in ``write_lock(db)``; the inner calls
reuse its connection.

Both engines pool their physical connections, so nothing is reopened per unit of work:

- PostgreSQL: ``PostgresPool`` (``postgres.py``), peewee's pool on psycopg 3: a connection
  older than five minutes is replaced, a check-out asks the server whether a pooled
  connection still lives only when it sat idle a while, and each connection has the
  ``Prepared`` statements it runs planned once (psycopg's prepared statements).
- SQLite: ``SqlitePool``, peewee's ``PooledSqliteDatabase``. peewee applies its pragmas to each
  new physical connection, so they are set once per connection.
  ``check_same_thread=False`` lets a returned connection serve the next thread that asks; the
  pool hands a connection to one thread at a time, and the sqlite3 module is built serialized
  (``sqlite3.threadsafety == 3``). On check-in the pool rolls back any transaction left open.
  This process's write transactions take their turn (``WritersTurn``) before the write lock.

Each pool holds at most ``connection_budget(config)`` connections: one for every thread that
can hold one at the same time. A thread that finds the pool empty waits up to
``database.pool_wait`` for a connection to come back, then fails (``pool_exhausted``).
``check_capacity`` refuses, at start, a budget a PostgreSQL server cannot serve.

Every wait on the database is bounded by ``[database]`` (``DatabaseConfig``), so a request
answers 503 within seconds while the database is away instead of hanging:

- PostgreSQL: libpq's ``connect_timeout`` for a new connection; ``statement_timeout`` for one
  statement and ``lock_timeout`` (``busy_timeout``, at most the statement timeout) for one lock
  wait, both sent as ``options`` before the URL's own (which therefore win), with JIT and
  parallel workers off (``_postgres_options`` says why); TCP keepalives and
  ``tcp_user_timeout`` so a connection whose peer vanished errors out instead of waiting for an
  answer that never comes. URL query parameters override any of these.
- SQLite: ``busy_timeout`` for the write lock held by another connection or process, as the
  pragma set first on each new connection; the wait for this process's writers' turn counts
  towards it.

Driver errors never leave the store: ``unit_of_work`` and ``write_lock`` (outermost or nested)
and ``checkout`` turn them into ``StoreUnavailable(kind)`` or ``Conflict`` (``faults.py``),
report each unit to the database's ``StoreHealth`` (``health.py``), and a unit that owns its
connection discards it, instead of pooling it again, when the connection failed.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar, cast
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import peewee
from playhouse.pool import PooledDatabase, PooledSqliteDatabase

from ticket_dispatcher.config import Config, DatabaseConfig
from ticket_dispatcher.errors import ConfigError, StoreUnavailable
from ticket_dispatcher.store.faults import FaultKind, store_error, unavailable
from ticket_dispatcher.store.health import StoreHealth
from ticket_dispatcher.timeutil import to_utc

if TYPE_CHECKING:
    from ticket_dispatcher.store.postgres import PostgresPool

log = logging.getLogger(__name__)

# A select query (lock_rows, skip_locked): a model's select stays that model's.
SelectT = TypeVar("SelectT", bound=peewee.Select)

# The only module-level state of the store: models reach the database through it.
database_proxy = peewee.DatabaseProxy()

SQLITE_PRAGMAS = (
    ("journal_mode", "wal"),  # readers never block the writer
    ("foreign_keys", 1),  # ON DELETE CASCADE of rules and rule executions
    ("synchronous", "normal"),  # durable enough with WAL, much faster than FULL
    # Reads come from one shared mapping of the file instead of each pooled connection's own
    # cache, which SQLite empties whenever another connection has written since its last read:
    # on a busy service nearly every read transaction. Read only: a bad pointer cannot write.
    ("mmap_size", 256 * 1024 * 1024),
)
# Threads beyond the configured ones that may hold a connection: the supervisor and the
# execution pool actor, plus a margin for the main thread, the scheduler and the CLI or harness.
RUNTIME_CONNECTIONS = 2
MARGIN_CONNECTIONS = 4
CLUSTER_LINK_CONNECTIONS = 1  # PostgreSQL: the mode lock and the work channel, outside the pool
# TCP keepalive probes of an idle PostgreSQL connection (one waiting for an answer is idle to
# TCP): the first after connect_timeout, then every PG_KEEPALIVE_INTERVAL seconds, and the
# connection is dropped after PG_KEEPALIVE_COUNT unanswered ones.
PG_KEEPALIVE_INTERVAL = 1
PG_KEEPALIVE_COUNT = 3
DEFAULT_DATABASE = DatabaseConfig()

_USAGE = "use sqlite:///PATH or postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME"


def connection_budget(config: Config) -> int:
    """The most connections the service can hold at once, the size of its pool.

    One per thread that may hold a connection at the same time:
    ``http.threads`` (one per request), ``trigger_actors`` and ``execution_slots`` (one per
    step of work), 2 for the supervisor and the execution pool actor, and a margin of 4 for the
    main thread, the scheduler and the CLI or test harness.
    """
    return (config.http.threads + config.trigger_actors + config.execution_slots
            + RUNTIME_CONNECTIONS + MARGIN_CONNECTIONS)


DEFAULT_MAX_CONNECTIONS = connection_budget(Config())


def open_database(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                  database: DatabaseConfig = DEFAULT_DATABASE) -> peewee.Database:
    """Build (without connecting) the pooled database a ``database_url`` names.

    ``max_connections`` bounds the pool; pass ``connection_budget(config)``. ``database``: its
    timeouts (``config.database``). The database carries its own ``StoreHealth``
    (``health_of``). Raises ``ConfigError`` naming ``database_url``; the message never repeats
    a password.
    """
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"database_url: not a database URL; {_USAGE}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit validates the port lazily
    except ValueError:
        raise ConfigError(f"database_url: malformed URL; {_USAGE}") from None
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        db: peewee.Database = _open_sqlite(parts, max_connections, database)
    elif scheme in ("postgresql", "postgres"):
        db = _open_postgres(parts, max_connections, database)
    else:
        raise ConfigError(f"database_url: unsupported scheme {scheme!r}; {_USAGE}")
    attach_health(db)
    return db


def _open_sqlite(parts: SplitResult, max_connections: int,
                 database: DatabaseConfig) -> SqlitePool:
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if parts.netloc or not path or parts.query:
        raise ConfigError(f"database_url: malformed SQLite URL; {_USAGE}")
    if path == ":memory:" or path.startswith("file:"):
        # Each connection would see its own, empty database.
        raise ConfigError("database_url: in-memory SQLite is not supported; use a file path")
    directory = Path(path).parent
    if not directory.is_dir():
        raise ConfigError(f"database_url: directory {str(directory)!r} does not exist")
    if sqlite3.sqlite_version_info < (3, 35, 0):  # RETURNING and upserts
        raise ConfigError(
            f"database_url: SQLite 3.35 or newer is needed, found {sqlite3.sqlite_version}"
        )
    # lock_type: every SQLite transaction takes the write lock up front. A deferred transaction
    # that upgrades from reading to writing fails at once with SQLITE_BUSY in WAL mode instead
    # of honouring busy_timeout; atomic('IMMEDIATE') takes the write lock at BEGIN.
    # busy_timeout comes first, so the other pragmas already wait for a lock as long.
    # sqlite3.connect's own ``timeout`` stays peewee's default: busy_timeout, the first pragma
    # of every new connection, replaces it before anything waits for a lock.
    busy = database.busy_timeout.total_seconds()
    return SqlitePool(
        path,
        max_connections=max_connections,
        pool_wait=database.pool_wait.total_seconds(),
        busy_timeout=busy,
        pragmas=(("busy_timeout", round(busy * 1000)), *SQLITE_PRAGMAS),
        lock_type="IMMEDIATE",
        returning_clause=True,
        autoconnect=False,
        check_same_thread=False,  # a pooled connection moves between threads (see above)
    )


class ServicePool:
    """What this service keeps beside peewee's pool, on the pool classes it opens
    (``SqlitePool``, ``PostgresPool``): the most connections the pool opens (``pool_size``),
    how long a thread waits for a free one, and the ``StoreHealth`` its units of work report
    to (``health_of``)."""

    pool_limit: int
    pool_wait: float
    store_health: StoreHealth


# The ignore: peewee's PooledSqliteDatabase itself inherits two ``init`` that disagree (the
# untyped PooledDatabase.init and types-peewee's SqliteDatabase.init); peewee calls it, not this.
class SqlitePool(ServicePool, PooledSqliteDatabase):  # type: ignore[misc]  # peewee's init clash
    """peewee's SQLite pool (built with its public arguments) and this process's writers' turn
    (``WritersTurn``), which every write transaction takes before ``BEGIN IMMEDIATE``."""

    def __init__(self, path: str, *, max_connections: int, pool_wait: float,
                 busy_timeout: float, **kwargs: Any):
        super().__init__(path, max_connections=max_connections, timeout=pool_wait, **kwargs)
        self.pool_limit = max_connections
        self.pool_wait = pool_wait
        self.store_health = StoreHealth()
        self.writers_turn = WritersTurn(busy_timeout)


def _open_postgres(parts: SplitResult, max_connections: int,
                   database: DatabaseConfig) -> PostgresPool:
    try:
        import psycopg  # noqa: F401 - imported to say the extra is missing, at start-up
    except ImportError:
        raise ConfigError(
            "database_url: PostgreSQL needs the 'postgres' extra (pip install "
            "'ticket-dispatcher[postgres]')"
        ) from None
    dbname = unquote(parts.path[1:])
    if not dbname or "/" in dbname:
        raise ConfigError(f"database_url: malformed PostgreSQL URL; {_USAGE}")
    # Query parameters are libpq connection parameters (sslmode, options, application_name…).
    text_params = dict(parse_qsl(parts.query, keep_blank_values=True))
    for name, value in _postgres_timeouts(database).items():
        text_params.setdefault(name, value)
    text_params["options"] = " ".join(filter(None, (_postgres_options(database),
                                                    text_params.get("options"))))
    params: dict[str, object] = dict(text_params)
    if parts.hostname:  # without one libpq uses its default (the local socket)
        params["host"] = parts.hostname
    if parts.port:
        params["port"] = parts.port
    if parts.username:
        params["user"] = unquote(parts.username)
    if parts.password:
        params["password"] = unquote(parts.password)
    from ticket_dispatcher.store.postgres import PostgresPool  # it needs psycopg

    return PostgresPool(
        dbname,
        max_connections=max_connections,
        pool_wait=database.pool_wait.total_seconds(),
        autoconnect=False,
        **params,
    )


class Prepared(str):
    """A hot statement, always the same text run with other values: on PostgreSQL each
    connection has it parsed and planned once, the first time it runs it, and runs it from
    that plan afterwards (``postgres.py``); other statements are planned at every run. On
    SQLite it is a plain statement (the sqlite3 module keeps its own cache of compiled
    statements)."""

    __slots__ = ()


def _postgres_timeouts(database: DatabaseConfig) -> dict[str, str]:
    """libpq connection parameters that bound a connect and a vanished peer."""
    connect = math.ceil(database.connect_timeout.total_seconds())  # libpq: whole seconds
    return {
        "connect_timeout": str(connect),
        "keepalives": "1",
        "keepalives_idle": str(connect),
        "keepalives_interval": str(PG_KEEPALIVE_INTERVAL),
        "keepalives_count": str(PG_KEEPALIVE_COUNT),
        # Data sent and not acknowledged for this long (the peer is gone) drops the connection.
        "tcp_user_timeout": str(connect * 1000),
    }


def _postgres_options(database: DatabaseConfig) -> str:
    """The server settings each connection starts with: bounded statements and lock waits.
    A lock wait is bounded like SQLite's (busy_timeout), so ``locked`` means the same on both
    engines; PostgreSQL's lock_timeout 0 would mean no bound, hence at least 1 ms. A
    transaction left open by a client that stopped answering (a paused process) is ended by
    the server after the statement timeout too, so the rows it locked do not stay locked for
    as long as the pause lasts: no transaction here waits on anything but the database.

    Neither JIT compilation nor parallel workers: every statement here reads or writes a few
    rows along an index. When a table's statistics are stale (a bulk of rows since the last
    ANALYZE, or a server running without autovacuum) the planner's estimates for such a
    statement can reach the thresholds of both, and a read of a few rows then spends far longer
    compiling its expressions and starting workers than reading (seen on the parked waits' rules
    with 100,000 parked: bench/README.md, the diary of 2026-12-04)."""
    statement = max(1, round(database.statement_timeout.total_seconds() * 1000))
    lock = min(statement, max(1, round(database.busy_timeout.total_seconds() * 1000)))
    return (f"-c statement_timeout={statement} -c lock_timeout={lock} "
            f"-c idle_in_transaction_session_timeout={statement} "
            "-c jit=off -c max_parallel_workers_per_gather=0")


class ProcessLock:
    """This process's claim on a SQLite database file: an exclusive ``flock`` on
    ``<file>.serve.lock``, which holds the claiming process's PID. The kernel lets go of it when
    the process ends, however it ends (``kill -9`` included), so it is never stale."""

    def __init__(self, path: Path):
        self.path = path
        self._file: TextIO | None = None

    def acquire(self) -> None:
        """Take the claim; ``ConfigError`` when another process holds it."""
        handle = open(self.path, "a+", encoding="utf-8")  # held until release: no ``with``
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise ConfigError(
                f"database_url: another ticket-dispatcher process (pid {holder}) already serves "
                f"this SQLite database; a SQLite database belongs to one process (use "
                f"PostgreSQL to run several)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None


def process_lock(db: peewee.Database) -> ProcessLock | None:
    """The claim ``serve`` must hold on ``db``: a SQLite file is served by one process only
    (its write lock and this process's pool, queue and leases assume so). None for
    PostgreSQL, where that is the database's business."""
    real = _real(db)
    if not isinstance(real, peewee.SqliteDatabase):
        return None
    return ProcessLock(Path(f"{real.database}.serve.lock"))


def pool_size(db: peewee.Database) -> int:
    """The most connections ``db``'s pool opens at once."""
    return _pool(db).pool_limit


def pool_wait(db: peewee.Database) -> float:
    """How long, in seconds, a thread waits for a free connection of ``db``'s pool before it
    fails (``pool_exhausted``)."""
    return _pool(db).pool_wait


def _pool(db: peewee.Database) -> ServicePool:
    real = _real(db)
    if not isinstance(real, ServicePool):
        raise TypeError(f"not a database open_database built: {type(real).__name__}")
    return real


@dataclass(frozen=True)
class ServerLimit:
    """What a PostgreSQL server lets ordinary roles open: ``max_connections`` less the slots
    reserved for superusers (and, from PostgreSQL 16, for ``pg_use_reserved_connections``)."""

    max_connections: int
    reserved: int
    autovacuum: bool = True  # the server's autovacuum runs (``autovacuum = on``)

    @property
    def allowed(self) -> int:
        return self.max_connections - self.reserved


def server_limit(db: peewee.Database) -> ServerLimit | None:
    """The PostgreSQL server's connection limit; None for SQLite, which has none."""
    if not is_postgres(db):
        return None
    # current_setting(name, true) is NULL for a setting the server does not have
    # (reserved_connections is new in PostgreSQL 16).
    with unit_of_work(db):
        row = db.execute_sql(
            "SELECT current_setting('max_connections')::int,"
            " current_setting('superuser_reserved_connections')::int,"
            " coalesce(current_setting('reserved_connections', true), '0')::int,"
            " current_setting('autovacuum') = 'on'"
        ).fetchone()
    return ServerLimit(max_connections=row[0], reserved=row[1] + row[2], autovacuum=row[3])


def check_capacity(db: peewee.Database, config: Config) -> None:
    """Refuse a configuration whose pool could need more connections than the server allows.

    Raises ``ConfigError`` naming the keys that size the pool. The check is against the whole
    server: other clients (another instance during a rolling update, psql, backups) share it.
    A server running without autovacuum is served, with a WARNING: every look at a parked wait
    leaves a dead row, and the planner's statistics never follow the tables.
    """
    limit = server_limit(db)
    if limit is None:
        return
    if not limit.autovacuum:
        log.warning("the PostgreSQL server runs with autovacuum off: the service's tables keep "
                    "every dead row and the planner's statistics go stale; turn it on "
                    "(docs/operations.md, \"What a parked wait costs\")")
    # The pool, and the connection every PostgreSQL process holds outside it (store/cluster.py).
    needed = connection_budget(config) + CLUSTER_LINK_CONNECTIONS
    if needed <= limit.allowed:
        return
    raise ConfigError(
        f"database: the configuration needs up to {needed} connections (http.threads "
        f"{config.http.threads} + trigger_actors {config.trigger_actors} + execution_slots "
        f"{config.execution_slots} + "
        f"{RUNTIME_CONNECTIONS + MARGIN_CONNECTIONS + CLUSTER_LINK_CONNECTIONS} for the "
        f"runtime), but the PostgreSQL server allows {limit.allowed} (max_connections "
        f"{limit.max_connections} - {limit.reserved} reserved); lower execution_slots, "
        f"trigger_actors or http.threads, or raise the server's max_connections"
    )


def bind(db: peewee.Database) -> None:
    """Point every model at ``db`` through the one ``DatabaseProxy``."""
    database_proxy.initialize(db)


def _real(db: peewee.Database) -> peewee.Database:
    return db.obj if isinstance(db, peewee.DatabaseProxy) else db


def is_postgres(db: peewee.Database) -> bool:
    return isinstance(_real(db), peewee.PostgresqlDatabase)


def attach_health(db: peewee.Database) -> StoreHealth:
    """``db``'s ``StoreHealth``, which its pool created with it (``Store`` reads it before any
    unit of work runs). ``TypeError`` for a database ``open_database`` did not build."""
    return _pool(db).store_health


def health_of(db: peewee.Database) -> StoreHealth | None:
    """The ``StoreHealth`` units of work on ``db`` report to (None: a database ``open_database``
    did not build)."""
    real = _real(db)
    return real.store_health if isinstance(real, ServicePool) else None


@contextmanager
def unit_of_work(db: peewee.Database) -> Iterator[peewee.Database]:
    """This thread's connection for one unit of work; reuses an already open one.

    The outermost unit takes a connection from the pool and returns it when it ends, or
    discards it when the connection failed. Every unit, outermost or nested, raises
    ``StoreUnavailable`` or ``Conflict`` for a driver error (an inner unit's passes through
    unchanged) and reports to the database's ``StoreHealth``.
    """
    health = health_of(db)
    try:
        owner = db.is_closed()
        if owner:
            db.connect()
        try:
            changes = _changes(db, health)
            yield db
            wrote = _wrote(db, health, changes)
        except BaseException as exc:
            if owner:
                _give_back(db, broken=_connection_failed(db, exc))
            raise
        if owner:
            _give_back(db, broken=False)
    except Exception as exc:
        _raise_typed(db, exc)
    if health is not None:
        health.succeeded(wrote)


@contextmanager
def write_lock(db: peewee.Database) -> Iterator[peewee.Database]:
    """A short write transaction; nested inside another one it becomes a savepoint.

    SQLite: after this process's earlier writers (``_writers_turn``), ``BEGIN IMMEDIATE``
    takes the database write lock (or raises ``StoreUnavailable`` of kind ``locked`` after
    ``busy_timeout``). PostgreSQL: a plain transaction; callers lock the rows they will change
    with ``lock_rows``.
    """
    with unit_of_work(db):
        outermost = db.transaction_depth() == 0
        with _writers_turn(db) if outermost else nullcontext():
            atomic = db.atomic("IMMEDIATE") if not is_postgres(db) else db.atomic()
            with atomic:
                yield db
        if outermost:  # this one committed: writes work again
            _succeeded(db, wrote=True)


def execute(db: peewee.Database, sql: str, params: Sequence[Any] = (), *,
            wait_for_disk: bool = True) -> Any:
    """Run one statement on this thread's connection and answer its cursor.

    ``wait_for_disk=False``: on PostgreSQL the commit of the transaction the statement runs
    in does not wait for its WAL to reach the disk (docs/design.md, "Writes that need not wait
    for the disk"). Only for a write a crash of the server may lose because what was
    committed before it makes it again; the caller says so, the statement's text does not.
    On SQLite it changes nothing: in WAL mode with ``synchronous=NORMAL`` no commit waits for
    the disk."""
    if wait_for_disk or not is_postgres(db):
        return db.execute_sql(sql, params)
    return cast("PostgresPool", _real(db)).execute_sql(sql, params, wait_for_disk=False)


@contextmanager
def one_statement_write(db: peewee.Database) -> Iterator[peewee.Database]:
    """A write that is one statement, atomic by itself: no ``BEGIN`` and ``COMMIT`` around it,
    which on PostgreSQL are two more round trips. On SQLite it still waits for this process's
    writers' turn (``_writers_turn``), as every ``write_lock`` does; nested inside a
    transaction it is part of that one."""
    with unit_of_work(db):
        with _writers_turn(db) if db.transaction_depth() == 0 else nullcontext():
            yield db


@contextmanager
def _writers_turn(db: peewee.Database) -> Iterator[None]:
    """SQLite: this process's turn to write (``WritersTurn``); nothing on PostgreSQL."""
    real = _real(db)
    if not isinstance(real, SqlitePool):
        yield
        return
    with real.writers_turn.taken(db):
        yield


class WritersTurn:
    """SQLite: this process's write transactions take the write lock one after another, in
    the order they ask, before ``BEGIN IMMEDIATE``. Left to SQLite, a writer that finds the
    lock taken sleeps in its busy handler (1, 2, 5 … 100 ms between tries) long after the lock
    is free, and writers that keep coming overtake it. The wait for the turn and the wait for
    the lock together stay within ``busy_timeout`` (the lock's is shortened by the time spent
    waiting for the turn); another process's writers still meet this one in the busy
    handler. One per pool (``SqlitePool.writers_turn``)."""

    SLACK = 0.05  # seconds of waiting for the turn that may go over busy_timeout

    def __init__(self, busy_timeout: float):
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()

    @contextmanager
    def taken(self, db: peewee.Database) -> Iterator[None]:
        """Hold the turn for this thread's write on ``db`` (its connection already taken);
        ``StoreUnavailable`` of kind ``locked`` when it does not come within busy_timeout."""
        budget, asked = self.busy_timeout, time.monotonic()
        if not self._lock.acquire(timeout=budget):
            typed = unavailable(FaultKind.LOCKED)
            health = health_of(db)
            if health is not None:
                health.failed(typed.kind)
            raise typed
        try:
            waited = time.monotonic() - asked
            if waited < self.SLACK:
                yield
                return
            _busy_timeout(db, max(budget - waited, 0.001))
            try:
                yield
            finally:
                with suppress(Exception):  # a connection that cannot take it is failing anyway
                    _busy_timeout(db, budget)
        finally:
            self._lock.release()


def _busy_timeout(db: peewee.Database, seconds: float) -> None:
    db.execute_sql(f"PRAGMA busy_timeout = {math.ceil(seconds * 1000)}")


def checkout(db: peewee.Database) -> bool:
    """Take this thread's connection now, for the units of work that follow (an HTTP request
    holds one): True when this call took it, and the caller must ``checkin``; False when
    one was already open. Raises ``StoreUnavailable`` when none can be had."""
    if not db.is_closed():
        return False
    try:
        db.connect()
    except Exception as exc:
        _raise_typed(db, exc)
    return True


def checkin(db: peewee.Database) -> None:
    """Return this thread's connection (``checkout``) to the pool; a connection the driver
    found lost is discarded instead, so the next check-out opens a fresh one."""
    if not db.is_closed():
        _give_back(db, broken=_driver_lost(db))


def _raise_typed(db: peewee.Database, exc: Exception) -> NoReturn:
    """Raise what ``exc`` means at the store's boundary (itself when it is no driver error);
    a typed error drops the driver's: its text may name the host, not for tracebacks."""
    typed = _typed(db, exc)
    if typed is exc:
        raise exc
    raise typed from None


def _typed(db: peewee.Database, exc: Exception) -> Exception:
    """What ``exc`` becomes at the store's boundary; a ``StoreUnavailable`` is reported."""
    typed = store_error(exc)
    if typed is None:
        return exc
    if isinstance(typed, StoreUnavailable):
        health = health_of(db)
        if health is not None:
            health.failed(typed.kind)
    return typed


def _succeeded(db: peewee.Database, wrote: bool) -> None:
    health = health_of(db)
    if health is not None:
        health.succeeded(wrote)


def _changes(db: peewee.Database, health: StoreHealth | None) -> int | None:
    """SQLite's count of rows this connection changed, read only while an outage waits for a
    write to end it (see ``_wrote``); None otherwise."""
    if health is None or health.available or db.is_closed():
        return None
    return getattr(db.connection(), "total_changes", None)


def _wrote(db: peewee.Database, health: StoreHealth | None, changes: int | None) -> bool:
    """Whether a unit that succeeded during an outage proves writes work again. A ``locked``
    outage ends only so (``health.py``): on SQLite, rows this unit changed (a write outside
    ``write_lock``, such as an autocommit INSERT, counts too). On PostgreSQL a lock timeout is
    contention on the rows one statement waited for, and any answer ends the outage."""
    if health is None or health.available:
        return False
    if is_postgres(db):
        return True
    return (changes is not None and not db.is_closed()
            and getattr(db.connection(), "total_changes", changes) != changes)


def _connection_failed(db: peewee.Database, exc: BaseException) -> bool:
    """Whether ``exc`` (raw or already typed) lost this thread's connection."""
    typed = exc if isinstance(exc, StoreUnavailable) else store_error(exc)
    lost = isinstance(typed, StoreUnavailable) and typed.kind == FaultKind.CONNECTION
    return lost or _driver_lost(db)


def _driver_lost(db: peewee.Database) -> bool:
    """psycopg marks a connection ``closed`` when it finds the server gone (sqlite3 has no
    such flag: a SQLite connection is never lost)."""
    return not db.is_closed() and bool(getattr(db.connection(), "closed", False))


def _give_back(db: peewee.Database, broken: bool) -> None:
    """End this thread's use of its connection: back to the pool, or closed and forgotten
    when ``broken`` (peewee's ``manual_close``), so nothing hands out a dead connection."""
    real = _real(db)
    if real.is_closed():
        return
    if broken and isinstance(real, PooledDatabase):
        real.manual_close()
    else:
        real.close()


@contextmanager
def without_statement_timeouts(db: peewee.Database) -> Iterator[peewee.Database]:
    """This thread's connection with PostgreSQL's statement and lock timeouts lifted, for
    work that may rightly take longer than a request: schema migrations (an index on a large
    table, waiting for another instance's migration). The timeouts are restored before the
    connection goes back to the pool; a connection that failed is discarded anyway. SQLite
    keeps its busy_timeout."""
    with unit_of_work(db):
        if not is_postgres(db):
            yield db
            return
        settings = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
        for name in settings:
            db.execute_sql(f"SET {name} = 0")
        try:
            yield db
        finally:
            if not _driver_lost(db):
                for name in settings:  # to the connection's own options
                    db.execute_sql(f"RESET {name}")


def lock_rows(query: SelectT, db: peewee.Database) -> SelectT:
    """``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite the IMMEDIATE transaction already
    holds the write lock and peewee refuses FOR UPDATE."""
    return query.for_update() if is_postgres(db) else query


def skip_locked(query: SelectT, db: peewee.Database) -> SelectT:
    """``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL: rows another transaction is claiming
    are left to it. On SQLite the IMMEDIATE transaction already holds the write lock."""
    return query.for_update(skip_locked=True) if is_postgres(db) else query


def close_database(db: peewee.Database) -> None:
    """Close this thread's connection and every pooled one (the process is stopping)."""
    real = _real(db)
    if isinstance(real, PooledDatabase):
        real.close_all()
    elif not real.is_closed():
        real.close()


def read_rows(db: peewee.Database, model: type[peewee.Model], sql: str, *params: Any,
              wait_for_disk: bool = True) -> list[SimpleNamespace]:
    """The rows a written-out ``SELECT`` of ``model``'s table returns, each column converted
    as ``model``'s field for it converts it (a foreign key under its ``…_id`` name, as on a
    model instance), without building model instances: on the reads every trigger and every
    execution makes, building them cost peewee more than the read itself. Columns are matched
    by name, so the table's order of columns does not matter. ``wait_for_disk``: see
    ``execute`` (a write that answers rows)."""
    cursor = execute(db, sql, params, wait_for_disk=wait_for_disk)
    converters = _converters_for(model, tuple(column[0] for column in cursor.description))
    return [SimpleNamespace(**{name: convert(value)
                               for (name, convert), value in zip(converters, row, strict=True)})
            for row in cursor.fetchall()]


def dict_rows(query: peewee.SelectBase) -> list[dict[str, Any]]:
    """``query.dicts()``'s rows: column name or alias -> value, converted by peewee. For a
    model's select too, whose rows types-peewee types as model instances even as dicts. Any:
    the values are whatever the columns and aggregates ``query`` selects are."""
    return list(query.dicts())


def rows_of(model: type[peewee.Model], records: list[dict]) -> list[SimpleNamespace]:
    """``read_rows`` for rows the database sent as JSON objects (a ``json_agg`` of them), each
    value converted as ``model``'s field for its column converts it."""
    return [SimpleNamespace(**{name: convert(value) for (name, convert), value
                               in zip(_converters_for(model, tuple(record)), record.values(),
                                      strict=True)})
            for record in records]


def _converters_for(model: type[peewee.Model], names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """``_converters_of``, worked out once for each model and list of columns."""
    converters = _converters.get((model, names))
    if converters is None:
        converters = _converters[(model, names)] = _converters_of(model, names)
    return converters


def _converters_of(model: type[peewee.Model], names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(attribute, converter) for each column: a column ``model`` does not know keeps its
    name and its value."""
    fields = model._meta.columns  # column name -> field
    converters: list[tuple[str, Any]] = []
    for name in names:
        field = fields.get(name)
        if field is None:
            converters.append((name, _same))
        elif isinstance(field, peewee.ForeignKeyField):
            converters.append((field.object_id_name, field.python_value))
        else:
            converters.append((field.name, field.python_value))
    return converters


def _same(value: Any) -> Any:
    return value


# (model, the columns of a cursor) -> their converters; a few entries, one per statement shape
_converters: dict[tuple[type[peewee.Model], tuple[str, ...]], list[tuple[str, Any]]] = {}


def fetch_page(query: peewee.Select, limit: int, offset: int) -> tuple[list, int]:
    """One page of an ordered query and the total. A short page is the last one, so its
    total needs no COUNT: a list costs two queries, three when more pages follow."""
    rows = list(query.limit(limit).offset(offset))
    if len(rows) < limit and (rows or offset == 0):
        return rows, offset + len(rows)
    return rows, query.order_by().count()


def seconds_since(now: datetime, oldest: Any, column: peewee.Field) -> float:
    """Seconds from ``oldest`` (a ``MIN`` of ``column``, which may come back as stored text)
    to ``now``; 0 for no row, never negative."""
    if oldest is None:
        return 0.0
    return max((to_utc(now) - column.python_value(oldest)).total_seconds(), 0.0)
