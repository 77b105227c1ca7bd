"""Fixtures shared by the whole suite: a migrated store on each engine, a query counter, and the
notification peers and processes of the real-process tests.

PostgreSQL runs only when TICKET_DISPATCHER_TEST_DATABASE_URL is set. Each test gets a fresh
schema of its own (tests/databases.py, which the benches share).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import peewee
import pytest

from tests.databases import postgres_schema, sqlite_url
from tests.peer_notify import FakeCore, FakeLark, FakeOncall
from tests.process import Processes, notification_peers
from ticket_dispatcher.store import Store

PG_URL_ENV = "TICKET_DISPATCHER_TEST_DATABASE_URL"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL URL whose connections use a private, throw-away schema."""
    base = os.environ.get(PG_URL_ENV)
    if not base:
        pytest.skip(f"{PG_URL_ENV} is not set")
    with postgres_schema(base) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path) -> str:
    """The URL of an empty database, once per engine."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    return request.getfixturevalue("postgres_url")


def _migrated(url: str) -> Store:
    store = Store.for_url(url)
    store.migrate()
    return store


@pytest.fixture
def store(db_url) -> Iterator[Store]:
    """A migrated store on each engine."""
    store = _migrated(db_url)
    yield store
    store.close()


@pytest.fixture
def sqlite_store(tmp_path) -> Iterator[Store]:
    """A migrated SQLite store, for tests that need only one engine."""
    store = _migrated(sqlite_url(tmp_path))
    yield store
    store.close()


class QueryCounter:
    """Records the SQL statements a block sends (peewee query hooks), from every thread.

    BEGIN/COMMIT/ROLLBACK and connection pragmas are not statements of the block's own and
    are not counted; savepoints are.
    """

    def __init__(self, db: peewee.Database):
        self.db = db
        self.statements: list[str] = []

    def _record(self, event) -> None:
        self.statements.append(event.sql)

    @property
    def count(self) -> int:
        return len(self.statements)

    def __enter__(self) -> QueryCounter:
        self.db.query_hooks.append(self._record)
        return self

    def __exit__(self, *exc) -> None:
        self.db.query_hooks.remove(self._record)


@pytest.fixture
def query_counter(store) -> Callable[[], QueryCounter]:
    """``with query_counter() as queries: ...`` then ``queries.count``."""
    return lambda: QueryCounter(store.db)


# -- notification peers for real-process tests --------------------------------------------------
# Fakes of Lark, Oncall and Core that know the one person a module's ``person`` fixture names
# (email, name, Lark open_id).


@pytest.fixture
def peers(person: tuple[str, str, str]) -> Iterator[tuple[FakeLark, FakeOncall, FakeCore]]:
    with notification_peers(*person) as fakes:
        yield fakes


@pytest.fixture
def lark(peers) -> FakeLark:
    return peers[0]


@pytest.fixture
def oncall(peers) -> FakeOncall:
    return peers[1]


@pytest.fixture
def core(peers) -> FakeCore:
    return peers[2]


@pytest.fixture
def processes() -> Iterator[Processes]:
    """The ``serve`` processes a test starts (``processes.start``), each stopped at its end."""
    started = Processes()
    yield started
    started.stop_all()


@pytest.fixture
def harness(sqlite_store):
    """The real actor runtime on SQLite with the test actions (the API and console tests)."""
    from tests.fakes import GateAction, RecordingAction
    from tests.harness import Harness
    from ticket_dispatcher.domain.execution import FailureCode

    h = Harness(sqlite_store, RecordingAction(), RecordingAction("test_wait", park_for=60),
                RecordingAction("test_plan_fails", fail_in="plan",
                                fail_code=FailureCode.PLAN_FAILED),
                GateAction())
    h.start()
    yield h
    h.stop()
