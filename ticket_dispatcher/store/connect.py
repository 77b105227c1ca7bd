"""The one place that picks the database engine: the scheme of ``database_url``.

``open_database`` builds the engine's pool (``sqlite.py`` or ``postgres.py``), which carries
the engine (``database.engine_of``) and its ``StoreHealth``; from then on the store asks that
engine what differs, never which engine it is.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import peewee

from ticket_dispatcher.config import DatabaseConfig
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.store.database import (
    DEFAULT_DATABASE,
    DEFAULT_MAX_CONNECTIONS,
    _real,
)
from ticket_dispatcher.store.engine import URL_USAGE
from ticket_dispatcher.store.sqlite import open_sqlite


def open_database(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                  database: DatabaseConfig = DEFAULT_DATABASE) -> peewee.Database:
    """Build (without connecting) the pooled database a ``database_url`` names.

    ``max_connections`` bounds the pool; pass ``connection_budget(config)``. ``database``: its
    timeouts (``config.database``). The database carries its engine and its own
    ``StoreHealth`` (``health_of``). Raises ``ConfigError`` naming ``database_url``; the
    message never repeats a password.
    """
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"database_url: not a database URL; {URL_USAGE}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit validates the port lazily
    except ValueError:
        raise ConfigError(f"database_url: malformed URL; {URL_USAGE}") from None
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        db: peewee.Database = open_sqlite(parts, max_connections, database)
    elif scheme in ("postgresql", "postgres"):
        try:
            import psycopg  # noqa: F401 - imported to say the extra is missing, at start-up
        except ImportError:
            raise ConfigError(
                "database_url: PostgreSQL needs the 'postgres' extra (pip install "
                "'ticket-dispatcher[postgres]')"
            ) from None
        # Imported here, once psycopg is known to be there: a SQLite service runs without it.
        from ticket_dispatcher.store.postgres import open_postgres

        db = open_postgres(parts, max_connections, database)
    else:
        raise ConfigError(f"database_url: unsupported scheme {scheme!r}; {URL_USAGE}")
    return db


def is_postgres(db: peewee.Database) -> bool:
    """Whether ``db`` is a PostgreSQL database: for what runs beside the store's engines and
    must know (the cluster link, tests and benches); the store asks its engine instead."""
    return isinstance(_real(db), peewee.PostgresqlDatabase)
