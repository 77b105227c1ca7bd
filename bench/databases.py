"""An empty database for one bench run: a temporary SQLite file, or a throw-away PostgreSQL
schema (so a bench never reads what an earlier run, or a test, left behind)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote


@contextmanager
def fresh_database(postgres_url: str | None) -> Iterator[str]:
    if not postgres_url:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'bench.db'}"
        return
    import psycopg2

    schema = f"td_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE SCHEMA "{schema}"')
        separator = "&" if "?" in postgres_url else "?"
        yield f"{postgres_url}{separator}options={quote(f'-c search_path={schema}')}"
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()
