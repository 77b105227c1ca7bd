"""The audit trail: one record for each change to the service's behaviour (docs/operations.md,
"Audit trail").

A record is written in the same transaction as the change it tells of (``AuditRepository.
changed``), so there is never a change without its record nor a record of a change that did
not happen. Nothing here edits a record, and nothing deletes one but the pruning of records
older than the retention. Values that are secret (keys, tokens, phone numbers) are replaced by
``REDACTED`` before they are stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

import peewee

from ticket_dispatcher.store.database import unit_of_work, write_lock
from ticket_dispatcher.store.models import AuditRow, delete_where
from ticket_dispatcher.timeutil import to_utc

T = TypeVar("T")

REDACTED = "[redacted]"
# A key naming one of these holds a secret or a phone number: its value is never stored.
_SECRET_KEY = re.compile(r"secret|token|password|api_?key|encrypt_key|phone|mobile|^key$",
                         re.IGNORECASE)
# Pruning looks at most this often: old records may wait that long past their retention.
PRUNE_EVERY = timedelta(hours=1)
MAX_LIMIT = 500


class Via(StrEnum):
    """How a change was made."""

    API = "api"
    CONSOLE = "console"
    CLI = "cli"


@dataclass(frozen=True)
class Author:
    """Who made a change (an API key's name, the proxy's email, the local user) and how."""

    actor: str
    via: Via
    applying: bool = False  # ``policy apply`` (a ``cli`` change): the versions it makes say so

    @property
    def origin(self) -> str:
        """What a policy version made by this author records as its ``origin``."""
        return "apply" if self.applying else self.via.value


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: datetime
    actor: str
    via: Via
    action: str
    object_type: str
    object_id: str
    before: Any
    after: Any

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at.isoformat().replace("+00:00", "Z"),
                "actor": self.actor, "via": self.via.value, "action": self.action,
                "object_type": self.object_type, "object_id": self.object_id,
                "before": self.before, "after": self.after}


@dataclass(frozen=True)
class AuditFilter:
    """Which records to read; a field left ``None`` does not filter."""

    actor: str | None = None
    object_type: str | None = None
    object_id: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def redacted(value: Any) -> Any:
    """``value`` with every secret replaced by ``REDACTED``, at any depth."""
    if isinstance(value, dict):
        return {key: REDACTED if _SECRET_KEY.search(str(key)) and item not in (None, "")
                else redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(item) for item in value]
    return value


class AuditRepository:
    def __init__(self, db: peewee.Database, retention: timedelta = timedelta(days=400)):
        self.db = db
        self.retention = retention
        self._pruned_at: datetime | None = None

    def changed(self, author: Author, action: str, object_type: str,
                change: Callable[[], T], *, object_id: Callable[[T], object],
                after: Callable[[T], Any], before: Callable[[], Any] | None = None,
                now: datetime) -> T:
        """Make ``change`` and record it, in one transaction: both happen, or neither.

        ``before`` reads the object's values ahead of the change, in the same transaction;
        ``object_id`` and ``after`` read the change's result (a created policy's id is known
        only once it is made)."""
        with write_lock(self.db):
            prior = before() if before is not None else None
            result = change()
            self.record(author, action, object_type, str(object_id(result)),
                        before=prior, after=after(result), now=now)
        return result

    def record(self, author: Author, action: str, object_type: str, object_id: str, *,
               before: Any = None, after: Any = None, now: datetime) -> None:
        """Add one record; inside the caller's transaction when there is one."""
        now = to_utc(now)
        with write_lock(self.db):
            AuditRow.insert(at=now, actor=author.actor, via=author.via.value, action=action,
                            object_type=object_type, object_id=object_id,
                            before_json=redacted(before), after_json=redacted(after)).execute()
            self._prune(now)

    def page(self, where: AuditFilter, *, cursor: int | None = None,
             limit: int = 100) -> tuple[list[AuditRecord], int | None]:
        """Records matching ``where``, newest first, from just before ``cursor`` (a record's
        id), and the cursor of the next page (``None`` when this is the last)."""
        query = AuditRow.select()
        for condition in _conditions(where, cursor):
            query = query.where(condition)
        with unit_of_work(self.db):
            rows = list(query.order_by(AuditRow.id.desc()).limit(limit + 1))
        records = [_record(row) for row in rows[:limit]]
        return records, records[-1].id if len(rows) > limit else None

    def _prune(self, now: datetime) -> None:
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        delete_where(AuditRow, AuditRow.at < now - self.retention)


def _conditions(where: AuditFilter, cursor: int | None) -> list[peewee.Expression]:
    equal = {AuditRow.actor: where.actor, AuditRow.object_type: where.object_type,
             AuditRow.object_id: where.object_id, AuditRow.action: where.action}
    conditions = [column == value for column, value in equal.items() if value is not None]
    if where.since is not None:
        conditions.append(AuditRow.at >= to_utc(where.since))
    if where.until is not None:
        conditions.append(AuditRow.at < to_utc(where.until))
    if cursor is not None:
        conditions.append(AuditRow.id < cursor)
    return conditions


def _record(row: AuditRow) -> AuditRecord:
    return AuditRecord(id=row.id, at=row.at, actor=row.actor, via=Via(row.via),
                       action=row.action, object_type=row.object_type,
                       object_id=row.object_id, before=row.before_json, after=row.after_json)
