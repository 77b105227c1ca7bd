"""What differs between the database engines the store runs on, behind one interface.

The URL picks the engine once, when the database is opened (``connect.open_database``), and
the pool it builds carries it (``database.engine_of``). The units of work (``database.py``),
the repositories and the migrations ask the engine for what differs: how a write transaction
starts, the locking clauses, a list of values as a parameter, a column's type, whether a write
of several tables can be one statement. Nothing asks which engine it is. Each engine is one
module, ``sqlite.py`` and ``postgres.py``; this one says what both answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

import peewee

# A select query (``Engine.lock_rows``, ``Engine.skip_locked``): a model's select stays that
# model's.
SelectT = TypeVar("SelectT", bound=peewee.Select)

URL_USAGE = "use sqlite:///PATH or postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME"

# Where several processes serve one PostgreSQL database (cluster.py): the channel they wake
# each other on, and the class of the advisory locks on an issue (one object per issue key,
# its CRC-32). Both belong to the schema the tables live in, computed by the server.
WORK_CHANNEL = "'ticket_dispatcher_work_' || md5(current_schema())"  # 55 characters, below 63
ISSUE_LOCK_CLASS = 0x7464_6972  # "tdir"


@dataclass(frozen=True)
class ColumnTypes:
    """The column types the migrations write, in the engine's words."""

    pk: str  # an integer key the database numbers itself
    bigint: str
    json: str
    time: str
    bool: str


@dataclass(frozen=True)
class ServerLimit:
    """What a PostgreSQL server lets ordinary roles open: ``max_connections`` less the slots
    reserved for superusers (and, from PostgreSQL 16, for ``pg_use_reserved_connections``)."""

    max_connections: int
    reserved: int
    autovacuum: bool = True  # the server's autovacuum runs (``autovacuum = on``)

    @property
    def allowed(self) -> int:
        return self.max_connections - self.reserved


