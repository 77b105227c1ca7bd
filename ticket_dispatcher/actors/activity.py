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
    """One told message's share of the activity count, ended once its handler is done."""

    __slots__ = ("_activity", "_ended")

    def __init__(self, activity: Activity):
        self._activity = activity
        self._ended = False

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

    def tell(self, ref: pykka.ActorRef, message: Any) -> bool:
        """Tell ``message`` to ``ref`` as one unit of activity; False (and nothing in flight)
        when the actor has already stopped, which only happens while shutting down."""
        unit = InFlight(self)
        with self._cond:
            self._count += 1
        try:
            ref.tell(Tracked(message, unit))
        except pykka.ActorDeadError:
            unit.end()
            log.debug("%s not delivered: %s has stopped", type(message).__name__, ref)
            return False
        return True

    def _end(self, unit: InFlight) -> None:
        with self._cond:
            if unit._ended:
                raise ActivityError("a message's activity was ended twice")
            unit._ended = True
            self._count -= 1
            self._handled += 1
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
    """An actor whose told messages come through ``Activity.tell``; subclasses implement
    ``handle``. Asks arrive unwrapped (their asker waits for the answer, so they need no count).

    Daemon threads: shutdown stops every actor within one deadline and sweeps the registry
    (``Runtime.stop``); a thread stuck past that must not keep the process alive.
    """

    use_daemon_thread = True

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
        self.drop_unhandled()

    def on_failure(self, *exc_info: Any) -> None:
        self.drop_unhandled()

    def drop_unhandled(self) -> None:
        """pykka drops told messages still in the inbox of a stopped actor; end their activity
        so the count stays true. Asks are put back for pykka to answer with ActorDeadError."""
        asks = []
        # Only this actor's thread takes from its inbox: not empty, ``get`` does not wait.
        while not self.actor_inbox.empty():
            envelope = self.actor_inbox.get()
            if isinstance(envelope.message, Tracked):
                envelope.message.in_flight.end()
            else:
                asks.append(envelope)
        for envelope in asks:
            self.actor_inbox.put(envelope)
