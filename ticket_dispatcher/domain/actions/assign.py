"""``assign`` and ``assign_l2``: choose a dispatch-enabled engineer and make them the assignee
(or the L2 assignee) in Jira (docs/policies.md, "assign and assign_l2").

``plan`` resolves the receiver to dispatch-enabled engineers in configured order and applies the
strategy: a live ``round_robin`` chooses and advances the engineer's turn in one transaction
under row locks (``EngineerStore.take_turn``); ``first`` and dry runs only read. ``balanced``
counts every candidate's open issues in Jira (``balanced.py``) and takes the fewest, ties in
round-robin order (a live run takes the turn among the tied ones, as ``round_robin`` does);
dry runs count too, since counting only reads. ``random`` draws once, uniformly, and the draw
is saved with the plan like every choice, so a resumed execution keeps its person. ``execute``
resolves the Jira account, writes the assignee (or the L2 user picker), records the engineer's
dispatch state with one UPDATE (unless a turn chose the engineer: taking it recorded the
dispatch, and a record landing after the engineer's next turn would move them behind turns
taken meanwhile), and finally removes the auto-assign label (a failure there is only
logged). The field and the label are written in one edit of the issue (``assign_and_label``)
where the project's edit screen allows it; else one by one, the field first. A write whose
outcome is unknown (``errors.fault_of``) is decided by re-reading the
issue; a field that already holds the account is not written again. Ports used
(domain/ports.py): ``jira`` (``Jira``), ``core`` (``Directory.group_members``), ``oncall``
(``OnCall.responders``), ``engineers`` (``EngineerStore``).
"""
from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ticket_dispatcher.domain.actions import balanced
from ticket_dispatcher.domain.actions.base import (
    ActionError,
    ActionResult,
    ActionRun,
    config_problems,
)
from ticket_dispatcher.domain.actions.retrying import (
    DEFAULT_RETRY_BUDGET,
    RetryingState,
    park_for_next_try,
)
from ticket_dispatcher.domain.availability import (
    LOOKAHEAD,
    CandidateVerdict,
    TimeOff,
    WorkingHoursMode,
    judge_candidates,
    no_eligible_candidate_reason,
)
from ticket_dispatcher.domain.availability_parsing import settings_of
from ticket_dispatcher.domain.catalog import (
    DIRECTORY_NAME,
    ENGINEER_EMAIL,
    ActionType,
    ReceiverType,
    Strategy,
)
from ticket_dispatcher.domain.checks import (
    Problems,
    at,
    check_enum,
    check_keys,
    check_name,
    check_names,
    check_object,
    check_text,
    check_text_list,
    quote,
)
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.domain.issues import DEFAULT_AUTO_ASSIGN_LABEL
from ticket_dispatcher.domain.jql import ACCOUNT
from ticket_dispatcher.domain.model import DispatchContext, Engineer, Issue, JiraUser
from ticket_dispatcher.domain.ports import EngineerStore, Turn
from ticket_dispatcher.domain.rotation import (
    dedupe,
    listed_emails,
    next_in_turn,
    receiver_emails,
    turn_candidates,
)
from ticket_dispatcher.errors import (
    DispatcherError,
    IntegrationError,
    Problem,
    fault_of,
)

log = logging.getLogger(__name__)

_RECEIVER_TYPES = tuple(t.value for t in ReceiverType)


@dataclass
class AssignState(RetryingState):
    """What ``assign`` keeps: what it started from, whom it chose and why, and what it did."""

    KEY = "assign"

    receiver: dict | None = None  # the configured receiver
    strategy: str | None = None
    current_assignee: str | None = None  # the field's holder at creation (email, "" if none)
    candidates: list[str] | None = None  # dispatch-enabled engineers, in receiver order
    assignee: str | None = None  # the chosen engineer's email
    turn_taken: bool | None = None  # chosen by a round-robin turn, which marked the dispatch
    reason: str | None = None  # why that one, or why nobody
    account_id: str | None = None  # the chosen engineer's Jira account ("" until known)
    jira_outcome: str | None = None  # how the write was settled, when it was not plain
    jira_updated: bool | None = None
    label_removed: str | None = None  # the auto-assign label, once removed
    count_jql: str | None = None  # balanced, or a cap: the JQL template of open issues
    counts: dict[str, int] | None = None  # balanced, or a cap: open issues, by email
    # Each candidate's verdict at the business time: eligible or not, and why (times in the
    # person's own zone); the fallback receiver's after the receiver's.
    judged: list[dict] | None = None
    fallback: bool | None = None  # the receiver had nobody eligible: the fallback's turn


