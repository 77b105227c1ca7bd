"""Leases at run time: what this process holds, how a holder that lost its claim stops, and how
work that met a database failure waits before it is tried again.

A claimed trigger or a running execution carries a lease in the store (owner, epoch, expiry).
The owner is this process (``process_identity``); the pool and the supervisor renew the leases
of the work they hold on every heartbeat, and a sweeper resumes work whose lease expired or
that nobody holds (docs/operations.md, "Database outages and leases", says what an
operator sees of it).

An execution actor keeps its claim in a ``Hold``. Two guards stop a holder that lost it before
its next external call:

- ``FencedCheckpoints``: every checkpoint write is conditional on the hold's owner and epoch,
  so the store refuses a write made under an older claim (``LeaseLost``);
- ``guarded_ports``: before every call to Jira, Lark, Oncall, Core or a store port, the hold
  must still be valid by this process's own clock (a process paused past its lease stops
  without waiting for the store to say so); an integration call checks it once more in the
  client actor's thread, just before it is sent (``client_pool.call_guard``).

A store failure met by a port is remembered on the hold, so an action that turns it into a
warning or a business failure cannot persist that: its next checkpoint raises the failure
instead, and the step is retried from the last checkpoint that was saved.
"""

from __future__ import annotations

import functools
import os
import random
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from ticket_dispatcher.actors.client_pool import call_guard
from ticket_dispatcher.domain.execution import Execution, Lease, RuleExecution
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.errors import LeaseLost, StoreUnavailable
from ticket_dispatcher.store import ExecutionRepository

# Work that met a database failure is tried again after a capped, jittered backoff.
RETRY_FIRST = timedelta(milliseconds=500)
RETRY_MAX = timedelta(seconds=30)
STORE_PORTS = ("engineers", "triggers", "contexts")


def process_identity() -> str:
    """Who holds this process's leases: host, PID and a random part (a PID is reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def store_fault_backoff(attempt: int, rng: random.Random | None = None) -> timedelta:
    """The wait before retry ``attempt`` (1, 2, ...) of work a database fault interrupted:
    0.5 s doubling up to 30 s, each drawn between half and all of that, so work that failed
    together does not retry together."""
    ceiling = min(RETRY_FIRST * (2 ** max(attempt - 1, 0)), RETRY_MAX)
    return ceiling * (rng or random).uniform(0.5, 1.0)


@dataclass(frozen=True)
class Position:
    """Where a running execution is, for the admin view: its issue, its policy, and the rule
    and action its next step runs ("" before its first rule, and at its end)."""

    issue_key: str
    policy_id: int | None
    rule: str
    action: str


class Hold:
    """This process's claim on an execution (shared by its actor and the pool that renews it)
    or on a trigger (its ``TriggerWork``, renewed by the trigger router).

    ``lease`` is set once the work is claimed; ``valid_until`` is how long this
    process knows the claim holds (moved on by each renewal); ``progress_at`` is the last time
    the actor showed progress (a checkpoint, a step): a hold whose actor shows none for a whole
    lease is presumed hung and is no longer renewed. ``lost`` is set when the claim is known
    to be gone; ``store_error`` is the store failure a port met during the current step.
    ``position`` is where the run is after its last step that advanced (None before one did):
    the pool reads it for the admin view rather than hear of every step, which would wake
    the pool's thread several times per execution.
    Plain attributes: each is written by one thread and read by another as a whole value.
    """

    __slots__ = ("lease", "valid_until", "progress_at", "lost", "store_error", "position")

    def __init__(self, now: datetime | None):
        self.lease: Lease | None = None
        self.valid_until: datetime | None = None
        self.progress_at = now  # None while the work waits (queued, or for a retry)
        self.lost = False
        self.store_error: StoreUnavailable | None = None
        self.position: Position | None = None

    def claimed(self, lease: Lease, now: datetime, duration: timedelta) -> None:
        self.lease, self.valid_until, self.progress_at = lease, now + duration, now

    def hung(self, now: datetime, duration: timedelta) -> bool:
        return self.progress_at is not None and now - self.progress_at > duration

    def check(self, now: datetime) -> None:
        """Raise ``LeaseLost`` unless the claim is still this process's."""
        if self.lease is None:
            return  # not claimed yet: the actor is loading, and claims before any write
        if self.lost or (self.valid_until is not None and now >= self.valid_until):
            self.lost = True
            raise LeaseLost(f"the lease on this execution expired at {self.valid_until}")


class FencedCheckpoints:
    """The behavior's ``Checkpoints`` port for one actor: fenced by its hold."""

    def __init__(self, executions: ExecutionRepository, hold: Hold,
                 now: Callable[[], datetime]):
        self._executions = executions
        self._hold = hold
        self._now = now

    def save(self, execution: Execution, rules: list[RuleExecution], *,
             parked: bool = False) -> None:
        if self._hold.store_error is not None:
            raise self._hold.store_error  # a port failed this step: nothing of it is saved
        self._hold.check(self._now())
        self._executions.save(execution, rules, lease=self._hold.lease, parked=parked)
        self._hold.progress_at = self._now()


class _GuardedPort:
    """A port whose every call first checks the hold, and whose store failures are kept."""

    def __init__(self, port: Any, hold: Hold, now: Callable[[], datetime], store: bool):
        self._port = port
        self._hold = hold
        self._now = now
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._port, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def call(*args: Any, **kwargs: Any) -> Any:
            self._hold.check(self._now())
            # Checked again by the client actor just before it sends: a pause between here
            # and there must not let a call out once the lease has run out.
            guard = call_guard.set(lambda: self._hold.check(self._now()))
            try:
                answer = attribute(*args, **kwargs)
            except StoreUnavailable as exc:
                if self._store:
                    self._hold.store_error = exc
                raise
            finally:
                call_guard.reset(guard)
            self._hold.progress_at = self._now()  # an answer, even a refusal, is progress
            return answer

        return call


def guarded_ports(ports: Ports, hold: Hold, now: Callable[[], datetime]) -> Ports:
    """``ports`` with every port behind the hold's guard."""
    return replace(ports, **{
        f.name: _GuardedPort(getattr(ports, f.name), hold, now, store=f.name in STORE_PORTS)
        for f in fields(ports)})
