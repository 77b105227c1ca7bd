"""Database setup: the URL picks the engine, one proxy binds the models (SPEC §9).

Connections: peewee keeps one connection per thread. Every repository method runs inside
``unit_of_work``, which opens this thread's connection when none is open and closes it when the
unit ends, so a waitress worker or an actor thread never holds a connection between units of
work (SPEC §9 "opened and closed per unit of work"). ``autoconnect`` is off: a query outside a
unit of work fails loudly instead of leaking a connection. A caller that needs several repository
calls in one transaction wraps them in ``write_lock(db)``; the inner calls reuse its connection.

PostgreSQL connections come from a small pool (closing returns them), SQLite ones are opened per
unit of work (cheap; a pooled SQLite connection cannot move between threads).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import peewee
from playhouse.pool import PooledPostgresqlDatabase

from ticket_dispatcher.errors import ConfigError

# The only module-level state of the store (SPEC §9): models reach the database through it.
database_proxy = peewee.DatabaseProxy()

SQLITE_PRAGMAS = (
    ("journal_mode", "wal"),  # readers never block the writer
    ("busy_timeout", 5000),  # wait for the write lock instead of failing at once
    ("foreign_keys", 1),  # ON DELETE CASCADE of rules and rule executions
    ("synchronous", "normal"),  # durable enough with WAL, much faster than FULL
)
# Pool sizing: waitress threads + trigger actors + execution slots + headroom.
PG_MAX_CONNECTIONS = 32
PG_STALE_SECONDS = 300
PG_WAIT_SECONDS = 10
PG_CONNECT_TIMEOUT_SECONDS = "5"

_USAGE = "use sqlite:///PATH or postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME"


def open_database(url: str) -> peewee.Database:
    """Build (without connecting) the database a ``database_url`` names.

    Raises ``ConfigError`` naming ``database_url``; the message never repeats a password.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"database_url: not a database URL; {_USAGE}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit validates the port lazily
    except ValueError:
        raise ConfigError(f"database_url: malformed URL; {_USAGE}") from None
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        return _open_sqlite(parts)
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(parts)
    raise ConfigError(f"database_url: unsupported scheme {scheme!r}; {_USAGE}")


def _open_sqlite(parts: SplitResult) -> peewee.SqliteDatabase:
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if parts.netloc or not path or parts.query:
        raise ConfigError(f"database_url: malformed SQLite URL; {_USAGE}")
    if path == ":memory:" or path.startswith("file:"):
        # Each thread and each unit of work would see its own, empty database.
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
    return peewee.SqliteDatabase(
        path,
        pragmas=SQLITE_PRAGMAS,
        timeout=5,
        lock_type="IMMEDIATE",
        returning_clause=True,
        autoconnect=False,
    )


def _open_postgres(parts: SplitResult) -> peewee.PostgresqlDatabase:
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
        max_connections=PG_MAX_CONNECTIONS,
        stale_timeout=PG_STALE_SECONDS,
        timeout=PG_WAIT_SECONDS,
        autoconnect=False,
        **params,
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
    """This thread's connection for one unit of work; reuses an already open one."""
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
    """Close this thread's connection and, for a pool, every idle pooled connection."""
    real = _real(db)
    if isinstance(real, PooledPostgresqlDatabase):
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
