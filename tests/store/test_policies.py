"""Policy repository: JSON round-trip, the version lifecycle, query counts."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import peewee
import pytest

from tests.factories import policy_body
from tests.fakes import RecordingAction
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.model import PolicySpec, PolicyStatus
from ticket_dispatcher.errors import Conflict, NotFound, PolicyInvalid
from ticket_dispatcher.store import Store, unit_of_work
from ticket_dispatcher.store.models import PolicyRow, RuleRow

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def spec(**overrides) -> PolicySpec:
    return PolicySpec.from_json(policy_body(**overrides))


def invalid_spec() -> PolicySpec:
    """Readable (a draft may hold it) but not valid: its condition names an unknown zone."""
    body = policy_body()
    body["rules"][0]["when"] = {"field": "now", "operator": "time_window", "time_window": {
        "timezone": "Mars/Olympus", "weekdays": ["mon"], "start": "09:00", "end": "18:00"}}
    return PolicySpec.from_json(body)


NESTED_WHEN = {
    "all": [
        {"field": "issue.summary", "operator": "regex", "value": "^工单 ✓ (é|ü)\\d+$",
         "ignore_case": True},
        {"any": [
            {"not": {"field": "issue.labels", "operator": "contains", "values": ["a", "b"]}},
            {"always": True},
        ]},
        {"field": "now", "operator": "time_window",
         "time_window": {"timezone": "Asia/Shanghai", "weekdays": ["mon", "fri"],
                         "start": "09:00", "end": "18:00"}},
    ],
    "extra": {"int": 9007199254740993, "neg": -1, "float": 1.5, "bool": False, "null": None,
              "nested": [[1, [2, [3]]], [], {}], "emoji": "🚨"},
}
NESTED_THEN = [
    {"type": "assign", "assign": {"receiver": {"type": "users", "users": ["ä@example.com"]},
                                  "strategy": "first"}},
    {"type": "page_assignment", "page_assignment": {"attempt": 1,
                                                    "ack_pending_statuses": ["待处理", "Open"],
                                                    "ack_timeout": "5m", "poll_interval": "5s"}},
    {"type": "mark_assignment_message_urgent", "mark_assignment_message_urgent": None},
]


def test_nested_conditions_and_actions_round_trip_exactly(store):
    body = policy_body(trigger={"enable": False, "source_in": ["jira"], "project_key_in": ["ÜX"],
                                "issue_label_all": ["l1", "l2"]})
    body["rules"][0].update(when=NESTED_WHEN, then=NESTED_THEN,
                            transition={"on_success": "continue"})
    created = store.policies.create(PolicySpec.from_json(body), T0)

    loaded = store.policies.get(created.id)

    assert loaded == created
    assert loaded.rules[0].when == NESTED_WHEN
    assert loaded.rules[0].then == NESTED_THEN
    assert loaded.rules[0].on_success is OnSuccess.CONTINUE
    assert loaded.trigger.to_json() == body["trigger"]
    assert loaded.to_json()["rules"][0]["when"]["extra"]["int"] == 9007199254740993


def test_create_makes_version_one_draft_of_a_new_family(store):
    policy = store.policies.create(spec(), T0)

    assert policy.status is PolicyStatus.DRAFT
    assert policy.version == 1
    assert policy.family_id.startswith("pf_") and len(policy.family_id) == 15
    assert policy.created_at == policy.updated_at == T0 and policy.activated_at is None
    assert [rule.id > 0 for rule in policy.rules] == [True]
    assert store.policies.create(spec(), T0).family_id != policy.family_id


def test_rules_keep_the_operators_order_for_equal_priorities(store):
    body = policy_body()
    rule = body["rules"][0]
    body["rules"] = [dict(rule, name=name, priority=5) for name in ("c", "a", "b")]

    policy = store.policies.get(store.policies.create(PolicySpec.from_json(body), T0).id)

    assert [rule.name for rule in policy.ordered_rules] == ["c", "a", "b"]


def test_times_are_stored_in_utc_and_naive_times_are_refused(store):
    shanghai = datetime(2026, 11, 30, 9, 0, tzinfo=timezone(timedelta(hours=8)))

    policy = store.policies.get(store.policies.create(spec(), shanghai).id)

    assert policy.created_at == shanghai and policy.created_at.tzinfo is UTC
    with pytest.raises(ValueError):
        store.policies.create(spec(), datetime(2026, 11, 30, 1, 0))


def test_update_draft_replaces_body_and_rules(store):
    draft = store.policies.create(spec(), T0)
    body = policy_body(name="Renamed", description="new")
    body["rules"].append(dict(body["rules"][0], name="second", priority=20))

    updated = store.policies.update_draft(draft.id, PolicySpec.from_json(body), T0 + timedelta(1))

    loaded = store.policies.get(draft.id)
    assert loaded == updated
    assert (loaded.name, loaded.description, loaded.version) == ("Renamed", "new", 1)
    assert [rule.name for rule in loaded.rules] == ["urgent", "second"]
    assert draft.rules[0].id not in {rule.id for rule in loaded.rules}
    assert loaded.created_at == T0 and loaded.updated_at == T0 + timedelta(1)


def test_delete_draft_removes_it_with_its_rules(store):
    draft = store.policies.create(spec(), T0)

    store.policies.delete_draft(draft.id)

    with pytest.raises(NotFound):
        store.policies.get(draft.id)
    with unit_of_work(store.db):
        assert RuleRow.select().where(RuleRow.policy == draft.id).count() == 0


def test_only_drafts_can_be_edited_or_deleted(store):
    active = store.policies.activate(store.policies.create(spec(), T0).id, T0)

    with pytest.raises(Conflict, match="only a draft"):
        store.policies.update_draft(active.id, spec(name="x"), T0)
    with pytest.raises(Conflict, match="only a draft"):
        store.policies.delete_draft(active.id)
    assert store.policies.get(active.id) == active


def test_replacement_is_a_new_draft_in_the_same_family_with_the_next_version(store):
    first = store.policies.create(spec(), T0)
    store.policies.activate(first.id, T0)
    second = store.policies.create_replacement(first.id, spec(name="v2"), T0)

    third = store.policies.create_replacement(first.id, spec(name="v3"), T0)

    assert (second.family_id, second.version, second.status) == (
        first.family_id, 2, PolicyStatus.DRAFT)
    assert (third.family_id, third.version) == (first.family_id, 3)
    assert store.policies.get(first.id).status is PolicyStatus.ACTIVE


def test_replacement_of_a_missing_policy_is_not_found(store):
    with pytest.raises(NotFound):
        store.policies.create_replacement(999, spec(), T0)


def test_activation_supersedes_the_active_version_of_the_family(store):
    v1 = store.policies.create(spec(), T0)
    store.policies.activate(v1.id, T0)
    v2 = store.policies.create_replacement(v1.id, spec(name="v2"), T0)

    later = T0 + timedelta(hours=1)
    activated = store.policies.activate(v2.id, later)

    assert activated == store.policies.get(v2.id)
    assert (activated.status, activated.activated_at) == (PolicyStatus.ACTIVE, later)
    old = store.policies.get(v1.id)
    assert (old.status, old.updated_at, old.activated_at) == (PolicyStatus.SUPERSEDED, later, T0)
    assert [p.id for p in store.policies.list_active()] == [v2.id]


def test_activation_refuses_an_invalid_version_and_changes_nothing(store):
    v1 = store.policies.activate(store.policies.create(spec(), T0).id, T0)
    v2 = store.policies.create_replacement(v1.id, invalid_spec(), T0)

    with pytest.raises(PolicyInvalid) as raised:
        store.policies.activate(v2.id, T0 + timedelta(1))

    assert [(p.path, p.message) for p in raised.value.problems] == [
        ("rules[0].when.time_window.timezone",
         'unknown time zone "Mars/Olympus"; use an IANA name like "Asia/Shanghai"')]
    assert store.policies.get(v1.id) == v1
    assert store.policies.get(v2.id) == v2


def test_activation_validates_against_the_stores_action_registry(store):
    """An action type no executor of this store's registry runs cannot be activated; a store
    built with a registry that runs it activates the same version."""
    body = policy_body()
    body["rules"][0]["then"] = [{"type": "test_noop", "test_noop": {}}]
    draft = store.policies.create(PolicySpec.from_json(body), T0)

    with pytest.raises(PolicyInvalid) as raised:
        store.policies.activate(draft.id, T0)
    registry = product_registry()
    registry.register(RecordingAction("test_noop"))
    activated = Store(store.db, registry).policies.activate(draft.id, T0)

    assert [p.path for p in raised.value.problems] == ["rules[0].then[0].type"]
    assert 'unknown action type "test_noop"' in raised.value.problems[0].message
    assert activated.status is PolicyStatus.ACTIVE


def test_rollback_activates_a_superseded_version(store):
    v1 = store.policies.activate(store.policies.create(spec(), T0).id, T0)
    v2 = store.policies.create_replacement(v1.id, spec(name="v2"), T0)
    store.policies.activate(v2.id, T0)

    store.policies.activate(v1.id, T0 + timedelta(1))

    assert store.policies.get(v1.id).status is PolicyStatus.ACTIVE
    assert store.policies.get(v2.id).status is PolicyStatus.SUPERSEDED


def test_deactivate_moves_active_to_inactive_and_it_can_be_reactivated(store):
    active = store.policies.activate(store.policies.create(spec(), T0).id, T0)

    inactive = store.policies.deactivate(active.id, T0 + timedelta(1))

    assert inactive == store.policies.get(active.id)
    assert inactive.status is PolicyStatus.INACTIVE and inactive.activated_at == T0
    assert store.policies.list_active() == []
    assert store.policies.activate(active.id, T0).status is PolicyStatus.ACTIVE


def test_illegal_lifecycle_moves_conflict(store):
    draft = store.policies.create(spec(), T0)
    active = store.policies.activate(store.policies.create(spec(), T0).id, T0)

    with pytest.raises(Conflict, match=f"policy {active.id} is already active"):
        store.policies.activate(active.id, T0)
    with pytest.raises(Conflict):
        store.policies.deactivate(draft.id, T0)


@pytest.mark.parametrize("move", ["get", "update", "delete", "activate", "deactivate"])
def test_moves_on_a_missing_policy_are_not_found(store, move):
    calls = {
        "get": lambda: store.policies.get(404),
        "update": lambda: store.policies.update_draft(404, spec(), T0),
        "delete": lambda: store.policies.delete_draft(404),
        "activate": lambda: store.policies.activate(404, T0),
        "deactivate": lambda: store.policies.deactivate(404, T0),
    }
    with pytest.raises(NotFound, match="policy 404 not found"):
        calls[move]()


def test_database_refuses_two_active_versions_in_one_family(store):
    def insert(family_id, status, version):
        PolicyRow.insert(family_id=family_id, version=version, status=status, name="n",
                         trigger_json={}, created_at=T0, updated_at=T0).execute()

    with unit_of_work(store.db):
        insert("pf_A", "active", 1)
        insert("pf_A", "superseded", 2)
        insert("pf_A", "superseded", 3)
        insert("pf_B", "active", 1)
        with pytest.raises(peewee.IntegrityError), store.db.atomic():
            insert("pf_A", "active", 4)
        with pytest.raises(peewee.IntegrityError), store.db.atomic():
            insert("pf_A", "draft", 1)  # (family_id, version) is unique too


def test_list_filters_by_status_and_family_and_pages_by_id(store):
    first = store.policies.create(spec(), T0)
    second = store.policies.activate(store.policies.create(spec(), T0).id, T0)
    third = store.policies.create_replacement(second.id, spec(), T0)

    everything, total = store.policies.page()
    drafts, drafts_total = store.policies.page(status=PolicyStatus.DRAFT)
    family, _ = store.policies.page(family_id=second.family_id)
    page, page_total = store.policies.page(limit=1, offset=1)
    beyond, beyond_total = store.policies.page(limit=2, offset=5)

    assert ([p.id for p in everything], total) == ([first.id, second.id, third.id], 3)
    assert ([p.id for p in drafts], drafts_total) == ([first.id, third.id], 2)
    assert [p.id for p in family] == [second.id, third.id]
    assert ([p.id for p in page], page_total) == ([second.id], 3)
    assert (beyond, beyond_total) == ([], 3)
    assert everything[0].rules == first.rules


def test_list_loads_rules_for_the_whole_page_in_one_query(store, query_counter):
    for _ in range(4):
        store.policies.create(spec(), T0)

    with query_counter() as queries:
        page, total = store.policies.page(limit=3)

    assert total == 4 and all(policy.rules for policy in page)
    assert queries.count == 3  # page, COUNT, rules


def test_create_and_get_take_two_statements_each(store, query_counter):
    body = policy_body()
    body["rules"] = [dict(body["rules"][0], name=f"r{i}") for i in range(5)]

    with query_counter() as create_queries:
        policy = store.policies.create(PolicySpec.from_json(body), T0)
    with query_counter() as get_queries:
        store.policies.get(policy.id)

    assert create_queries.count == 2  # one policy INSERT, one multi-row rules INSERT
    assert get_queries.count == 2


def test_concurrent_activations_in_one_family_leave_exactly_one_active(store):
    v1 = store.policies.create(spec(), T0)
    versions = [v1] + [store.policies.create_replacement(v1.id, spec(), T0) for _ in range(3)]
    barrier = threading.Barrier(len(versions))
    errors = []

    def activate(policy_id):
        barrier.wait()
        try:
            store.policies.activate(policy_id, T0)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=activate, args=(v.id,)) for v in versions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    statuses = [store.policies.get(v.id).status for v in versions]
    assert errors == []
    assert statuses.count(PolicyStatus.ACTIVE) == 1
    assert statuses.count(PolicyStatus.SUPERSEDED) == len(versions) - 1


def test_concurrent_replacements_get_distinct_versions(store):
    source = store.policies.create(spec(), T0)
    barrier = threading.Barrier(4)
    created, errors = [], []

    def replace():
        barrier.wait()
        try:
            created.append(store.policies.create_replacement(source.id, spec(), T0).version)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=replace) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(created) == [2, 3, 4, 5]


def test_matching_sees_every_change_of_the_active_versions_made_by_another_replica(store):
    """Matching keeps the active versions it loaded; a change made through another store on the
    same database (another replica's repositories), even at the same instant, is seen by the
    next call."""
    other = Store(store.db, product_registry())
    v1 = other.policies.activate(other.policies.create(spec(), T0).id, T0)
    assert [p.id for p in store.policies.list_active()] == [v1.id]

    v2 = other.policies.create_replacement(v1.id, spec(name="v2"), T0)
    other.policies.activate(v2.id, T0)
    assert [(p.id, p.name) for p in store.policies.list_active()] == [(v2.id, "v2")]

    other.policies.deactivate(v2.id, T0)
    assert store.policies.list_active() == []

    other.policies.activate(v1.id, T0)  # a rollback at the same instant
    assert [(p.id, p.status) for p in store.policies.list_active()] == [
        (v1.id, PolicyStatus.ACTIVE)]


def test_matching_reads_one_small_query_while_the_active_versions_stay_the_same(
        store, query_counter):
    for name in ("a", "b"):
        store.policies.activate(store.policies.create(spec(name=name), T0).id, T0)
    first = store.policies.list_active()

    with query_counter() as queries:
        again = store.policies.list_active()

    assert again == first and [p.name for p in again] == ["a", "b"]
    assert queries.count == 1  # which versions are active; their rules are not read again


def test_a_version_seen_active_exists_without_a_query_and_a_deleted_draft_does_not(
        store, query_counter):
    active = store.policies.activate(store.policies.create(spec(name="a"), T0).id, T0)
    draft = store.policies.create(spec(name="b"), T0)
    store.policies.list_active()
    store.policies.deactivate(active.id, T0)  # out of draft for good: never deleted

    with query_counter() as queries:
        assert store.policies.exists(active.id)
    assert store.policies.exists(draft.id)
    store.policies.delete_draft(draft.id)

    assert queries.count == 0
    assert not store.policies.exists(draft.id)
