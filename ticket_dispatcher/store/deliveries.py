"""The Jira webhook deliveries taken (docs/jira-webhooks.md): a delivery's identifier stays
the same across Jira's retries of it, so a repeat is known and starts nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

import peewee

from ticket_dispatcher.store.database import Prepared, execute, unit_of_work
from ticket_dispatcher.store.models import WebhookDeliveryRow, delete_where, time_param
from ticket_dispatcher.timeutil import to_utc

# How long a delivery's identifier is remembered. Jira retries a delivery for about half an
# hour; a day covers that and a replay of the day's deliveries by hand.
RETENTION = timedelta(days=7)
# Identifiers are forgotten once every so many deliveries taken, in the same transaction.
FORGET_EVERY = 1000


def take_statement(param: str) -> str:
    """The INSERT that records a delivery (its identifier, then the time) unless it was taken
    before, answering the identifier only when it records it. ``DeliveryRepository.take`` runs
    it alone; ``TriggerRepository.create_for_delivery`` inserts a trigger from its answer."""
    return (f"INSERT INTO {WebhookDeliveryRow._meta.table_name} (identifier, received_at) "
            f"VALUES ({param}, {param}) ON CONFLICT (identifier) DO NOTHING RETURNING identifier")


class DeliveryRepository:
    def __init__(self, db: peewee.Database):
        self.db = db
        self._insert = Prepared(take_statement(db.param))
        self._taken = 0

    def take(self, identifier: str, now: datetime) -> bool:
        """Record the delivery inside the caller's transaction; False when it was taken
        before (nothing is written then)."""
        moment = time_param(to_utc(now))
        with unit_of_work(self.db):
            taken = bool(execute(self.db, self._insert, (identifier, moment)).fetchall())
        if taken:
            self.taken(now)
        return taken

    def taken(self, now: datetime) -> None:
        """A delivery was recorded; once every ``FORGET_EVERY`` the old ones are forgotten."""
        self._taken += 1
        if self._taken % FORGET_EVERY == 0:
            self.forget_before(now - RETENTION)

    def forget_before(self, moment: datetime) -> int:
        """Forget the deliveries received before ``moment``; how many."""
        with unit_of_work(self.db):
            return delete_where(WebhookDeliveryRow, WebhookDeliveryRow.received_at < to_utc(moment))

    def known(self, identifier: str) -> bool:
        with unit_of_work(self.db):
            return WebhookDeliveryRow.select().where(
                WebhookDeliveryRow.identifier == identifier).exists()
