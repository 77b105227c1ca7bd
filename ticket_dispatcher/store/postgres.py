"""The PostgreSQL engine: peewee's pool on psycopg 3, through their public APIs only.

``connect.open_database`` opens it for a ``postgresql://`` URL (``database.py`` says what every
pool does); this module imports psycopg, so only a PostgreSQL store needs the ``postgres``
extra.

- **The connection's bounds.** libpq's ``connect_timeout`` for a new connection;
  ``statement_timeout`` for one statement and ``lock_timeout`` (``busy_timeout``, at most the
  statement timeout) for one lock wait, both sent as ``options`` before the URL's own (which
  therefore win), with JIT and parallel workers off (``_session_options`` says why); TCP
  keepalives and ``tcp_user_timeout`` so a connection whose peer vanished errors out instead
  of waiting for an answer that never comes. URL query parameters override any of these.
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
- **What the statements say differently** (``PostgresEngine``): rows are locked
  (``FOR UPDATE``) and claimed past the locked ones (``SKIP LOCKED``); a list of values is one
  array parameter; a write of several tables is one statement (data-modifying ``WITH``); a
  migration holds an advisory lock.
"""

from __future__ import annotations

import functools
import math
import time
import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote

import peewee
import psycopg
from playhouse.pool import PooledPostgresqlDatabase

from ticket_dispatcher.config import DatabaseConfig
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.store.database import Prepared, ServicePool, unit_of_work
from ticket_dispatcher.store.engine import (
    ISSUE_LOCK_CLASS,
    URL_USAGE,
    WORK_CHANNEL,
    ColumnTypes,
    SelectT,
    ServerLimit,
)
from ticket_dispatcher.store.faults import StoreFaultKind, unavailable
from ticket_dispatcher.store.health import StoreHealth
from ticket_dispatcher.store.models import array_literal

