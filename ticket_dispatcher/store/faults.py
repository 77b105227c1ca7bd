"""What a database failure means to the service: driver errors never leave ``store/``.

``store_error(exc)`` reads an exception raised by peewee, its pool or a driver (psycopg2,
psycopg, sqlite3) and answers the error the rest of the service handles instead:

- ``StoreUnavailable(message, kind)`` for an operational failure: retryable, nothing of the
  failed unit of work was committed (unless the commit itself lost its answer);
- ``Conflict`` for an integrity violation, with a generic message (a repository that knows
  which constraint it risks catches ``Conflict`` and says more);
- None for anything else (bad SQL, a value the column refuses): a bug, left as it is.

The kind comes from the SQLSTATE when the server sent one, else from the driver's error name
(SQLite) or message. The message is a fixed text per kind: the driver's own may name the
host, the port or the user, and ours is shown in 503 bodies and logs.
"""

from __future__ import annotations

from enum import StrEnum

from ticket_dispatcher.errors import Conflict, StoreUnavailable


class StoreFaultKind(StrEnum):
    """Why the database could not do its part (the ``kind`` of ``StoreUnavailable``)."""

    CONNECTION = "connection"  # refused, lost or shut down by the server
    LOCKED = "locked"  # a lock held by another connection or process outlasted busy_timeout
    TIMEOUT = "timeout"  # the statement outlasted statement_timeout
    SERIALIZATION = "serialization"  # a serialization failure or deadlock: retry at once
    TOO_MANY_CONNECTIONS = "too_many_connections"  # the server has no connection slot left
    POOL_EXHAUSTED = "pool_exhausted"  # this service's pool stayed empty for pool_wait
    OTHER = "other"


MESSAGES = {
    StoreFaultKind.CONNECTION: "the database cannot be reached; retry later",
    StoreFaultKind.LOCKED: "the database is locked by another writer; retry later",
    StoreFaultKind.TIMEOUT: "the database did not answer in time; retry later",
    StoreFaultKind.SERIALIZATION: "the database refused a concurrent change; retry",
    StoreFaultKind.TOO_MANY_CONNECTIONS: "the database has no connection to spare; retry later",
    StoreFaultKind.POOL_EXHAUSTED: "every database connection of this service is busy; retry later",
    StoreFaultKind.OTHER: "the database failed; retry later",
}
CONFLICT_MESSAGE = "the change conflicts with data already stored"

# PostgreSQL error codes (Appendix A of its manual) that say the database is unavailable.
_SQLSTATES = {
    "25P03": StoreFaultKind.CONNECTION,  # idle_in_transaction_session_timeout: the server hung up
    "55P03": StoreFaultKind.LOCKED,  # lock_not_available (lock_timeout)
    "57014": StoreFaultKind.TIMEOUT,  # query_canceled (statement_timeout)
    "40001": StoreFaultKind.SERIALIZATION,  # serialization_failure
    "40P01": StoreFaultKind.SERIALIZATION,  # deadlock_detected
    "53300": StoreFaultKind.TOO_MANY_CONNECTIONS,
}
_SQLSTATE_CLASSES = {
    "08": StoreFaultKind.CONNECTION,  # connection exception
    "57": StoreFaultKind.CONNECTION,  # operator intervention: shutdown, cannot connect now
    "53": StoreFaultKind.OTHER,  # insufficient resources: disk full, out of memory
    "58": StoreFaultKind.OTHER,  # system error: I/O
}
# When no SQLSTATE came (a failed connect, a connection lost mid-query), the message says it.
# Checked in this order: "connection to server ... failed: too many clients" is not a network
# failure.
_MESSAGES = (
    (StoreFaultKind.TOO_MANY_CONNECTIONS, ("too many clients", "too many connections",
                                      "remaining connection slots are reserved")),
    (StoreFaultKind.LOCKED, ("database is locked", "database table is locked", "lock timeout")),
    (StoreFaultKind.TIMEOUT, ("statement timeout", "canceling statement")),
    (StoreFaultKind.SERIALIZATION, ("could not serialize access", "deadlock detected")),
    (StoreFaultKind.CONNECTION, (
        "server closed the connection", "connection already closed", "connection to server",
        "could not connect", "connection refused", "terminating connection",
        "timeout expired", "ssl syscall error", "eof detected", "could not receive data",
        "could not send data", "no connection to the server", "the database system is",
        "connection reset", "broken pipe", "could not translate host name",
        "unable to open database file", "the connection is closed", "the connection is lost",
        "connection failed",
    )),
)
_SQLITE_NAMES = {
    "SQLITE_BUSY": StoreFaultKind.LOCKED,
    "SQLITE_LOCKED": StoreFaultKind.LOCKED,
    "SQLITE_CANTOPEN": StoreFaultKind.CONNECTION,
}
_DRIVER_MODULES = frozenset({"peewee", "playhouse", "sqlite3", "psycopg2", "psycopg"})
# The DB-API exception classes (peewee repeats their names), most specific first.
_OPERATIONAL = ("OperationalError", "InterfaceError", "DatabaseError")
_DBAPI_NAMES = ("IntegrityError", "OperationalError", "InterfaceError", "ProgrammingError",
                "DataError", "NotSupportedError", "InternalError", "DatabaseError")


