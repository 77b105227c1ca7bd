"""Shadow policies in the store (docs/policies.md, "Shadow: try a change on live traffic").

A family has at most one shadow: a draft version whose decisions are recorded next to the live
ones. The shadowed draft cannot be changed or deleted while it is a shadow (its decisions would
mix two versions); activating it ends the shadow (``PolicyRepository.activate``).

A decision is recorded when the shadow has evaluated a live trigger, and judged once the live
execution it stands beside has ended: whichever comes last judges it, so the order in which
the two finish does not matter.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, cast

import peewee

from ticket_dispatcher.domain.execution import Execution
from ticket_dispatcher.domain.model import PolicyStatus
from ticket_dispatcher.domain.shadow import DIFFERENCES, Decision, ShadowVerdict, decide, judge
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store.database import (
    dict_rows,
    engine_of,
    lock_rows,
    unit_of_work,
    write_lock,
)
from ticket_dispatcher.store.executions import ExecutionRepository
from ticket_dispatcher.store.models import (
    ExecutionRow,
    PolicyRow,
    ShadowDecisionRow,
    ShadowRow,
    delete_where,
)
from ticket_dispatcher.timeutil import format_time, to_utc

LATEST_SHOWN = 20  # differing cases a report lists, newest first
STOPPED_SHOWN = 10  # shadows no longer running that the overview lists, newest version first
_TERMINAL = ("succeeded", "failed")


@dataclass(frozen=True)
class Shadow:
    policy_id: int
    family_id: str
    started_at: datetime


class ShadowCaseJson(TypedDict):
    """A differing case as the API and ``policy shadow --json`` show it."""

    trigger_id: int
    issue_key: str
    live_execution_id: int
    kind: str  # the verdict
    live: dict[str, Any]  # ``Decision.to_json``
    shadow: dict[str, Any]
    decided_at: str | None


class ShadowReportJson(TypedDict):
    """A shadow report as the API and ``policy shadow --json`` show it."""

    policy_id: int
    family_id: str
    shadowing: bool
    started_at: str | None
    seen: int
    agreed: int
    differed: int
    pending: int
    dropped: int
    differences: dict[str, int]  # verdict → count, for each verdict that differs
    latest_differences: list[ShadowCaseJson]


@dataclass(frozen=True)
class ShadowCase:
    trigger_id: int
    issue_key: str
    live_execution_id: int
    verdict: ShadowVerdict
    live: Decision
    shadow: Decision
    decided_at: datetime | None

    def to_json(self) -> ShadowCaseJson:
        return {"trigger_id": self.trigger_id, "issue_key": self.issue_key,
                "live_execution_id": self.live_execution_id, "kind": self.verdict.value,
                "live": self.live.to_json(), "shadow": self.shadow.to_json(),
                "decided_at": format_time(self.decided_at)}


@dataclass(frozen=True)
class ShadowReport:
    policy_id: int
    family_id: str
    shadowing: bool  # still in shadow (else: what it decided while it was)
    started_at: datetime | None
    dropped: int  # live triggers not evaluated because the service was busy
    verdicts: Counter = field(default_factory=Counter)  # ShadowVerdict -> count; None: pending
    latest: list[ShadowCase] = field(default_factory=list)

    @property
    def seen(self) -> int:
        return sum(self.verdicts.values())

    def to_json(self) -> ShadowReportJson:
        differed = sum(self.verdicts[v] for v in DIFFERENCES)
        return {
            "policy_id": self.policy_id, "family_id": self.family_id,
            "shadowing": self.shadowing, "started_at": format_time(self.started_at),
            "seen": self.seen, "agreed": self.verdicts[ShadowVerdict.AGREED], "differed": differed,
            "pending": self.verdicts[None], "dropped": self.dropped,
            "differences": {v.value: self.verdicts[v] for v in DIFFERENCES},
            "latest_differences": [case.to_json() for case in self.latest],
        }


@dataclass(frozen=True)
class ShadowSummary:
    """One version in the shadows' overview: what it is, and its counts (no cases)."""

    policy_id: int
    family_id: str
    name: str
    version: int
    status: PolicyStatus
    report: ShadowReport