class AssignExecutor:
    """One executor serves both types; ``l2`` picks the L2 user picker instead of the assignee."""

    def __init__(self, action_type: ActionType, auto_assign_label: str = DEFAULT_AUTO_ASSIGN_LABEL,
                 rng: random.Random | None = None,
                 retry_budget: timedelta = DEFAULT_RETRY_BUDGET):
        """``rng``: the ``random`` strategy's source of draws (tests pass a scripted one);
        ``retry_budget``: how long a write refused by a passing fault is tried again."""
        self.type = action_type.value
        self._l2 = action_type is ActionType.ASSIGN_L2
        self._auto_assign_label = auto_assign_label
        self._rng = rng or random.SystemRandom()
        self._retry_budget = retry_budget

    # -- validate -------------------------------------------------------------------------------

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return config_problems(config, path, _check_assign)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        current = self._user(issue)
        state = AssignState(receiver=config.get("receiver"), strategy=config.get("strategy"),
                            current_assignee=current.email if current else "", candidates=[],
                            assignee="", reason="")
        return {AssignState.KEY: state.dump()}

    # -- plan ---------------------------------------------------------------------------------

    def plan(self, run: ActionRun) -> None:
        with AssignState.editing(run) as state:
            self._plan(run, state)

    def _plan(self, run: ActionRun, state: AssignState) -> None:
        strategy = Strategy(run.config["strategy"])
        rules = AvailabilityRules.of(run.config)
        judged: list[CandidateVerdict] = []
        chosen = self._choose_among(run, state, strategy, rules, run.config["receiver"], judged)
        if chosen is None and (fallback := run.config.get("fallback")) is not None:
            state.fallback = True
            chosen = self._choose_among(run, state, strategy, rules, fallback, judged)
        if chosen is None:
            if any(not verdict.eligible for verdict in judged):  # someone was passed over
                state.reason = no_eligible_candidate_reason(judged)
                raise ActionError(state.reason, FailureCode.NO_ELIGIBLE_CANDIDATE)
            raise ActionError(state.reason or "no candidates", FailureCode.NO_CANDIDATES)
        state.assignee = chosen.email
        # the engineer's cache ("" when unknown), or the account ``balanced`` looked up
        state.account_id = state.account_id or chosen.jira_account_id

    def _choose_among(self, run: ActionRun, state: AssignState, strategy: Strategy,
                      rules: AvailabilityRules, receiver: dict,
                      judged: list[CandidateVerdict]) -> Engineer | None:
        """The engineer ``strategy`` chooses among those of ``receiver`` who may take the
        issue (``_eligible``), with ``state.reason`` saying why; None when nobody is left."""
        live_turn = strategy is Strategy.ROUND_ROBIN and not run.execution.dry_run
        pool = self._eligible(run, state, receiver, rules, judged, read_all=not live_turn)
        if live_turn:
            # the turn is taken among the eligible, in one transaction under row locks
            taken = self._take_turn(run, state, pool.emails) if pool.emails else None
            read = [e.email for e in taken.candidates] if taken is not None else []
            if not pool.read:  # the turn read the candidates: those passed over beside them
                state.candidates = _in_order(state.candidates, pool.passed_over + read,
                                             pool.resolved)
            if taken is None:  # nobody left, or none of them is dispatch-enabled (any more)
                if not pool.passed_over:
                    state.reason = (f"no candidates: {_describe(receiver)} resolved to "
                                    f"{pool.resolved or 'nobody'}, none of them "
                                    f"dispatch-enabled")
                return None
            state.reason = _round_robin_reason(taken.chosen)
            return taken.chosen
        if not pool.emails:
            return None
        candidates = pool.candidates
        if strategy is Strategy.BALANCED:
            return self._balanced(run, state, candidates, pool)
        if strategy is Strategy.RANDOM:
            state.reason = ("random: the one candidate" if len(candidates) == 1 else
                            f"random: drawn uniformly among {len(candidates)} candidates")
            return candidates[self._rng.randrange(len(candidates))]
        chosen, state.reason = _choose(candidates, strategy)  # ``first``; a dry-run turn
        return chosen

    def _balanced(self, run: ActionRun, state: AssignState, candidates: list[Engineer],
                  pool: Eligible) -> Engineer:
        """The candidate with the fewest open issues; ties in round-robin order. Every count
        is recorded in ``state.counts``, and the chosen one's account in ``state.account_id``.
        Someone back from time off counts as no fewer than the fewest of those who were not
        away (``returning_counts``), so a return is no flood of catch-up tickets."""
        if pool.counts is None:
            accounts, counts = self._count(run, state, candidates)
        else:
            accounts, counts = pool.accounts or {}, pool.counts
        judged_counts, lifted = returning_counts(candidates, counts, pool.returned)
        workload = balanced.Workload(judged_counts)
        tied = workload.least_loaded(candidates)
        fewest = workload.counts[tied[0].email]
        back = "".join(f"; {email} is back from time off and counts as {judged_counts[email]}"
                       for email in lifted if any(e.email == email for e in tied))
        if len(tied) == 1:
            chosen = tied[0]
            state.reason = f"balanced: fewest open issues ({fewest}){back}"
        else:
            chosen = (next_in_turn(tied) if run.execution.dry_run
                      else self._tied_turn(run, state, tied))
            state.reason = (f"balanced: fewest open issues ({fewest}), tied with "
                            f"{len(tied) - 1} more{back}; {_round_robin_reason(chosen)}")
        state.account_id = accounts[chosen.email]
        return chosen

    def _count(self, run: ActionRun, state: AssignState, candidates: list[Engineer],
               ) -> tuple[dict[str, str], dict[str, int]]:
        """Every candidate's Jira account and count of open issues (``balanced.py``),
        recorded in ``state.counts``."""
        if len(candidates) > balanced.MAX_CANDIDATES:
            state.reason = (f"balanced: {_describe(run.config['receiver'])} has "
                            f"{len(candidates)} dispatch-enabled candidates; balanced counts "
                            f"open issues for at most {balanced.MAX_CANDIDATES}")
            raise ActionError(state.reason, FailureCode.PLAN_FAILED)
        state.count_jql = run.config.get("count_jql") or balanced.DEFAULT_COUNT_JQL
        state.counts = {}
        try:
            accounts = balanced.accounts_of(run, candidates, cache=not run.execution.dry_run)
            workload = balanced.count_open_issues(run, candidates, accounts, state.count_jql,
                                                  state.counts)
        except ActionError as exc:
            state.reason = exc.message
            raise
        return accounts, workload.counts

    def _eligible(self, run: ActionRun, state: AssignState, receiver: dict,
                  rules: AvailabilityRules, judged: list[CandidateVerdict], *,
                  read_all: bool) -> Eligible:
        """Who of the receiver may take the issue at the execution's business time:
        dispatch-enabled, not on time off, inside their working hours where the rules require
        them (where they prefer them, those inside when anyone is), and under their cap of
        open issues. Only those with something to judge are read with their time off, in one
        query (``EngineerStore.hindered``); the verdict of each one passed over, or outside
        their hours, is added to ``judged``. ``read_all``: the dispatch-enabled candidates are
        read too (a live round robin's turn reads them itself, in its transaction). Open
        issues are counted in Jira only when a cap applies."""
        read = self._read_receiver(run, state, receiver, rules, read_all=read_all)
        verdicts, accounts, counts = self._judge(run, state, read, rules)
        _keep_judged(state, judged, verdicts)
        candidates = read.candidates
        if read.enabled is not None:
            state.candidates = dedupe((state.candidates or []) + [e.email for e in candidates])
            if not candidates:
                state.reason = (f"no candidates: {_describe(receiver)} resolved to "
                                f"{read.emails or 'nobody'}, none of them dispatch-enabled")
        left = turn_candidates(read.emails if read.enabled is None
                               else [e.email for e in candidates], verdicts)
        return Eligible(left, [e for e in candidates if e.email in left],
                        _back_from_time_off(read.away, run.now), read=read.enabled is not None,
                        passed_over=[v.email for v in verdicts if not v.eligible],
                        resolved=read.emails, accounts=accounts, counts=counts)

    def _read_receiver(self, run: ActionRun, state: AssignState, receiver: dict,
                       rules: AvailabilityRules, *, read_all: bool) -> ReceiverRead:
        """Whom the receiver resolves to, those of them with something to judge with their
        time off, and (with ``read_all``, or when a cap applies) the dispatch-enabled ones."""
        try:
            emails = receiver_emails(receiver, run.ports.core, run.ports.oncall)
            hindered, away = run.ports.engineers.hindered(
                emails, run.now, run.now + LOOKAHEAD,
                hours=rules.working_hours is not WorkingHoursMode.IGNORE,
                returned_since=(run.now - RETURN_WINDOW
                                if run.config["strategy"] == Strategy.BALANCED else None))
            counting = rules.cap is not None or any(e.max_open_issues for e in hindered)
            enabled = (run.ports.engineers.enabled_by_email(emails) if read_all or counting
                       else None)
        except DispatcherError as exc:
            state.reason = f"receiver could not be resolved: {exc.message}"
            raise ActionError(state.reason, FailureCode.PLAN_FAILED) from None
        return ReceiverRead(emails, hindered, away, enabled, counting)

    def _judge(self, run: ActionRun, state: AssignState, read: ReceiverRead,
               rules: AvailabilityRules,
               ) -> tuple[list[CandidateVerdict], dict[str, str] | None, dict[str, int] | None]:
        """The verdicts at the business time of those with something to judge; when a cap
        applies, of every dispatch-enabled candidate instead, with the open issues of each
        one still eligible counted (as ``balanced`` counts them). Also the accounts and
        counts, when counted."""
        mode = rules.working_hours
        profiles = {e.email: settings_of(e) for e in read.hindered}
        verdicts = judge_candidates(list(profiles), profiles, read.away, run.now,
                                    working_hours=mode)
        if not read.counting:
            return verdicts, None, None
        out = {v.email for v in verdicts if not v.eligible}
        counted = [e for e in read.candidates if e.email not in out]
        accounts, counts = self._count(run, state, counted) if counted else (None, None)
        everyone = {**{e.email: settings_of(e) for e in read.candidates}, **profiles}
        verdicts = judge_candidates([e.email for e in read.candidates], everyone, read.away,
                                    run.now, working_hours=mode, cap=rules.cap,
                                    open_issues=counts)
        return verdicts, accounts, counts

    def _tied_turn(self, run: ActionRun, state: AssignState, tied: list[Engineer]) -> Engineer:
        """``balanced``'s tie, broken by a live turn among the tied candidates."""
        emails = [e.email for e in tied]
        taken = self._take_turn(run, state, emails)
        if taken is None:  # every one of them was disabled or deleted in the meantime
            state.reason = f"no candidates: {emails} are no longer dispatch-enabled"
            raise ActionError(state.reason, FailureCode.NO_CANDIDATES)
        return taken.chosen

    def _take_turn(self, run: ActionRun, state: AssignState, emails: list[str]) -> Turn | None:
        """A live round robin (over the receiver's engineers, or over ``balanced``'s tied
        ones) reads the dispatch-enabled ones, chooses and advances the turn in one
        transaction under row locks (``EngineerStore.take_turn``), so concurrent executions,
        in this process or in other replicas, never choose the same engineer from the same
        state. The choice is saved with the plan, so a resumed execution does not take
        another turn. None: none of ``emails`` is dispatch-enabled."""
        try:
            taken = run.ports.engineers.take_turn(emails, issue_key=run.issue.key, now=run.now)
        except DispatcherError as exc:
            state.reason = f"round_robin turn could not be taken: {exc.message}"
            raise ActionError(state.reason, FailureCode.PLAN_FAILED) from None
        if taken is not None:
            state.turn_taken = True
        return taken

    # -- execute --------------------------------------------------------------------------------

    def execute(self, run: ActionRun) -> ActionResult:
        with AssignState.editing(run) as state:
            if not state.jira_updated:  # else a retry of the label's removal
                email = state.assignee or ""
                if not state.account_id:
                    try:
                        state.account_id = self._find_account_id(run, email)
                    except IntegrationError as exc:  # a passing fault: search again later
                        return park_for_next_try(run, state, exc, f"searching Jira for {email}",
                                                 self._retry_budget)
                if self._holder(run.issue) == state.account_id:
                    # ``run.issue`` is loaded fresh whenever the execution actor (re)starts or
                    # wakes: on a resume after a restart, or a retry, whose earlier PUT
                    # landed, this is how we never assign twice
                    state.jira_outcome = state.jira_outcome or "already assigned"
                elif state.retries and self._changed_by_someone(run.issue, state):
                    raise ActionError(f"while setting the Jira {self._field} was retried, it "
                                      f"became {_describe_user(self._user(run.issue))}; "
                                      f"{state.assignee} was not set over it")
                else:
                    later = self._write_to_jira(run, state)
                    if later is not None:
                        return later
                state.jira_updated = True
                if not state.turn_taken:  # a turn recorded this dispatch when it was taken
                    self._record_dispatch(run, email)
            return self._remove_auto_assign_label(run, state) or ActionResult.proceed()

    def _write_to_jira(self, run: ActionRun, state: AssignState) -> ActionResult | None:
        """Set the field. Its answer lost, the issue is read now to see whether it landed; any
        other passing fault parks until the next try, whose fresh issue tells whether a write
        with an unknown outcome (a 5xx) landed before the PUT is made again."""
        # ``CallAbandoned`` (shutdown) is no DispatcherError and passes through untouched: the
        # action stays ``executing`` and resumes after the restart
        account_id = state.account_id or ""
        label = self._label_to_remove(run, state)
        try:
            if label and run.ports.jira.assign_and_label(run.issue.key, account_id, [label],
                                                         l2=self._l2):
                state.label_removed = label  # one edit set the field and removed the label
            elif self._l2:  # no label to remove, or the project's edit screen refuses the edit
                run.ports.jira.set_l2_assignee(run.issue.key, account_id)
            else:
                run.ports.jira.assign(run.issue.key, account_id)
        except DispatcherError as exc:  # the engineer's dispatch state is not updated
            fault = fault_of(exc)
            if fault.answer_lost:
                return self._confirm_by_rereading(run, state, exc)
            if fault.passing:
                return park_for_next_try(run, state, exc, f"setting the Jira {self._field}",
                                         self._retry_budget)
            raise ActionError(f"Jira refused to set the {self._field}: {exc.message}") from None
        return None

    def _confirm_by_rereading(self, run: ActionRun, state: AssignState,
                              unknown: DispatcherError) -> ActionResult | None:
        """The write's answer was lost: the issue as Jira now has it decides. When it does
        not hold the account (yet), the write is tried again later, after another read."""
        what = f"setting the Jira {self._field}"
        first = f"{what} had an unknown outcome ({unknown.message})"
        try:
            issue = run.ports.jira.load_issue(run.issue.key)
        except DispatcherError as exc:
            if fault_of(exc).passing:
                return park_for_next_try(run, state, unknown, what, self._retry_budget)
            raise ActionError(f"{first}, and re-reading the issue failed too: "
                              f"{exc.message}") from None
        if self._holder(issue) == state.account_id:
            state.jira_outcome = "unknown; confirmed by re-reading the issue"
            label = self._label_to_remove(run, state)
            if label and label not in issue.labels:  # the one edit landed: label and all
                state.label_removed = label
            return None
        if self._changed_by_someone(issue, state):
            raise ActionError(f"{first}; re-reading the issue found the {self._field} is "
                              f"{_describe_user(self._user(issue))}, not {state.assignee}")
        return park_for_next_try(run, state, unknown, what, self._retry_budget)

    def _changed_by_someone(self, issue: Issue, state: AssignState) -> bool:
        """The field holds neither the chosen engineer nor whom it held when the execution
        was created: someone else set it meanwhile, and a retry must not write over them."""
        user = self._user(issue)
        return (user.email if user else "") != (state.current_assignee or "")

    @property
    def _field(self) -> str:
        return "L2 assignee" if self._l2 else "assignee"

    def _user(self, issue: Issue) -> JiraUser | None:
        return issue.l2_assignee if self._l2 else issue.assignee

    def _holder(self, issue: Issue) -> str | None:
        """The account ID now in this action's field, or None."""
        user = self._user(issue)
        return user.account_id if user else None

    def _find_account_id(self, run: ActionRun, email: str) -> str:
        """No cached account: an exact email match in Jira, cached on the engineer. A search
        a passing fault kept from Jira raises its ``IntegrationError``; any other failure an
        ``ActionError``."""
        try:
            user = run.ports.jira.find_user_by_email(email)
        except DispatcherError as exc:
            if fault_of(exc).passing:
                raise
            raise ActionError(f"Jira user search for {email} failed: {exc.message}") from None
        if user is None:
            raise ActionError(f"no Jira user has the email {email}")
        run.ports.engineers.set_jira_account_id(email, user.account_id, now=run.now)
        return user.account_id

    def _record_dispatch(self, run: ActionRun, email: str) -> None:
        try:
            updated = run.ports.engineers.update_dispatch_state(
                email, dispatched_at=run.now, issue_key=run.issue.key, now=run.now)
        except Exception as exc:  # the Jira assignment stays: it was made
            raise ActionError(f"Jira assignment kept, but the engineer's dispatch state was "
                              f"not recorded: {type(exc).__name__}") from None
        if not updated:
            raise ActionError(f"Jira assignment kept, but engineer {email} no longer exists")

    def _label_to_remove(self, run: ActionRun, state: AssignState) -> str | None:
        """The auto-assign label, while the issue carries it and it was not removed yet."""
        label = self._auto_assign_label
        if not label or label not in run.issue.labels or state.label_removed == label:
            return None
        return label

    def _remove_auto_assign_label(self, run: ActionRun,
                                  state: AssignState) -> ActionResult | None:
        """Remove the auto-assign label; a park when a passing fault refused it (the wake's
        fresh issue says whether it is still there). Any other failure is only logged: the
        assignment is done."""
        label = self._label_to_remove(run, state)
        if not label:
            return None
        try:
            run.ports.jira.edit_labels(run.issue.key, remove=[label])
            state.label_removed = label
        except DispatcherError as exc:  # removing by name: made twice, it removes once
            if fault_of(exc).passing:
                return park_for_next_try(run, state, exc, "removing the auto-assign label",
                                         self._retry_budget)
            _label_not_removed(run, exc)
        return None


