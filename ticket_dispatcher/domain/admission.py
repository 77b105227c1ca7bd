"""The one admission rule for new live executions (docs/design.md, "The life of a trigger").

Given the executions a trigger would create and the lock keys that already have a live
execution, decide what happens: create the idle ones, refuse (an explicit policy that is busy),
defer (a reserved source whose family is busy while the role label is still on the issue), or
nothing to do. The execution pool applies it inside its creation transaction; the HTTP intake
applies it early to answer 409 for a busy explicit policy before a trigger is even stored.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class Candidate(Protocol):
    """What admission needs of an execution about to be created."""

    # Read-only: a frozen LockCandidate and a live Execution both are one.
    @property
    def policy_id(self) -> int: ...

    @property
    def issue_key(self) -> str: ...

    @property
    def live_lock_key(self) -> str | None:
        """None for a dry-run: never excluded."""
        ...


@dataclass(frozen=True)
class LockCandidate:
    """A candidate described by its parts, for a check made before any execution exists."""

    policy_id: int
    issue_key: str
    live_lock_key: str | None


class AdmissionOutcome(StrEnum):
    CREATE = "create"  # create ``admitted`` (every candidate, or the idle ones of an auto-match)
    CONFLICT = "conflict"  # an explicit policy is busy: the trigger fails, HTTP answers 409
    DEFERRED = "deferred"  # reserved source, family busy, label still there: try again later
    NOOP = "noop"  # every match is busy and nothing asks to wait: complete with no executions


@dataclass(frozen=True)
class Admission:
    outcome: AdmissionOutcome
    admitted: tuple[int, ...] = ()  # indexes into the candidates, in their order
    reason: str = ""


def admit(candidates: Sequence[Candidate], busy: Collection[str], *, explicit: bool,
          role_label: str | None = None, issue_labels: Collection[str] = ()) -> Admission:
    """Decide for ``candidates`` given the ``busy`` lock keys.

    ``explicit``: the trigger named its policy (``policy_id``). ``role_label``: the label of the
    reserved source's role, None for ordinary sources; while it is still on the issue a busy
    family defers the trigger instead of dropping it.
    """
    busy_ones = [c for c in candidates if c.live_lock_key and c.live_lock_key in busy]
    admitted = tuple(i for i, c in enumerate(candidates)
                     if not (c.live_lock_key and c.live_lock_key in busy))
    if not busy_ones:
        return Admission(AdmissionOutcome.CREATE, admitted)
    first = busy_ones[0]
    if explicit:
        return Admission(AdmissionOutcome.CONFLICT, (),
                         f"policy {first.policy_id} already has a live execution for "
                         f"{first.issue_key}")
    if role_label is not None and role_label in issue_labels:
        return Admission(AdmissionOutcome.DEFERRED, (),
                         f"a live notification workflow is running for {first.issue_key} "
                         f"and {role_label!r} is still on the issue")
    skipped = ", ".join(str(c.policy_id) for c in busy_ones)
    if not admitted:
        return Admission(AdmissionOutcome.NOOP, (), f"already running for {first.issue_key}: "
                                           f"policies {skipped}")
    return Admission(AdmissionOutcome.CREATE, admitted, f"skipped busy policies {skipped}")
