"""Policies: the versions with the API's filters; one version, readable, with its family's
history and its lifecycle (activate, roll back, switch off, shadow); a side-by-side diff of two
versions; the validator for a pasted document; and a dry run of a version on one issue
(docs/policies.md, "From file to live" and "Change it later").

Every move goes through the store's own method, the one the API calls, so the console can
neither skip the activation's validation nor the shadow's rules: a refusal is the same 4xx with
the same problems.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

import falcon

from ticket_dispatcher.console.actions import Action, Done, console_author
from ticket_dispatcher.console.web import (
    Console,
    Page,
    Query,
    form_text,
    masked,
    see_other,
    url,
)
from ticket_dispatcher.domain.catalog import SOURCE
from ticket_dispatcher.domain.conditions import MAX_CONDITION_DEPTH
from ticket_dispatcher.domain.fanout import reserved_role
from ticket_dispatcher.domain.model import Policy, PolicyStatus, Rule
from ticket_dispatcher.domain.validation import validate_policy, without_server_fields
from ticket_dispatcher.errors import Conflict, InvalidInput, PolicyInvalid, Problem
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.binding import (
    MAX_ID,
    paging,
    parse_json,
    query_choice,
    query_int,
    text_problems,
)
from ticket_dispatcher.http.contexts import checked_issue_key
from ticket_dispatcher.http.policies import MULTILINE_PATHS
from ticket_dispatcher.store import Store
from ticket_dispatcher.timeutil import parse_business_now

FILTERS = ("status", "family_id", "limit")
HISTORY_SHOWN = 200  # versions of one family on a policy's page (the API's largest page)
# The source a console dry run is posted with: an ordinary one (a reserved source cannot name
# a policy), so the trigger list tells these apart from Jira's and the command line's.
TEST_SOURCE = "console"
ACTIVATABLE = (PolicyStatus.DRAFT, PolicyStatus.INACTIVE, PolicyStatus.SUPERSEDED)
# The diff shows this many unchanged lines around each change, and folds longer equal runs.
DIFF_CONTEXT = 3
DIFF_FOLD_OVER = 6


def routes(console: Console, ID: str) -> list[tuple[str, Page]]:
    item = f"/policies/{{policy_id:{ID}}}"
    return [
        ("/policies", PolicyList(console)),
        ("/policies/diff", PolicyDiff(console)),
        ("/policies/validate", PolicyValidate(console)),
        (item, PolicyPage(console)),
        (item + "/activate", PolicyActivate(console)),
        (item + "/deactivate", PolicyDeactivate(console)),
        (item + "/test", PolicyTest(console)),
    ]


# --- the list and one version -----------------------------------------------------------------


class PolicyList(Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = Query(req)
        limit, offset = paging(query)
        status = query_choice(query, "status", PolicyStatus,
                              "one of " + ", ".join(PolicyStatus))
        store = self.services.store
        items, total = store.policies.page(status=status, family_id=query.get_param("family_id"),
                                           limit=limit, offset=offset)
        shadows = store.shadows.of_families(sorted({p.family_id for p in items}))
        filters = query.values(*FILTERS)
        self.console.render(
            req, resp, "policies.html", items=items, total=total, limit=limit, offset=offset,
            filters=dict.fromkeys(FILTERS, "") | filters, page_query=filters,
            statuses=list(PolicyStatus), shadow_ids=set(shadows.values()))


class PolicyPage(Page):
    """One version: what it does, its family's versions, and what an operator may do."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        store = self.services.store
        policy = store.policies.get(policy_id)
        versions, total = family_versions(store, policy.family_id)
        active = next((p for p in versions if p.status is PolicyStatus.ACTIVE), None)
        shadow_id = store.shadows.of_families([policy.family_id]).get(policy.family_id)
        # The other version a diff most likely wants: the live one, else the one before.
        others = [p for p in versions if p.id != policy.id]
        partner = (active if active is not None and active.id != policy.id
                   else next((p for p in others if p.version < policy.version),
                             others[0] if others else None))
        self.console.render(
            req, resp, "policy.html", policy=policy, versions=versions, total=total,
            active=active, shadow_id=shadow_id, partner=partner,
            activation=activation_label(policy, active),
            rules=[describe_rule(rule) for rule in policy.ordered_rules],
            document=pretty(policy.to_json(), sort_keys=False),
            diff_link=diff_link)