def _label_not_removed(run: ActionRun, exc: DispatcherError) -> None:
    log.warning("could not remove the auto-assign label", extra={
        "issue_key": run.issue.key, "execution_id": run.execution.id, "reason": exc.message})


def _check_assign(config: dict, path: str, problems: Problems) -> None:
    check_keys(config, path, ("receiver", "strategy", "count_jql", "availability", "fallback"),
               problems, required=("receiver", "strategy"))
    if "strategy" in config:
        check_enum(config["strategy"], f"{path}.strategy", Strategy, problems)
    for key in ("receiver", "fallback"):
        if key in config and check_object(config[key], f"{path}.{key}", problems):
            _check_receiver(config[key], f"{path}.{key}", problems)
    capped = False
    if "availability" in config:
        capped = _check_availability(config["availability"], f"{path}.availability", problems)
    is_balanced = config.get("strategy") == Strategy.BALANCED
    if "count_jql" in config:
        _check_count_jql(config["count_jql"], f"{path}.count_jql", is_balanced or capped,
                         problems)
    if is_balanced:
        for key in ("receiver", "fallback"):
            if isinstance(config.get(key), dict):
                _check_balanced_receiver(config[key], f"{path}.{key}", problems)


def _check_availability(raw: object, path: str, problems: Problems) -> bool:
    """``{"working_hours": "ignore" | "required" | "preferred", "max_open_issues": N}``;
    whether it sets a cap."""
    if not check_object(raw, path, problems) or not isinstance(raw, dict):
        return False
    check_keys(raw, path, ("working_hours", "max_open_issues"), problems)
    if "working_hours" in raw:
        check_enum(raw["working_hours"], at(path, "working_hours"), WorkingHoursMode, problems)
    cap = raw.get("max_open_issues")
    if "max_open_issues" not in raw:
        return False
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        problems.rule(at(path, "max_open_issues"), f"{quote(cap)} is not a whole number of 1 "
                                                   f"or more")
        return False
    return True


