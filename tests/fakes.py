"""Plain fakes: the ports of domain/ports.py in memory (``FakeJira``, ``FakeDirectory``,
``FakeOnCall``; tests/domain/test_ports.py checks them against their Protocols), the store's
ports refusing every call (``bare_ports``, for a test without a store), test-only actions and
an in-memory checkpoint store."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification import NOTIFICATION_CONFIG_CHECKS
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.execution import Execution, FailureCode, RuleExecution
from ticket_dispatcher.domain.model import DispatchContext, Engineer, Issue, JiraUser
from ticket_dispatcher.domain.ports import (
    Answer,
    DirectoryUser,
    GroupMember,
    NotConfigured,
    PageOutcome,
    PageResult,
    Ports,
    Readers,
    Responder,
    TriageChange,
    Turn,
    answer_each,
)
from ticket_dispatcher.errors import IntegrationError, Problem


def issue(**overrides) -> Issue:
    values = dict(key="TCID-1", project_key="TCID", summary="Payment page is down",
                  priority="P1", status="Todo", labels=("auto-dispatch",),
                  components=("payments",),
                  created_at=datetime(2026, 11, 30, 0, 0, tzinfo=UTC))
    values.update(overrides)
    return Issue(**values)


ConfigCheck = Callable[[Any, str], list[Problem]]


def no_config(config: Any, path: str) -> list[Problem]:
    """The config check of a test-only action: it takes none (absent, null or ``{}``)."""
    if config in (None, {}):
        return []
    return [Problem(path, "a test action takes no configuration", "shape")]


class RecordingAction:
    """A test-only action type: records each plan and execute, then answers ``result``.

    ``fail_code``: the failure code of ``fail_in="plan"``. ``config_check``: its
    ``validate_config`` (no configuration by default); a stand-in for a notification action
    passes that action's real check (see ``notification_stand_ins``)."""

    def __init__(self, type_: str = "test_noop", result: str = "continue",
                 fail_in: str = "", park_for: float = 0, crash_in: str = "",
                 fail_code: FailureCode = FailureCode.NO_CANDIDATES,
                 config_check: ConfigCheck = no_config):
        self.type = type_
        self.result = result
        self.fail_in = fail_in
        self.park_for = park_for
        self.crash_in = crash_in
        self.fail_code = fail_code
        self.config_check = config_check
        self.calls: list[tuple[str, int]] = []

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return self.config_check(config, path)

    def build_context(self, issue, dispatch_context, config) -> dict:
        return {"issue_key": issue.key}

    def plan(self, run: ActionRun) -> None:
        self.calls.append(("plan", run.execution.id))
        run.context["planned"] = True
        if self.crash_in == "plan":
            raise RuntimeError("boom in plan")
        if self.fail_in == "plan":
            raise ActionError("nobody to assign", self.fail_code)

    def execute(self, run: ActionRun) -> ActionResult:
        self.calls.append(("execute", run.execution.id))
        if self.crash_in == "execute":
            raise RuntimeError("boom in execute")
        if self.fail_in == "execute":
            raise ActionError("jira said no")
        if self.park_for:
            deadline = run.context.get("deadline")
            if deadline is None:
                deadline = (run.now + timedelta(seconds=self.park_for)).isoformat()
                run.context["deadline"] = deadline
            if run.now < datetime.fromisoformat(deadline):
                return ActionResult.park(datetime.fromisoformat(deadline))
        run.context["executed"] = True
        return {"continue": ActionResult.proceed(),
                "terminate": ActionResult.terminate()}[self.result]


def notification_stand_ins(**behaviour) -> list[RecordingAction]:
    """Recording executors for the four assignment-notification types, each validating its
    configuration with the real check (domain/actions/notification.py). The product registry
    has no notification executors yet; these let tests build valid notification policies."""
    return [RecordingAction(action_type, config_check=check, **behaviour)
            for action_type, check in NOTIFICATION_CONFIG_CHECKS.items()]


class MemoryCheckpoints:
    """Keeps every saved state, so tests can assert what was persisted and when."""

    def __init__(self):
        self.saved: list[Execution] = []

    def save(self, execution: Execution, rules: list[RuleExecution], *,
             parked: bool = False) -> None:
        self.saved.append(copy.deepcopy(execution))

    @property
    def last(self) -> Execution:
        return self.saved[-1]


