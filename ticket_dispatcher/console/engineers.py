"""Engineers: who may receive tickets, switching one on or off, and the rotations of the active
policies with whose turn it is now.

A rotation is a ``round_robin`` or ``balanced`` receiver of an active policy's ``assign`` or
``assign_l2`` action. Where the receiver lists its engineers, the turn is computed as a live
assignment would take it now, by the action's own rules (domain/rotation.py: whom the receiver
names, who may be chosen, and ``next_in_turn``, the rule ``EngineerRepository.take_turn``
applies), from one read of every member of every rotation. A
group or an Oncall team is only resolved when an assignment runs, and ``balanced`` counts open
issues in Jira at that moment: for those the page shows what the newest run of the rule read
(its candidates, counts, choice and reason), from one bounded query for all the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import quote

import falcon

from ticket_dispatcher.console.actions import Action, Done, console_author
from ticket_dispatcher.console.web import Console, Page, Query, url
from ticket_dispatcher.domain.actions.assign import AssignState, AvailabilityRules
from ticket_dispatcher.domain.actions.state import StateError
from ticket_dispatcher.domain.availability import (
    LOOKAHEAD,
    Availability,
    CandidateVerdict,
    TimeOff,
    availability_at,
    judge_candidates,
)
from ticket_dispatcher.domain.availability_parsing import settings_of
from ticket_dispatcher.domain.catalog import ActionType, ReceiverType, Strategy
from ticket_dispatcher.domain.execution import ActionExecution, Execution
from ticket_dispatcher.domain.model import Engineer, Policy, Rule
from ticket_dispatcher.domain.rotation import (
    dedupe,
    listed_emails,
    next_in_turn,
    turn_candidates,
)
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.auth import OPERATOR
from ticket_dispatcher.http.binding import paging, query_choice
from ticket_dispatcher.http.engineers import checked_email
from ticket_dispatcher.store import Store
from ticket_dispatcher.store.executions import LATEST_LOOKBACK

FILTERS = ("dispatch_enabled", "limit")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# What the engineer's page says after a form of it was saved (``?saved=``).
SAVED = {"availability": "Saved: the time zone, working hours and cap.",
         "time-off": "The time off was added."}
ASSIGN_TYPES = (ActionType.ASSIGN.value, ActionType.ASSIGN_L2.value)
ROTATING = (Strategy.ROUND_ROBIN.value, Strategy.BALANCED.value)
# Receivers whose engineers the policy names; a group's or a team's are known at run time only.
LISTED = (ReceiverType.USER.value, ReceiverType.USERS.value)


def routes(console: Console, ID: str) -> list[tuple[str, Page]]:
    return [
        ("/engineers", EngineerList(console)),
        ("/engineers/{email}", EngineerPage(console)),
        ("/engineers/{email}/dispatch", EngineerDispatch(console)),
    ]


def engineer_url(email: str) -> str:
    return url(f"/engineers/{quote(email, safe='@')}")


@dataclass
class Presence:
    """An engineer as the pages show their availability now: available or not and why (the
    domain's sentences, whose times are in the engineer's zone and say so: they explain the
    verdict), and their open issues against their cap as last counted."""

    engineer: Engineer
    availability: Availability
    counted: int | None = None  # open issues, as the newest rotation run counted them


def presence(engineer: Engineer, time_off: list[TimeOff], now: datetime) -> Presence:
    return Presence(engineer, availability_at(settings_of(engineer), time_off, now))


def _flag(text: str) -> bool:
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError(text)


def dispatch_url(email: str) -> str:
    """The switch's form action: the email as one path segment."""
    return url(f"/engineers/{quote(email, safe='@')}/dispatch")


# -- the rotations --------------------------------------------------------------------------------


@dataclass
class Member:
    """One engineer of a rotation as the page shows it: the stored engineer (None when no
    engineer has that email, so no assignment can choose them) and whether the turn is theirs.
    """

    email: str
    engineer: Engineer | None = None
    turn: bool = False
    count: int | None = None  # balanced: open issues as last counted
    # why an assignment now would pass them over (time off, working hours the action requires)
    away: tuple[str, ...] = ()
    preferred: bool = True  # inside their working hours, where the action prefers them

    @property
    def enabled(self) -> bool:
        return self.engineer is not None and self.engineer.dispatch_enabled

    @property
    def eligible(self) -> bool:
        return self.enabled and not self.away