def _check_count_jql(jql: object, path: str, counted: bool, problems: Problems) -> None:
    if not check_text(jql, path, problems) or not isinstance(jql, str):
        return
    if not counted:
        # (and by ``availability.max_open_issues``, whose presence makes it valid)
        problems.rule(path, "is only used by the balanced strategy")
    if ACCOUNT not in jql:
        problems.rule(path, f"must contain {ACCOUNT}, where each candidate's Jira "
                            f"account goes")
    elif f'"{ACCOUNT}"' in jql or f"'{ACCOUNT}'" in jql:
        problems.rule(path, f"{ACCOUNT} is put in as a quoted JQL string; remove "
                            f"the quotes around it")
    if len(jql) > balanced.MAX_COUNT_JQL_LENGTH:
        problems.rule(path, f"is longer than {balanced.MAX_COUNT_JQL_LENGTH} characters")


def _check_balanced_receiver(receiver: dict, path: str, problems: Problems) -> None:
    """A listed receiver is known now: more candidates than ``balanced`` counts is refused
    here. A group or team is only known at plan time (docs/policies.md)."""
    users = receiver.get("users") if receiver.get("type") == ReceiverType.USERS else None
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        return
    distinct = len(dedupe(users))
    if distinct > balanced.MAX_CANDIDATES:
        problems.rule(at(path, "users"), f"balanced counts open issues for at most "
                                         f"{balanced.MAX_CANDIDATES} candidates; this list "
                                         f"has {distinct}")


