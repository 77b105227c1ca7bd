"""The sandbox's in-memory world (SPEC §11 *Sandbox*): one directory of people shared by the four
fake services, Jira issues, Lark messages, pages, and the faults an operator injected.

Plain Python behind one ``threading.Lock``. Every method takes the lock for its whole read or
write and hands out copies (or frozen values), so a response is rendered from a consistent
snapshot while other waitress threads go on. People carry only a ``has_phone`` flag: the sandbox
never holds a phone number, so none can leak into a response.
"""

from __future__ import annotations

import copy
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ticket_dispatcher.domain.issues import DEFAULT_L2_FIELD_ID, DEFAULT_SEVERITY_FIELD_ID
from ticket_dispatcher.domain.timeutil import format_time

SERVICES = ("jira", "lark", "oncall", "core")
TOKEN_TTL_SECONDS = 7200  # Lark tenant tokens live two hours (SPEC §11)
REQUEST_LOG_SIZE = 500

# Issue attributes an edit may change; the user ones hold Jira account ids.
USER_FIELDS = ("assignee", "l2_assignee", "reporter")
ISSUE_FIELDS = (
    "project_key", "summary", "environment", "priority", "status", "severity",
    "labels", "components", "created_at", *USER_FIELDS,
)


class SandboxError(Exception):
    """A lookup or write the sandbox world refuses; ``message`` is safe to show."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UnknownIssue(SandboxError):
    pass


class UnknownUser(SandboxError):
    pass


class UnknownMessage(SandboxError):
    pass


class DuplicateId(SandboxError):
    """Two people would share one Jira account id or one Lark open_id."""


@dataclass(frozen=True)
class SandboxUser:
    email: str  # lower case: the key of the directory
    display_name: str
    account_id: str  # Jira
    active: bool = True
    open_id: str | None = None  # Lark; None = not on Lark
    has_phone: bool = False  # Oncall can call them; the number itself is never held
    leader_email: str | None = None  # Core

    def to_json(self) -> dict:
        return {
            "email": self.email,
            "display_name": self.display_name,
            "account_id": self.account_id,
            "active": self.active,
            "open_id": self.open_id,
            "has_phone": self.has_phone,
            "leader_email": self.leader_email,
        }


@dataclass
class SandboxIssue:
    key: str
    project_key: str
    summary: str = ""
    environment: str | None = None
    priority: str | None = None
    status: str | None = None
    severity: str | None = None
    labels: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)
    assignee: str | None = None  # account ids
    l2_assignee: str | None = None
    reporter: str | None = None
    created_at: datetime | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)  # raw Jira fields set by edits
    comments: list[dict] = field(default_factory=list)
    label_history: list[dict] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)


@dataclass
class LarkMessage:
    message_id: str
    receive_id: str
    msg_type: str
    content: str
    uuid: str | None
    created_at: datetime
    reads: dict[str, int] = field(default_factory=dict)  # open_id → read time (epoch ms)

    def to_json(self) -> dict:
        return {
            "message_id": self.message_id,
            "receive_id": self.receive_id,
            "msg_type": self.msg_type,
            "content": self.content,
            "uuid": self.uuid,
            "created_at": format_time(self.created_at),
            "read_by": list(self.reads),
        }


@dataclass(frozen=True)
class Urgent:
    message_id: str
    user_ids: tuple[str, ...]
    invalid_user_ids: tuple[str, ...]
    at: datetime

    def to_json(self) -> dict:
        return {
            "message_id": self.message_id,
            "user_ids": list(self.user_ids),
            "invalid_user_ids": list(self.invalid_user_ids),
            "at": format_time(self.at),
        }


@dataclass(frozen=True)
class Page:
    email: str
    title: str
    message: str
    issue_key: str
    dedup_key: str
    accepted: bool
    call_id: str
    call_error: str
    at: datetime
    repeated: bool = False  # the dedup_key was paged before: same call_id, still recorded

    def to_json(self) -> dict:
        return {
            "email": self.email,
            "title": self.title,
            "message": self.message,
            "issue_key": self.issue_key,
            "dedup_key": self.dedup_key,
            "accepted": self.accepted,
            "call_id": self.call_id,
            "call_error": self.call_error,
            "at": format_time(self.at),
            "repeated": self.repeated,
        }


@dataclass
class Fault:
    id: int
    service: str
    path_contains: str = ""
    status: int | None = None
    retry_after: int | None = None
    latency_ms: int | None = None
    times: int = 1  # how many more requests it hits

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "service": self.service,
            "path_contains": self.path_contains,
            "status": self.status,
            "retry_after": self.retry_after,
            "latency_ms": self.latency_ms,
            "times": self.times,
        }


class SandboxState:
    """The whole fake world. ``now`` and ``sleep`` are injectable so tests drive time."""

    def __init__(
        self,
        *,
        l2_field_id: str = DEFAULT_L2_FIELD_ID,
        severity_field_id: str = DEFAULT_SEVERITY_FIELD_ID,
        now: Callable[[], datetime] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.l2_field_id = l2_field_id
        self.severity_field_id = severity_field_id
        self.now = now or (lambda: datetime.now(UTC))
        self.sleep = sleep
        self._lock = threading.Lock()
        self._counter = 0
        self._users: dict[str, SandboxUser] = {}
        self._groups: dict[str, list[str]] = {}
        self._teams: dict[str, list[str]] = {}
        self._issues: dict[str, SandboxIssue] = {}
        self._tokens: dict[str, datetime] = {}  # token → expiry
        self._messages: dict[str, LarkMessage] = {}
        self._message_by_uuid: dict[str, str] = {}
        self._urgents: list[Urgent] = []
        self._pages: list[Page] = []
        self._call_by_dedup: dict[str, str] = {}
        self._faults: list[Fault] = []
        self._requests: deque[dict] = deque(maxlen=REQUEST_LOG_SIZE)

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    # -- people ------------------------------------------------------------------------------

    def put_user(
        self,
        email: str,
        *,
        display_name: str = "",
        account_id: str | None = None,
        active: bool = True,
        open_id: str | None = None,
        has_phone: bool = False,
        leader_email: str | None = None,
    ) -> tuple[SandboxUser, bool]:
        """Create or replace a person by email; an existing account id is kept when none is
        given. Returns the user and whether it was created."""
        email = email.strip().lower()
        with self._lock:
            current = self._users.get(email)
            account_id = account_id or (current.account_id if current else self._new_account())
            for other in self._users.values():
                if other.email == email:
                    continue
                if other.account_id == account_id:
                    raise DuplicateId(f"account id {account_id} belongs to {other.email}")
                if open_id and other.open_id == open_id:
                    raise DuplicateId(f"open_id {open_id} belongs to {other.email}")
            user = SandboxUser(
                email=email,
                display_name=display_name or email.split("@")[0],
                account_id=account_id,
                active=active,
                open_id=open_id or None,
                has_phone=has_phone,
                leader_email=leader_email.strip().lower() if leader_email else None,
            )
            self._users[email] = user
            return user, current is None

    def _new_account(self) -> str:
        taken = {user.account_id for user in self._users.values()}
        while True:
            candidate = f"sbx-{self._next():06d}"
            if candidate not in taken:
                return candidate

    def users(self) -> list[SandboxUser]:
        with self._lock:
            return sorted(self._users.values(), key=lambda user: user.email)

    def user(self, email: str) -> SandboxUser | None:
        with self._lock:
            return self._users.get(email.strip().lower())

    def user_by_account(self, account_id: str) -> SandboxUser | None:
        with self._lock:
            return self._by_account(account_id)

    def _by_account(self, account_id: str | None) -> SandboxUser | None:
        return next((u for u in self._users.values() if u.account_id == account_id), None)

    def _by_open_id(self, open_id: str) -> SandboxUser | None:
        return next((u for u in self._users.values() if u.open_id == open_id), None)

    def account_id_for(self, email: str) -> str:
        user = self.user(email)
        if user is None:
            raise UnknownUser(f"no sandbox user has the email {email}")
        return user.account_id

    def search_users(self, query: str) -> list[SandboxUser]:
        """Jira's user search: a case-insensitive *contains* match on email or display name."""
        needle = query.lower()
        with self._lock:
            return [
                user for user in sorted(self._users.values(), key=lambda u: u.email)
                if needle in user.email or needle in user.display_name.lower()
            ]

    def leader(self, email: str) -> SandboxUser | None:
        with self._lock:
            user = self._users.get(email.strip().lower())
            if user is None or not user.leader_email:
                return None
            return self._users.get(user.leader_email)

    # -- groups (Core) and on-call teams (Oncall) ---------------------------------------------

    def put_group(self, name: str, emails: Iterable[str]) -> list[SandboxUser]:
        with self._lock:
            members = self._known(emails)
            self._groups[name] = [user.email for user in members]
            return members

    def put_team(self, name: str, emails: Iterable[str]) -> list[SandboxUser]:
        """Responders in order: the first is the primary (SPEC §11)."""
        with self._lock:
            responders = self._known(emails)
            self._teams[name] = [user.email for user in responders]
            return responders

    def _known(self, emails: Iterable[str]) -> list[SandboxUser]:
        users = []
        for email in emails:
            user = self._users.get(email.strip().lower())
            if user is None:
                raise UnknownUser(f"no sandbox user has the email {email}")
            if user not in users:
                users.append(user)
        return users

    def group_members(self, name: str) -> list[SandboxUser] | None:
        with self._lock:
            emails = self._groups.get(name)
            return None if emails is None else [self._users[email] for email in emails]

    def team_responders(self, name: str) -> list[SandboxUser] | None:
        with self._lock:
            emails = self._teams.get(name)
            return None if emails is None else [self._users[email] for email in emails]

    def groups(self) -> dict[str, list[str]]:
        with self._lock:
            return copy.deepcopy(self._groups)

    def teams(self) -> dict[str, list[str]]:
        with self._lock:
            return copy.deepcopy(self._teams)

    # -- Jira issues ---------------------------------------------------------------------------

    def put_issue(self, issue: SandboxIssue) -> bool:
        """Create or replace (comments and history start afresh). True when created."""
        issue = copy.deepcopy(issue)
        issue.key = issue.key.upper()
        with self._lock:
            self._check_accounts({name: getattr(issue, name) for name in USER_FIELDS})
            if issue.created_at is None:
                issue.created_at = self.now()
            created = issue.key not in self._issues
            self._issues[issue.key] = issue
            return created

    def issue(self, key: str) -> SandboxIssue:
        with self._lock:
            return copy.deepcopy(self._issue(key))

    def issue_keys(self) -> list[str]:
        with self._lock:
            return sorted(self._issues)

    def _issue(self, key: str) -> SandboxIssue:
        issue = self._issues.get(key.upper())
        if issue is None:
            raise UnknownIssue(f"issue {key} does not exist")
        return issue

    def jira_issue(self, key: str) -> tuple[SandboxIssue, dict[str, SandboxUser]]:
        """The issue and the people its user fields name, by account id."""
        with self._lock:
            issue = copy.deepcopy(self._issue(key))
            people = {}
            for name in USER_FIELDS:
                user = self._by_account(getattr(issue, name))
                if user is not None:
                    people[user.account_id] = user
            return issue, people

    def issue_view(self, key: str) -> dict:
        """The issue as stored, people by email, with comments and histories (control API)."""
        with self._lock:
            issue = self._issue(key)

            def email(account_id: str | None) -> str | None:
                user = self._by_account(account_id)
                return user.email if user else account_id

            return copy.deepcopy({
                "key": issue.key,
                "project_key": issue.project_key,
                "summary": issue.summary,
                "environment": issue.environment,
                "priority": issue.priority,
                "status": issue.status,
                "severity": issue.severity,
                "labels": issue.labels,
                "components": issue.components,
                "assignee_email": email(issue.assignee),
                "l2_assignee_email": email(issue.l2_assignee),
                "reporter_email": email(issue.reporter),
                "assignee_account_id": issue.assignee,
                "l2_assignee_account_id": issue.l2_assignee,
                "created_at": format_time(issue.created_at),
                "fields": issue.extra_fields,
                "comments": issue.comments,
                "label_history": issue.label_history,
                "history": issue.history,
            })

    def update_issue(
        self,
        key: str,
        changes: dict[str, Any],
        *,
        label_ops: Iterable[tuple[str, str]] = (),
        extra_fields: dict[str, Any] | None = None,
        via: str,
    ) -> None:
        """Apply one edit atomically. ``changes`` maps ``ISSUE_FIELDS`` names to new values
        (user fields as account ids, None clears); ``label_ops`` are ("add"|"remove", label)
        applied after a wholesale ``labels``; every change lands in the issue's histories."""
        unknown = set(changes) - set(ISSUE_FIELDS)
        if unknown:
            raise ValueError(f"not issue fields: {sorted(unknown)}")
        with self._lock:
            issue = self._issue(key)
            self._check_accounts({k: v for k, v in changes.items() if k in USER_FIELDS})
            at = format_time(self.now())
            for name, value in changes.items():
                if name == "labels":
                    self._set_labels(issue, list(value), at, via)
                    continue
                before = getattr(issue, name)
                if before != value:
                    issue.history.append({"at": at, "field": name, "from": _plain(before),
                                          "to": _plain(value), "via": via})
                    setattr(issue, name, list(value) if name == "components" else value)
            for action, label in label_ops:
                self._change_label(issue, action, label, at, via)
            issue.extra_fields.update(copy.deepcopy(extra_fields or {}))

    def _check_accounts(self, fields: dict[str, str | None]) -> None:
        for name, account_id in fields.items():
            if account_id is not None and self._by_account(account_id) is None:
                raise UnknownUser(f"{name}: no user has the account id {account_id}")

    def _set_labels(self, issue: SandboxIssue, labels: list[str], at: str, via: str) -> None:
        for label in [label for label in issue.labels if label not in labels]:
            self._change_label(issue, "remove", label, at, via)
        for label in labels:
            self._change_label(issue, "add", label, at, via)

    @staticmethod
    def _change_label(issue: SandboxIssue, action: str, label: str, at: str, via: str) -> None:
        # Like Jira: adding a present label or removing an absent one changes nothing.
        if action == "add" and label not in issue.labels:
            issue.labels.append(label)
        elif action == "remove" and label in issue.labels:
            issue.labels.remove(label)
        else:
            return
        issue.label_history.append({"at": at, "action": action, "label": label, "via": via})

    def add_comment(self, key: str, body: str, public: bool) -> dict:
        with self._lock:
            issue = self._issue(key)
            comment = {
                "id": str(10000 + self._next()),
                "issue_key": issue.key,
                "body": body,
                "public": public,
                "created_at": format_time(self.now()),
            }
            issue.comments.append(comment)
            return dict(comment)

    def comments(self, issue_key: str | None = None) -> list[dict]:
        with self._lock:
            keys = [self._issue(issue_key).key] if issue_key else sorted(self._issues)
            return [dict(c) for key in keys for c in self._issues[key].comments]

    # -- Lark ----------------------------------------------------------------------------------

    def issue_token(self) -> tuple[str, int]:
        with self._lock:
            token = "t-" + secrets.token_hex(16)
            self._tokens[token] = self.now() + timedelta(seconds=TOKEN_TTL_SECONDS)
            return token, TOKEN_TTL_SECONDS

    def token_valid(self, token: str) -> bool:
        with self._lock:
            expiry = self._tokens.get(token)
            return expiry is not None and self.now() < expiry

    def revoke_tokens(self) -> int:
        """Forget every tenant token, so clients must refresh on code 99991663."""
        with self._lock:
            count = len(self._tokens)
            self._tokens.clear()
            return count

    def open_ids(self, emails: Iterable[str]) -> dict[str, str]:
        """Lower-case email → open_id, for those people who are on Lark."""
        with self._lock:
            found = {}
            for email in emails:
                user = self._users.get(email.strip().lower())
                if user is not None and user.open_id:
                    found[user.email] = user.open_id
            return found

    def send_message(self, receive_id: str, msg_type: str, content: str,
                     uuid: str | None) -> tuple[str, bool]:
        """The message id and whether it was sent now; a known ``uuid`` is not sent twice."""
        with self._lock:
            if uuid and uuid in self._message_by_uuid:
                return self._message_by_uuid[uuid], False
            if self._by_open_id(receive_id) is None:
                raise UnknownUser(f"no Lark user has the open_id {receive_id}")
            message_id = f"om_sbx{self._next():08d}"
            self._messages[message_id] = LarkMessage(
                message_id, receive_id, msg_type, content, uuid or None, self.now()
            )
            if uuid:
                self._message_by_uuid[uuid] = message_id
            return message_id, True

    def _message(self, message_id: str) -> LarkMessage:
        message = self._messages.get(message_id)
        if message is None:
            raise UnknownMessage(f"message {message_id} does not exist")
        return message

    def urgent(self, message_id: str, user_ids: Iterable[str]) -> list[str]:
        """Send an in-app urgent; the ids that are not Lark users come back invalid."""
        with self._lock:
            self._message(message_id)
            user_ids = list(user_ids)
            invalid = [uid for uid in user_ids if self._by_open_id(uid) is None]
            self._urgents.append(Urgent(message_id, tuple(user_ids), tuple(invalid), self.now()))
            return invalid

    def mark_read(self, message_id: str, open_id: str, at_ms: int | None = None) -> bool:
        """Record that ``open_id`` read the card; the first read counts. True when new."""
        with self._lock:
            message = self._message(message_id)
            if self._by_open_id(open_id) is None:
                raise UnknownUser(f"no Lark user has the open_id {open_id}")
            if open_id in message.reads:
                return False
            message.reads[open_id] = at_ms if at_ms is not None else _epoch_ms(self.now())
            return True

    def read_users(self, message_id: str, offset: int, limit: int) -> tuple[list[tuple], int]:
        """One page of ``(open_id, read ms)`` in read order, and the total."""
        with self._lock:
            reads = list(self._message(message_id).reads.items())
            return reads[offset:offset + limit], len(reads)

    def messages(self) -> list[LarkMessage]:
        with self._lock:
            return [copy.deepcopy(m) for m in self._messages.values()]

    def urgents(self) -> list[Urgent]:
        with self._lock:
            return list(self._urgents)

    # -- Oncall ---------------------------------------------------------------------------------

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> Page:
        """Call someone. Everybody's page is recorded; a repeated ``dedup_key`` keeps its
        call id (as paging systems dedupe incidents) and is marked ``repeated``."""
        with self._lock:
            user = self._users.get(email.strip().lower())
            call_error = ""
            if user is None:
                call_error = "unknown_user"
            elif not user.active:
                call_error = "user_inactive"
            elif not user.has_phone:
                call_error = "no_phone_number"
            repeated = bool(dedup_key) and dedup_key in self._call_by_dedup
            call_id = ""
            if not call_error:
                call_id = self._call_by_dedup.get(dedup_key) or f"call-{self._next():06d}"
                if dedup_key:
                    self._call_by_dedup[dedup_key] = call_id
            page = Page(email.strip().lower(), title, message, issue_key, dedup_key,
                        not call_error, call_id, call_error, self.now(), repeated)
            self._pages.append(page)
            return page

    def pages(self) -> list[Page]:
        with self._lock:
            return list(self._pages)

    # -- faults and the request log -------------------------------------------------------------

    def add_fault(self, service: str, *, path_contains: str = "", status: int | None = None,
                  retry_after: int | None = None, latency_ms: int | None = None,
                  times: int = 1) -> Fault:
        if service not in SERVICES:
            raise ValueError(f"unknown service {service}")
        with self._lock:
            fault = Fault(self._next(), service, path_contains, status, retry_after, latency_ms,
                          times)
            self._faults.append(fault)
            return replace(fault)

    def take_fault(self, service: str, path: str) -> Fault | None:
        """The first fault for this request, used up by one; None when none applies."""
        with self._lock:
            for fault in self._faults:
                if fault.service == service and fault.path_contains in path:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return replace(fault)
            return None

    def faults(self) -> list[Fault]:
        with self._lock:
            return [replace(fault) for fault in self._faults]

    def clear_faults(self) -> int:
        with self._lock:
            count = len(self._faults)
            self._faults.clear()
            return count

    def record_request(self, service: str, method: str, path: str,
                       fault_status: int | None) -> None:
        """Remember a call (the last ``REQUEST_LOG_SIZE``), so tests can count retries."""
        with self._lock:
            self._requests.append({"at": format_time(self.now()), "service": service,
                                   "method": method, "path": path, "fault": fault_status})

    def requests(self) -> list[dict]:
        with self._lock:
            return [dict(entry) for entry in self._requests]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    return list(value) if isinstance(value, list) else value


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