@dataclass
class LastRun:
    """What the newest run of a rotation's rule read and chose (``context.assign``)."""

    execution: Execution
    action: ActionExecution
    candidates: list[str]
    assignee: str
    reason: str
    counts: dict[str, int] | None

    @property
    def at(self) -> datetime | None:
        return self.action.finished_at or self.action.planned_at or self.execution.updated_at

    @property
    def planned(self) -> bool:
        return self.action.planned_at is not None


@dataclass
class Rotation:
    policy: Policy
    rule: Rule
    index: int  # the action's place in the rule's ``then``
    action_type: str
    strategy: str
    receiver_type: str
    receiver: str  # the group or team name, or the listed emails joined
    rules: AvailabilityRules = field(default_factory=AvailabilityRules)
    listed: list[str] = field(default_factory=list)  # a listed receiver's emails, in order
    members: list[Member] = field(default_factory=list)
    turn: Member | None = None
    last: LastRun | None = None

    @property
    def listed_receiver(self) -> bool:
        return self.receiver_type in LISTED

    @property
    def round_robin(self) -> bool:
        return self.strategy == Strategy.ROUND_ROBIN.value


def find_rotations(policies: list[Policy]) -> list[Rotation]:
    """Every rotating assign action of ``policies``, in policy, rule-run and action order."""
    found: list[Rotation] = []
    for policy in policies:
        for rule in policy.ordered_rules:
            for index, action in enumerate(rule.then):
                kind = action.get("type")
                if kind not in ASSIGN_TYPES:
                    continue
                config = action.get(kind)
                if not isinstance(config, dict) or config.get("strategy") not in ROTATING:
                    continue
                receiver = config.get("receiver") or {}
                receiver_type = receiver.get("type", "")
                listed = listed_emails(receiver)
                try:
                    rules = AvailabilityRules.of(config)
                except ValueError:  # an active policy was validated: not expected
                    rules = AvailabilityRules()
                found.append(Rotation(
                    policy=policy, rule=rule, index=index, action_type=kind,
                    strategy=config["strategy"], receiver_type=receiver_type,
                    receiver=", ".join(listed) if listed else str(receiver.get(receiver_type)),
                    rules=rules, listed=listed))
    return found


def _last_run(rotation: Rotation, execution: Execution | None) -> LastRun | None:
    if execution is None:
        return None
    for rule in execution.rule_executions:
        if rule.rule_id != rotation.rule.id or rotation.index >= len(rule.action_executions):
            continue
        action = rule.action_executions[rotation.index]
        try:
            state = AssignState.load(action.context.get(AssignState.KEY))
        except (StateError, TypeError) as exc:  # written by a newer release, or damaged
            return LastRun(execution=execution, action=action, candidates=[], assignee="",
                           reason=f"its saved state cannot be read here: {exc}", counts=None)
        return LastRun(execution=execution, action=action,
                       candidates=list(state.candidates or []), assignee=state.assignee or "",
                       reason=state.reason or "", counts=state.counts)
    return None


def read_rotations(store: Store, now: datetime) -> list[Rotation]:
    """The active policies' rotations with their members and turns at ``now``: a bounded
    number of queries whatever the number of rotations (the active policies, the newest run of
    every rotation's rule, one read of every engineer any of them names and one of their time
    off). The turn skips whoever an assignment now would pass over: time off, and working hours
    where the action requires them (where it prefers them, those inside come first); caps are
    counted in Jira only when an assignment runs."""
    rotations = find_rotations(store.policies.list_active())
    if not rotations:
        return []
    latest = store.executions.latest_matched({r.rule.id for r in rotations})
    for rotation in rotations:
        rotation.last = _last_run(rotation, latest.get(rotation.rule.id))
    named = {email for rotation in rotations for email in _member_emails(rotation)}
    engineers, away = _read_engineers(store, named, now)
    for rotation in rotations:
        counts = (rotation.last.counts or {}) if rotation.last else {}
        rotation.members = [Member(email, engineers.get(email), count=counts.get(email))
                            for email in _member_emails(rotation)]
        verdicts = _judge(rotation, away, now)
        if rotation.round_robin:
            _mark_turn(rotation, verdicts)
    return rotations


