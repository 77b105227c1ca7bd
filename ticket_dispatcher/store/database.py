"""Database setup: the URL picks the engine, one proxy binds the models (SPEC §9).

Connections have one owner per engine: a pool (issue 7, part 3). Every repository method runs
inside ``unit_of_work``, which takes a connection from the pool for this thread when none is
open and hands it back when the outermost unit ends, so a waitress worker or an actor thread
never holds a connection between units of work. An HTTP request holds one for the whole request
(``http/middleware.py``); the units of work of its handler reuse it. ``autoconnect`` is off: a
query outside a unit of work fails loudly instead of leaking a connection. A caller that needs
several repository calls in one transaction wraps them in ``write_lock(db)``; the inner calls
reuse its connection.

Both engines pool their physical connections, so nothing is reopened per unit of work:

- PostgreSQL: ``PooledPostgresqlDatabase``; a connection older than ``PG_STALE_SECONDS`` is
  closed on its next check-out or check-in and replaced by a new one.
- SQLite: ``PooledSqliteDatabase``. Its pragmas are applied in ``SqliteDatabase._connect``,
  which the pool calls only for a new physical connection, so they are set once per connection.
  ``check_same_thread=False`` lets a returned connection serve the next thread that asks
  (execution-actor threads are short-lived, so thread-local connections would be reopened
  anyway); the pool hands a connection to one thread at a time, and the sqlite3 module is built
  serialized (``sqlite3.threadsafety == 3``). On check-in the pool rolls back any transaction
  left open.

Each pool holds at most ``connection_budget(config)`` connections: one for every thread that
can hold one at the same time. A thread that finds the pool empty waits up to
``POOL_WAIT_SECONDS`` for a connection to come back, then fails with ``MaxConnectionsExceeded``.
``check_capacity`` refuses, at start, a budget a PostgreSQL server cannot serve.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import peewee
from playhouse.pool import PooledDatabase, PooledPostgresqlDatabase, PooledSqliteDatabase

from ticket_dispatcher.config import Config
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.timeutil import to_utc

# The only module-level state of the store (SPEC §9): models reach the database through it.
database_proxy = peewee.DatabaseProxy()

SQLITE_PRAGMAS = (
    ("journal_mode", "wal"),  # readers never block the writer
    ("busy_timeout", 5000),  # wait for the write lock instead of failing at once
    ("foreign_keys", 1),  # ON DELETE CASCADE of rules and rule executions
    ("synchronous", "normal"),  # durable enough with WAL, much faster than FULL
)
# Threads beyond the configured ones that may hold a connection: the supervisor and the
# execution pool actor, plus a margin for the main thread, the scheduler and the CLI or harness.
RUNTIME_CONNECTIONS = 2
MARGIN_CONNECTIONS = 4
POOL_WAIT_SECONDS = 10  # how long a thread waits for a free pooled connection
PG_STALE_SECONDS = 300
PG_CONNECT_TIMEOUT_SECONDS = "5"

_USAGE = "use sqlite:///PATH or postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME"


def connection_budget(config: Config) -> int:
    """The most connections the service can hold at once, the size of its pool.

    One per thread that may hold a connection at the same time (issue 7, part 3):
    ``http.threads`` (one per request), ``trigger_actors`` and ``execution_slots`` (one per
    step of work), 2 for the supervisor and the execution pool actor, and a margin of 4 for the
    main thread, the scheduler and the CLI or test harness.
    """
    return (config.http.threads + config.trigger_actors + config.execution_slots
            + RUNTIME_CONNECTIONS + MARGIN_CONNECTIONS)


DEFAULT_MAX_CONNECTIONS = connection_budget(Config())


def open_database(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> peewee.Database:
    """Build (without connecting) the pooled database a ``database_url`` names.

    ``max_connections`` bounds the pool; pass ``connection_budget(config)``. Raises
    ``ConfigError`` naming ``database_url``; the message never repeats a password.
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
        return _open_sqlite(parts, max_connections)
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(parts, max_connections)
    raise ConfigError(f"database_url: unsupported scheme {scheme!r}; {_USAGE}")


def _open_sqlite(parts: SplitResult, max_connections: int) -> PooledSqliteDatabase:
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
    # of honouring busy_timeout (SPEC §9: atomic('IMMEDIATE') takes the write lock).
    # The pool's ``timeout`` is its wait for a free connection; sqlite3's own busy timeout keeps
    # peewee's default (5 s), the same as the busy_timeout pragma.
    return PooledSqliteDatabase(
        path,
        max_connections=max_connections,
        timeout=POOL_WAIT_SECONDS,
        pragmas=SQLITE_PRAGMAS,
        lock_type="IMMEDIATE",
        returning_clause=True,
        autoconnect=False,
        check_same_thread=False,  # a pooled connection moves between threads (see above)
    )


