"""The people of the sandbox: one directory that the four fake services share.

A person is one record keyed by email that carries each service's identity: a Jira account id,
a Lark open_id (or none), whether Oncall can phone them and their leader in Core. One record
rather than four, so the fake services never disagree about who exists; each service's state
reads it through ``People``. A person carries only a ``has_phone`` flag: the sandbox never holds
a phone number, so none can leak into an answer.

The service states take their own lock first and may then ask ``People``, which asks nobody:
the lock order is always service → people, so no deadlock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass


class SandboxError(Exception):
    """A lookup or write the sandbox world refuses; ``message`` is safe to show."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UnknownUser(SandboxError):
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


def email_key(email: str) -> str:
    """The directory's key of an email: trimmed, lower case."""
    return email.strip().lower()


class People:
    """The directory. Users are frozen, so handing them out needs no copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, SandboxUser] = {}
        self._counter = 0

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
        email = email_key(email)
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
                leader_email=email_key(leader_email) if leader_email else None,
            )
            self._users[email] = user
            return user, current is None

    def _new_account(self) -> str:
        taken = {user.account_id for user in self._users.values()}
        while True:
            self._counter += 1
            candidate = f"sbx-{self._counter:06d}"
            if candidate not in taken:
                return candidate

    def users(self) -> list[SandboxUser]:
        """Everybody, by email."""
        with self._lock:
            return sorted(self._users.values(), key=lambda user: user.email)

    def user(self, email: str) -> SandboxUser | None:
        with self._lock:
            return self._users.get(email_key(email))

    def user_by_account(self, account_id: str | None) -> SandboxUser | None:
        with self._lock:
            return next((u for u in self._users.values() if u.account_id == account_id), None)

    def user_by_open_id(self, open_id: str) -> SandboxUser | None:
        with self._lock:
            return next((u for u in self._users.values() if u.open_id == open_id), None)

    def account_id_for(self, email: str) -> str:
        user = self.user(email)
        if user is None:
            raise UnknownUser(f"no sandbox user has the email {email}")
        return user.account_id

    def known(self, emails: Iterable[str]) -> list[SandboxUser]:
        """The people of ``emails`` in order, each once; ``UnknownUser`` for a stranger."""
        with self._lock:
            users: list[SandboxUser] = []
            for email in emails:
                user = self._users.get(email_key(email))
                if user is None:
                    raise UnknownUser(f"no sandbox user has the email {email}")
                if user not in users:
                    users.append(user)
            return users
