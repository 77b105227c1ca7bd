"""The PostgreSQL pool: peewee's pool on psycopg 3, through their public APIs only.

``open_database`` builds it for a ``postgresql://`` URL (``database.py`` says what every pool
does); this module imports psycopg, so only a PostgreSQL store needs the ``postgres`` extra.

- **The pool** is peewee's ``PooledPostgresqlDatabase`` with ``prefer_psycopg3``, sized and
  bounded by its public arguments (``max_connections``, ``timeout`` for the wait of a thread
  that finds it empty, ``stale_timeout``: a connection older than ``PG_STALE_SECONDS`` is
  closed on its next check-out or check-in and replaced).
- **The check-out.** peewee's pool asks the server whether a pooled connection still lives
  (``SELECT 1``) on every check-out, under the lock every check-out and check-in of every
  thread takes, so under load each one queued behind a round trip. This pool asks only when
  the connection sat in the pool ``PG_PING_IDLE_SECONDS`` or longer. A connection the server
  dropped while it was busy fails its first statement instead, and the unit of work discards
  it. peewee reaches the driver through its adapter, whose class a database names in
  ``psycopg3_adapter`` (playhouse's own databases set theirs there): ``_PooledAdapter`` keeps that
  rule.
- **Hot statements planned once.** psycopg prepares a statement on the server, per connection,
  when a connection runs it more than ``prepare_threshold`` times; this pool sets it to 0 and
  its cursors (``_Cursor``, the connections' ``cursor_factory``) let psycopg prepare only the
  statements marked ``Prepared``: each is parsed and planned the first time a connection runs
  it, then run from its plan (psycopg keeps at most ``prepared_max``, 100, per connection and
  deallocates the least recently used). Every other statement is sent as it always was, so
  a statement whose best plan depends on its values (``claim_due``) is planned each time.
- **A plan gone stale** (another replica's migration changed what a table answers, or the
  session lost its statements): the statement fails before it does anything, the connection
  is retired (its statements are run unprepared until the pool closes it at check-in, instead
  of pooling it again) and the statement, outside a transaction, is run again; inside one the
  transaction is lost and its caller is told to do it again (``serialization``).
- **Writes that need not wait for the disk** (``execute_sql(..., wait_for_disk=False)``):
  ``synchronous_commit`` is turned off for the transaction the write runs in, by a statement
  sent ahead of it in one psycopg pipeline, so both reach the server in one round trip and,
  outside an explicit transaction, run in one implicit transaction whose commit does not wait.
"""

from __future__ import annotations

import functools
import time
import weakref
from typing import Any

import peewee
import psycopg
from playhouse.pool import PooledPostgresqlDatabase

from ticket_dispatcher.store.database import Prepared, ServicePool
from ticket_dispatcher.store.faults import FaultKind, unavailable
from ticket_dispatcher.store.health import StoreHealth

PG_STALE_SECONDS = 300
PG_PING_IDLE_SECONDS = 1.0

# A statement prepared on the server whose plan it can no longer use: it does not exist (the
# session was reset under the connection), or its table changed the columns it answers.
_PLAN_GONE = {"26000": "", "0A000": "cached plan must not change result type"}
# Sent ahead of a write that need not wait for the disk, in the same transaction: local to it.
_WITHOUT_FLUSH_WAIT = "SELECT set_config('synchronous_commit', 'off', true)"