class FakeJira:
    """The ``Jira`` port in memory: issues by key, users, scripted failures, every write
    recorded."""

    def __init__(self, *issues: Issue):
        self.issues: dict[str, Issue] = {i.key: i for i in issues}
        self.users: dict[str, JiraUser] = {}  # by account id
        self.writes: list[tuple] = []
        self.failing_writes: set[str] = set()  # method names that raise
        self.failures: dict[str, int] = {}  # key -> how many loads still fail
        self.spared: dict[str, int] = {}  # key -> loads that succeed before failures start
        self.failure_status: dict[str, int] = {}  # key -> the HTTP status its failures answer
        self.failure_errors: dict[str, Callable[[], IntegrationError]] = {}  # key -> raised
        self.write_faults: dict[str, list[tuple[IntegrationError, bool]]] = {}
        self.loads: list[str] = []
        self.searches: list[list[str]] = []  # the keys of each batched read, in order
        # Issue counts: each JQL's first quoted string names the account it counts for.
        self.open_issues: dict[str, int] = {}  # account id -> what its counts answer
        self.failing_counts: set[str] = set()  # account ids whose count answers 400
        self.counted: list[str] = []  # every JQL counted, in order
        # Projects whose edit screen refuses the one edit of ``assign_and_label``.
        self.screen_refusing: set[str] = set()

    def put(self, the_issue: Issue) -> Issue:
        self.issues[the_issue.key] = the_issue
        return the_issue

    def fail_next(self, key: str, times: int = 1, after: int = 0, status: int = 503,
                  error: Callable[[], IntegrationError] | None = None) -> None:
        """The next ``times`` loads of ``key`` fail with ``status`` (or raise what ``error``
        makes), once ``after`` loads have succeeded."""
        self.failures[key] = times
        self.spared[key] = after
        self.failure_status[key] = status
        if error is not None:
            self.failure_errors[key] = error

    def fail_writes(self, method: str, *errors: IntegrationError, applied: bool = False) -> None:
        """The next calls of write ``method`` raise ``errors``, one each, in order: before the
        write, or with ``applied`` after it took effect (an answer lost on its way back)."""
        self.write_faults.setdefault(method, []).extend((error, applied) for error in errors)

    def load_issue(self, key: str) -> Issue:
        self.loads.append(key)
        if self.spared.get(key, 0) > 0:
            self.spared[key] -= 1
        elif self.failures.get(key, 0) > 0:
            self.failures[key] -= 1
            if key in self.failure_errors:
                raise self.failure_errors[key]()
            status = self.failure_status.get(key, 503)
            raise IntegrationError(f"jira answered {status} for {key}", status=status,
                                   service="jira")
        if key not in self.issues:
            raise IntegrationError(f"issue {key} does not exist", status=404, service="jira")
        return self.issues[key]

    def load_issues(self, keys: Sequence[str]) -> dict[str, Issue]:
        """One search for many keys: a scripted failure of any of them fails the search, as
        a 503 would; a key that does not exist is left out of the answer."""
        self.searches.append(list(keys))
        found = {}
        for key in keys:
            try:
                found[key] = self.load_issue(key)
            except IntegrationError as exc:
                if exc.status != 404:
                    raise
        return found

    # -- users and writes ---------------------------------------------------------------------

    def add_user(self, email: str, account_id: str | None = None) -> JiraUser:
        user = JiraUser(account_id=account_id or f"acc-{email.split('@')[0]}", email=email,
                        display_name=email.split("@")[0])
        self.users[user.account_id] = user
        return user

    def find_user_by_email(self, email: str) -> JiraUser | None:
        self._write("find_user_by_email", email)
        return next((u for u in self.users.values() if u.email == email.lower()), None)

    def assign(self, key: str, account_id: str) -> None:
        self._write("assign", key, account_id)
        self.issues[key] = replace(self.issues[key], assignee=self.users[account_id])
        self._answered("assign")

    def set_l2_assignee(self, key: str, account_id: str) -> None:
        self._write("set_l2_assignee", key, account_id)
        self.issues[key] = replace(self.issues[key], l2_assignee=self.users[account_id])
        self._answered("set_l2_assignee")

    def assign_and_label(self, key: str, account_id: str, remove_labels=(), *,
                         l2: bool = False) -> bool:
        """The one edit; False, writing nothing, for a project in ``screen_refusing``."""
        if key.rsplit("-", 1)[0] in self.screen_refusing:
            return False
        self._write("assign_and_label", key, account_id, tuple(remove_labels), l2)
        user = self.users[account_id]
        labels = tuple(label for label in self.issues[key].labels if label not in remove_labels)
        self.issues[key] = (replace(self.issues[key], l2_assignee=user, labels=labels) if l2
                            else replace(self.issues[key], assignee=user, labels=labels))
        self._answered("assign_and_label")
        return True

    def edit_labels(self, key: str, add=(), remove=()) -> None:
        self._write("edit_labels", key, tuple(add), tuple(remove))
        labels = [label for label in self.issues[key].labels if label not in remove]
        self.issues[key] = replace(self.issues[key], labels=tuple(labels + list(add)))
        self._answered("edit_labels")

    def apply_triage(self, key: str, change: TriageChange) -> None:
        self._write("apply_triage", key, change)
        before = self.issues[key]
        labels = [label for label in before.labels if label not in change.labels_remove]
        self.issues[key] = replace(
            before, priority=change.priority or before.priority,
            components=before.components if change.components is None else change.components,
            labels=tuple(labels + [label for label in change.labels_add if label not in labels]))

    def add_internal_comment(self, key: str, text: str) -> None:
        self._write("add_internal_comment", key, text)

    # -- batches (one after another here; the client pool runs them concurrently) -------------

    def count_issues(self, jqls: Sequence[str]) -> list[Answer[int]]:
        answers: list[Answer[int]] = []
        for jql in jqls:
            self.counted.append(jql)
            account_id = first_jql_string(jql)
            if account_id in self.failing_counts:
                answers.append(Answer(error=IntegrationError(
                    f"jira POST /rest/api/2/search/approximate-count failed: HTTP 400: "
                    f"the JQL for {account_id} is not valid", status=400, service="jira")))
            else:
                answers.append(Answer(value=self.open_issues.get(account_id or "", 0)))
        return answers

    def find_users_by_email(self, emails: Sequence[str]) -> list[Answer[JiraUser | None]]:
        answers: list[Answer[JiraUser | None]] = []
        for email in emails:
            try:
                answers.append(Answer(value=self.find_user_by_email(email)))
            except IntegrationError as exc:
                answers.append(Answer(error=exc))
        return answers

    def _write(self, method: str, *args) -> None:
        if method in self.failing_writes:
            raise IntegrationError(f"jira answered 500 to {method}", status=500, service="jira")
        faults = self.write_faults.get(method)
        if faults and not faults[0][1]:
            raise faults.pop(0)[0]
        self.writes.append((method, *args))

    def _answered(self, method: str) -> None:
        """A scripted fault of a write that took effect: its answer never came back."""
        faults = self.write_faults.get(method)
        if faults and faults[0][1]:
            raise faults.pop(0)[0]

    def calls(self, method: str) -> list[tuple]:
        return [w for w in self.writes if w[0] == method]

    def assignments(self) -> list[tuple[str, str]]:
        """The (issue key, account id) of every write of the Assignee: by its own endpoint,
        or in the one edit with the labels."""
        return [(w[1], w[2]) for w in self.writes
                if w[0] == "assign" or (w[0] == "assign_and_label" and not w[4])]


