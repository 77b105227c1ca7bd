"""Counts the messages in flight through the actor system, so "wait until settled" is one
bounded call, and is the one way actors tell each other things.

``Activity.tell(ref, message)`` begins a unit of activity (an ``InFlight``) and sends the
message wrapped with it; the receiving ``TrackedActor`` ends it exactly once, when its handler
has returned or raised. A handler that sends a message before it returns keeps the count above
zero, so a chain of work (a trigger creating executions, an execution stepping, a finished one
freeing a slot for the next) is in flight until its last message is handled. The harness and
the benches wait on the count reaching zero instead of sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

log = logging.getLogger(__name__)


class ActivityError(RuntimeError):
    """A message's activity ended twice: a bug in the runtime, never clamped away."""


class InFlight:
    """One told message's share of the activity count, ended once its handler is done (or
    once its actor stopped without handling it)."""

    __slots__ = ("_activity", "_ended", "actor_urn")

    def __init__(self, activity: Activity, actor_urn: str = ""):
        self._activity = activity
        self._ended = False
        self.actor_urn = actor_urn  # whose inbox it went to ("": nobody's, a test's own)

    def end(self) -> None:
        self._activity._end(self)


@dataclass(frozen=True)
class Tracked:
    """A told message and its share of the activity count, which its handler ends."""

    message: Any
    in_flight: InFlight


class Activity:
    def __init__(self) -> None:
        self._count = 0
        self._handled = 0  # messages handled so far: ``wait_for`` waits for it to move
        self._cond = threading.Condition()
        # What each actor was told and has not handled yet, by its URN: what its stop leaves
        # in its inbox (pykka drops told messages there) is ended by ``abandon``.
        self._pending: dict[str, set[InFlight]] = {}

    def tell(self, ref: pykka.ActorRef, message: Any) -> bool:
        """Tell ``message`` to ``ref`` as one unit of activity; False (and nothing in flight)
        when the actor has already stopped, which only happens while shutting down."""
        unit = InFlight(self, ref.actor_urn)
        with self._cond:
            self._count += 1
            self._pending.setdefault(unit.actor_urn, set()).add(unit)
        try:
            ref.tell(Tracked(message, unit))
        except pykka.ActorDeadError:
            self._end_unless_ended(unit)  # its actor's stop may have abandoned it already
            log.debug("%s not delivered: %s has stopped", type(message).__name__, ref)
            return False
        return True

    def abandon(self, actor_urn: str) -> None:
        """The actor ``actor_urn`` has stopped: end what it was told and will never handle.
        pykka marks an actor stopped before its ``on_stop`` runs, so nothing told after this
        reaches its inbox."""
        with self._cond:
            units = self._pending.pop(actor_urn, set())
        for unit in units:
            self._end_unless_ended(unit)

    def _end(self, unit: InFlight) -> None:
        with self._cond:
            if unit._ended:
                raise ActivityError("a message's activity was ended twice")
            self._close(unit)

    def _end_unless_ended(self, unit: InFlight) -> None:
        with self._cond:
            if not unit._ended:
                self._close(unit)

    def _close(self, unit: InFlight) -> None:
        """End ``unit``; the caller holds the lock."""
        unit._ended = True
        self._count -= 1
        self._handled += 1
        pending = self._pending.get(unit.actor_urn)
        if pending is not None:
            pending.discard(unit)
            if not pending:
                del self._pending[unit.actor_urn]
        self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._count

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is in flight; False when ``timeout`` seconds pass first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout=timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate`` holds, re-checking it each time a message is handled;
        False when ``timeout`` seconds pass first.

        The predicate runs without the lock held: it may ask an actor (the admin status),
        and that actor ends its own message's activity under this lock before it answers.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                seen = self._handled
            if predicate():
                return True
            with self._cond:
                while self._handled == seen:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)


class TrackedActor(pykka.ThreadingActor):
    """An actor whose told messages come through ``activity.tell``; subclasses implement
    ``handle``. Asks arrive unwrapped (their asker waits for the answer, so they need no count;
    pykka answers those left at a stop with ``ActorDeadError``).

    Daemon threads: shutdown stops every actor within one deadline and sweeps the registry
    (``Runtime.stop``); a thread stuck past that must not keep the process alive.
    """

    use_daemon_thread = True

    def __init__(self, activity: Activity) -> None:
        super().__init__()
        self._activity = activity

    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, Tracked):
            return self.handle(message)
        try:
            return self.handle(message.message)
        finally:
            message.in_flight.end()

    def handle(self, message: Any) -> Any:
        raise NotImplementedError

    def on_stop(self) -> None:
        self._activity.abandon(self.actor_urn)

    def on_failure(self, *exc_info: Any) -> None:
        self._activity.abandon(self.actor_urn)
