"""The ports: what the domain asks of the outside world, declared once.

Actions, the behavior and the runtime are typed against these ``Protocol``s, never against a
client. Who implements them:

- the client pools of ``actors/client_ports.py`` (``JiraPool``, ``LarkPool``, ``OncallPool``,
  ``CorePool``), each running the matching ``integrations/`` client on its actors — in
  production, and under ``serve --sandbox`` where the same clients talk to the sandbox;
- the store's repositories for ``EngineerStore``, ``TriggerIntake`` and
  ``EscalationSlots`` (``store.engineers``, ``store.triggers``, ``store.contexts``);
- the test fakes in ``tests/fakes.py``;
- the ``NotConfigured*`` classes below, for an integration with no ``base_url`` (the store's
  ports have no such stand-in: the runtime always has a store);
- for ``NotificationCalls``, ``metrics.Metrics`` (the runtime wires it), or
  ``UncountedCalls``, counting nothing.

``tests/domain/test_ports.py`` checks every one of them against its Protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.execution import Execution
from ticket_dispatcher.domain.lark_callbacks import PressAction
from ticket_dispatcher.domain.maintenance import InEffect, MaintenanceWindow
from ticket_dispatcher.domain.model import DispatchContext, Engineer, Issue, JiraUser
from ticket_dispatcher.errors import DispatcherError, IntegrationError, ServiceNotConfigured

T = TypeVar("T")

# An interactive card as Lark's API takes it: a JSON body for Lark, which the notification
# action builds and ``Messenger.send_card`` sends as it is.
LarkCard = dict[str, Any]

# -- the values the ports speak ------------------------------------------------------------------


@dataclass(frozen=True)
class GroupMember:
    """A member of a Core group."""

    email: str  # lower-cased
    active: bool = True


@dataclass(frozen=True)
class DirectoryUser:
    """A Core user, or a user's direct leader."""

    email: str  # lower-cased
    name: str = ""
    active: bool = True
    open_id: str | None = None  # preferred over a Lark lookup by email


@dataclass(frozen=True)
class Responder:
    """An on-call responder of a team, primary first."""

    email: str  # lower-cased
    name: str = ""


class PageOutcome(StrEnum):
    ACCEPTED = "accepted"
    FAILED = "failed"  # Oncall refused or failed the call; no phone number is one case
    UNKNOWN = "unknown"  # no answer in time: the phone may or may not ring


@dataclass(frozen=True)
class PageResult:
    """What a page came to; every outcome consumes the attempt."""

    outcome: PageOutcome
    call_id: str = ""
    call_error: str = ""  # safe to store and log