# The ignore: peewee's PooledPostgresqlDatabase itself inherits two ``init`` that disagree (the
# untyped PooledDatabase.init and types-peewee's PostgresqlDatabase.init); peewee calls it.
class PostgresPool(ServicePool, PooledPostgresqlDatabase):  # type: ignore[misc]  # init clash
    """peewee's PostgreSQL pool on psycopg 3 (see the module's docstring)."""

    def __init__(self, dbname: str, *, max_connections: int, pool_wait: float, **params: Any):
        self.connections = _Connections()
        # peewee builds its driver adapter by calling this (the class attribute, on
        # PostgresqlDatabase); ours shares what this pool knows of its connections.
        self.psycopg3_adapter = functools.partial(_PooledAdapter, self.connections)
        super().__init__(dbname, max_connections=max_connections, timeout=pool_wait,
                         stale_timeout=PG_STALE_SECONDS, prefer_psycopg3=True,
                         prepare_threshold=0, cursor_factory=_Cursor, **params)
        self.pool_limit = max_connections
        self.pool_wait = pool_wait
        self.store_health = StoreHealth()

    def execute_sql(self, sql: str, params: Any = None, *, wait_for_disk: bool = True) -> Any:
        """peewee's ``execute_sql``, for a ``Prepared`` statement whose plan went stale too
        (see the module's docstring). ``wait_for_disk`` False: the commit of the transaction
        this statement runs in does not wait for its WAL to reach the disk
        (``database.execute``)."""
        if self.is_closed():  # it fails as any statement does without a connection
            return super().execute_sql(sql, params)
        conn = self.connection()
        if type(sql) is Prepared and conn in self.connections.retired:
            sql = str(sql)  # planned afresh until the pool replaces the connection
        try:
            return self._run(conn, sql, params, wait_for_disk)
        except peewee.DatabaseError as exc:
            if type(sql) is not Prepared or not _plan_gone(exc):
                raise
            self.connections.retired.add(conn)
            if self.in_transaction():  # the transaction is lost: its caller does it again
                raise unavailable(FaultKind.SERIALIZATION) from None
            return self._run(conn, str(sql), params, wait_for_disk)

    def _run(self, conn: psycopg.Connection, sql: str, params: Any,
             wait_for_disk: bool) -> Any:
        if wait_for_disk:
            return super().execute_sql(sql, params)
        try:
            with conn.pipeline():
                conn.execute(_WITHOUT_FLUSH_WAIT, prepare=False)
                cursor = super().execute_sql(sql, params)
        except psycopg.Error as exc:  # met when the pipeline ends, outside peewee's call
            raise _as_peewee(exc) from exc
        return cursor

    def open_connection(self) -> psycopg.Connection:
        """A new connection with this pool's parameters, outside the pool, in autocommit:
        the caller owns it and closes it (``cluster.ClusterLink``)."""
        return psycopg.connect(dbname=self.database, autocommit=True, **self.connect_params)


class _Connections:
    """What a pool knows of its connections beyond peewee's pool: when each came back to the
    pool, and which are not to be pooled again (their prepared statements went stale)."""

    def __init__(self) -> None:
        self.returned_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self.retired: weakref.WeakSet[Any] = weakref.WeakSet()


class _PooledAdapter(peewee.Psycopg3Adapter):
    """peewee's psycopg 3 adapter, which its pool asks about a connection at check-in
    (``is_connection_reusable``) and at check-out (``is_connection_closed``)."""

    def __init__(self, connections: _Connections):
        super().__init__()
        self.connections = connections

    def is_connection_reusable(self, conn: Any) -> bool:
        """Check-in: peewee's answer (a transaction left open is rolled back; a lost
        connection is not pooled again), not for a retired connection; notes when a
        connection came back."""
        if conn in self.connections.retired or not super().is_connection_reusable(conn):
            return False
        self.connections.returned_at[conn] = time.monotonic()
        return True

    def is_connection_closed(self, conn: Any) -> bool:
        """Check-out of a pooled connection that is not closed: peewee asks the server each
        time; this asks only when the connection sat in the pool ``PG_PING_IDLE_SECONDS`` or
        longer (or is not idle, which peewee's answer rolls back)."""
        returned = self.connections.returned_at.pop(conn, None)
        if (returned is not None and time.monotonic() - returned < PG_PING_IDLE_SECONDS
                and self.txn_status(conn) == self.txn_idle):
            return False
        return super().is_connection_closed(conn)


class _Cursor(psycopg.Cursor[Any]):
    """The connections' cursors: psycopg prepares the statements marked ``Prepared`` (by the
    connection's ``prepare_threshold``) and no other, unless the caller says otherwise."""

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                binary: bool | None = None) -> _Cursor:
        if prepare is None and type(query) is not Prepared:
            prepare = False
        return super().execute(query, params, prepare=prepare, binary=binary)


# peewee's exceptions, by the DB-API name of the driver's exception each stands for.
_PEEWEE_ERRORS: dict[str, type[peewee.PeeweeException]] = {cls.__name__: cls for cls in (
    peewee.IntegrityError, peewee.DataError, peewee.ProgrammingError, peewee.NotSupportedError,
    peewee.InternalError, peewee.OperationalError, peewee.InterfaceError, peewee.DatabaseError)}


def _as_peewee(exc: psycopg.Error) -> Exception:
    """The exception peewee raises for ``exc`` (the driver's kept as its ``orig``), as its
    ``execute_sql`` does for an error met inside it."""
    for cls in type(exc).__mro__:
        if cls.__name__ in _PEEWEE_ERRORS:
            return _PEEWEE_ERRORS[cls.__name__](exc, *exc.args)
    return exc


def _plan_gone(exc: BaseException) -> bool:
    driver = getattr(exc, "orig", None) or exc
    message = _PLAN_GONE.get(getattr(driver, "sqlstate", None) or "")
    return message is not None and message in str(driver)