def _check_receiver(receiver: dict, path: str, problems: Problems) -> None:
    kind = receiver.get("type")
    if "type" not in receiver:
        problems.shape(f"{path}.type", "missing key")
        return
    if isinstance(kind, str):
        check_keys(receiver, path, ("type", kind), problems)
    check_enum(kind, f"{path}.type", ReceiverType, problems)
    if kind not in _RECEIVER_TYPES:
        return
    target_path = f"{path}.{kind}"
    if kind not in receiver:
        problems.shape(target_path, "missing key")
    elif kind == ReceiverType.USERS:
        emails = check_text_list(receiver[kind], target_path, problems, non_empty=True)
        check_names(emails, target_path, ENGINEER_EMAIL, problems)
    elif check_text(receiver[kind], target_path, problems):
        # A user is matched against engineer records, a group or team is asked for by name
        # in a Core or Oncall URL: the same rules those apply (domain/catalog.py).
        rule = ENGINEER_EMAIL if kind == ReceiverType.USER else DIRECTORY_NAME
        check_name(receiver[kind], target_path, rule, problems)


def _choose(candidates: list[Engineer], strategy: Strategy) -> tuple[Engineer, str]:
    if strategy is Strategy.FIRST:
        return candidates[0], "first: first dispatch-enabled candidate in receiver order"
    chosen = next_in_turn(candidates)
    return chosen, _round_robin_reason(chosen)


