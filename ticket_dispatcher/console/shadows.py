"""Shadows: every draft deciding beside its family's live version, how often the two agree,
and each difference with the live execution it stands beside (docs/policies.md, "Shadow: try a
change on live traffic"); starting and stopping one.
"""

from __future__ import annotations

from typing import Any, TypedDict

import falcon

from ticket_dispatcher.console.actions import Action, Done, console_author
from ticket_dispatcher.console.web import Console, Page, url
from ticket_dispatcher.domain.model import PolicyStatus
from ticket_dispatcher.domain.shadow import DIFFERENCES, ShadowVerdict
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store.shadows import (
    LATEST_SHOWN,
    STOPPED_SHOWN,
    ShadowReport,
    ShadowSummary,
)


def routes(console: Console, ID: str) -> list[tuple[str, Page]]:
    item = f"/policies/{{policy_id:{ID}}}/shadow"
    return [
        ("/shadows", ShadowList(console)),
        (item, ShadowPage(console)),
        (item + "/start", ShadowStart(console)),
        (item + "/stop", ShadowStop(console)),
    ]


class ShadowListRow(TypedDict):
    """One shadow in the list: the version and its counts (``agreement``)."""

    summary: ShadowSummary
    counts: dict[str, Any]


def agreement(report: ShadowReport) -> dict[str, Any]:
    """The counts a page shows: agreement is over the settled decisions only (a pending one
    has no live decision to agree with yet); ``ratio`` None while none is settled."""
    agreed = report.verdicts[ShadowVerdict.AGREED]
    differed = sum(report.verdicts[v] for v in DIFFERENCES)
    settled = agreed + differed
    return {"seen": report.seen, "agreed": agreed, "differed": differed, "settled": settled,
            "pending": report.verdicts[None], "dropped": report.dropped,
            "ratio": agreed / settled if settled else None,
            "differences": {v.value: report.verdicts[v] for v in DIFFERENCES}}


class ShadowList(Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        summaries = self.services.store.shadows.overview()
        rows: list[ShadowListRow] = [{"summary": s, "counts": agreement(s.report)}
                                     for s in summaries]
        self.console.render(req, resp, "shadows.html",
                            running=[r for r in rows if r["summary"].report.shadowing],
                            stopped=[r for r in rows if not r["summary"].report.shadowing],
                            stopped_shown=STOPPED_SHOWN)


class ShadowPage(Page):
    """One version's report; a version never shadowed shows zero counts, as the API does."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        store = self.services.store
        policy = store.policies.get(policy_id)
        report = store.shadows.report(policy_id)
        live, _ = store.policies.page(family_id=policy.family_id, status=PolicyStatus.ACTIVE,
                                      limit=1)
        self.console.render(req, resp, "shadow.html", policy=policy, report=report,
                            counts=agreement(report), live=live[0] if live else None,
                            latest_shown=LATEST_SHOWN)


class ShadowStart(Action):
    title = "Start a shadow"

    def back(self, req: falcon.Request, policy_id: int) -> str:
        return url(f"/policies/{policy_id}")

    def question(self, req: falcon.Request, policy_id: int) -> str:
        store = self.services.store
        policy = store.policies.get(policy_id)
        # The store decides again when it starts; asking first spares a pointless question.
        if policy.status is not PolicyStatus.DRAFT:
            raise Conflict(f"policy {policy_id} is {policy.status.value}: only a draft can be "
                           "put in shadow")
        current = store.shadows.of_families([policy.family_id]).get(policy.family_id)
        if current == policy_id:
            raise Conflict(f"policy {policy_id} is in shadow already")
        if current is not None:
            raise Conflict(f"family {policy.family_id} has a shadow already: policy {current}; "
                           "stop it first")
        return (f"Put version {policy.version} of “{policy.name}” (policy {policy.id}) in "
                "shadow: beside every live trigger its family's active version takes, it is "
                "evaluated as a dry run on the same issue and its decision is stored next to "
                "the live one. It writes nothing to Jira, Lark or Oncall, and the draft cannot "
                "be edited until the shadow is stopped.")

    def apply(self, req: falcon.Request, policy_id: int) -> Done:
        shadow = self.services.changes.start_shadow(console_author(req), policy_id)
        return Done(f"Policy {shadow.policy_id} is in shadow for family {shadow.family_id}.",
                    url(f"/policies/{policy_id}/shadow"), "See its shadow report")


class ShadowStop(Action):
    title = "Stop a shadow"
    danger = True

    def back(self, req: falcon.Request, policy_id: int) -> str:
        return url(f"/policies/{policy_id}/shadow")

    def question(self, req: falcon.Request, policy_id: int) -> str:
        store = self.services.store
        policy = store.policies.get(policy_id)
        if not store.shadows.is_shadow(policy_id):
            raise NotFound(f"policy {policy_id} is not in shadow")
        return (f"Stop the shadow of version {policy.version} of “{policy.name}” (policy "
                f"{policy.id}): it decides beside no more live triggers. Its report stays, "
                "and the draft can be edited again.")

    def apply(self, req: falcon.Request, policy_id: int) -> Done:
        self.services.changes.stop_shadow(console_author(req), policy_id)
        return Done(f"The shadow of policy {policy_id} is stopped; its report stays.",
                    url(f"/policies/{policy_id}/shadow"), "See its report")
