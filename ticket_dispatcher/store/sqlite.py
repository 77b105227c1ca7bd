"""The SQLite engine: its pool, this process's writers' turn and its claim on the file.

``connect.open_database`` opens it for a ``sqlite:///PATH`` URL; ``database.py`` says what
every pool does.

- **The pool** is peewee's ``PooledSqliteDatabase``. peewee applies the pragmas to each new
  physical connection, so they are set once per connection, ``busy_timeout`` first: every
  other pragma then waits for a lock as long. ``check_same_thread=False`` lets a returned
  connection serve the next thread that asks; the pool hands a connection to one thread at a
  time, and the sqlite3 module is built serialized (``sqlite3.threadsafety == 3``). On check-in
  the pool rolls back any transaction left open.
- **Every transaction takes the write lock up front** (``BEGIN IMMEDIATE``): a deferred
  transaction that upgrades from reading to writing fails at once with ``SQLITE_BUSY`` in WAL
  mode instead of honouring ``busy_timeout``. That lock already serializes every writer, so
  no statement locks rows, skips locked ones or takes an advisory lock.
- **The writers' turn** (``WritersTurn``): this process's write transactions take the lock
  one after another, in the order they ask.
- **One process per file** (``ProcessLock``).
- **What the planner is told**: ``+column`` keeps SQLite's planner, which has no statistics,
  off an index that would read every running row (``unindexed``).
"""

from __future__ import annotations

import fcntl
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import SplitResult, unquote

import peewee
from playhouse.pool import PooledSqliteDatabase

from ticket_dispatcher.config import DatabaseConfig
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.store.database import ServicePool, health_of, write_lock
from ticket_dispatcher.store.engine import URL_USAGE, ColumnTypes, SelectT, ServerLimit
from ticket_dispatcher.store.faults import StoreFaultKind, unavailable
from ticket_dispatcher.store.health import StoreHealth
from ticket_dispatcher.store.models import placeholders

SQLITE_PRAGMAS = (
    ("journal_mode", "wal"),  # readers never block the writer
    ("foreign_keys", 1),  # ON DELETE CASCADE of rules and rule executions
    ("synchronous", "normal"),  # durable enough with WAL, much faster than FULL
    # Reads come from one shared mapping of the file instead of each pooled connection's own
    # cache, which SQLite empties whenever another connection has written since its last read:
    # on a busy service nearly every read transaction. Read only: a bad pointer cannot write.
    ("mmap_size", 256 * 1024 * 1024),
)
COLUMN_TYPES = ColumnTypes(pk="INTEGER PRIMARY KEY AUTOINCREMENT", bigint="INTEGER",
                           json="TEXT", time="TEXT", bool="INTEGER")


def open_sqlite(parts: SplitResult, max_connections: int,
                database: DatabaseConfig) -> SqlitePool:
    """The pool of the file a ``sqlite:///PATH`` URL names (``ConfigError`` when unusable)."""
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if parts.netloc or not path or parts.query:
        raise ConfigError(f"database_url: malformed SQLite URL; {URL_USAGE}")
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
        self.engine = SqliteEngine(self)