class ServingClaim(Protocol):
    """A process's claim to be the one that serves a database (``Engine.process_lock``)."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


class Engine(Protocol):
    """One database engine, as the store uses it. ``db`` is the database the engine was opened
    with (or the models' proxy of it), on this thread's connection."""

    # Several processes may serve one database at once: PostgreSQL, where the cluster link
    # (``cluster.py``) keeps them in step. A SQLite file is served by one (``process_lock``).
    several_processes: bool
    # A write of several rows and tables may be one statement (data-modifying ``WITH``
    # clauses), atomic by itself; without them it is several statements in one transaction.
    one_statement_writes: bool
    column_types: ColumnTypes
    # Appended to a written-out ``SELECT`` whose rows a claim takes: rows another transaction
    # is claiming are left to it ("" where the write lock already serializes every claim).
    skip_locked_clause: str

    # -- connections and transactions --------------------------------------------------------

    def transaction(self, db: peewee.Database) -> AbstractContextManager[Any]:
        """A write transaction (a savepoint when nested), as the engine begins one."""
        ...

    def writers_turn(self, db: peewee.Database) -> AbstractContextManager[None]:
        """What an outermost write waits for before it begins, within this process."""
        ...

    def execute(self, db: peewee.Database, sql: str, params: Sequence[Any], *,
                wait_for_disk: bool) -> Any:
        """Run one statement and answer its cursor (``database.execute``)."""
        ...

    def readiness(self, db: peewee.Database) -> AbstractContextManager[Any]:
        """The block a readiness probe's ``SELECT 1`` runs in: what a write would need."""
        ...

    def written_rows(self, db: peewee.Database) -> int | None:
        """A count of the rows this connection has changed, when the engine keeps one."""
        ...

    def wrote_since(self, db: peewee.Database, before: int | None) -> bool:
        """Whether a unit of work that succeeded during an outage proves that writes work
        again; ``before``: ``written_rows`` when it began."""
        ...

    def connection_lost(self, db: peewee.Database) -> bool:
        """Whether the driver found this thread's open connection lost."""
        ...

    def without_statement_timeouts(self, db: peewee.Database) -> AbstractContextManager[None]:
        """This connection with the bounds of a statement and a lock wait lifted for the
        block, and restored after it."""
        ...

    # -- what the statements say differently -------------------------------------------------

    def lock_rows(self, query: SelectT) -> SelectT:
        """``query`` locking the rows it reads until the transaction ends."""
        ...

    def skip_locked(self, query: SelectT) -> SelectT:
        """``query`` taking the rows it reads, those another transaction holds left out."""
        ...

    def among(self, column: str, values: Sequence[Any], array_type: str) -> tuple[str, tuple]:
        """``column`` is one of ``values``: the condition and its parameters; ``array_type``
        names the values' SQL array type (``text[]``)."""
        ...

    def unindexed(self, column: peewee.Field) -> peewee.ColumnBase:
        """``column``, for a condition whose index the planner must not use in place of the
        one the query means to read."""
        ...

    def unindexed_name(self, name: str) -> str:
        """``unindexed`` for a statement written out: the column ``name`` as it is written."""
        ...

    def epoch_seconds(self, column: str) -> str:
        """The time ``column`` (as stored: UTC) as seconds since the Unix epoch, a number the
        database computes, so that a report adds or groups times without reading them."""
        ...

    def month_number(self, column: str) -> str:
        """The UTC month of the time ``column`` as an integer ``yyyymm``."""
        ...

    def day_text(self, column: str) -> str:
        """The UTC day of the time ``column`` as ``yyyy-mm-dd``."""
        ...

    def joined_numbers(self, column: str) -> str:
        """An aggregate: the group's values of the number ``column`` as one text, separated
        by commas, in no order."""
        ...

    def json_elements(self, column: str, alias: str) -> str:
        """A ``FROM`` item of one row per element of the JSON array ``column`` (text), its
        text in ``alias.value``; joined to the row that holds the array."""
        ...

    def after_insert(self, name: str, table: str, statement: str) -> list[str]:
        """The DDL that runs ``statement`` (which reads ``NEW``) after each row inserted into
        ``table``, in the inserting transaction; run again, it replaces what it made."""
        ...

    def covering_key(self, key: str, values: str) -> tuple[str, str]:
        """A table read along its primary key ``key`` for its ``values`` too: the PRIMARY
        KEY constraint, and what ends the CREATE TABLE, so that such a read reads the key's
        index alone."""
        ...

    def join_each(self, table: str, alias: str, condition: Callable[[str], str]) -> str:
        """A ``LEFT JOIN`` of ``table`` as ``alias`` on ``condition`` (written for the alias
        it is given), looked up for each row of the outer query along an index."""
        ...

    # -- migrations and the process ----------------------------------------------------------

    def stored_time(self, moment: datetime) -> datetime | str:
        """A naive UTC time as the engine's time columns hold it, for a statement the models
        do not convert (the migrations' own record)."""
        ...

    def lock_migrations(self, db: peewee.Database) -> None:
        """Keep other processes from migrating until this transaction ends."""
        ...

    def explain(self, db: peewee.Database, sql: str, params: Sequence[Any]) -> list[str]:
        """The plan the engine would run ``sql`` with, one line a step (the indexes it
        reads), for a bench or a test to show."""
        ...

    def server_limit(self, db: peewee.Database) -> ServerLimit | None:
        """The server's connection limit; None where there is no server."""
        ...

    # -- several processes on one database (cluster.py) ----------------------------------------

    def notify_work(self, db: peewee.Database) -> None:
        """Tell every process serving the database there may be work to claim; inside a
        transaction, when it commits (never if it rolls back). Nothing where one process
        serves the database."""
        ...

    def lock_issue(self, db: peewee.Database, issue_key: str) -> None:
        """Serialize, across processes, the transactions that create executions for
        ``issue_key``, until the current transaction ends. Nothing where the write lock
        already serializes every writer."""
        ...

    def process_lock(self) -> ServingClaim | None:
        """The claim ``serve`` must hold on the database; None where several processes may
        serve it."""
        ...

    def is_missing(self) -> bool:
        """Whether the database is not there, as far as can be told without connecting
        (connecting would create it)."""
        ...
