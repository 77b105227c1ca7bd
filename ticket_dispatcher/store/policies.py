"""Policies and their rules: the versioned lifecycle (docs/policies.md, "Versions and families").

Only drafts change; every other version is immutable. Lifecycle moves lock the rows they
touch (``SELECT … FOR UPDATE`` on PostgreSQL, the IMMEDIATE transaction on SQLite), and
activation locks the whole family, so two activations in one family serialize instead of
tripping the one-active-per-family index.

The repository refuses to activate an invalid policy by itself: it holds the action
registry it was built with and validates the version inside the activation's transaction, so no
caller can activate without the check, nor with another registry than the runtime's.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import TypedDict, Unpack

import peewee

from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.model import Policy, PolicySpec, PolicyStatus, PolicyTrigger, Rule
from ticket_dispatcher.domain.validation import validate_policy
from ticket_dispatcher.errors import Conflict, NotFound, PolicyInvalid
from ticket_dispatcher.store.database import (
    Prepared,
    fetch_page,
    lock_rows,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.models import PolicyRow, RuleRow, ShadowRow, delete_where
from ticket_dispatcher.timeutil import to_utc

# Crockford base32: upper case, no I/L/O/U, so a family ID survives being read aloud.
_FAMILY_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_FAMILY_ID_LENGTH = 12
# A version may be activated from these (rollback to inactive/superseded).
_ACTIVATABLE = (PolicyStatus.DRAFT, PolicyStatus.INACTIVE, PolicyStatus.SUPERSEDED)


def new_family_id() -> str:
    """``pf_`` + 12 random characters (≤ 20 characters)."""
    return "pf_" + "".join(secrets.choice(_FAMILY_ALPHABET) for _ in range(_FAMILY_ID_LENGTH))


class PolicyRepository:
    def __init__(self, db: peewee.Database, registry: ActionRegistry):
        self.db = db
        self.registry = registry  # what activation validates against: the runtime's actions
        # the active versions last loaded: ((id, updated_at) of each, the policies)
        self._active: tuple[tuple, list[Policy]] | None = None
        # every version this store has loaded active, by id: only drafts are ever deleted,
        # and a version's rules and trigger never change once out of draft
        self._versions: dict[int, Policy] = {}
        # read for every trigger and every execution start: written out once
        table = PolicyRow._meta.table_name
        self._exists = Prepared(f"SELECT 1 FROM {table} WHERE id = {db.param}")
        # with the shadow version of each one's family, if it has one
        self._active_versions = Prepared(
            f"SELECT p.id, p.updated_at, p.family_id, s.policy_id FROM {table} p "
            f"LEFT JOIN {ShadowRow._meta.table_name} s ON s.family_id = p.family_id "
            f"WHERE p.status = {db.param} ORDER BY p.id")

    # -- reads -------------------------------------------------------------------------------

    def page(
        self,
        status: PolicyStatus | None = None,
        family_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[Policy], int]:
        """One page ordered by id and the total: at most 3 queries (page, total, rules)."""
        query = PolicyRow.select()
        if status is not None:
            query = query.where(PolicyRow.status == PolicyStatus(status).value)
        if family_id is not None:
            query = query.where(PolicyRow.family_id == family_id)
        with unit_of_work(self.db):
            rows, total = fetch_page(query.order_by(PolicyRow.id), limit, offset)
            return self._with_rules(rows), total

    def get(self, policy_id: int) -> Policy:
        with unit_of_work(self.db):
            row = PolicyRow.get_or_none(PolicyRow.id == policy_id)
            if row is None:
                raise NotFound(f"policy {policy_id} not found")
            return self._with_rules([row])[0]

    def exists(self, policy_id: int) -> bool:
        """Whether the policy is still stored (a deleted draft is not). A version this store
        has seen active is known without a query: only drafts are ever deleted."""
        if policy_id in self._versions:
            return True
        with unit_of_work(self.db):
            return bool(self.db.execute_sql(self._exists, (policy_id,)).fetchall())

    def known(self, policy_id: int) -> Policy | None:
        """A version this store has loaded active, without a query; None when it has not."""
        return self._versions.get(policy_id)

    def list_active(self) -> list[Policy]:
        """Every active version, for matching; a fresh read on every call."""
        return self.active_and_shadows()[0]

    def active_and_shadows(self) -> tuple[list[Policy], dict[str, int]]:
        """Every active version, for matching, and the shadow version of each of their
        families that has one (family → policy id); a fresh read on every call, one small
        query while the active versions stay the same.

        Every trigger matches against them, and a version's rules and trigger never change
        once it is out of draft, so the loaded versions are kept: each call reads which
        versions are active (id and ``updated_at``) and loads them again only when that list
        changed, e.g. after an activation by this or another replica."""
        active = PolicyRow.status == PolicyStatus.ACTIVE.value
        with unit_of_work(self.db):
            read = self.db.execute_sql(self._active_versions,
                                       (PolicyStatus.ACTIVE.value,)).fetchall()
            versions = tuple((policy_id, PolicyRow.updated_at.python_value(updated))
                             for policy_id, updated, _, _ in read)
            shadows = {family: shadow for _, _, family, shadow in read if shadow is not None}
            known = self._active
            if known is not None and known[0] == versions:
                return list(known[1]), shadows
            rows = list(PolicyRow.select().where(active).order_by(PolicyRow.id))
            policies = self._with_rules(rows)
        self._active = (tuple((row.id, row.updated_at) for row in rows), policies)
        self._versions.update((policy.id, policy) for policy in policies)
        return list(policies), shadows

    # -- drafts ------------------------------------------------------------------------------

    def create(self, spec: PolicySpec, now: datetime, origin: str = "") -> Policy:
        """A new family: version 1, draft. Two statements (policy, rules). ``origin``: how it
        was made (``Policy.origin``)."""
        now = to_utc(now)
        with write_lock(self.db):
            return self._insert(spec, new_family_id(), 1, now, origin)

    def update_draft(self, policy_id: int, spec: PolicySpec, now: datetime) -> Policy:
        """Replace a draft's body and rules; every other status is immutable."""
        now = to_utc(now)
        with write_lock(self.db):
            row = self._lock(policy_id)
            self._require_draft(row, "edited")
            _require_no_shadow(policy_id, "edited")
            PolicyRow.update(
                name=spec.name,
                description=spec.description,
                trigger_json=spec.trigger.to_json(),
                updated_at=now,
            ).where(PolicyRow.id == policy_id).execute()
            delete_where(RuleRow, RuleRow.policy == policy_id)
            rules = self._insert_rules(policy_id, spec)
            return _policy(row, rules, name=spec.name, description=spec.description,
                           trigger=spec.trigger, updated_at=now)

    def delete_draft(self, policy_id: int) -> None:
        with write_lock(self.db):
            row = self._lock(policy_id)
            self._require_draft(row, "deleted")
            _require_no_shadow(policy_id, "deleted")
            # Rules go with it (ON DELETE CASCADE).
            delete_where(PolicyRow, PolicyRow.id == policy_id)

    def create_replacement(self, policy_id: int, spec: PolicySpec, now: datetime,
                           origin: str = "") -> Policy:
        """A new draft in the source's family with the family's highest version + 1."""
        now = to_utc(now)
        with write_lock(self.db):
            source = PolicyRow.get_or_none(PolicyRow.id == policy_id)
            if source is None:
                raise NotFound(f"policy {policy_id} not found")
            # Serialize concurrent replacements of one family; MAX() then sees the winner's row.
            self._lock_family(source.family_id)
            version = (
                PolicyRow.select(peewee.fn.MAX(PolicyRow.version))
                .where(PolicyRow.family_id == source.family_id)
                .scalar()
            )
            return self._insert(spec, source.family_id, int(version or 0) + 1, now, origin)

    # -- lifecycle ---------------------------------------------------------------------------

    def activate(self, policy_id: int, now: datetime) -> Policy:
        """Validate and activate; the family's active version becomes superseded in the same
        transaction. ``PolicyInvalid`` with every problem when the version is not valid against
        the registry: nothing changes then."""
        now = to_utc(now)
        with write_lock(self.db):
            source = PolicyRow.get_or_none(PolicyRow.id == policy_id)
            if source is None:
                raise NotFound(f"policy {policy_id} not found")
            family = self._lock_family(source.family_id)
            row = family[policy_id]  # re-read under the lock: the status may have moved
            if PolicyStatus(row.status) not in _ACTIVATABLE:
                raise Conflict(f"policy {policy_id} is already active")
            policy = self._with_rules([row])[0]
            problems = validate_policy(policy.spec.to_json(), self.registry)
            if problems:
                how = ("edit the draft (PUT) and activate it again"
                       if PolicyStatus(row.status) is PolicyStatus.DRAFT
                       else "fix it in a replacement")
                raise PolicyInvalid(f"policy {policy_id} is not valid; {how}", problems)
            # Supersede first: the one-active index is checked per statement.
            PolicyRow.update(status=PolicyStatus.SUPERSEDED.value, updated_at=now).where(
                (PolicyRow.family_id == row.family_id)
                & (PolicyRow.status == PolicyStatus.ACTIVE.value)
            ).execute()
            PolicyRow.update(
                status=PolicyStatus.ACTIVE.value, activated_at=now, updated_at=now
            ).where(PolicyRow.id == policy_id).execute()
            # Activating the family's shadow is the ordinary activation, and ends the shadow.
            delete_where(ShadowRow, ShadowRow.policy_id == policy_id)
            return _policy(row, policy.rules, status=PolicyStatus.ACTIVE, activated_at=now,
                           updated_at=now)

    def deactivate(self, policy_id: int, now: datetime) -> Policy:
        now = to_utc(now)
        with write_lock(self.db):
            row = self._lock(policy_id)
            if row.status != PolicyStatus.ACTIVE.value:
                raise Conflict(f"policy {policy_id} is {row.status}; only an active policy "
                               "can be deactivated")
            PolicyRow.update(status=PolicyStatus.INACTIVE.value, updated_at=now).where(
                PolicyRow.id == policy_id
            ).execute()
            rules = self._rules_by_policy([policy_id]).get(policy_id, [])
            return _policy(row, rules, status=PolicyStatus.INACTIVE, updated_at=now)

    # -- helpers -----------------------------------------------------------------------------

    def _lock(self, policy_id: int) -> PolicyRow:
        query = PolicyRow.select().where(PolicyRow.id == policy_id)
        row = lock_rows(query, self.db).get_or_none()
        if row is None:
            raise NotFound(f"policy {policy_id} not found")
        return row

    def _lock_family(self, family_id: str) -> dict[int, PolicyRow]:
        query = PolicyRow.select().where(PolicyRow.family_id == family_id).order_by(PolicyRow.id)
        return {row.id: row for row in lock_rows(query, self.db)}

    @staticmethod
    def _require_draft(row: PolicyRow, verb: str) -> None:
        if row.status != PolicyStatus.DRAFT.value:
            raise Conflict(f"policy {row.id} is {row.status}; only a draft can be {verb}")

    def _insert(self, spec: PolicySpec, family_id: str, version: int, now: datetime,
                origin: str) -> Policy:
        row = PolicyRow(
            family_id=family_id,
            version=version,
            status=PolicyStatus.DRAFT.value,
            name=spec.name,
            description=spec.description,
            trigger_json=spec.trigger.to_json(),
            created_at=now,
            updated_at=now,
            activated_at=None,
            origin=origin,
        )
        row.save(force_insert=True)
        return _policy(row, self._insert_rules(row.id, spec))

    def _insert_rules(self, policy_id: int, spec: PolicySpec) -> list[Rule]:
        """One multi-row INSERT. Ids are assigned in VALUES order, so the operator's order
        breaks priority ties (rules run in ``(priority, id)`` order)."""
        if not spec.rules:
            return []
        inserted = (
            RuleRow.insert_many([
                {
                    RuleRow.policy: policy_id,
                    RuleRow.name: rule.name,
                    RuleRow.priority: rule.priority,
                    RuleRow.condition_json: rule.when,
                    RuleRow.actions_json: rule.then,
                    RuleRow.transition_json: {"on_success": OnSuccess(rule.on_success).value},
                }
                for rule in spec.rules
            ])
            .returning(RuleRow.id)
            .execute()
        )
        ids = sorted(item.id for item in inserted)  # RETURNING order is not guaranteed
        return [
            Rule(name=rule.name, priority=rule.priority, when=rule.when, then=rule.then,
                 on_success=OnSuccess(rule.on_success), id=rule_id)
            for rule_id, rule in zip(ids, spec.rules, strict=True)
        ]

    def _rules_by_policy(self, policy_ids: Iterable[int]) -> dict[int, list[Rule]]:
        ids = list(policy_ids)
        rules: dict[int, list[Rule]] = {policy_id: [] for policy_id in ids}
        if not ids:
            return rules
        query = RuleRow.select().where(RuleRow.policy.in_(ids)).order_by(RuleRow.id)
        for row in query:
            # the foreign key's column, which peewee gives as ``policy_id`` on the row
            policy_id: int = row.policy_id  # type: ignore[attr-defined]  # not in types-peewee
            rules[policy_id].append(_rule(row))
        return rules

    def _with_rules(self, rows: list[PolicyRow]) -> list[Policy]:
        """Attach rules to every row with one query."""
        rules = self._rules_by_policy(row.id for row in rows)
        return [_policy(row, rules[row.id]) for row in rows]