class ShadowRepository:
    def __init__(self, db: peewee.Database, executions: ExecutionRepository):
        self.db = db
        self.engine = engine_of(db)
        self._executions = executions  # a live execution that ended first is judged at once

    # -- the shadow itself ------------------------------------------------------------------

    def start(self, policy_id: int, now: datetime) -> Shadow:
        """Put a draft in shadow for its family. ``NotFound``; ``Conflict`` when it is no
        draft, or its family has a shadow already."""
        with write_lock(self.db):
            row = lock_rows(PolicyRow.select().where(PolicyRow.id == policy_id),
                            self.db).get_or_none()
            if row is None:
                raise NotFound(f"policy {policy_id} not found")
            if row.status != PolicyStatus.DRAFT.value:
                raise Conflict(f"policy {policy_id} is {row.status}: only a draft can be put "
                               f"in shadow")
            current = ShadowRow.get_or_none(ShadowRow.family_id == row.family_id)
            if current is not None:
                if current.policy_id == policy_id:
                    raise Conflict(f"policy {policy_id} is in shadow already")
                raise Conflict(f"family {row.family_id} has a shadow already: policy "
                               f"{current.policy_id}; stop it first")
            ShadowRow.create(family_id=row.family_id, policy_id=policy_id,
                             started_at=to_utc(now), dropped=0)
            return Shadow(policy_id, row.family_id, to_utc(now))

    def stop(self, policy_id: int) -> None:
        """``NotFound`` when the policy is not in shadow."""
        with unit_of_work(self.db):
            if not delete_where(ShadowRow, ShadowRow.policy_id == policy_id):
                raise NotFound(f"policy {policy_id} is not in shadow")

    def of_families(self, family_ids: list[str]) -> dict[str, int]:
        """The shadow version of each of these families that has one: family → policy id."""
        if not family_ids:
            return {}
        condition, params = self.engine.among("family_id", family_ids, "text[]")
        with unit_of_work(self.db):  # every trigger asks: by hand
            return dict(self.db.execute_sql(
                f"SELECT family_id, policy_id FROM {ShadowRow._meta.table_name} "
                f"WHERE {condition}", params).fetchall())

    def is_shadow(self, policy_id: int) -> bool:
        with unit_of_work(self.db):
            return ShadowRow.select().where(ShadowRow.policy_id == policy_id).exists()

    def dropped(self, family_id: str) -> None:
        """One more live trigger this family's shadow did not evaluate (the service was
        busy)."""
        with unit_of_work(self.db):
            (ShadowRow.update(dropped=ShadowRow.dropped + 1)
             .where(ShadowRow.family_id == family_id).execute())

    # -- decisions -----------------------------------------------------------------------------

    def record(self, *, policy_id: int, family_id: str, trigger_id: int, issue_key: str,
               live_execution_id: int, shadow: Decision, now: datetime) -> ShadowVerdict | None:
        """Store the shadow's decision beside the live execution; judged at once when that
        execution has ended already (the verdict), else when it ends (None now)."""
        with write_lock(self.db):
            row = ShadowDecisionRow.create(
                policy_id=policy_id, family_id=family_id, trigger_id=trigger_id,
                issue_key=issue_key, live_execution_id=live_execution_id,
                shadow_json=shadow.to_json(), created_at=to_utc(now))
            # Locked: a live execution ending right now either committed its end before this
            # read (judged here) or finds this decision when it settles (judged there).
            status = lock_rows(ExecutionRow.select(ExecutionRow.status)
                               .where(ExecutionRow.id == live_execution_id), self.db).scalar()
        if status not in _TERMINAL:
            return None
        live = self._executions.get(live_execution_id)
        judged = self._judge([row.id], decide(live), now)
        return judged[0][1] if judged else None

    def settle(self, execution: Execution, now: datetime) -> list[tuple[str, ShadowVerdict]]:
        """The live ``execution`` has ended: judge every shadow decision waiting for it.
        (family, verdict) for each judged now."""
        with unit_of_work(self.db):  # every live execution's end asks: written out by hand
            waiting = [decision_id for (decision_id,) in self.db.execute_sql(
                f"SELECT id FROM {ShadowDecisionRow._meta.table_name} "
                f"WHERE live_execution_id = {self.db.param} AND verdict IS NULL",
                (execution.id,)).fetchall()]
        if not waiting:
            return []
        return self._judge(waiting, decide(execution), now)

    def _judge(self, ids: list[int], live: Decision,
               now: datetime) -> list[tuple[str, ShadowVerdict]]:
        """Judge the decisions ``ids`` not judged yet against ``live``: (family, verdict)
        for each."""
        judged = []
        with write_lock(self.db):
            rows = lock_rows(ShadowDecisionRow.select().where(
                ShadowDecisionRow.id.in_(ids) & ShadowDecisionRow.verdict.is_null()), self.db)
            for row in list(rows):
                verdict = judge(live, Decision.from_json(row.shadow_json))
                (ShadowDecisionRow.update(live_json=live.to_json(), verdict=verdict.value,
                                          decided_at=to_utc(now))
                 .where(ShadowDecisionRow.id == row.id).execute())
                judged.append((row.family_id, verdict))
        return judged

    # -- the report ----------------------------------------------------------------------------

    def overview(self, stopped: int = STOPPED_SHOWN) -> list[ShadowSummary]:
        """Every shadow running, then the ``stopped`` newest versions that were shadowed and
        are not now (stopped, or activated), each with its counts; in three queries whatever
        their number.

        Only the decisions remember a stopped shadow. Its versions are found by walking the
        distinct policy ids of the decisions downwards, one index probe each (a recursive
        query: a plain ``DISTINCT`` would read every decision ever recorded), and there are
        only ever a few of them."""
        shadows, decisions = ShadowRow._meta.table_name, ShadowDecisionRow._meta.table_name
        policies = PolicyRow._meta.table_name
        with unit_of_work(self.db):
            running = dict_rows(ShadowRow
                                .select(ShadowRow, PolicyRow.name, PolicyRow.version,
                                        PolicyRow.status)
                                .join(PolicyRow, on=(PolicyRow.id == ShadowRow.policy_id))
                                .order_by(ShadowRow.started_at.desc(),
                                          ShadowRow.policy_id.desc()))
            ended = self.db.execute_sql(
                f"WITH RECURSIVE walk(policy_id) AS ("
                f" SELECT MAX(policy_id) FROM {decisions}"
                f" UNION ALL"
                f" SELECT (SELECT MAX(d.policy_id) FROM {decisions} d"
                f" WHERE d.policy_id < walk.policy_id)"
                f" FROM walk WHERE walk.policy_id IS NOT NULL)"
                f" SELECT p.id, p.family_id, p.name, p.version, p.status"
                f" FROM walk JOIN {policies} p ON p.id = walk.policy_id"
                f" WHERE walk.policy_id NOT IN (SELECT policy_id FROM {shadows})"
                f" ORDER BY p.id DESC LIMIT {int(stopped)}").fetchall() if stopped > 0 else []
            ids = [row["policy_id"] for row in running] + [row[0] for row in ended]
            verdicts: dict[int, Counter] = {policy_id: Counter() for policy_id in ids}
            if ids:
                condition, params = self.engine.among("policy_id", ids, "bigint[]")
                counts = self.db.execute_sql(
                    f"SELECT policy_id, verdict, COUNT(*) FROM {decisions}"
                    f" WHERE {condition} GROUP BY policy_id, verdict", params).fetchall()
                for policy_id, verdict, n in counts:
                    verdicts[policy_id][ShadowVerdict(verdict) if verdict else None] = n
        summaries = [ShadowSummary(
            row["policy_id"], row["family_id"], row["name"], row["version"],
            PolicyStatus(row["status"]),
            ShadowReport(policy_id=row["policy_id"], family_id=row["family_id"], shadowing=True,
                         started_at=row["started_at"], dropped=row["dropped"],
                         verdicts=verdicts[row["policy_id"]])) for row in running]
        summaries += [ShadowSummary(
            policy_id, family_id, name, version, PolicyStatus(status),
            ShadowReport(policy_id=policy_id, family_id=family_id, shadowing=False,
                         started_at=None, dropped=0, verdicts=verdicts[policy_id]))
            for policy_id, family_id, name, version, status in ended]
        return summaries

    def report(self, policy_id: int, latest: int = LATEST_SHOWN) -> ShadowReport:
        """What ``policy_id`` decided in shadow; ``NotFound`` for an unknown policy."""
        with unit_of_work(self.db):
            policy = PolicyRow.get_or_none(PolicyRow.id == policy_id)
            if policy is None:
                raise NotFound(f"policy {policy_id} not found")
            shadow = ShadowRow.get_or_none(ShadowRow.policy_id == policy_id)
            verdicts: Counter = Counter()
            counts = dict_rows(ShadowDecisionRow
                               .select(ShadowDecisionRow.verdict,
                                       peewee.fn.COUNT(ShadowDecisionRow.id).alias("n"))
                               .where(ShadowDecisionRow.policy_id == policy_id)
                               .group_by(ShadowDecisionRow.verdict))
            for row in counts:
                verdicts[ShadowVerdict(row["verdict"]) if row["verdict"] else None] = row["n"]
            differing = (ShadowDecisionRow.select()
                         .where((ShadowDecisionRow.policy_id == policy_id)
                                & ShadowDecisionRow.verdict.in_([v.value for v in DIFFERENCES]))
                         .order_by(ShadowDecisionRow.id.desc()).limit(latest))
            # cast: the query keeps the rows whose verdict is one of DIFFERENCES, never NULL
            cases = [ShadowCase(row.trigger_id, row.issue_key, row.live_execution_id,
                                ShadowVerdict(cast(str, row.verdict)),
                                Decision.from_json(row.live_json or {}),
                                Decision.from_json(row.shadow_json), row.decided_at)
                     for row in differing]
        return ShadowReport(policy_id=policy_id, family_id=policy.family_id,
                            shadowing=shadow is not None,
                            started_at=shadow.started_at if shadow else None,
                            dropped=shadow.dropped if shadow else 0,
                            verdicts=verdicts, latest=cases)