def _round_robin_reason(chosen: Engineer) -> str:
    """Why ``chosen`` (as it was before its turn) had the turn."""
    if chosen.last_dispatched_at is None:
        return "round_robin: never dispatched before"
    return "round_robin: oldest last_dispatched_at"


def _describe_user(user: JiraUser | None) -> str:
    if user is None:
        return "empty"
    return user.email or user.display_name or user.account_id


def _describe(receiver: dict) -> str:
    kind = receiver.get("type")
    return f"{kind} {receiver.get(kind)!r}" if kind != "users" else f"users {receiver['users']}"


# Someone whose time off ended this recently is "back from time off" for ``balanced``.
RETURN_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class AvailabilityRules:
    """An assign action's ``availability``: whether working hours matter (``ignore``, the
    default; ``required``; ``preferred``) and its own cap on open issues."""

    working_hours: WorkingHoursMode = WorkingHoursMode.IGNORE
    cap: int | None = None

    @classmethod
    def of(cls, config: dict) -> AvailabilityRules:
        raw = config.get("availability") or {}
        return cls(WorkingHoursMode(raw.get("working_hours", WorkingHoursMode.IGNORE)),
                   raw.get("max_open_issues"))


@dataclass(frozen=True)
class Eligible:
    """Who may take the issue, in receiver order (their records too, when they were read),
    and who of them is back from time off; who was passed over, and whom the receiver
    resolved to; the accounts and counts of open issues when a cap had them counted."""

    emails: list[str]
    candidates: list[Engineer]
    returned: set[str]
    read: bool = True  # the dispatch-enabled candidates were read (``candidates``)
    passed_over: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    accounts: dict[str, str] | None = None
    counts: dict[str, int] | None = None