def _open_postgres(parts: SplitResult, max_connections: int) -> PooledPostgresqlDatabase:
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        raise ConfigError(
            "database_url: PostgreSQL needs the 'postgres' extra (pip install "
            "'ticket-dispatcher[postgres]')"
        ) from None
    dbname = unquote(parts.path[1:])
    if not dbname or "/" in dbname:
        raise ConfigError(f"database_url: malformed PostgreSQL URL; {_USAGE}")
    # Query parameters are libpq connection parameters (sslmode, options, application_name…).
    params: dict[str, object] = dict(parse_qsl(parts.query, keep_blank_values=True))
    params.setdefault("connect_timeout", PG_CONNECT_TIMEOUT_SECONDS)
    if parts.hostname:  # without one libpq uses its default (the local socket)
        params["host"] = parts.hostname
    if parts.port:
        params["port"] = parts.port
    if parts.username:
        params["user"] = unquote(parts.username)
    if parts.password:
        params["password"] = unquote(parts.password)
    return PooledPostgresqlDatabase(
        dbname,
        max_connections=max_connections,
        stale_timeout=PG_STALE_SECONDS,
        timeout=POOL_WAIT_SECONDS,
        autoconnect=False,
        **params,
    )


def pool_size(db: peewee.Database) -> int:
    """The most connections ``db``'s pool opens at once."""
    return _real(db)._max_connections


@dataclass(frozen=True)
class ServerLimit:
    """What a PostgreSQL server lets ordinary roles open: ``max_connections`` less the slots
    reserved for superusers (and, from PostgreSQL 16, for ``pg_use_reserved_connections``)."""

    max_connections: int
    reserved: int

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
            " coalesce(current_setting('reserved_connections', true), '0')::int"
        ).fetchone()
    return ServerLimit(max_connections=row[0], reserved=row[1] + row[2])


def check_capacity(db: peewee.Database, config: Config) -> None:
    """Refuse a configuration whose pool could need more connections than the server allows.

    Raises ``ConfigError`` naming the keys that size the pool. The check is against the whole
    server: other clients (another instance during a rolling update, psql, backups) share it.
    """
    limit = server_limit(db)
    needed = connection_budget(config)
    if limit is None or needed <= limit.allowed:
        return
    raise ConfigError(
        f"database: the configuration needs up to {needed} connections (http.threads "
        f"{config.http.threads} + trigger_actors {config.trigger_actors} + execution_slots "
        f"{config.execution_slots} + {RUNTIME_CONNECTIONS + MARGIN_CONNECTIONS} for the "
        f"runtime), but the PostgreSQL server allows {limit.allowed} (max_connections "
        f"{limit.max_connections} - {limit.reserved} reserved); lower execution_slots, "
        f"trigger_actors or http.threads, or raise the server's max_connections"
    )


def bind(db: peewee.Database) -> None:
    """Point every model at ``db`` (SPEC §9's DatabaseProxy)."""
    database_proxy.initialize(db)


def _real(db: peewee.Database) -> peewee.Database:
    return db.obj if isinstance(db, peewee.DatabaseProxy) else db


def is_postgres(db: peewee.Database) -> bool:
    return isinstance(_real(db), peewee.PostgresqlDatabase)


@contextmanager
def unit_of_work(db: peewee.Database) -> Iterator[peewee.Database]:
    """This thread's connection for one unit of work; reuses an already open one.

    The outermost unit takes a connection from the pool and returns it when it ends.
    """
    if not db.is_closed():
        yield db
        return
    with db.connection_context():
        yield db


@contextmanager
def write_lock(db: peewee.Database) -> Iterator[peewee.Database]:
    """A short write transaction; nested inside another one it becomes a savepoint.

    SQLite: ``BEGIN IMMEDIATE`` takes the database write lock at once. PostgreSQL: a plain
    transaction; callers lock the rows they will change with ``lock_rows`` (SPEC §9).
    """
    with unit_of_work(db):
        atomic = db.atomic("IMMEDIATE") if not is_postgres(db) else db.atomic()
        with atomic:
            yield db


def lock_rows(query: peewee.Select, db: peewee.Database) -> peewee.Select:
    """``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite the IMMEDIATE transaction already
    holds the write lock and peewee refuses FOR UPDATE."""
    return query.for_update() if is_postgres(db) else query


def close_database(db: peewee.Database) -> None:
    """Close this thread's connection and every pooled one (the process is stopping)."""
    real = _real(db)
    if isinstance(real, PooledDatabase):
        real.close_all()
    elif not real.is_closed():
        real.close()


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
