"""The one error hierarchy of the service.

Every layer raises these; the HTTP layer maps each class to one status code and the CLI to one
exit code, so a user error never surfaces as a traceback. ``fault_of`` says what a failed
integration call ended in, for every caller that decides what to do next.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located by a JSON path (``rules[1].then[0].type``)."""

    path: str
    message: str
    # ``shape`` problems (missing/unknown key, wrong JSON type) make a body unreadable;
    # ``rule`` problems make a readable policy unfit to run.
    kind: str = "rule"

    def to_json(self) -> dict:
        return {"path": self.path, "message": self.message}


class DispatcherError(Exception):
    """Base of every expected error. ``message`` is safe to show to a user."""

    def __init__(self, message: str, problems: list[Problem] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = list(problems or [])


class InvalidInput(DispatcherError):
    """The request or file cannot be read as what it claims to be (HTTP 400, exit 2)."""


class NotFound(DispatcherError):
    """The named thing does not exist (HTTP 404)."""


class Conflict(DispatcherError):
    """The thing exists but its state forbids the move (HTTP 409)."""


class PolicyInvalid(DispatcherError):
    """A well-formed policy that validation rejects (HTTP 422, exit 1)."""


class StoreUnavailable(DispatcherError):
    """The database could not do its part just now: a lost or refused connection, "database is
    locked", a lock or statement timeout, a serialization failure, too many connections.

    Retryable by definition: nothing of the failed unit of work was committed unless the commit
    itself lost its answer, which every caller treats like a lost external answer (re-read,
    never repeat). ``kind`` names the failure for metrics and logs (``connection``, ``locked``,
    ``timeout``, ``serialization``, ``too_many_connections``, ``other``); the message never
    carries a host, a user or a password.
    """

    def __init__(self, message: str, kind: str = "other"):
        super().__init__(message)
        self.kind = kind


class RuntimeUnavailable(DispatcherError):
    """The actor runtime did not answer a request in time: it is stopping, or an actor is
    stuck. Retryable, like ``StoreUnavailable``."""


class LeaseLost(DispatcherError):
    """A fenced write was refused: another holder took over this trigger or execution after
    its lease expired. The loser stops before its next external call and leaves the work to
    the new holder."""


class ConfigError(DispatcherError):
    """A configuration key is unknown or its value is bad; the message names the key."""


class IntegrationError(DispatcherError):
    """An external service (Jira, Lark, Oncall, Core) failed; ``status`` is its HTTP status or
    None for a timeout or connection failure. The message never carries a secret.

    ``retry_after``: the seconds the service asked to wait (``Retry-After``), when it said.
    What the failure means for the caller (repeat, read first, wait, fail) is ``fault_of``'s
    to say, not the caller's (docs/design.md, "Passing faults")."""

    def __init__(self, message: str, status: int | None = None, service: str = "", *,
                 retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.service = service
        self.retry_after = retry_after


class OutcomeUnknown(IntegrationError):
    """The call was sent but its answer never came (a read timeout, or the caller stopped
    waiting for a call already running): the remote side may or may not have acted
    (``fault_of``: unknown, its answer lost). Actions re-read before deciding, or record
    ``unknown`` and never repeat the side effect (docs/design.md, "Checkpoints and
    at-most-once")."""


class ServiceNotConfigured(IntegrationError):
    """The service has no ``base_url``: no call is made, now or later."""


class FaultKind(Enum):
    """What an integration call ended in, as far as its caller can tell."""

    NOT_SENT = "not_sent"  # nothing reached the peer: safe to repeat
    UNKNOWN = "unknown"  # the peer may have acted: read before writing again; a read repeats
    HELD = "held"  # refused by a limit, not applied: repeat no sooner than ``retry_after``
    PERMANENT = "permanent"  # an answer that asking again will not change: fail


class FaultCause(Enum):
    """Why a passing fault happened, as the metric
    ``ticket_manager_dispatch_transient_retries_total`` labels its ``cause``."""

    RATE_LIMITED = "rate_limited"  # a 429, or not sent while the rate limit holds
    SERVER_ERROR = "server_error"  # a 5xx answer
    NO_ANSWER = "no_answer"  # sent, and no answer came
    CONNECTION = "connection"  # nothing sent


@dataclass(frozen=True)
class Fault:
    """``fault_of``'s verdict on a failed call. ``cause`` is None for a permanent one;
    ``retry_after`` the seconds the service asked to wait, when it said."""

    kind: FaultKind
    cause: FaultCause | None = None
    retry_after: float | None = None

    @property
    def passing(self) -> bool:
        """A fault that passes: the work is tried again within the retry budget rather than
        failed (docs/design.md, "Passing faults")."""
        return self.kind is not FaultKind.PERMANENT

    @property
    def repeatable(self) -> bool:
        """Refused with certainty (never sent, or held by a limit): nothing was applied, so
        the same call may simply be made again, after ``retry_after``."""
        return self.kind in (FaultKind.NOT_SENT, FaultKind.HELD)

    @property
    def answer_lost(self) -> bool:
        """Sent, and no answer came: reading the peer now may tell whether it acted. (A 5xx is
        an unknown outcome too, but the peer said it is failing: a read waits for the next
        try.)"""
        return self.cause is FaultCause.NO_ANSWER

    @property
    def cause_label(self) -> str:
        """``cause`` as the metric labels it; asked of a passing fault only."""
        assert self.cause is not None, "a permanent fault is never tried again"
        return self.cause.value


_PERMANENT = Fault(FaultKind.PERMANENT)


def fault_of(error: BaseException) -> Fault:
    """What a call that raised ``error`` ended in: the one place that judges a failure of an
    integration call (docs/design.md, "Passing faults"). A 429 was held by a limit, a 5xx or a
    lost answer left the outcome unknown, a call that never left was not sent; any other
    answer, and anything that is no ``IntegrationError``, is permanent."""
    if not isinstance(error, IntegrationError) or isinstance(error, ServiceNotConfigured):
        return _PERMANENT
    status, wait = error.status, error.retry_after
    if isinstance(error, OutcomeUnknown):
        return Fault(FaultKind.UNKNOWN, FaultCause.NO_ANSWER, wait)
    if status is None:
        return Fault(FaultKind.NOT_SENT, FaultCause.CONNECTION, wait)
    if status == 429:
        return Fault(FaultKind.HELD, FaultCause.RATE_LIMITED, wait)
    if status >= 500:
        return Fault(FaultKind.UNKNOWN, FaultCause.SERVER_ERROR, wait)
    return _PERMANENT


class CallAbandoned(Exception):
    """The runtime is shutting down and stopped waiting for this call (or never started it).

    Deliberately not a ``DispatcherError``: it is no business outcome. The caller stops where
    it is and leaves its checkpoint as it was, so the work resumes after the restart.
    """