def _member_emails(rotation: Rotation) -> list[str]:
    """Whom the rotation names: its listed engineers, else those its newest run read."""
    return rotation.listed or dedupe(rotation.last.candidates if rotation.last else [])


def _read_engineers(store: Store, emails: set[str], now: datetime,
                    ) -> tuple[dict[str, Engineer], Mapping[str, list[TimeOff]]]:
    """The engineers of ``emails`` who exist, by email, and their time off around ``now``."""
    if not emails:
        return {}, {}
    engineers = {e.email: e for e in store.engineers.named(emails)}
    return engineers, store.engineers.time_off(engineers, now, now + LOOKAHEAD)


def _judge(rotation: Rotation, away: Mapping[str, list[TimeOff]],
           now: datetime) -> list[CandidateVerdict]:
    """Each enabled member's verdict at ``now`` under the rotation's rules, also set on the
    member."""
    enabled = {m.email: m.engineer for m in rotation.members
               if m.enabled and m.engineer is not None}
    verdicts = judge_candidates(list(enabled),
                                {email: settings_of(e) for email, e in enabled.items()},
                                away, now, working_hours=rotation.rules.working_hours)
    members = {m.email: m for m in rotation.members}
    for verdict in verdicts:
        member = members[verdict.email]
        member.away = () if verdict.eligible else verdict.reasons
        member.preferred = verdict.preferred
    return verdicts


def _mark_turn(rotation: Rotation, verdicts: list[CandidateVerdict]) -> None:
    """The member whose turn a round robin would take now, by the assign action's own rules:
    among those it may choose (``turn_candidates``), the next in turn (``next_in_turn``)."""
    enabled = {m.email: m.engineer for m in rotation.members
               if m.enabled and m.engineer is not None}
    emails = turn_candidates(list(enabled), verdicts)
    if not emails:
        return
    chosen = next_in_turn([enabled[email] for email in emails])
    rotation.turn = next(m for m in rotation.members if m.email == chosen.email)
    rotation.turn.turn = True


# -- resources ------------------------------------------------------------------------------------


