"""A crash hook for the actor harness: the process "dies" once, right before or right after a
named checkpoint, and stays dead until the test restarts it.

A checkpoint is either an execution save (the behavior's ``Checkpoints.save``, where every
action phase is persisted), an external call made through a port (``"jira.assign"``,
``"triggers.ensure_reserved_trigger"``, ...), or a write of a notification role slot
(``"slot"``: the escalation intent and marker, judged by the slot being stored).

* before: the exception is raised before the write or call, so nothing of it happened. A slot
  write dies inside its transaction, which rolls back.
* after: the write has committed (the call has answered) and the exception is raised before
  the caller sees the result.

Dying sets the runtime's ``stopping`` flag and makes every later execution save raise too: the
crashed ExecutionActor treats the exception as a shutdown (it neither reports a crash nor is
restarted in-process by the supervisor), no execution step starts or persists anything more, and
the test stops the runtime and boots a new one on the same database — a real process restart
with boot recovery. Port calls are not refused while dead: only a trigger actor already in
flight could make one, and what it does is what it would have done just before the crash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ticket_dispatcher.domain.execution import Execution

SAVE, SLOT = "save", "slot"
BEFORE, AFTER = "before", "after"


class ProcessDied(Exception):
    """The simulated process death. Not a ``DispatcherError``: no product handler treats it as
    an integration outcome, it unwinds to the ExecutionActor like any crash."""


@dataclass(frozen=True)
class Checkpoint:
    """Where to die: ``site`` is ``"save"``, ``"slot"`` or ``"<port>.<method>"``; ``match``
    gets the saved execution (save), the slot about to be stored (slot), or the call's
    ``(args, kwargs)`` (a port call)."""

    name: str
    site: str
    match: Callable[..., bool]


class Injector:
    """Dies once at ``checkpoint`` (``when`` = before|after). ``on_death`` freezes the runtime
    (the harness sets its ``stopping`` flag). Only the first execution that saves is watched,
    so a later workflow (the leader's, a wake-up's) never matches a save checkpoint."""

    def __init__(self, checkpoint: Checkpoint, when: str, on_death: Callable[[], None]):
        if when not in (BEFORE, AFTER):
            raise ValueError(f"when must be {BEFORE!r} or {AFTER!r}")
        self.checkpoint = checkpoint
        self.when = when
        self.on_death = on_death
        self.fired = False  # the checkpoint was reached (once per test)
        self.dead = False  # between the death and the restart
        self.watched: int | None = None

    # -- hooks ------------------------------------------------------------------------------------

    def wrap_save(self, repository: Any) -> None:
        """Hook the execution repository's ``save`` (the behavior's checkpoint port) and
        ``record_looks`` (the ACK watcher's)."""
        real = repository.save

        def save(execution: Execution, rules: list, **fencing: Any) -> None:
            self._alive()
            if self.watched is None:
                self.watched = execution.id
            hit = execution.id == self.watched and self._hits(SAVE, execution)
            if hit and self.when == BEFORE:
                self._die()
            real(execution, rules, **fencing)
            if hit:
                self._die()

        repository.save = save
        real_looks = repository.record_looks

        def record_looks(looks: list) -> set[int]:
            """The ACK watcher's saves of its looks: the same checkpoints a wait's own poll
            would save."""
            self._alive()
            hit = any(execution.id == self.watched and self._hits(SAVE, execution)
                      for execution, _, _ in looks)
            if hit and self.when == BEFORE:
                self._die()
            saved = real_looks(looks)
            if hit:
                self._die()
            return saved

        repository.record_looks = record_looks

    def port(self, name: str, port: Any) -> Any:
        """``port`` as the actions see it: each call ``name.method`` is a possible crash site."""
        return _HookedPort(self, name, port)

    def revive(self) -> None:
        """The new process: hooked calls go through again; the checkpoint does not fire twice."""
        self.dead = False

    # -- internals --------------------------------------------------------------------------------

    def _alive(self) -> None:
        if self.dead:
            raise ProcessDied("the process is dead")

    def _hits(self, site: str, *subject: Any) -> bool:
        if self.fired or self.checkpoint.site != site:
            return False
        if not self.checkpoint.match(*subject):
            return False
        self.fired = True
        return True

    def _die(self) -> None:
        self.dead = True
        self.on_death()
        raise ProcessDied(f"died {self.when} {self.checkpoint.name}")

    def call(self, site: str, real: Callable, args: tuple, kwargs: dict) -> Any:
        if site == "contexts.update_notification_slot":
            return self._slot_write(real, *args, **kwargs)
        hit = self._hits(site, args, kwargs)
        if hit and self.when == BEFORE:
            self._die()
        answer = real(*args, **kwargs)
        if hit:
            self._die()
        return answer

    def _slot_write(self, real: Callable, issue_key: str, role: str, mutate: Callable,
                    now: Any) -> Any:
        hit: list[bool] = []

        def judged(slot: dict | None) -> dict | None:
            new = mutate(slot)
            if self._hits(SLOT, new):
                hit.append(True)
                if self.when == BEFORE:
                    self._die()  # inside the row-lock transaction: it rolls back
            return new

        answer = real(issue_key, role, judged, now)
        if hit:
            self._die()
        return answer


class _HookedPort:
    def __init__(self, injector: Injector, name: str, port: Any):
        self._injector, self._name, self._port = injector, name, port

    def __getattr__(self, method: str) -> Any:
        real = getattr(self._port, method)
        if not callable(real):
            return real
        site = f"{self._name}.{method}"

        def call(*args, **kwargs):
            return self._injector.call(site, real, args, kwargs)

        return call