def first_jql_string(jql: str) -> str | None:
    """The first double-quoted JQL string literal in ``jql``, unescaped; None when none."""
    found = re.search(r'"((?:[^"\\]|\\.)*)"', jql)
    return re.sub(r"\\(.)", r"\1", found.group(1)) if found else None


class FakeDirectory:
    """The ``Directory`` port (Core) in memory: groups, users and their direct leaders."""

    def __init__(self, groups: dict[str, list[GroupMember]] | None = None,
                 users: dict[str, DirectoryUser] | None = None,
                 leaders: dict[str, str] | None = None):
        self.groups = groups or {}
        self.users = users or {}  # by lower-case email
        self.leaders = leaders or {}  # user email -> leader email

    def group_members(self, group: str) -> list[GroupMember]:
        if group not in self.groups:
            raise IntegrationError(f"core group {group} not found", status=404, service="core")
        return self.groups[group]

    def user(self, email: str) -> DirectoryUser | None:
        return self.users.get(email.lower())

    def leader(self, email: str) -> DirectoryUser | None:
        leader = self.leaders.get(email.lower())
        return self.users.get(leader) if leader else None


class FakeOnCall:
    """The ``OnCall`` port in memory: team responders; every page recorded and, unless
    ``outcomes`` scripts the next answers (a ``PageResult`` to answer, or an exception to raise
    after the call was recorded: ``OutcomeUnknown`` for a timeout), accepted."""

    def __init__(self, teams: dict[str, list[Responder]] | None = None):
        self.teams = teams or {}
        self.pages: list[tuple[str, str, str, str, str]] = []
        self.outcomes: list[PageResult | Exception] = []

    def responders(self, team: str) -> list[Responder]:
        if team not in self.teams:
            raise IntegrationError(f"oncall team {team} not found", status=404,
                                   service="oncall")
        return self.teams[team]

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> PageResult:
        self.pages.append((email, title, message, issue_key, dedup_key))
        if self.outcomes:
            scripted = self.outcomes.pop(0)
            if isinstance(scripted, Exception):
                raise scripted
            return scripted
        return PageResult(PageOutcome.ACCEPTED, call_id=f"call-{len(self.pages)}")


