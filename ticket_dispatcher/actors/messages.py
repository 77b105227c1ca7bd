"""The messages actors exchange. Requests flow down with ``ask``; reports flow up with ``tell``.

Every ``tell`` goes through ``Activity.tell`` (actors/activity.py), which counts it in flight
until its handler returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, TypedDict

from ticket_dispatcher.actors.first_read import IssueRead
from ticket_dispatcher.actors.lanes import LaneView
from ticket_dispatcher.domain.execution import Execution, Lease, Trigger
from ticket_dispatcher.store.audit import Author

if TYPE_CHECKING:
    from ticket_dispatcher.actors.leases import Hold


# -- to the trigger actors (tell) ------------------------------------------------------------
@dataclass(frozen=True)
class ProcessTrigger:
    trigger_id: int
    recovering: bool  # boot recovery may take over a trigger left ``processing``
    token: int  # which submission of the trigger this is (the router's ``TriggerWork``)


# -- to the execution pool ------------------------------------------------------------------
@dataclass(frozen=True)
class Enqueue:  # tell
    execution_id: int


@dataclass(frozen=True)
class CreateExecutions:  # ask, from a trigger actor; answers a CreationResult
    trigger: Trigger
    executions: list[Execution]
    explicit: bool  # the trigger named its policy
    # The role label of a reserved-source trigger: a busy lock key defers it while the label
    # is still on the issue (docs/design.md, "The life of a trigger").
    reserved_label: str | None
    issue_labels: tuple[str, ...]
    lease: Lease | None  # the trigger actor's claim: every trigger write is fenced by it
    # The issue the trigger matched on, for its executions' first run (actors/first_read.py);
    # kept in memory only.
    read: IssueRead | None = None


class TriggerOutcome(StrEnum):
    """How one processing of a trigger ended; the value is the metric's ``outcome`` label."""

    COMPLETED = "completed"
    FAILED = "failed"
    DEFERRED = "deferred"  # a busy lock key: pending again, due later
    COALESCED = "coalesced"  # completed into a pending duplicate
    RETRYING = "retrying"  # a passing fault of Jira: pending again after a backoff
    HELD = "held"  # a maintenance window holds it: pending again until the window ends
    # A database failure interrupted it: it keeps its claim and the same actor tries again.
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class CreationResult:
    execution_ids: list[int] = field(default_factory=list)
    outcome: TriggerOutcome = TriggerOutcome.COMPLETED  # never RETRYING or INTERRUPTED
    reason: str = ""


class CancelOutcome(StrEnum):
    APPLIED = "applied"  # it was queued or parked, and is failed now
    SIGNALLED = "signalled"  # its running actor stops at its next step
    MISSING = "missing"
    FINISHED = "finished"  # already terminal


@dataclass(frozen=True)
class Cancellation:
    """An operator's cancel: the execution's failure reason, and who cancelled it, whose
    audit record is written in the transaction that ends the execution."""

    reason: str
    by: Author


@dataclass(frozen=True)
class CancelExecution:  # ask, from the admin API and the console; answers a CancelOutcome
    execution_id: int
    cancellation: Cancellation


@dataclass(frozen=True)
class PoolStatus:  # ask; answers a PoolView for GET /admin/actors
    pass


class ReclaimView(TypedDict):
    """One of the sweeper's latest reclaims."""

    execution_id: int
    reason: str
    at: str | None


class SweeperView(TypedDict):
    last_at: str | None
    reclaimed_total: int
    recent: list[ReclaimView]


class PoolFigures(TypedDict):
    """The pool's slots, queue, lanes, parked count and sweeps."""

    slots: int
    busy: int
    queue_length: int
    oldest_queued_age_seconds: float | None
    lanes: dict[str, LaneView]
    parked: int
    next_wake_at: str | None
    database_waits: int
    sweeper: SweeperView


class LeaseView(TypedDict):
    """The lease a running execution works under, as this process last renewed it."""

    owner: str
    epoch: int
    expires_at: str | None
    lost: bool


class RunningView(TypedDict):
    """A running execution and where it is."""

    execution_id: int
    issue_key: str
    policy_id: int | None
    rule: str
    action: str
    since: str | None
    lease: LeaseView | None


class ParkedView(TypedDict):
    """A parked execution as the pool knows it: its id and when it wakes."""

    execution_id: int
    wake_at: str | None


