"""An empty database for one bench run: a temporary SQLite file, or a throw-away PostgreSQL
schema (so a bench never reads what an earlier run, or a test, left behind).

Both come from the test suite's ``tests/databases.py``, so the benches and the tests set up a
database one way. A bench runs as ``python bench/NAME.py``, which puts only ``bench/`` on
``sys.path``; importing this module adds the repository root, where ``tests`` lives.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.databases import postgres_schema, sqlite_url  # noqa: E402  (needs the root above)


@contextmanager
def fresh_database(postgres_url: str | None) -> Iterator[str]:
    if postgres_url:
        with postgres_schema(postgres_url, prefix="td_bench_") as url:
            yield url
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield sqlite_url(Path(tmp))