def store_error(exc: BaseException) -> StoreUnavailable | Conflict | None:
    """The typed error ``exc`` means, or None when it is not a database failure (nor a driver
    error at all: an error of ours, already typed, passes through as None)."""
    category = _category(exc)
    if category is None:
        return None
    if category == "MaxConnectionsExceeded":
        return unavailable(StoreFaultKind.POOL_EXHAUSTED)
    if category == "IntegrityError":
        return Conflict(CONFLICT_MESSAGE)
    kind = fault_kind(exc)
    if kind is None and category in _OPERATIONAL:
        kind = StoreFaultKind.CONNECTION if category == "InterfaceError" else StoreFaultKind.OTHER
    return unavailable(kind) if kind is not None else None


def unavailable(kind: StoreFaultKind) -> StoreUnavailable:
    return StoreUnavailable(MESSAGES[kind], kind.value)


def fault_kind(exc: BaseException) -> StoreFaultKind | None:
    """The kind its SQLSTATE, SQLite error name or message names; None when none does."""
    driver = _driver_error(exc)
    sqlstate = getattr(driver, "pgcode", None) or getattr(driver, "sqlstate", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        kind = _SQLSTATES.get(sqlstate) or _SQLSTATE_CLASSES.get(sqlstate[:2])
        if kind is not None:
            return kind
    sqlite_name = getattr(driver, "sqlite_errorname", None)
    if isinstance(sqlite_name, str):
        # extended codes refine the primary one: SQLITE_BUSY_SNAPSHOT is an SQLITE_BUSY
        kind = _SQLITE_NAMES.get("_".join(sqlite_name.split("_")[:2]))
        if kind is not None:
            return kind
    text = str(driver).lower()
    for kind, fragments in _MESSAGES:
        if any(fragment in text for fragment in fragments):
            return kind
    return None


def driver_detail(exc: BaseException) -> str:
    """The first line of the driver's own message behind ``exc`` (a typed error keeps the
    driver's as its context), else of ``exc``'s. It may name the host and the user: only for
    whoever configured them (the command line), redacted, never in an API answer."""
    current: BaseException | None = exc
    while current is not None and _category(current) is None:
        current = current.__cause__ or current.__context__
    text = str(_driver_error(current) if current is not None else exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0]


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's exception under peewee's, which keeps it as ``orig``."""
    orig = getattr(exc, "orig", None) if type(exc).__module__ == "peewee" else None
    return orig if isinstance(orig, BaseException) else exc


def _category(exc: BaseException) -> str | None:
    """The DB-API class name of a driver or peewee exception; None for any other exception."""
    if type(exc).__module__.split(".")[0] not in _DRIVER_MODULES:
        return None
    names = [cls.__name__ for cls in type(exc).__mro__]
    if "MaxConnectionsExceeded" in names:
        return "MaxConnectionsExceeded"
    return next((name for name in names if name in _DBAPI_NAMES), None)
