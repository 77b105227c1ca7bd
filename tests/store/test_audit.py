"""The audit trail's store: a record goes with its change or not at all, reads come newest
first by filter and cursor, secrets never reach a record, and only age removes one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import policy_body
from ticket_dispatcher.domain import validation
from ticket_dispatcher.errors import NotFound
from ticket_dispatcher.store.audit import (
    PRUNE_EVERY,
    REDACTED,
    AuditFilter,
    AuditRepository,
    Author,
    Via,
    redacted,
)

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
ALICE = Author("alice-key", Via.API)
BOB = Author("bob@example.com", Via.CONSOLE)


def _spec(store, name="Audited"):
    return validation.parse_policy_spec(policy_body(name=name), store.registry)


def test_a_change_and_its_record_are_one_transaction(store):
    made = store.audit.changed(ALICE, "policy.created", "policy",
                               lambda: store.policies.create(_spec(store), T0),
                               object_id=lambda p: p.id, after=lambda p: p.to_json(), now=T0)
    records, _ = store.audit.page(AuditFilter())
    assert [(r.actor, r.via, r.action, r.object_id) for r in records] == [
        ("alice-key", Via.API, "policy.created", str(made.id))]
    assert records[0].after["name"] == "Audited" and records[0].before is None

    def fails_after_the_change():
        store.policies.create(_spec(store, "Never"), T0)
        raise RuntimeError("the record could not be written")

    with pytest.raises(RuntimeError):
        store.audit.changed(ALICE, "policy.created", "policy", fails_after_the_change,
                            object_id=lambda p: p, after=lambda p: None, now=T0)
    names = [p.name for p in store.policies.page(status=None, family_id=None,
                                                 limit=50, offset=0)[0]]
    assert names == ["Audited"]  # the change went back with its record


def test_a_refused_change_leaves_no_record(store):
    with pytest.raises(NotFound):
        store.audit.changed(ALICE, "engineer.deleted", "engineer",
                            lambda: store.engineers.delete("nobody@example.com"),
                            object_id=lambda _: "nobody@example.com", after=lambda _: None,
                            now=T0)
    assert store.audit.page(AuditFilter()) == ([], None)


def test_records_read_newest_first_by_filter_and_cursor(store):
    for minute in range(5):
        author = ALICE if minute % 2 == 0 else BOB
        store.audit.record(author, "engineer.changed", "engineer", f"e{minute}@example.com",
                           after={"minute": minute}, now=T0 + timedelta(minutes=minute))
    first, cursor = store.audit.page(AuditFilter(), limit=2)
    assert [r.object_id for r in first] == ["e4@example.com", "e3@example.com"]
    second, cursor = store.audit.page(AuditFilter(), cursor=cursor, limit=2)
    assert [r.object_id for r in second] == ["e2@example.com", "e1@example.com"]
    last, cursor = store.audit.page(AuditFilter(), cursor=cursor, limit=2)
    assert [r.object_id for r in last] == ["e0@example.com"] and cursor is None

    by_bob, _ = store.audit.page(AuditFilter(actor="bob@example.com"))
    assert [r.after for r in by_bob] == [{"minute": 3}, {"minute": 1}]
    window, _ = store.audit.page(AuditFilter(since=T0 + timedelta(minutes=1),
                                             until=T0 + timedelta(minutes=3)))
    assert [r.object_id for r in window] == ["e2@example.com", "e1@example.com"]
    one, _ = store.audit.page(AuditFilter(object_type="engineer", object_id="e0@example.com"))
    assert len(one) == 1 and one[0].at == T0


def test_secrets_and_phone_numbers_never_reach_a_record(store):
    store.audit.record(ALICE, "engineer.changed", "engineer", "a@example.com",
                       before={"phone": "+86 138 0000 0000", "name": "A"},
                       after={"settings": [{"api_key": "k-123", "webhook_secret": "s",
                                            "session_token": "t", "keep": "visible"}]},
                       now=T0)
    record = store.audit.page(AuditFilter())[0][0]
    assert record.before == {"phone": REDACTED, "name": "A"}
    assert record.after == {"settings": [{"api_key": REDACTED, "webhook_secret": REDACTED,
                                          "session_token": REDACTED, "keep": "visible"}]}
    assert redacted({"key": "x", "family_key": "kept", "token": None}) == {
        "key": REDACTED, "family_key": "kept", "token": None}


def test_records_are_pruned_only_past_their_retention(store):
    audit = AuditRepository(store.db, retention=timedelta(days=400))
    audit.record(ALICE, "policy.created", "policy", "1", now=T0)
    audit.record(ALICE, "policy.created", "policy", "2", now=T0 + timedelta(days=399))
    assert len(audit.page(AuditFilter())[0]) == 2
    audit.record(ALICE, "policy.created", "policy", "3",
                 now=T0 + timedelta(days=400) + PRUNE_EVERY)
    assert [r.object_id for r in audit.page(AuditFilter())[0]] == ["3", "2"]