@dataclass(frozen=True)
class ReceiverRead:
    """What a plan read of a receiver: whom it resolved to (each once, in its order), those of
    them with something to judge with their time off, the dispatch-enabled ones when read
    (None: not read) and whether a cap applies, so their open issues are counted."""

    emails: list[str]
    hindered: list[Engineer]
    away: Mapping[str, list[TimeOff]]
    enabled: list[Engineer] | None
    counting: bool

    @property
    def candidates(self) -> list[Engineer]:
        """The dispatch-enabled ones in receiver order; none when they were not read."""
        by_email = {e.email: e for e in self.enabled or []}
        return [by_email[email] for email in self.emails if email in by_email]


def _keep_judged(state: AssignState, judged: list[CandidateVerdict],
                 verdicts: list[CandidateVerdict]) -> None:
    """Add to ``judged``, and to the state, each one passed over or outside their hours (once:
    a fallback may name someone the receiver named)."""
    seen = {v.email for v in judged}
    judged.extend(v for v in verdicts if (not v.eligible or not v.preferred)
                  and v.email not in seen)
    state.judged = [verdict.to_json() for verdict in judged]


def _back_from_time_off(away: Mapping[str, list[TimeOff]], now: datetime) -> set[str]:
    """Whose time off ended within ``RETURN_WINDOW`` before ``now``."""
    return {email for email, entries in away.items()
            if any(now - RETURN_WINDOW < entry.end <= now for entry in entries)}