class GateAction:
    """A test-only action whose execute blocks until the test opens the gate.

    ``wait_entered(n)`` is the bounded way to know n executions are inside execute at once.
    """

    GATE_TIMEOUT = 20

    def __init__(self, type_: str = "test_gate"):
        import threading

        self.type = type_
        self._gate = threading.Event()
        self._cond = threading.Condition()
        self.entered: list[int] = []
        self.planned: list[int] = []

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return no_config(config, path)

    def build_context(self, issue, dispatch_context, config) -> dict:
        return {}

    def plan(self, run: ActionRun) -> None:
        with self._cond:
            self.planned.append(run.execution.id)

    def execute(self, run: ActionRun) -> ActionResult:
        with self._cond:
            self.entered.append(run.execution.id)
            self._cond.notify_all()
        if not self._gate.wait(self.GATE_TIMEOUT):
            raise AssertionError("the test never opened the gate")
        return ActionResult.proceed()

    def wait_entered(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.entered) >= count, self.GATE_TIMEOUT)

    def open(self) -> None:
        self._gate.set()

    def close(self) -> None:
        """The executions that enter from now on wait again."""
        self._gate.clear()


class FakeLark:
    """The ``Messenger`` port (Lark) in memory: open IDs by email, every card and App-urgent
    recorded, read users per message. ``fail[method]`` scripts the next answers of a method:
    an exception instance to raise (``OutcomeUnknown`` for a lost answer) per call."""

    def __init__(self, open_ids: dict[str, str] | None = None):
        self.open_ids = dict(open_ids or {})  # email -> open_id
        self.sends: list[tuple[str, dict, str]] = []  # (open_id, card, uuid)
        self.urgents: list[tuple[str, str]] = []  # (message_id, open_id)
        self.readers: dict[str, list[str]] = {}  # message_id -> open_ids who read it
        self.read_at: dict[str, dict[str, datetime]] = {}  # message_id -> open_id -> read at
        self.reads: list[str] = []
        self.rejected: set[str] = set()  # open_ids urgent_app answers as invalid
        self.fail: dict[str, list[Exception]] = {}

    def _script(self, method: str) -> None:
        if self.fail.get(method):
            raise self.fail[method].pop(0)

    def open_ids_by_email(self, emails) -> dict[str, str]:
        self._script("open_ids_by_email")
        return {e.lower(): self.open_ids[e.lower()] for e in emails if e.lower() in self.open_ids}

    def send_card(self, open_id: str, card: dict, uuid: str) -> str:
        self._script("send_card")
        self.sends.append((open_id, card, uuid))
        return f"om_{uuid}"

    def urgent_app(self, message_id: str, open_id: str) -> list[str]:
        self._script("urgent_app")
        self.urgents.append((message_id, open_id))
        return [open_id] if open_id in self.rejected else []

    def read_user_ids(self, message_id: str) -> list[str]:
        self._script("read_user_ids")
        self.reads.append(message_id)
        return Readers(self.readers.get(message_id, []), self.read_at.get(message_id))

    def read_user_ids_each(self, message_ids: Sequence[str],
                           at_once: int | None = None) -> list[Answer[list[str]]]:
        return answer_each(self.read_user_ids, message_ids)


class FakeTriggers:
    """The ``TriggerIntake`` port: records each ensured reserved-source wake-up."""

    def __init__(self):
        self.ensured: list[tuple[str, str]] = []

    def ensure_reserved_trigger(self, source: str, issue_key: str, now: datetime) -> None:
        self.ensured.append((source, issue_key))


class StoreTriggers:
    """``TriggerIntake`` over a test store's trigger repository: an open pending trigger of the
    same source and issue is reused, else one is created (the trigger poll picks it up)."""

    def __init__(self, triggers):
        self.triggers = triggers
        self.ensured: list[tuple[str, str]] = []

    def ensure_reserved_trigger(self, source: str, issue_key: str, now: datetime) -> None:
        self.ensured.append((source, issue_key))
        for trigger_id, _ in self.triggers.recoverable():
            found = self.triggers.get(trigger_id)
            if (found.source, found.issue_key, found.status.value) == (
                    source, issue_key, "pending"):
                return
        self.triggers.create(source, issue_key, policy_id=None, dryrun=None, now=now)


