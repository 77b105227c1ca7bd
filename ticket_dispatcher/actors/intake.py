"""Answer first, process next: trigger requests come before the processing of new triggers.

The service answers each trigger request once its row is committed and processes it in the
background, and both share one interpreter; under a burst of requests the trigger actors
took much of its time, and the requests queued behind them (bench/README.md, the diary's
"answer first, process next"). A request that waits
long enough is given up by its sender (Jira Automation's web request has a timeout of its
own), while a trigger processed a second later loses nothing.

So a request is "being accepted" while its row is inserted (``Runtime.accept_trigger``), the
round trip that takes most of its time, and a trigger actor about to start on its next trigger
first waits until no request is (``IntakePriority.wait_turn``), for at most ``intake_priority``:
a stream of requests that never pauses still leaves every actor one trigger per
``intake_priority``, and ``0`` switches the wait off. Only the start of a trigger waits: a
trigger in processing, the executions and their timers never do, so no notification deadline
moves for the intake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class IntakePriority:
    """How many trigger requests are being accepted right now, and the wait of a trigger
    actor for the moment none is (``wait_turn``)."""

    def __init__(self, hold_seconds: float, on_held: Callable[[float], None] | None = None):
        """``hold_seconds``: the longest one ``wait_turn`` waits (0: never); ``on_held`` is
        told how long each wait that did wait took."""
        self._hold = hold_seconds
        self._on_held = on_held
        self._accepting = 0
        self._waiting = 0
        self._open = False  # stopped: nobody waits any more
        self._changed = threading.Condition(threading.Lock())

    @contextmanager
    def accepting(self) -> Iterator[None]:
        """Around the insert of one trigger request's row."""
        with self._changed:
            self._accepting += 1
        try:
            yield
        finally:
            with self._changed:
                self._accepting -= 1
                if not self._accepting and self._waiting:
                    self._changed.notify_all()

    def wait_turn(self) -> None:
        """Return once no trigger request is being accepted, after ``hold_seconds`` at most,
        or at once when the wait is off or the runtime stops."""
        with self._changed:
            if not self._accepting or self._open or not self._hold:
                return
            self._waiting += 1
            started = time.monotonic()
            try:
                self._changed.wait_for(lambda: not self._accepting or self._open, self._hold)
            finally:
                self._waiting -= 1
        if self._on_held is not None:
            self._on_held(time.monotonic() - started)

    @property
    def waiting(self) -> int:
        """Trigger actors waiting for their turn right now."""
        with self._changed:
            return self._waiting

    def stop(self) -> None:
        """The runtime stops: end every wait now, and wait no more."""
        with self._changed:
            self._open = True
            self._changed.notify_all()
