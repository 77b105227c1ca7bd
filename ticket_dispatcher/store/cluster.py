"""Several processes on one PostgreSQL database (docs/operations.md, "High availability").

- **The mode lock.** Every serving process holds a session advisory lock on the database: a
  single-mode process the exclusive one, a shared-mode replica the shared one. So a
  single-mode process cannot start beside another process, and a replica cannot start beside a
  single-mode process: each is refused at start with a message that says why.
- **The work channel.** Replicas wake each other through ``LISTEN``/``NOTIFY`` on one channel:
  a notification says only "there may be work to claim"; what there is, and who takes it, is
  decided by the claims themselves (``FOR UPDATE SKIP LOCKED`` under leases).

The mode lock and the channel belong to the schema the tables live in (``current_schema()``,
computed by the server), so two services in two schemas of one database stay apart.
- **The issue lock.** Creating executions takes a transaction-scoped advisory lock on the issue,
  so the check of the live locks and the insert are one step across replicas.

``ClusterLink`` holds the lock and listens on its own connection, outside the pool, with a
thread that waits on it. When the connection is lost (the database went away) it reconnects
with a backoff, takes the lock again and reports work, since notifications sent meanwhile
are lost. SQLite needs none of this: a file is served by one process (``ProcessLock``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import peewee

from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.store.database import _real, engine_of
from ticket_dispatcher.store.engine import WORK_CHANNEL

if TYPE_CHECKING:
    import psycopg

    from ticket_dispatcher.store.postgres import PostgresPool

log = logging.getLogger(__name__)

# Advisory lock keys are two int4: a class that is this service's, and an object.
_LOCK_CLASS = 0x7464_6973  # "tdis"
_MODE_LOCK_OBJECT = "hashtext(current_schema())"
WAIT_SECONDS = 1.0  # how often the listening thread looks at its stop flag
RECONNECT_FIRST, RECONNECT_MAX = 0.5, 10.0


def notify_work(db: peewee.Database) -> None:
    """Tell every replica there may be work to claim. Inside a transaction the notification
    is sent when it commits (and never if it rolls back). The engine says how (nothing on
    SQLite: engine.py)."""
    engine_of(db).notify_work(db)


def lock_issue(db: peewee.Database, issue_key: str) -> None:
    """Serialize, across replicas, the transactions that create executions for ``issue_key``:
    the lock lasts until the current transaction ends. The engine says how (on SQLite the
    write lock already serializes every writer)."""
    engine_of(db).lock_issue(db, issue_key)


class ModeLock(Protocol):
    """How a process holds its database on the cluster link's connection (actors/cluster.py
    picks one by ``cluster.mode``)."""

    def take(self, cursor: psycopg.Cursor) -> None:
        """Take the mode lock, and whatever else the link holds; ``ConfigError`` when the
        lock is refused."""


class SoleProcessLock:
    """Single mode: the exclusive mode lock. Nobody tells a sole process of work, so it
    listens to nothing."""

    def take(self, cursor: psycopg.Cursor) -> None:
        _try_lock(cursor, "pg_try_advisory_lock", (
            "cluster.mode: another ticket-dispatcher process already serves this "
            "PostgreSQL database; in single mode only one may (set cluster.mode = "
            "\"shared\" on every process to run several)"))


class ReplicaLock:
    """Shared mode: the shared mode lock, and ``LISTEN`` on the work channel."""

    def take(self, cursor: psycopg.Cursor) -> None:
        _try_lock(cursor, "pg_try_advisory_lock_shared", (
            "cluster.mode: a ticket-dispatcher process in single mode serves this "
            "PostgreSQL database; stop it, or set cluster.mode = \"shared\" on it too"))
        cursor.execute(f"SELECT {WORK_CHANNEL}")
        cursor.execute(f'LISTEN "{_answer(cursor)}"')


SOLE_PROCESS_LOCK, REPLICA_LOCK = SoleProcessLock(), ReplicaLock()


def _try_lock(cursor: psycopg.Cursor, function: str, refusal: str) -> None:
    cursor.execute(f"SELECT {function}(%s, {_MODE_LOCK_OBJECT})", (_LOCK_CLASS,))
    if not _answer(cursor):
        raise ConfigError(refusal)


class ClusterLink:
    """This process's own PostgreSQL connection: the mode ``lock`` and, for a replica, the work
    channel. ``on_work`` is called from the listening thread for each batch of notifications
    and after every reconnect; it must not block for long."""

    def __init__(self, db: peewee.Database, *, lock: ModeLock, on_work: Callable[[], None]):
        self._db = cast("PostgresPool", _real(db))
        self._lock = lock
        self._on_work = on_work
        self._conn: psycopg.Connection | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Take the mode lock (``ConfigError`` when refused) and start listening."""
        self._conn = self._connect()
        self._thread = threading.Thread(target=self._run, name="cluster-link", daemon=True)
        self._thread.start()

    def _connect(self) -> psycopg.Connection:
        conn = self._db.open_connection()  # a new one, outside the pool, in autocommit
        try:
            with conn.cursor() as cursor:
                self._lock.take(cursor)
        except BaseException:
            conn.close()
            raise
        return conn

    def _run(self) -> None:
        backoff = RECONNECT_FIRST
        while not self._stop.is_set():
            if self._conn is None:
                if self._stop.wait(backoff):
                    return
                try:
                    self._conn = self._connect()
                except ConfigError as exc:  # another mode took the database meanwhile
                    log.error("cluster link refused after a reconnect", extra={
                        "reason": exc.message})
                    backoff = min(backoff * 2, RECONNECT_MAX)
                    continue
                except Exception:
                    backoff = min(backoff * 2, RECONNECT_MAX)
                    continue
                backoff = RECONNECT_FIRST
                log.info("cluster link connected again")
                self._on_work()  # notifications sent while it was away are lost
            try:
                self._wait()
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.warning("cluster link lost; reconnecting", extra={
                    "reason": type(exc).__name__})
                self._drop()

    def _wait(self) -> None:
        """Wait up to ``WAIT_SECONDS`` for notifications; one call of ``on_work`` for all that
        came together. A lost connection raises."""
        assert self._conn is not None
        if any(True for _ in self._conn.notifies(timeout=WAIT_SECONDS, stop_after=1)):
            self._on_work()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def close(self) -> None:
        """Stop listening and give the mode lock back (closing the session does)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(WAIT_SECONDS * 2)
        self._drop()


def _answer(cursor: psycopg.Cursor) -> Any:
    """The one value a one-row ``SELECT`` answered."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]
