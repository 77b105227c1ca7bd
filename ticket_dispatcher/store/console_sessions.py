"""Console sessions signed out before they expired (docs/console.md, "Signing in").

A session lives in its signed cookie, not in the database; signing out records the session
until its own expiry, so a copy of the cookie is refused by every replica from then on.
"""

from __future__ import annotations

from datetime import datetime

import peewee

from ticket_dispatcher.store.database import unit_of_work, write_lock
from ticket_dispatcher.store.models import ConsoleSignOutRow, delete_where
from ticket_dispatcher.timeutil import to_utc


class ConsoleSessionRepository:
    def __init__(self, db: peewee.Database):
        self.db = db

    def sign_out(self, session: str, expires_at: datetime, now: datetime) -> None:
        """Refuse ``session`` from now until ``expires_at``; the sign-outs whose sessions have
        expired meanwhile are forgotten in the same transaction."""
        with write_lock(self.db):
            delete_where(ConsoleSignOutRow, ConsoleSignOutRow.expires_at <= to_utc(now))
            (ConsoleSignOutRow.insert(session=session, expires_at=to_utc(expires_at))
             .on_conflict_ignore().execute())

    def signed_out(self, session: str) -> bool:
        with unit_of_work(self.db):
            return ConsoleSignOutRow.select().where(
                ConsoleSignOutRow.session == session).exists()
