"""The one error hierarchy of the service.

Every layer raises these; the HTTP layer maps each class to one status code and the CLI to one
exit code, so a user error never surfaces as a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    ``transient``: a fault that passes (no answer, a failed connection, 429, a 5xx), which the
    caller retries within its budget rather than failing (docs/design.md, "Passing faults");
    a 4xx answer or a malformed body is permanent. ``retry_after``: the seconds the service
    asked to wait (``Retry-After``), when it said."""

    def __init__(self, message: str, status: int | None = None, service: str = "", *,
                 retry_after: float | None = None, transient: bool | None = None):
        super().__init__(message)
        self.status = status
        self.service = service
        self.retry_after = retry_after
        self.transient = (status is None or status == 429 or status >= 500
                          if transient is None else transient)


def transient_cause(error: IntegrationError) -> str:
    """The kind of a transient ``error``, for metrics: rate_limited, server_error, no_answer
    (sent, no answer) or connection (nothing sent)."""
    if error.status == 429:
        return "rate_limited"
    if error.status is not None:
        return "server_error"
    return "no_answer" if isinstance(error, OutcomeUnknown) else "connection"


class OutcomeUnknown(IntegrationError):
    """The call was sent but its answer never came (a read timeout, or the caller stopped
    waiting for a call already running): the remote side may or may not have acted. Actions
    handle it explicitly: re-read before deciding, or record ``unknown`` and never repeat the
    side effect (docs/design.md, "Checkpoints and at-most-once")."""


class CallAbandoned(Exception):
    """The runtime is shutting down and stopped waiting for this call (or never started it).

    Deliberately not a ``DispatcherError``: it is no business outcome. The caller stops where
    it is and leaves its checkpoint as it was, so the work resumes after the restart.
    """