@dataclass(frozen=True)
class PoolView:
    """The pool's answer to ``PoolStatus``, as the admin view shows it: its slots, queue,
    lanes, parked count and sweeps (``figures``), the executions it runs, and the parked
    ones that wake soonest."""

    figures: PoolFigures
    running: list[RunningView]
    parked: list[ParkedView]


@dataclass(frozen=True)
class ExecutionWorkers:  # ask, from the shutdown; answers the refs of every execution worker
    pass


@dataclass(frozen=True)
class Recover:  # tell, from boot recovery: running executions, a thousand or so at a time
    # (id, wake_at, live lock key): parked until a future wake_at, else queued at once
    executions: tuple[tuple[int, datetime | None, str | None], ...]


@dataclass(frozen=True)
class WakeDue:  # tell, from the scheduler timer at the soonest parked execution's wake_at
    pass


@dataclass(frozen=True)
class WatchedWake:  # tell, from the ACK watcher: the guard has something to say, or a deadline
    execution_id: int
    adopted: bool = False  # a wait the watcher took from the store, not one the pool parked


@dataclass(frozen=True)
class Rescheduled:  # tell, from the ACK watcher: the waits it looked at and their next wake
    wakes: dict[int, datetime | None]  # None: the wait moved on (ended, or taken elsewhere)
    adopted: frozenset[int] = frozenset()  # of them, the ones it took from the store


# -- to the ACK watcher (tell) ----------------------------------------------------------------
@dataclass(frozen=True)
class Watch:  # parked waits to look at: (execution id, its stored wake_at) each
    waits: tuple[tuple[int, datetime], ...]


@dataclass(frozen=True)
class Look:  # from a scheduler timer: look at every wait due
    pass


@dataclass(frozen=True)
class Adopt:  # from a scheduler timer, shared mode: take the due waits nobody looked at
    pass


@dataclass(frozen=True)
class Retry:  # tell, from a scheduler timer: the backoff after an interrupted step is over
    execution_id: int


@dataclass(frozen=True)
class Pull:  # tell, shared mode: there may be executions to claim (a notification, a timer)
    pass


@dataclass(frozen=True)
class Heartbeat:  # tell, from the heartbeat timer: renew what is held, resume what is stale
    pass


# -- from an execution actor to the pool (tell) ----------------------------------------------
# ``run`` numbers the pool's starts of an execution: a report from an actor the pool has
# already replaced (a hung one whose lease was taken over) is told apart and ignored.
@dataclass(frozen=True)
class Finished:
    execution_id: int
    run: int


@dataclass(frozen=True)
class Parked:
    execution_id: int
    wake_at: datetime
    run: int
    watched: bool = False  # a page's ACK wait the watcher can keep (actors/watcher.py)


@dataclass(frozen=True)
class Crashed:
    execution_id: int
    error: str
    run: int


@dataclass(frozen=True)
class Interrupted:
    """The step met a database failure (``StoreUnavailable``) or found its lease gone
    (``LeaseLost``): nothing of it past the last saved checkpoint counts, and the execution is
    tried again after a backoff."""

    execution_id: int
    reason: str
    run: int


# -- to an execution worker (tell) -----------------------------------------------------------
@dataclass(frozen=True)
class RunExecution:
    """From the pool: run this execution from its checkpoint (the pool's ``run``-th start of
    an execution), until it ends, parks or is interrupted."""

    execution_id: int
    hold: Hold  # shared with the pool, whose heartbeat renews it
    run: int
    first_read: IssueRead | None = None  # the trigger's read, for a first run
    cancel: Cancellation | None = None  # cancelled before it started: ended at its first step


@dataclass(frozen=True)
class NextStep:  # take the run's next step (one ``Behavior.step``)
    run: int


@dataclass(frozen=True)
class Cancel:  # from the pool: end the run at its next step
    cancellation: Cancellation
    run: int


# -- to the supervisor (tell) ----------------------------------------------------------------
@dataclass(frozen=True)
class ChildCrashed:
    execution_id: int
    error: str
    attempt: int = 0  # tries to handle this crash that a database failure interrupted


@dataclass(frozen=True)
class Boot:  # ask, from the runtime: start children and recover; raises when recovery fails
    pass


@dataclass(frozen=True)
class PollTriggers:  # tell, from the poll timer
    pass


@dataclass(frozen=True)
class ObserveBacklog:  # tell, from the backlog metrics timer
    pass