def _in_order(before: list[str] | None, emails: list[str], order: list[str]) -> list[str]:
    """``before`` (the receiver's candidates, when the fallback's follow), then ``emails`` in
    the receiver's ``order``."""
    wanted = set(emails)
    return dedupe(list(before or []) + [email for email in order if email in wanted])


def judge_listed(engineers: EngineerStore, config: dict, rules: AvailabilityRules,
                 now: datetime) -> list[CandidateVerdict]:
    """The verdicts, at ``now``, of the engineers an action's ``user``/``users`` receiver and
    fallback name (a group or a team is resolved only when the action runs), as its plan would
    judge them without the Jira count of open issues: a dry look for ``policy test``. Those
    who are no dispatch-enabled engineer come last."""
    listed = dedupe(listed_emails(config.get("receiver") or {})
                    + listed_emails(config.get("fallback") or {}))
    by_email = {e.email: e for e in engineers.enabled_by_email(listed)}
    away = engineers.time_off(list(by_email), now, now + LOOKAHEAD)
    present = [email for email in listed if email in by_email]
    verdicts = judge_candidates(present, {e: settings_of(by_email[e]) for e in present}, away, now,
                                working_hours=rules.working_hours)
    missing = [CandidateVerdict(email, eligible=False, preferred=False,
                                reasons=("not a dispatch-enabled engineer",))
               for email in listed if email not in by_email]
    return verdicts + missing


def returning_counts(candidates: Sequence[Engineer], counts: dict[str, int],
                     returned: set[str]) -> tuple[dict[str, int], list[str]]:
    """The counts ``balanced`` judges by: a candidate back from time off (within
    ``RETURN_WINDOW``) counts as no fewer open issues than the fewest of the candidates who
    were not away, so their return puts them among the least loaded, in round-robin turn
    with them, instead of handing them every ticket until they catch up. Also who was lifted."""
    judged = {e.email: counts[e.email] for e in candidates}
    stayed = [judged[e.email] for e in candidates if e.email not in returned]
    if not stayed:
        return judged, []
    floor = min(stayed)
    lifted = [email for email in judged if email in returned and judged[email] < floor]
    for email in lifted:
        judged[email] = floor
    return judged, lifted
