"""Units of work on pooled connections, whichever the engine.

``connect.open_database`` opens the database: the URL picks the engine (``sqlite.py``,
``postgres.py``), whose pool carries it (``engine_of``); what differs between the engines is
asked of it (``engine.py``). This module is the same on both. One proxy binds the models.

Connections have one owner per engine: a pool. Every repository method runs
inside ``unit_of_work``, which takes a connection from the pool for this thread when none is
open and hands it back when the outermost unit ends, so a waitress worker or an actor thread
never holds a connection between units of work. An HTTP request holds one for the whole request
(``http/middleware.py``); the units of work of its handler reuse it. ``autoconnect`` is off: a
query outside a unit of work fails loudly instead of leaking a connection. A caller that needs
several repository calls in one transaction wraps them in ``write_lock(db)``; the inner calls
reuse its connection. Both engines pool their physical connections, so nothing is reopened per
unit of work.

Each pool holds at most ``connection_budget(config)`` connections: one for every thread that
can hold one at the same time. A thread that finds the pool empty waits up to
``database.pool_wait`` for a connection to come back, then fails (``pool_exhausted``).
``check_capacity`` refuses, at start, a budget a PostgreSQL server cannot serve.

Every wait on the database is bounded by ``[database]`` (``DatabaseConfig``), so a request
answers 503 within seconds while the database is away instead of hanging: each engine's
module says how.

Driver errors never leave the store: ``unit_of_work`` and ``write_lock`` (outermost or nested)
and ``checkout`` turn them into ``StoreUnavailable(kind)`` or ``Conflict`` (``faults.py``),
report each unit to the database's ``StoreHealth`` (``health.py``), and a unit that owns its
connection discards it, instead of pooling it again, when the connection failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime
from types import SimpleNamespace
from typing import Any, NoReturn

import peewee
from playhouse.pool import PooledDatabase

from ticket_dispatcher.config import Config, DatabaseConfig
from ticket_dispatcher.errors import ConfigError, StoreUnavailable
from ticket_dispatcher.store.engine import Engine, SelectT
from ticket_dispatcher.store.faults import StoreFaultKind, store_error
from ticket_dispatcher.store.health import StoreHealth
from ticket_dispatcher.timeutil import to_utc

log = logging.getLogger(__name__)

# The only module-level state of the store: models reach the database through it.
database_proxy = peewee.DatabaseProxy()

# Threads beyond the configured ones that may hold a connection: the supervisor and the
# execution pool actor, plus a margin for the main thread, the scheduler and the CLI or harness.
RUNTIME_CONNECTIONS = 2
MARGIN_CONNECTIONS = 4
CLUSTER_LINK_CONNECTIONS = 1  # PostgreSQL: the mode lock and the work channel, outside the pool
DEFAULT_DATABASE = DatabaseConfig()


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


class ServicePool:
    """What this service keeps beside peewee's pool, on the pool classes it opens
    (``sqlite.SqlitePool``, ``postgres.PostgresPool``): its engine (``engine_of``), the most
    connections the pool opens (``pool_size``), how long a thread waits for a free one, and
    the ``StoreHealth`` its units of work report to (``health_of``)."""

    engine: Engine
    pool_limit: int
    pool_wait: float
    store_health: StoreHealth


class Prepared(str):
    """A hot statement, always the same text run with other values: on PostgreSQL each
    connection has it parsed and planned once, the first time it runs it, and runs it from
    that plan afterwards (``postgres.py``); other statements are planned at every run. On
    SQLite it is a plain statement (the sqlite3 module keeps its own cache of compiled
    statements)."""

    __slots__ = ()


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


def check_capacity(db: peewee.Database, config: Config) -> None:
    """Refuse a configuration whose pool could need more connections than the server allows.

    Raises ``ConfigError`` naming the keys that size the pool. The check is against the whole
    server: other clients (another instance during a rolling update, psql, backups) share it.
    A server running without autovacuum is served, with a WARNING: every look at a parked wait
    leaves a dead row, and the planner's statistics never follow the tables.
    """
    limit = engine_of(db).server_limit(db)
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


def engine_of(db: peewee.Database) -> Engine:
    """The engine ``db`` was opened with. ``TypeError`` for a database ``open_database`` did
    not build."""
    return _pool(db).engine


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

    The outermost one waits for its turn among this process's writers, if the engine has
    one (SQLite's ``WritersTurn``), and begins as the engine does: on SQLite ``BEGIN
    IMMEDIATE`` takes the database write lock (or raises ``StoreUnavailable`` of kind
    ``locked`` after ``busy_timeout``); on PostgreSQL a plain transaction, and callers lock
    the rows they will change with ``lock_rows``.
    """
    engine = engine_of(db)
    with unit_of_work(db):
        outermost = db.transaction_depth() == 0
        with engine.writers_turn(db) if outermost else nullcontext():
            with engine.transaction(db):
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
    return engine_of(db).execute(db, sql, params, wait_for_disk=wait_for_disk)


@contextmanager
def one_statement_write(db: peewee.Database) -> Iterator[peewee.Database]:
    """A write that is one statement, atomic by itself: no ``BEGIN`` and ``COMMIT`` around it,
    which on PostgreSQL are two more round trips. It still waits for this process's writers'
    turn (``Engine.writers_turn``), as every ``write_lock`` does; nested inside a transaction
    it is part of that one."""
    engine = engine_of(db)
    with unit_of_work(db):
        with engine.writers_turn(db) if db.transaction_depth() == 0 else nullcontext():
            yield db


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
    """The engine's count of rows this connection changed, read only while an outage waits
    for a write to end it (see ``_wrote``); None otherwise."""
    if health is None or health.available or db.is_closed():
        return None
    return engine_of(db).written_rows(db)


def _wrote(db: peewee.Database, health: StoreHealth | None, changes: int | None) -> bool:
    """Whether a unit that succeeded during an outage proves writes work again. A ``locked``
    outage ends only so (``health.py``), as the engine judges (``Engine.wrote_since``)."""
    if health is None or health.available:
        return False
    return engine_of(db).wrote_since(db, changes)


def _connection_failed(db: peewee.Database, exc: BaseException) -> bool:
    """Whether ``exc`` (raw or already typed) lost this thread's connection."""
    typed = exc if isinstance(exc, StoreUnavailable) else store_error(exc)
    lost = isinstance(typed, StoreUnavailable) and typed.kind == StoreFaultKind.CONNECTION
    return lost or _driver_lost(db)


def _driver_lost(db: peewee.Database) -> bool:
    """Whether the driver found this thread's open connection lost (``Engine.connection_lost``)."""
    return not db.is_closed() and engine_of(db).connection_lost(db)


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
    table, waiting for another instance's migration). SQLite keeps its busy_timeout."""
    with unit_of_work(db), engine_of(db).without_statement_timeouts(db):
        yield db


def lock_rows(query: SelectT, db: peewee.Database) -> SelectT:
    """``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite the IMMEDIATE transaction already
    holds the write lock and peewee refuses FOR UPDATE (``Engine.lock_rows``)."""
    return engine_of(db).lock_rows(query)


def skip_locked(query: SelectT, db: peewee.Database) -> SelectT:
    """``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL: rows another transaction is claiming
    are left to it. On SQLite the IMMEDIATE transaction already holds the write lock
    (``Engine.skip_locked``)."""
    return engine_of(db).skip_locked(query)


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


def rows_of(model: type[peewee.Model], records: list[dict[str, Any]],
            ) -> list[SimpleNamespace]:
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