def family_versions(store: Store, family_id: str) -> tuple[list[Policy], int]:
    """The family's versions newest first (the newest ``HISTORY_SHOWN``) and how many there
    are: one list query, a second only for a family longer than a page."""
    versions, total = store.policies.page(family_id=family_id, limit=HISTORY_SHOWN)
    if total > len(versions):
        versions, total = store.policies.page(family_id=family_id, limit=HISTORY_SHOWN,
                                              offset=total - HISTORY_SHOWN)
    return sorted(versions, key=lambda p: p.version, reverse=True), total


def activation_label(policy: Policy, active: Policy | None) -> str | None:
    """What activating this version means, as its button says it; None when it cannot be."""
    if policy.status not in ACTIVATABLE:
        return None
    if policy.status is PolicyStatus.DRAFT:
        return f"Activate version {policy.version}"
    if active is not None and active.version > policy.version:  # the rollback
        return f"Roll back to version {policy.version}"
    return f"Activate version {policy.version} again"


def diff_link(one: Policy, other: Policy) -> str:
    """The diff of two versions, the older on the left."""
    older, newer = sorted((one, other), key=lambda p: (p.version, p.id))
    return url("/policies/diff", a=older.id, b=newer.id)


def pretty(value: Any, *, sort_keys: bool = True) -> str:
    """A JSON document as the API sends it, indented, secrets masked as everywhere here."""
    return json.dumps(masked(value), indent=2, sort_keys=sort_keys, ensure_ascii=False)