class SqliteEngine:
    """SQLite as the store uses it (``engine.Engine`` says what each member is)."""

    several_processes = False
    one_statement_writes = False  # SQLite has no data-modifying WITH
    column_types = COLUMN_TYPES
    skip_locked_clause = ""

    def __init__(self, pool: SqlitePool):
        self._pool = pool

    def transaction(self, db: peewee.Database) -> AbstractContextManager[Any]:
        return db.atomic("IMMEDIATE")

    def writers_turn(self, db: peewee.Database) -> AbstractContextManager[None]:
        return self._pool.writers_turn.taken(db)

    def execute(self, db: peewee.Database, sql: str, params: Sequence[Any], *,
                wait_for_disk: bool) -> Any:
        # In WAL mode with synchronous=NORMAL no commit waits for the disk anyway.
        return db.execute_sql(sql, params)

    def readiness(self, db: peewee.Database) -> AbstractContextManager[Any]:
        # Another process holding the write lock stops every write while reads go on; an
        # empty transaction writes nothing.
        return write_lock(db)

    def written_rows(self, db: peewee.Database) -> int | None:
        return int(db.connection().total_changes)

    def wrote_since(self, db: peewee.Database, before: int | None) -> bool:
        # A ``locked`` outage ends only with a write: rows this unit changed (a write outside
        # ``write_lock``, such as an autocommit INSERT, counts too).
        return (before is not None and not db.is_closed()
                and db.connection().total_changes != before)

    def connection_lost(self, db: peewee.Database) -> bool:
        return False  # a connection to a file is never lost

    def without_statement_timeouts(self, db: peewee.Database) -> AbstractContextManager[None]:
        return nullcontext()  # busy_timeout stays

    def lock_rows(self, query: SelectT) -> SelectT:
        return query  # peewee refuses FOR UPDATE, and the write lock is held already

    def skip_locked(self, query: SelectT) -> SelectT:
        return query

    def among(self, column: str, values: Sequence[Any], array_type: str) -> tuple[str, tuple]:
        return f"{column} IN ({placeholders(self._pool.param, len(values))})", tuple(values)

    def unindexed(self, column: peewee.Field) -> peewee.ColumnBase:
        return peewee.NodeList((peewee.SQL("+"), column), glue="")

    def unindexed_name(self, name: str) -> str:
        return f"+{name}"

    def epoch_seconds(self, column: str) -> str:
        return f"((julianday({column}) - 2440587.5) * 86400.0)"  # the epoch's Julian day

    def month_number(self, column: str) -> str:
        # stored as text, 'yyyy-mm-dd hh:mm:ss.ffffff'
        return f"CAST(substr({column}, 1, 4) || substr({column}, 6, 2) AS INTEGER)"

    def day_text(self, column: str) -> str:
        return f"substr({column}, 1, 10)"

    def joined_numbers(self, column: str) -> str:
        return f"group_concat({column}, ',')"

    def json_elements(self, column: str, alias: str) -> str:
        return f"json_each({column}) {alias}"

    def after_insert(self, name: str, table: str, statement: str) -> list[str]:
        return [f"DROP TRIGGER IF EXISTS {name}",
                f"CREATE TRIGGER {name} AFTER INSERT ON {table} BEGIN {statement}; END"]

    def covering_key(self, key: str, values: str) -> tuple[str, str]:
        """The rows kept in the key's order, in its b-tree, without a rowid."""
        return f"PRIMARY KEY ({key})", " WITHOUT ROWID"

    def join_each(self, table: str, alias: str, condition: Callable[[str], str]) -> str:
        return f"LEFT JOIN {table} {alias} ON {condition(alias)}"

    def stored_time(self, moment: datetime) -> datetime | str:
        # Text with a fixed six-digit fraction, so that text order is time order.
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")

    def lock_migrations(self, db: peewee.Database) -> None:
        """Nothing: another process's migration waits at ``BEGIN IMMEDIATE``."""

    def server_limit(self, db: peewee.Database) -> ServerLimit | None:
        return None

    def explain(self, db: peewee.Database, sql: str, params: Sequence[Any]) -> list[str]:
        return [str(row[-1]) for row in
                db.execute_sql(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()]

    def notify_work(self, db: peewee.Database) -> None:
        """Nothing: one process serves a file, and it knows its own work."""

    def lock_issue(self, db: peewee.Database, issue_key: str) -> None:
        """Nothing: the write lock already serializes every writer."""

    def process_lock(self) -> ProcessLock:
        # The file's write lock and this process's pool, queue and leases assume one process.
        return ProcessLock(Path(f"{self._pool.database}.serve.lock"))

    def is_missing(self) -> bool:
        return not Path(self._pool.database).is_file()


class WritersTurn:
    """This process's write transactions take the write lock one after another, in the order
    they ask, before ``BEGIN IMMEDIATE``. Left to SQLite, a writer that finds the lock taken
    sleeps in its busy handler (1, 2, 5 … 100 ms between tries) long after the lock is free,
    and writers that keep coming overtake it. The wait for the turn and the wait for the lock
    together stay within ``busy_timeout`` (the lock's is shortened by the time spent waiting
    for the turn); another process's writers still meet this one in the busy handler. One per
    pool (``SqlitePool.writers_turn``)."""

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
            typed = unavailable(StoreFaultKind.LOCKED)
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