class EngineerList(Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = Query(req)
        limit, offset = paging(query)
        enabled = query_choice(query, "dispatch_enabled", _flag, "true or false")
        store = self.services.store
        items, total = store.engineers.page(limit=limit, offset=offset,
                                            dispatch_enabled=enabled)
        now = self.services.clock.now()
        away = store.engineers.time_off((e.email for e in items), now, now + LOOKAHEAD)
        rotations = read_rotations(store, now)
        counted = {m.email: m.count for r in rotations for m in r.members
                   if m.count is not None}
        rows = [presence(e, away.get(e.email, []), now) for e in items]
        for row in rows:
            row.counted = counted.get(row.engineer.email)
        filters = query.values(*FILTERS)
        self.console.render(
            req, resp, "engineers.html", items=items, rows=rows, total=total, limit=limit,
            offset=offset, filters=dict.fromkeys(FILTERS, "") | filters, query=filters,
            rotations=rotations, dispatch_url=dispatch_url, engineer_url=engineer_url,
            lookback=LATEST_LOOKBACK)


class EngineerPage(Page):
    """One engineer: available now or not and why, their zone, hours and cap, their time off
    (what has ended too, with ``past=true``) and the calendar feeds it comes from; for an
    operator, the forms that change them (engineer_settings.py)."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        saved = req.get_param("saved")
        self.show(req, resp, email, notice=SAVED.get(saved or ""))

    def show(self, req: falcon.Request, resp: falcon.Response, email: str, *,
             status: str = falcon.HTTP_200, notice: str | None = None,
             failed: InvalidInput | None = None, form_name: str = "",
             form: Mapping[str, str] | None = None) -> None:
        """The page; after a refused form, with ``status`` 400, what was wrong (``failed``)
        above the form ``form_name``, which keeps what was typed (``form``)."""
        query = Query(req)
        past = query_choice(query, "past", _flag, "true or false") or False
        limit, offset = paging(query)
        store, now = self.services.store, self.services.clock.now()
        engineer = store.engineers.get(checked_email(email))  # 400, 404
        away = store.engineers.time_off([engineer.email], now, now + LOOKAHEAD)
        entries, total = store.time_off.page(engineer.email, now=now, past=past, limit=limit,
                                             offset=offset)
        # the organisation's feeds, which may name anyone, and this engineer's own, each with
        # the entries it holds for this engineer
        feeds = [feed for feed in store.calendar_feeds.feeds()
                 if feed.email in (None, engineer.email)]
        counts = store.time_off.count_by_source(engineer.email, (f.name for f in feeds))
        page_path = f"/engineers/{quote(engineer.email, safe='@')}"
        self.console.render(
            req, resp, "engineer.html", status=status,
            row=presence(engineer, away.get(engineer.email, []), now),
            entries=entries, total=total, past=past,
            feeds=[(feed, _age(feed.age_seconds(now)), counts[feed.name]) for feed in feeds],
            limit=limit, offset=offset, query=query.values("past", "limit"),
            page_path=page_path, dispatch_url=dispatch_url, notice=notice, failed=failed,
            form_name=form_name, form=form or {}, days=DAYS, now_utc=now)


class _Switch(Action):
    """Turn one engineer's dispatch on or off. The other columns stay as they are (``put``
    with ``None`` keeps them), and so does the engineer's place in every round robin."""

    enabled: bool
    effect: str  # what the switch does, for the question

    def _engineer(self, email: str) -> Engineer:
        return self.services.store.engineers.get(checked_email(email))  # 400, 404

    def back(self, req: falcon.Request, email: str) -> str:
        return url("/engineers")

    def question(self, req: falcon.Request, email: str) -> str:
        engineer = self._engineer(email)
        if engineer.dispatch_enabled is self.enabled:
            state = "enabled" if self.enabled else "disabled"
            return f"{_who(engineer)} is {state} for dispatch already: confirming changes nothing."
        return f"{self.title} for {_who(engineer)}? {self.effect}"

    def apply(self, req: falcon.Request, email: str) -> Done:
        # 404 for an engineer deleted since the question: ``put`` would create them again
        engineer = self._engineer(email)
        changed, _ = self.services.changes.put_engineer(
            console_author(req), engineer.email, dispatch_enabled=self.enabled)
        state = "enabled" if changed.dispatch_enabled else "disabled"
        return Done(f"{_who(changed)} is now {state} for dispatch.", url("/engineers"),
                    "Back to the engineers and rotations")


class EnableDispatch(_Switch):
    title = "Enable dispatch"
    enabled = True
    effect = ("Assign actions may choose them again. In a round robin their turn comes by "
              "their last dispatch: never dispatched, or dispatched longest ago, goes first.")


class DisableDispatch(_Switch):
    title = "Disable dispatch"
    enabled = False
    danger = True
    effect = ("No assign action chooses them until they are enabled again; an assignment "
              "that has chosen them already still completes. Their last dispatch is kept, and "
              "with it their place in each round robin.")


class EngineerDispatch(Page):
    """``POST /engineers/{email}/dispatch`` with ``enabled=true|false``: the form field picks
    the switch, which asks first and acts on the confirmation."""

    console_roles = {"POST": OPERATOR}

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self._switches = {True: EnableDispatch(console), False: DisableDispatch(console)}

    def on_post(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        try:
            enabled = _flag(req.context.form.get("enabled", ""))
        except ValueError:
            raise InvalidInput("enabled must be true or false",
                               [Problem("enabled", "must be true or false")]) from None
        self._switches[enabled].on_post(req, resp, email=email)


def _age(seconds: float | None) -> str:
    """A copy's age in words: ``"40 s"``, ``"12 min"``, ``"3 h"``, ``"2 d"``."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def _who(engineer: Engineer) -> str:
    if engineer.display_name:
        return f"{engineer.display_name} ({engineer.email})"
    return engineer.email