# --- rules, readable --------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One condition of a ``when`` tree as the page shows it: ``kind`` is all, any, not,
    always, leaf, or raw (what this page does not know how to read: shown as JSON)."""

    kind: str
    field: str = ""
    operator: str = ""
    operand: str = ""
    ignore_case: bool = False
    children: tuple[Node, ...] = ()


def describe_rule(rule: Rule) -> dict[str, Any]:
    return {"name": rule.name, "priority": rule.priority, "on_success": rule.on_success.value,
            "when": describe_condition(rule.when),
            "then": [describe_action(action) for action in rule.then]}


def describe_condition(when: Any, depth: int = 0) -> Node:
    """The tree to render; below the depth conditions may nest it is shown as JSON, so no
    stored draft can make the template recurse without end."""
    if not isinstance(when, dict) or depth > MAX_CONDITION_DEPTH:
        return Node("raw", operand=pretty(when))
    if set(when) == {"always"}:
        return Node("always")
    for kind in ("all", "any"):
        if set(when) == {kind} and isinstance(when[kind], list) and when[kind]:
            return Node(kind, children=tuple(describe_condition(child, depth + 1)
                                             for child in when[kind]))
    if set(when) == {"not"}:
        return Node("not", children=(describe_condition(when["not"], depth + 1),))
    if isinstance(when.get("field"), str) and isinstance(when.get("operator"), str):
        operands = {k: v for k, v in when.items()
                    if k not in ("field", "operator", "ignore_case")}
        return Node("leaf", field=when["field"], operator=when["operator"],
                    operand=_operand(operands), ignore_case=when.get("ignore_case") is True)
    return Node("raw", operand=pretty(when))


def _operand(operands: dict) -> str:
    if not operands:
        return ""
    if set(operands) == {"time_window"} and isinstance(operands["time_window"], dict):
        window = operands["time_window"]
        days = window.get("weekdays")
        days = ",".join(map(str, days)) if isinstance(days, list) else str(days)
        return f"{days} {window.get('start')}–{window.get('end')} {window.get('timezone')}"
    if len(operands) == 1:
        return json.dumps(next(iter(operands.values())), ensure_ascii=False)
    return json.dumps(operands, ensure_ascii=False, sort_keys=True)


def describe_action(action: Any) -> dict:
    if isinstance(action, dict) and isinstance(action.get("type"), str):
        config = action.get(action["type"])
        return {"type": action["type"], "config": pretty(config) if config else ""}
    return {"type": "", "config": pretty(action)}


# --- lifecycle actions ------------------------------------------------------------------------


class PolicyActivate(Action):
    """Activate a version: a draft going live, or an older version coming back (the rollback)."""

    title = "Activate a policy version"

    def _state(self, policy_id: int) -> tuple[Policy, Policy | None]:
        store = self.services.store
        policy = store.policies.get(policy_id)
        if policy.status not in ACTIVATABLE:
            raise Conflict(f"policy {policy_id} is {policy.status.value}; it is live already")
        live, _ = store.policies.page(family_id=policy.family_id, status=PolicyStatus.ACTIVE,
                                      limit=1)
        return policy, (live[0] if live else None)

    def back(self, req: falcon.Request, policy_id: int) -> str:
        return url(f"/policies/{policy_id}")

    def question(self, req: falcon.Request, policy_id: int) -> str:
        policy, active = self._state(policy_id)
        # Asked before the operator confirms, so a version that cannot go live is refused
        # here with every problem; the store checks again when it activates.
        problems = validate_policy(policy.spec.to_json(), self.services.registry)
        if problems:
            how = ("edit the draft (PUT /dispatch/policies/{id}) and try again"
                   if policy.status is PolicyStatus.DRAFT else "fix it in a replacement")
            raise PolicyInvalid(f"version {policy.version} (policy {policy.id}) is not valid "
                                f"and cannot be activated; {how.format(id=policy.id)}",
                                problems)
        text = (f"{activation_label(policy, active)}: version {policy.version} of "
                f"“{policy.name}” (policy {policy.id}) becomes the family's active version")
        if active is not None:
            text += f", and version {active.version} (policy {active.id}), active now, " \
                    "becomes superseded"
        text += (". New triggers are matched against it at once; executions already running "
                 "finish with the version they started with")
        if self.services.store.shadows.is_shadow(policy.id):
            text += ". This ends its shadow (its report stays)"
        return text + "."

    def apply(self, req: falcon.Request, policy_id: int) -> Done:
        policy, active = self._state(policy_id)
        activated = self.services.changes.activate(console_author(req), policy_id)
        message = f"Version {activated.version} of “{activated.name}” (policy {activated.id}) " \
                  "is active now"
        if active is not None:
            message += f"; version {active.version} (policy {active.id}) is superseded"
        if active is not None and active.version > policy.version:
            message = "Rolled back. " + message
        return Done(message + ".", url(f"/policies/{policy_id}"),
                    f"See version {activated.version}")


class PolicyDeactivate(Action):
    """Switch a family off: its active version becomes inactive, and no version is live."""

    title = "Switch a policy off"
    danger = True

    def _active(self, policy_id: int) -> Policy:
        policy = self.services.store.policies.get(policy_id)
        if policy.status is not PolicyStatus.ACTIVE:
            raise Conflict(f"policy {policy_id} is {policy.status.value}; only the active "
                           "version can be switched off")
        return policy

    def back(self, req: falcon.Request, policy_id: int) -> str:
        return url(f"/policies/{policy_id}")

    def question(self, req: falcon.Request, policy_id: int) -> str:
        policy = self._active(policy_id)
        return (f"Deactivate “{policy.name}”, version {policy.version} (policy {policy.id}): "
                "it becomes inactive and its family has no active version, so the triggers "
                "it would take are no longer dispatched by it. Executions already running "
                "finish. Activating any version of the family later switches it on again.")

    def apply(self, req: falcon.Request, policy_id: int) -> Done:
        policy = self.services.changes.deactivate(console_author(req), policy_id)
        return Done(f"Version {policy.version} of “{policy.name}” (policy {policy.id}) is "
                    "inactive; its family has no active version now.",
                    url(f"/policies/{policy_id}"), f"See version {policy.version}")


class PolicyTest(Page):
    """A dry run of this version on one issue, posted as the API's trigger intake would take
    ``{"source": "console", "input": {"issue_key"}, "policy_id", "dryrun": {"overwrite_data":
    {"now"?}}}``. It writes nothing outside the service, so it asks no confirmation; it still
    posts a trigger, so it needs the operator role."""

    console_roles = {"POST": OPERATOR}

    def on_post(self, req: falcon.Request, resp: falcon.Response, policy_id: int) -> None:
        form = req.context.form
        problems: list[Problem] = []
        issue_key = form_text(form, "issue_key", limit=200).strip()
        try:
            checked_issue_key(issue_key, "issue_key")
        except InvalidInput as exc:
            problems.extend(exc.problems)
        now = form_text(form, "now", required=False, limit=100).strip()
        if now:
            try:
                parse_business_now(now)
            except ValueError as exc:
                problems.append(Problem("now", str(exc)))
        if problems:
            raise InvalidInput("the dry run is not valid", problems)
        self.services.store.policies.get(policy_id)  # 404 before a trigger is stored
        assert SOURCE(TEST_SOURCE) and reserved_role(TEST_SOURCE) is None
        trigger = self.services.running().accept_trigger(
            TEST_SOURCE, issue_key, policy_id=policy_id,
            dryrun={"overwrite_data": {"now": now} if now else {}})
        see_other(resp, url("/executions", trigger_id=trigger.id))


# --- the diff -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffRow:
    """One row of the side-by-side diff. ``kind``: same, changed, or folded (``folded``
    unchanged lines left out). A side without a line has number None."""

    kind: str
    left_number: int | None = None
    left: str = ""
    right_number: int | None = None
    right: str = ""
    folded: int = 0


def side_by_side(left: list[str], right: list[str]) -> list[DiffRow]:
    """The two documents line-aligned; long runs of equal lines folded to a count."""
    rows: list[DiffRow] = []
    opcodes = SequenceMatcher(None, left, right).get_opcodes()
    if all(tag == "equal" for tag, *_ in opcodes):  # the same document: show it whole
        return [DiffRow("same", i + 1, line, i + 1, line) for i, line in enumerate(left)]
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag != "equal":
            for k in range(max(i2 - i1, j2 - j1)):
                i, j = i1 + k, j1 + k
                rows.append(DiffRow("changed",
                                    i + 1 if i < i2 else None, left[i] if i < i2 else "",
                                    j + 1 if j < j2 else None, right[j] if j < j2 else ""))
            continue
        head = DIFF_CONTEXT if index > 0 else 0  # context after the change before
        tail = DIFF_CONTEXT if index < len(opcodes) - 1 else 0  # before the next change
        size = i2 - i1
        kept = range(size) if size <= DIFF_FOLD_OVER or size - head - tail < 2 \
            else [*range(head), None, *range(size - tail, size)]
        for k in kept:
            if k is None:
                rows.append(DiffRow("folded", folded=size - head - tail))
            else:
                rows.append(DiffRow("same", i1 + k + 1, left[i1 + k], j1 + k + 1,
                                    right[j1 + k]))
    return rows


class PolicyDiff(Page):
    """Two versions' documents side by side, as their authors wrote them (the policy spec,
    sorted keys): the fields the server assigns (ids, status, times) differ between any two
    versions and would bury the change; the page's header shows them instead."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = Query(req)
        missing = [Problem(name, "choose a policy version (its id)")
                   for name in ("a", "b") if query.get_param(name) is None]
        if missing:
            raise InvalidInput("a diff needs two versions: a and b", missing)
        a = query_int(query, "a", default=None, minimum=1, maximum=MAX_ID)
        b = query_int(query, "b", default=None, minimum=1, maximum=MAX_ID)
        assert a is not None and b is not None  # both are there: checked above
        store = self.services.store
        left, right = store.policies.get(a), store.policies.get(b)
        rows = side_by_side(pretty(left.spec.to_json()).splitlines(),
                            pretty(right.spec.to_json()).splitlines())
        self.console.render(req, resp, "policy_diff.html", left=left, right=right, rows=rows,
                            changed=sum(1 for row in rows if row.kind == "changed"))


