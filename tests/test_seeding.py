"""Seeding an empty database from ops/examples/ (the service's half of ``serve --sandbox``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clocks import ManualClock
from ticket_dispatcher.domain.model import PolicyStatus
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.seeding import seed_store

EXAMPLES = Path(__file__).resolve().parents[1] / "ops" / "examples"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_seed_store_fills_an_empty_database(sqlite_store, clock):
    summary = seed_store(sqlite_store, EXAMPLES, clock.now())

    engineers, total = sqlite_store.engineers.page(limit=200)
    policies = sqlite_store.policies.list_active()
    expected = json.loads((EXAMPLES / "engineers.json").read_text())["engineers"]
    assert summary.seeded and summary.engineers == total == len(expected)
    assert {e.email for e in engineers} == {e["email"] for e in expected}
    assert sorted(summary.policy_ids) == sorted(p.id for p in policies)
    assert len(policies) == 4 and all(p.status == PolicyStatus.ACTIVE for p in policies)
    assert "Assign TCID tickets" in {p.name for p in policies}


def test_second_seed_store_does_nothing(sqlite_store, clock):
    seed_store(sqlite_store, EXAMPLES, clock.now())

    again = seed_store(sqlite_store, EXAMPLES, clock.now())

    assert again.seeded is False
    assert sqlite_store.policies.page()[1] == 4


def test_seed_store_leaves_a_database_with_engineers_alone(sqlite_store, clock):
    sqlite_store.engineers.put("someone@example.com", dispatch_enabled=True, now=clock.now())

    summary = seed_store(sqlite_store, EXAMPLES, clock.now())

    assert summary.seeded is False
    assert sqlite_store.policies.page()[1] == 0
    assert sqlite_store.engineers.page()[1] == 1


def test_seed_store_writes_nothing_when_a_file_is_bad(sqlite_store, clock, tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "engineers.json").write_text(json.dumps({"engineers": []}))
    (tmp_path / "policies" / "assign-tcid.json").write_text("{broken")

    with pytest.raises(InvalidInput):
        seed_store(sqlite_store, tmp_path, clock.now())

    assert sqlite_store.engineers.page()[1] == 0
