"""Throw-away databases, shared by the test fixtures (conftest.py) and the benches (bench/).

A PostgreSQL database is isolated by a schema of its own, selected through the connection's
``search_path`` and dropped afterwards, so parallel runs against one database never see each
other's rows, and a bench never reads what a test or an earlier run left behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote


def sqlite_url(directory: Path) -> str:
    """The URL of a (not yet created) SQLite database file in ``directory``."""
    return f"sqlite:///{directory / 'ticket-dispatcher.db'}"


@contextmanager
def postgres_schema(base_url: str, prefix: str = "td_") -> Iterator[str]:
    """``base_url`` with its connections pinned to a new, empty schema, dropped on exit."""
    import psycopg  # only a PostgreSQL run needs the driver

    schema = f"{prefix}{uuid.uuid4().hex[:12]}"
    admin = psycopg.connect(base_url, autocommit=True)
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE SCHEMA "{schema}"')
        separator = "&" if "?" in base_url else "?"
        try:
            yield f"{base_url}{separator}options={quote(f'-c search_path={schema}')}"
        finally:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        admin.close()
