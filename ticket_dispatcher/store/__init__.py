"""The store: peewee models, one repository per aggregate, migrations (SPEC §9).

``Store.open(url, registry=..., max_connections=connection_budget(config))`` builds the pooled
database for a ``database_url`` and binds the models to it; it neither connects nor migrates.
The action registry (the product's by default) is what policy activation validates against.
Repositories take this thread's connection from the pool per unit of work (see ``database.py``),
so one ``Store`` is shared by every waitress worker and actor thread.
``Store.check_capacity(config)`` refuses at start a configuration the database server cannot
serve.
"""

from __future__ import annotations

import logging

import peewee

from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.store import migrations
from ticket_dispatcher.store.contexts import ContextRepository
from ticket_dispatcher.store.database import (
    DEFAULT_MAX_CONNECTIONS,
    bind,
    check_capacity,
    close_database,
    connection_budget,
    is_postgres,
    lock_rows,
    open_database,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.engineers import EngineerRepository
from ticket_dispatcher.store.executions import ExecutionRepository
from ticket_dispatcher.store.policies import PolicyRepository
from ticket_dispatcher.store.triggers import TriggerRepository

logger = logging.getLogger(__name__)

__all__ = [
    "ContextRepository",
    "EngineerRepository",
    "ExecutionRepository",
    "PolicyRepository",
    "Store",
    "TriggerRepository",
    "connection_budget",
    "is_postgres",
    "lock_rows",
    "open_database",
    "unit_of_work",
    "write_lock",
]


class Store:
    def __init__(self, db: peewee.Database, registry: ActionRegistry | None = None):
        # The models reach the database through the proxy; bind it here so a Store built
        # from any database is always the one its repositories query.
        bind(db)
        self.db = db
        # The actions this service runs: activation refuses a policy they cannot (SPEC §6).
        self.registry = registry if registry is not None else product_registry()
        self.policies = PolicyRepository(db, self.registry)
        self.engineers = EngineerRepository(db)
        self.contexts = ContextRepository(db)
        self.triggers = TriggerRepository(db)
        self.executions = ExecutionRepository(db, self.contexts)

    @classmethod
    def open(cls, url: str, *, registry: ActionRegistry | None = None,
             max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Store:
        """The store for ``url`` (``ConfigError`` when unusable); does not connect or migrate.

        ``registry``: the action types policies may use, the product's by default.
        ``max_connections`` sizes the connection pool: ``connection_budget(config)`` for the
        service; the default is the budget of the default configuration.
        """
        return cls(open_database(url, max_connections), registry)

    def check_capacity(self, config: Config) -> None:
        """``ConfigError`` when ``config`` could need more connections than the PostgreSQL
        server allows (SQLite has no such limit); connects once to ask the server."""
        check_capacity(self.db, config)

    def migrate(self) -> list[int]:
        """Apply missing schema migrations; the versions applied now."""
        return migrations.migrate(self.db)

    def ping(self) -> bool:
        """A cheap ``SELECT 1`` for readiness (SPEC §10): True when the database answers."""
        try:
            with unit_of_work(self.db):
                self.db.execute_sql("SELECT 1").fetchone()
        except Exception as exc:  # readiness reports, it never raises
            logger.warning("database ping failed: %s", type(exc).__name__)
            return False
        return True

    def close(self) -> None:
        close_database(self.db)