PG_STALE_SECONDS = 300
PG_PING_IDLE_SECONDS = 1.0
# TCP keepalive probes of an idle connection (one waiting for an answer is idle to TCP): the
# first after connect_timeout, then every PG_KEEPALIVE_INTERVAL seconds, and the connection is
# dropped after PG_KEEPALIVE_COUNT unanswered ones.
PG_KEEPALIVE_INTERVAL = 1
PG_KEEPALIVE_COUNT = 3
# Any constant works: it only keeps two processes from migrating the same database at once.
MIGRATION_LOCK = 0x7D15_9A7C
COLUMN_TYPES = ColumnTypes(pk="BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                           bigint="BIGINT", json="JSONB", time="TIMESTAMP", bool="BOOLEAN")

# A statement prepared on the server whose plan it can no longer use: it does not exist (the
# session was reset under the connection), or its table changed the columns it answers.
_PLAN_GONE = {"26000": "", "0A000": "cached plan must not change result type"}
# Sent ahead of a write that need not wait for the disk, in the same transaction: local to it.
_WITHOUT_FLUSH_WAIT = "SELECT set_config('synchronous_commit', 'off', true)"


def open_postgres(parts: SplitResult, max_connections: int,
                  database: DatabaseConfig) -> PostgresPool:
    """The pool of the database a ``postgresql://`` URL names (``ConfigError`` when the URL is
    malformed); its query parameters are libpq's (sslmode, options, application_name…)."""
    dbname = unquote(parts.path[1:])
    if not dbname or "/" in dbname:
        raise ConfigError(f"database_url: malformed PostgreSQL URL; {URL_USAGE}")
    text_params = dict(parse_qsl(parts.query, keep_blank_values=True))
    for name, value in _connection_timeouts(database).items():
        text_params.setdefault(name, value)
    text_params["options"] = " ".join(filter(None, (_session_options(database),
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
    return PostgresPool(
        dbname,
        max_connections=max_connections,
        pool_wait=database.pool_wait.total_seconds(),
        autoconnect=False,
        **params,
    )


def _connection_timeouts(database: DatabaseConfig) -> dict[str, str]:
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


def _session_options(database: DatabaseConfig) -> str:
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
        self.engine = PostgresEngine(self)

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
                raise unavailable(StoreFaultKind.SERIALIZATION) from None
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


class PostgresEngine:
    """PostgreSQL as the store uses it (``engine.Engine`` says what each member is)."""

    several_processes = True
    one_statement_writes = True
    column_types = COLUMN_TYPES
    skip_locked_clause = " FOR UPDATE SKIP LOCKED"

    def __init__(self, pool: PostgresPool):
        self._pool = pool

    def transaction(self, db: peewee.Database) -> AbstractContextManager[Any]:
        return db.atomic()  # callers lock the rows they will change (``lock_rows``)

    def writers_turn(self, db: peewee.Database) -> AbstractContextManager[None]:
        return nullcontext()

    def execute(self, db: peewee.Database, sql: str, params: Sequence[Any], *,
                wait_for_disk: bool) -> Any:
        if wait_for_disk:
            return db.execute_sql(sql, params)
        return self._pool.execute_sql(sql, params, wait_for_disk=False)

    def readiness(self, db: peewee.Database) -> AbstractContextManager[Any]:
        return unit_of_work(db)

    def written_rows(self, db: peewee.Database) -> int | None:
        return None

    def wrote_since(self, db: peewee.Database, before: int | None) -> bool:
        # A lock timeout is contention on the rows one statement waited for: any answer ends
        # the outage.
        return True

    def connection_lost(self, db: peewee.Database) -> bool:
        return bool(db.connection().closed)  # psycopg marks it when it finds the server gone

    @contextmanager
    def without_statement_timeouts(self, db: peewee.Database) -> Iterator[None]:
        """The timeouts are restored before the connection goes back to the pool; a
        connection that failed is discarded anyway."""
        settings = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
        for name in settings:
            db.execute_sql(f"SET {name} = 0")
        try:
            yield
        finally:
            if db.is_closed() or not self.connection_lost(db):
                for name in settings:  # to the connection's own options
                    db.execute_sql(f"RESET {name}")

    def lock_rows(self, query: SelectT) -> SelectT:
        return query.for_update()

    def skip_locked(self, query: SelectT) -> SelectT:
        return query.for_update(skip_locked=True)

    def among(self, column: str, values: Sequence[Any], array_type: str) -> tuple[str, tuple]:
        """One array parameter (``= ANY``), so the statement's text is the same whatever the
        count: one prepared statement and plan, and psycopg converts the query once rather
        than at every execution (it keeps the conversion only of queries of at most 50
        parameters, which a rotation of 50 engineers passes)."""
        return f"{column} = ANY({self._pool.param}::{array_type})", (array_literal(values),)

    def unindexed(self, column: peewee.Field) -> peewee.ColumnBase:
        return column  # the planner chooses by its statistics

    def unindexed_name(self, name: str) -> str:
        return name

    def epoch_seconds(self, column: str) -> str:
        return f"EXTRACT(EPOCH FROM {column})"  # a timestamp without time zone: taken as UTC

    def month_number(self, column: str) -> str:
        return (f"CAST(EXTRACT(YEAR FROM {column}) * 100 + EXTRACT(MONTH FROM {column}) "
                "AS INTEGER)")

    def day_text(self, column: str) -> str:
        return f"to_char({column}, 'YYYY-MM-DD')"

    def joined_numbers(self, column: str) -> str:
        return f"string_agg(CAST({column} AS text), ',')"

    def json_elements(self, column: str, alias: str) -> str:
        return f"jsonb_array_elements_text({column}) AS {alias}(value)"

    def after_insert(self, name: str, table: str, statement: str) -> list[str]:
        """A row trigger calling a PL/pgSQL function of the same name."""
        return [f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN {statement}; RETURN NULL; END $$",
                f"DROP TRIGGER IF EXISTS {name} ON {table}",
                f"CREATE TRIGGER {name} AFTER INSERT ON {table} FOR EACH ROW "
                f"EXECUTE FUNCTION {name}()"]

    def covering_key(self, key: str, values: str) -> tuple[str, str]:
        """The values in the key's index as well (an index-only scan, once vacuumed)."""
        return f"PRIMARY KEY ({key}) INCLUDE ({values})", ""

    def join_each(self, table: str, alias: str, condition: Callable[[str], str]) -> str:
        """A lateral subquery, with OFFSET 0 to keep the planner from folding the lookup into
        a join that hashes every row of ``table`` the condition's values allow, whoever it is
        for."""
        return (f"LEFT JOIN LATERAL (SELECT * FROM {table} o WHERE {condition('o')} OFFSET 0) "
                f"{alias} ON TRUE")

    def stored_time(self, moment: datetime) -> datetime | str:
        return moment  # a TIMESTAMP column takes the datetime

    def lock_migrations(self, db: peewee.Database) -> None:
        db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))

    def explain(self, db: peewee.Database, sql: str, params: Sequence[Any]) -> list[str]:
        return [str(row[0]) for row in db.execute_sql(f"EXPLAIN {sql}", params).fetchall()]

    def server_limit(self, db: peewee.Database) -> ServerLimit:
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

    def notify_work(self, db: peewee.Database) -> None:
        db.execute_sql(f"SELECT pg_notify({WORK_CHANNEL}, '')")

    def lock_issue(self, db: peewee.Database, issue_key: str) -> None:
        key = zlib.crc32(issue_key.encode()) - 2**31  # an int4
        db.execute_sql("SELECT pg_advisory_xact_lock(%s, %s)", (ISSUE_LOCK_CLASS, key))

    def process_lock(self) -> None:
        return None  # the mode lock of ``cluster.py`` says which processes may serve

    def is_missing(self) -> bool:
        return False  # connecting never creates a database


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