@dataclass(frozen=True)
class TriageChange:
    """What ``triage`` changes on an issue, in the domain's words; the Jira
    writer turns it into one edit. ``None`` leaves a field as it is; ``components`` replaces
    the issue's components; ``fields`` are raw Jira field values by field ID."""

    priority: str | None = None
    components: tuple[str, ...] | None = None
    labels_add: tuple[str, ...] = ()
    labels_remove: tuple[str, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer(Generic[T]):
    """One call of a batch (``JiraSearch``): its ``value``, or the ``DispatcherError`` it
    raised. One call failing does not stop the others; the caller decides what a failure
    means."""

    value: T | None = None
    error: DispatcherError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Turn:
    """A round-robin turn (``EngineerStore.take_turn``): the engineer ``chosen``, as it was
    before its turn, among the ``candidates`` (the dispatch-enabled engineers asked about, in
    the order asked) that the same transaction read."""

    chosen: Engineer
    candidates: tuple[Engineer, ...]


def answer_each(call: Callable[[Any], T], arguments: Iterable[Any]) -> list[Answer[T]]:
    """``call`` of each argument, one after another; a ``DispatcherError`` is that one's
    answer, and the others are still asked (a client's batch method, without a pool)."""
    answers: list[Answer[T]] = []
    for argument in arguments:
        try:
            answers.append(Answer(value=call(argument)))
        except DispatcherError as exc:
            answers.append(Answer(error=exc))
    return answers


# -- the ports ------------------------------------------------------------------------------------


class IssueLoader(Protocol):
    """The live issue snapshot, read by triggers, executions and ``assign``."""

    def load_issue(self, key: str) -> Issue: ...

    def load_issues(self, keys: Sequence[str]) -> dict[str, Issue]:
        """The live issues of up to 100 keys in one read, by key; a key Jira did not answer
        for is missing (the ACK watcher's batched guard read)."""
        ...


class JiraWriter(Protocol):
    """The Jira writes of the actions, and the user search ``assign`` needs."""

    def assign(self, key: str, account_id: str | None) -> None: ...

    def set_l2_assignee(self, key: str, account_id: str | None) -> None: ...

    def assign_and_label(self, key: str, account_id: str, remove_labels: Iterable[str] = (),
                         *, l2: bool = False) -> bool:
        """The assignee (the L2 assignee with ``l2``) set and ``remove_labels`` removed in one
        edit of the issue. False, with nothing written, where the project's edit screen
        refuses that edit: the caller writes them one by one."""
        ...

    def edit_labels(self, key: str, add: Iterable[str] = (),
                    remove: Iterable[str] = ()) -> None: ...

    def apply_triage(self, key: str, change: TriageChange) -> None: ...

    def find_user_by_email(self, email: str) -> JiraUser | None: ...

    def add_internal_comment(self, key: str, text: str) -> None: ...


class JiraSearch(Protocol):
    """The reads ``assign``'s ``balanced`` strategy makes for all its candidates at once.
    Each answers one ``Answer`` per input, in input order. A client pool runs the calls of one
    batch concurrently, at most its size at a time; a plain client runs them one after
    another. ``CallAbandoned`` (shutdown) is raised for the whole batch, never answered."""

    def count_issues(self, jqls: Sequence[str]) -> list[Answer[int]]:
        """How many issues each JQL matches (Jira's approximate count: a very recent change
        may not show yet)."""
        ...

    def find_users_by_email(self, emails: Sequence[str]) -> list[Answer[JiraUser | None]]:
        """``find_user_by_email`` for each email."""
        ...


class Jira(IssueLoader, JiraWriter, JiraSearch, Protocol):
    """Jira as the runtime holds it: ``JiraPool`` over ``integrations.jira.JiraClient``."""


class Directory(Protocol):
    """Core: groups, users, direct leaders. ``CorePool`` over ``integrations.core.CoreClient``."""

    def group_members(self, group: str) -> list[GroupMember]: ...

    def user(self, email: str) -> DirectoryUser | None: ...

    def leader(self, email: str) -> DirectoryUser | None: ...


class OnCall(Protocol):
    """Oncall: responders and phone pages. ``OncallPool`` over
    ``integrations.oncall.OncallClient``."""

    def responders(self, team: str) -> list[Responder]: ...

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> PageResult: ...


class Readers(list[str]):
    """The open IDs of a message's readers, in read order, and when each read it where Lark
    says (``read_at``): the moment of a read ACK is the read's own time."""

    def __init__(self, open_ids: Iterable[str] = (),
                 read_at: Mapping[str, datetime] | None = None):
        super().__init__(open_ids)
        self.read_at: dict[str, datetime] = dict(read_at or {})


def read_time(readers: Sequence[str], open_id: str) -> datetime | None:
    """When ``open_id`` read the message, where its readers carry the time."""
    return readers.read_at.get(open_id) if isinstance(readers, Readers) else None


class Messenger(Protocol):
    """Lark: user lookup, cards, App urgent, read receipts. ``LarkPool`` over
    ``integrations.lark.LarkClient``."""

    def open_ids_by_email(self, emails: Iterable[str]) -> dict[str, str]: ...

    def send_card(self, open_id: str, card: LarkCard, uuid: str) -> str: ...

    def urgent_app(self, message_id: str, open_id: str) -> list[str]: ...

    def read_user_ids(self, message_id: str) -> list[str]: ...

    def read_user_ids_each(self, message_ids: Sequence[str],
                           at_once: int | None = None) -> list[Answer[list[str]]]:
        """``read_user_ids`` of each message, concurrently where the port can (at most
        ``at_once`` at a time, when given)."""
        ...


class EngineerStore(Protocol):
    """The engineers ``assign`` reads and updates: ``store.engineers``."""

    def enabled_by_email(self, emails: Iterable[str]) -> list[Engineer]: ...

    def take_turn(self, emails_in_order: Iterable[str], *, issue_key: str,
                  now: datetime) -> Turn | None:
        """A live round robin's choice: in one transaction with the candidates' rows locked,
        read which of ``emails_in_order`` are dispatch-enabled, choose the one whose turn it
        is (``rotation.next_in_turn``) and advance their ``last_dispatched_at``/
        ``last_dispatched_issue``. None when none of them is dispatch-enabled."""
        ...

    def hindered(self, emails: Iterable[str], at: datetime, until: datetime, *, hours: bool,
                 returned_since: datetime | None = None,
                 ) -> tuple[list[Engineer], dict[str, list[TimeOff]]]:
        """The dispatch-enabled engineers among ``emails`` an assignment at ``at`` has
        something to judge of (on time off at ``at``, a cap, working hours with ``hours``, back
        from time off since ``returned_since``), with their time off: one read."""
        ...

    def time_off(self, emails: Iterable[str], since: datetime, until: datetime,
                 ) -> Mapping[str, list[TimeOff]]:
        """Each engineer's time off that ends after ``since`` and starts before ``until``, by
        start: one read."""
        ...

    def set_jira_account_id(self, email: str, account_id: str, now: datetime) -> bool: ...

    def update_dispatch_state(self, email: str, *, dispatched_at: datetime, issue_key: str,
                              now: datetime) -> bool: ...


class TriggerIntake(Protocol):
    """The durable trigger outbox, as an action needs it: after a guarded label consume saw
    the target or urgency change, ``send_assignment_notification`` restores the label and
    ensures a wake-up of the same reserved source. To be implemented by
    ``store.triggers.TriggerRepository``."""

    def ensure_reserved_trigger(self, source: str, issue_key: str, now: datetime) -> None:
        """A ``pending`` trigger of ``source`` for ``issue_key`` exists afterwards (an open one
        is reused: a duplicate wake-up is harmless, a missing one is not)."""
        ...


class EscalationSlots(Protocol):
    """The per-role escalation slots of ``dispatch_contexts.assignment_notification_state``
    (docs/design.md, "The escalation slot"), as ``escalate_assignment_to_leader`` needs them:
    ``store.contexts`` (``ContextRepository``)."""

    def find(self, issue_key: str) -> DispatchContext | None: ...

    def update_notification_slot(self, issue_key: str, role: str,
                                 mutate: Callable[[dict | None], dict | None],
                                 now: datetime) -> DispatchContext:
        """Apply ``mutate`` to one role's slot in one short transaction with the row locked
        (``SELECT … FOR UPDATE`` / SQLite ``IMMEDIATE``), creating the context when missing;
        the other role's slot is untouched. ``mutate`` must not call out."""
        ...


class NotificationCalls(Protocol):
    """Told of each Lark card, App-urgent and Oncall page of a live notification workflow as
    soon as its result is saved, long before the workflow ends (the terminal metrics wait for
    that): the runtime counts it for the prompt alerts (docs/operations.md, "Metrics").
    ``actors/runtime.py`` wires the service's ``metrics.Metrics``; left out of a bare
    ``Ports``, nothing is counted (``UncountedCalls``)."""

    def call_settled(self, call: str, result: str, role: str, attempt: str) -> None:
        """``call`` card|urgent|page; ``result`` succeeded|failed|unknown; ``role`` the
        notified role; ``attempt`` the page attempt ("" for a card or an urgent). Called once
        per call, after the checkpoint that saved its result (so a restart never tells it
        twice); must not raise."""
        ...

    def passing_fault_retry(self, work: str, cause: str) -> None:
        """An action's step put off for a passing fault (``work`` execution_write; ``cause``
        as ``errors.FaultCause`` names it); must not raise."""
        ...


# -- an integration with no base_url -------------------------------------------------------------


class NotConfigured:
    """A port nobody configured: every call is an ``IntegrationError`` (a business failure of
    the action that made it), never a crash. One subclass per port, each method written out,
    so the class reads like the Protocol it stands in for."""

    service: ClassVar[str]

    def _refused(self, method: str) -> IntegrationError:
        return ServiceNotConfigured(f"{self.service} is not configured ({method})",
                                    service=self.service)


class NotConfiguredJira(NotConfigured):
    service = "jira"

    def load_issue(self, key: str) -> Issue:
        raise self._refused("load_issue")

    def load_issues(self, keys: Sequence[str]) -> dict[str, Issue]:
        raise self._refused("load_issues")

    def assign(self, key: str, account_id: str | None) -> None:
        raise self._refused("assign")

    def set_l2_assignee(self, key: str, account_id: str | None) -> None:
        raise self._refused("set_l2_assignee")

    def assign_and_label(self, key: str, account_id: str, remove_labels: Iterable[str] = (),
                         *, l2: bool = False) -> bool:
        raise self._refused("assign_and_label")

    def edit_labels(self, key: str, add: Iterable[str] = (), remove: Iterable[str] = ()) -> None:
        raise self._refused("edit_labels")

    def apply_triage(self, key: str, change: TriageChange) -> None:
        raise self._refused("apply_triage")

    def find_user_by_email(self, email: str) -> JiraUser | None:
        raise self._refused("find_user_by_email")

    def add_internal_comment(self, key: str, text: str) -> None:
        raise self._refused("add_internal_comment")

    def count_issues(self, jqls: Sequence[str]) -> list[Answer[int]]:
        raise self._refused("count_issues")

    def find_users_by_email(self, emails: Sequence[str]) -> list[Answer[JiraUser | None]]:
        raise self._refused("find_users_by_email")


class NotConfiguredDirectory(NotConfigured):
    service = "core"

    def group_members(self, group: str) -> list[GroupMember]:
        raise self._refused("group_members")

    def user(self, email: str) -> DirectoryUser | None:
        raise self._refused("user")

    def leader(self, email: str) -> DirectoryUser | None:
        raise self._refused("leader")


class NotConfiguredOnCall(NotConfigured):
    service = "oncall"

    def responders(self, team: str) -> list[Responder]:
        raise self._refused("responders")

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> PageResult:
        raise self._refused("page")


class NotConfiguredMessenger(NotConfigured):
    service = "lark"

    def open_ids_by_email(self, emails: Iterable[str]) -> dict[str, str]:
        raise self._refused("open_ids_by_email")

    def send_card(self, open_id: str, card: LarkCard, uuid: str) -> str:
        raise self._refused("send_card")

    def urgent_app(self, message_id: str, open_id: str) -> list[str]:
        raise self._refused("urgent_app")

    def read_user_ids(self, message_id: str) -> list[str]:
        raise self._refused("read_user_ids")

    def read_user_ids_each(self, message_ids: Sequence[str],
                           at_once: int | None = None) -> list[Answer[list[str]]]:
        raise self._refused("read_user_ids_each")


class MaintenanceWindows(Protocol):
    """The maintenance windows, as the notification steps and the ACK watcher need them
    (domain/maintenance.py): ``store.maintenance.ExecutionWindows``."""

    def active(self, now: datetime) -> list[MaintenanceWindow]:
        """The windows that have started and not ended."""
        ...

    def ruling(self, execution: Execution, now: datetime,
               windows: list[MaintenanceWindow] | None = None) -> InEffect | None:
        """The window that rules ``execution``'s work now (by its issue's project, its
        trigger's source and its policy's name), among ``windows`` when given (read
        otherwise); None when none does."""
        ...


class KeptReads(Protocol):
    """What an execution run keeps of its reads of its issue: a read of moments ago answers
    the next one while nothing can have changed the issue (actors/recent_reads.py)."""

    def forget(self) -> None:
        """The next read of the issue asks Jira: one that must be Jira's answer now, such as
        the escalation's right before its guarded write."""
        ...


class NoReadsKept:
    """Nothing kept: every read asks Jira (a port left out: the runtime passes its own)."""

    def forget(self) -> None:
        """Nothing to forget."""


class NoMaintenance:
    """No maintenance windows (a port left out: the runtime over a store passes its own)."""

    def active(self, now: datetime) -> list[MaintenanceWindow]:
        return []

    def ruling(self, execution: Execution, now: datetime,
               windows: list[MaintenanceWindow] | None = None) -> InEffect | None:
        return None


@dataclass(frozen=True)
class CardPress:
    """A press of a card's button that acts on its wait (notification_press.py)."""

    action: PressAction
    pressed_at: datetime


class CardPresses(Protocol):
    """The presses of the cards' buttons, as the guard and the ACK watcher read them:
    ``store.card_presses.ExecutionPresses``. ``buttons``: whether cards carry buttons (Lark's
    callbacks are configured)."""

    @property
    def buttons(self) -> bool:
        ...

    def pressed(self, execution_id: int) -> CardPress | None:
        """The press that acts on the execution's wait, if any."""
        ...

    def pressed_among(self, execution_ids: Sequence[int]) -> set[int]:
        """Which of the executions have a press that acts on their wait."""
        ...


class NoPresses:
    """No callbacks configured: cards carry no buttons, and nothing was pressed."""

    buttons = False

    def pressed(self, execution_id: int) -> CardPress | None:
        return None

    def pressed_among(self, execution_ids: Sequence[int]) -> set[int]:
        return set()


class UncountedCalls:
    """No counter wired: calls go uncounted (the runtime wires its metrics instead)."""

    def call_settled(self, call: str, result: str, role: str, attempt: str) -> None:
        return None

    def passing_fault_retry(self, work: str, cause: str) -> None:
        return None


# -- what an action receives ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Ports:
    """The ports handed to triggers, executions and actions.

    An integration left out is ``NotConfigured``: the service passes a client pool for every
    configured one. The store's ports (``engineers``, ``triggers``, ``contexts``) have no
    stand-in: the runtime always works over a store, so they are always passed. ``calls`` left
    out is ``UncountedCalls``, which the runtime replaces by its metrics."""

    jira: Jira = field(default_factory=NotConfiguredJira)
    lark: Messenger = field(default_factory=NotConfiguredMessenger)
    oncall: OnCall = field(default_factory=NotConfiguredOnCall)
    core: Directory = field(default_factory=NotConfiguredDirectory)
    engineers: EngineerStore
    triggers: TriggerIntake
    contexts: EscalationSlots
    calls: NotificationCalls = field(default_factory=UncountedCalls)
    maintenance: MaintenanceWindows = field(default_factory=NoMaintenance)
    presses: CardPresses = field(default_factory=NoPresses)
    reads: KeptReads = field(default_factory=NoReadsKept)