def _require_no_shadow(policy_id: int, verb: str) -> None:
    """A draft in shadow is frozen: its decisions must all come from one version."""
    if ShadowRow.select().where(ShadowRow.policy_id == policy_id).exists():
        raise Conflict(f"policy {policy_id} is in shadow and cannot be {verb}; stop the "
                       f"shadow first (DELETE /dispatch/policies/{policy_id}/shadow)")


def _rule(row: RuleRow) -> Rule:
    transition = row.transition_json or {}
    return Rule(
        name=row.name,
        priority=row.priority,
        when=row.condition_json,
        then=row.actions_json,
        on_success=OnSuccess(transition.get("on_success", OnSuccess.TERMINATE.value)),
        id=row.id,
    )


class _PolicyFields(TypedDict):
    """A ``Policy``'s fields but its rules."""

    id: int
    family_id: str
    version: int
    status: PolicyStatus
    name: str
    description: str
    trigger: PolicyTrigger
    created_at: datetime
    updated_at: datetime
    activated_at: datetime | None
    origin: str


class _PolicyChanges(TypedDict, total=False):
    """What an UPDATE of a policy row writes, as ``Policy`` fields."""

    status: PolicyStatus
    name: str
    description: str
    trigger: PolicyTrigger
    updated_at: datetime
    activated_at: datetime | None


def _policy(row: PolicyRow, rules: Iterable[Rule], **changes: Unpack[_PolicyChanges]) -> Policy:
    """The domain policy of ``row`` with ``changes`` applied (what an UPDATE just wrote)."""
    fields: _PolicyFields = {
        "id": row.id,
        "family_id": row.family_id,
        "version": row.version,
        "status": PolicyStatus(row.status),
        "name": row.name,
        "description": row.description,
        "trigger": PolicyTrigger.from_json(row.trigger_json),
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "activated_at": row.activated_at,
        "origin": row.origin,
        **changes,
    }
    return Policy(rules=tuple(rules), **fields)
