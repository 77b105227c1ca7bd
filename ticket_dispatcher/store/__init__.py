"""The store: peewee models, one repository per aggregate, migrations.

``Store.for_url(url, registry=..., max_connections=connection_budget(config),
database=config.database)`` builds the pooled database for a ``database_url``, its waits bounded
by ``[database]``, and binds the models to it; it neither connects nor migrates.
The action registry (the product's by default) is what policy activation validates against.
Repositories take this thread's connection from the pool per unit of work (see ``database.py``),
so one ``Store`` is shared by every waitress worker and actor thread.
``Store.check_capacity(config)`` refuses at start a configuration the database server cannot
serve.

A failing database surfaces as ``StoreUnavailable`` (retryable, with a ``kind``) or, for an
integrity violation, ``Conflict``; no driver error leaves the store. ``Store.health`` follows
outages (``health.py``); ``Store.connection()`` / ``checkout()`` / ``checkin()`` hold one
connection across several repository calls (an HTTP request).
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from datetime import timedelta

import peewee

from ticket_dispatcher.config import AuditConfig, Config, DatabaseConfig
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.store import migrations
from ticket_dispatcher.store.audit import AuditRepository
from ticket_dispatcher.store.burden import BurdenRepository
from ticket_dispatcher.store.calendar_feeds import CalendarFeedRepository
from ticket_dispatcher.store.card_presses import CardPressRepository
from ticket_dispatcher.store.connect import open_database
from ticket_dispatcher.store.console_sessions import ConsoleSessionRepository
from ticket_dispatcher.store.contexts import ContextRepository
from ticket_dispatcher.store.database import (
    DEFAULT_DATABASE,
    DEFAULT_MAX_CONNECTIONS,
    attach_health,
    bind,
    check_capacity,
    checkin,
    checkout,
    close_database,
    connection_budget,
    engine_of,
    lock_rows,
    unit_of_work,
    without_statement_timeouts,
    write_lock,
)
from ticket_dispatcher.store.deliveries import DeliveryRepository
from ticket_dispatcher.store.engine import Engine, ServingClaim
from ticket_dispatcher.store.engineers import EngineerRepository
from ticket_dispatcher.store.executions import ExecutionRepository
from ticket_dispatcher.store.faults import StoreFaultKind, driver_detail
from ticket_dispatcher.store.health import StoreHealth, StoreHealthListener
from ticket_dispatcher.store.maintenance import MaintenanceRepository
from ticket_dispatcher.store.policies import PolicyRepository
from ticket_dispatcher.store.replicas import ReplicaRepository
from ticket_dispatcher.store.shadows import ShadowRepository
from ticket_dispatcher.store.time_off import TimeOffRepository
from ticket_dispatcher.store.triggers import TriggerRepository

logger = logging.getLogger(__name__)

# What a command that opens the store may meet from the database: the typed failure, or a
# driver error the store does not type (bad SQL, a missing privilege). ``driver_detail`` says
# what happened, for the operator who configured the database.
DATABASE_ERRORS: tuple[type[Exception], ...] = (StoreUnavailable, peewee.PeeweeException)

__all__ = [
    "DATABASE_ERRORS",
    "CalendarFeedRepository",
    "ContextRepository",
    "EngineerRepository",
    "ExecutionRepository",
    "StoreFaultKind",
    "PolicyRepository",
    "Store",
    "StoreHealth",
    "StoreHealthListener",
    "TimeOffRepository",
    "TriggerRepository",
    "connection_budget",
    "driver_detail",
    "lock_rows",
    "open_database",
    "unit_of_work",
    "write_lock",
]

DEFAULT_AUDIT_RETENTION = AuditConfig().retention


class Store:
    def __init__(self, db: peewee.Database, registry: ActionRegistry | None = None,
                 audit_retention: timedelta = DEFAULT_AUDIT_RETENTION):
        # The models reach the database through the proxy; bind it here so a Store built
        # from any database is always the one its repositories query.
        bind(db)
        self.db = db
        # What differs between the database engines: asked, never branched on.
        self.engine: Engine = engine_of(db)
        # Outages of this database: its units of work report here, the metrics listen.
        self.health: StoreHealth = attach_health(db)
        # The actions this service runs: activation refuses a policy they cannot.
        self.registry = registry if registry is not None else product_registry()
        self.policies = PolicyRepository(db, self.registry)
        self.time_off = TimeOffRepository(db)
        self.calendar_feeds = CalendarFeedRepository(db)
        self.engineers = EngineerRepository(db, self.time_off)
        self.contexts = ContextRepository(db)
        self.triggers = TriggerRepository(db)
        self.deliveries = DeliveryRepository(db)
        self.burden = BurdenRepository(db, self.engineers)
        self.executions = ExecutionRepository(db, self.contexts, self.burden)
        self.replicas = ReplicaRepository(db)
        self.shadows = ShadowRepository(db, self.executions)
        self.console_sessions = ConsoleSessionRepository(db)
        self.audit = AuditRepository(db, audit_retention)
        self.maintenance = MaintenanceRepository(db)
        self.card_presses = CardPressRepository(db, self.executions)
        self._process_lock: ServingClaim | None = None  # held while serving a SQLite file

    @classmethod
    def for_url(cls, url: str, *, registry: ActionRegistry | None = None,
             max_connections: int = DEFAULT_MAX_CONNECTIONS,
             database: DatabaseConfig = DEFAULT_DATABASE,
             audit_retention: timedelta = DEFAULT_AUDIT_RETENTION) -> Store:
        """The store for ``url`` (``ConfigError`` when unusable); does not connect or migrate.

        ``registry``: the action types policies may use, the product's by default.
        ``max_connections`` sizes the connection pool: ``connection_budget(config)`` for the
        service; the default is the budget of the default configuration. ``database``: the
        timeouts of every wait on the database (``config.database``). ``audit_retention``: how long
        audit records are kept (``config.audit.retention``).
        """
        return cls(open_database(url, max_connections, database), registry, audit_retention)

    def check_capacity(self, config: Config) -> None:
        """``ConfigError`` when ``config`` could need more connections than the PostgreSQL
        server allows (SQLite has no such limit); connects once to ask the server."""
        check_capacity(self.db, config)

    def migrate(self) -> list[int]:
        """Apply missing schema migrations; the versions applied now. They run without the
        statement and lock timeouts meant for requests: a long index build, or waiting for
        another instance's migration, is not an outage."""
        with without_statement_timeouts(self.db):
            return migrations.migrate(self.db)

    def connection(self) -> AbstractContextManager[peewee.Database]:
        """Hold this thread's connection across the repository calls of the block (one
        check-out for all of them); ``StoreUnavailable`` when none can be had."""
        return unit_of_work(self.db)

    def checkout(self) -> bool:
        """Take this thread's connection until ``checkin`` (``database.checkout``): True when
        this call took it. For a holder that cannot use ``connection()``'s block."""
        return checkout(self.db)

    def checkin(self) -> None:
        """Return this thread's connection to the pool (a lost one is discarded)."""
        checkin(self.db)

    def ping(self) -> bool:
        """Readiness: True when the database answers, within the configured
        timeouts, never raising. PostgreSQL: ``SELECT 1``. SQLite: the same inside a write
        transaction, since another process holding the write lock stops every write while
        reads go on; an empty transaction writes nothing."""
        try:
            with self.engine.readiness(self.db):
                self.db.execute_sql("SELECT 1").fetchone()
        except StoreUnavailable:
            return False  # the store's health has logged the outage
        except Exception as exc:  # readiness reports, it never raises
            logger.warning("database ping failed: %s", type(exc).__name__)
            return False
        return True

    def claim_for_serving(self) -> None:
        """Refuse (``ConfigError``) to serve a SQLite file another process already serves;
        the claim lasts until ``close``. PostgreSQL needs none."""
        lock = self.engine.process_lock()
        if lock is not None:
            lock.acquire()
            self._process_lock = lock

    def close(self) -> None:
        close_database(self.db)
        if self._process_lock is not None:
            self._process_lock.release()
            self._process_lock = None