class FakeContexts:
    """The ``EscalationSlots`` port in memory: role slots by issue key, every update
    recorded (``(issue_key, role, slot after)``) so tests can check the order of writes."""

    def __init__(self):
        self.states: dict[str, dict] = {}
        self.updates: list[tuple[str, str, Any]] = []

    def find(self, issue_key: str) -> DispatchContext | None:
        if issue_key not in self.states:
            return None
        return DispatchContext(issue_key, assignment_notification_state=copy.deepcopy(
            self.states[issue_key]))

    def update_notification_slot(self, issue_key: str, role: str,
                                 mutate: Callable[[dict | None], dict | None],
                                 now: datetime) -> DispatchContext:
        state = self.states.setdefault(issue_key, {})
        state[role] = mutate(copy.deepcopy(state.get(role)))
        self.updates.append((issue_key, role, copy.deepcopy(state[role])))
        return self.find(issue_key)

    def slot(self, issue_key: str, role: str) -> dict | None:
        return self.states.get(issue_key, {}).get(role)


class FakeCalls:
    """The ``NotificationCalls`` port: every counted call as ``(call, result, role, attempt)``.
    ``seen``, when given, is asked at each count and its answers kept in ``witnessed``, so a
    test can check what had been saved by then."""

    def __init__(self, seen: Callable[[], Any] | None = None):
        self.counted: list[tuple[str, str, str, str]] = []
        self.retried: list[tuple[str, str]] = []  # steps put off for a passing fault
        self.witnessed: list[Any] = []
        self._seen = seen

    def call_settled(self, call: str, result: str, role: str, attempt: str) -> None:
        self.counted.append((call, result, role, attempt))
        if self._seen is not None:
            self.witnessed.append(self._seen())

    def passing_fault_retry(self, work: str, cause: str) -> None:
        self.retried.append((work, cause))


# -- the store's ports, for a test without a store ---------------------------------------------
# The runtime always passes the store's repositories; a Behavior or an action run built bare in
# a test gets these instead, and any call it makes is refused like a missing integration's.


class NotConfiguredEngineers(NotConfigured):
    service = "engineers"

    def enabled_by_email(self, emails: Iterable[str]) -> list[Engineer]:
        raise self._refused("enabled_by_email")

    def take_turn(self, emails_in_order: Iterable[str], *, issue_key: str,
                  now: datetime) -> Turn | None:
        raise self._refused("take_turn")

    def hindered(self, emails: Iterable[str], at: datetime, until: datetime, *, hours: bool,
                 returned_since: datetime | None = None,
                 ) -> tuple[list[Engineer], dict[str, list[TimeOff]]]:
        raise self._refused("hindered")

    def time_off(self, emails: Iterable[str], since: datetime, until: datetime,
                 ) -> Mapping[str, list[TimeOff]]:
        raise self._refused("time_off")

    def set_jira_account_id(self, email: str, account_id: str, now: datetime) -> bool:
        raise self._refused("set_jira_account_id")

    def update_dispatch_state(self, email: str, *, dispatched_at: datetime, issue_key: str,
                              now: datetime) -> bool:
        raise self._refused("update_dispatch_state")


class NotConfiguredTriggers(NotConfigured):
    """No trigger outbox: the action records the wake-up as failed, with a warning."""

    service = "triggers"

    def ensure_reserved_trigger(self, source: str, issue_key: str, now: datetime) -> None:
        raise self._refused("ensure_reserved_trigger")


class NotConfiguredEscalationSlots(NotConfigured):
    """No context store: an escalation cannot persist its intent, so it writes nothing."""

    service = "contexts"

    def find(self, issue_key: str) -> DispatchContext | None:
        raise self._refused("find")

    def update_notification_slot(self, issue_key: str, role: str,
                                 mutate: Callable[[dict | None], dict | None],
                                 now: datetime) -> DispatchContext:
        raise self._refused("update_notification_slot")


def bare_ports(**ports: Any) -> Ports:
    """``Ports`` for a test without a store: the store's ports not given refuse every call."""
    return Ports(**{"engineers": NotConfiguredEngineers(), "triggers": NotConfiguredTriggers(),
                    "contexts": NotConfiguredEscalationSlots(), **ports})