# --- validating a pasted document ---------------------------------------------------------------


class PolicyValidate(Page):
    """A pasted document judged exactly as ``POST /dispatch/policies/validate`` judges a body
    (the same parser, the same text checks, the same validator and actions); a viewer may.
    Fields the server assigns are left out with a note, as ``policy validate`` does, so a
    version copied from a policy's page can be checked as it is."""

    console_roles = {"GET": VIEWER, "POST": VIEWER}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.console.render(req, resp, "policy_validate.html", text="", result=None)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        text = req.context.form.get("document", "")
        status, result = self.judge(text)
        self.console.render(req, resp, "policy_validate.html", status=status, text=text,
                            result=result)

    def judge(self, text: str) -> tuple[str, dict]:
        """(status, what to show): 200 for a readable document, valid or not; 400 for one that
        is not JSON, or not text the API would take; 413 for one over the body limit."""
        def unreadable(status: str, message: str,
                       problems: Iterable[Problem] = ()) -> tuple[str, dict]:
            return status, {"valid": False, "readable": False, "message": message,
                            "problems": list(problems), "ignored": []}

        if not text.strip():
            return unreadable(falcon.HTTP_400, "Paste a policy document first.")
        limit = self.services.max_body_bytes
        size = len(text.encode("utf-8", errors="replace"))
        if size > limit:
            return unreadable(falcon.HTTP_413, f"The document is {size} bytes; the limit is "
                                               f"{limit} (http.max_body_bytes).")
        try:
            value = parse_json(text, max_depth=self.services.max_json_depth,
                               what="the document")
        except InvalidInput as exc:
            return unreadable(falcon.HTTP_400, _sentence(exc.message), exc.problems)
        problems = text_problems(value, multiline=MULTILINE_PATHS)
        if problems:
            return unreadable(falcon.HTTP_400, "The document holds control characters or lone "
                                               "surrogates.", problems)
        body, ignored = without_server_fields(value)
        problems = validate_policy(body, self.services.registry)
        return falcon.HTTP_200, {"valid": not problems, "readable": True, "message": "",
                                 "problems": problems, "ignored": ignored}


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")
