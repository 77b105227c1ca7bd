"""The outage signal: is the database answering, and since when not.

One ``StoreHealth`` belongs to each opened database (``health_of(db)``); the store's units of
work report to it: every ``StoreUnavailable`` they raise (``failed``) and every unit that ends
cleanly (``succeeded``). Listeners (the service's metrics) follow it.

An outage starts at the first failure of an outage kind and ends at the first success after
it. It is logged once, not once per failure: one WARNING "database unavailable" when it starts,
at most one WARNING "database still unavailable" per ``SUMMARY_SECONDS`` while it lasts, and one
INFO "database available again" with its duration and failure count when it ends. A WARNING is
never logged less than ``SUMMARY_SECONDS`` after the previous one, so a database that fails
every other second stays quiet between them (an outage that logged nothing ends silently).

Not every failure is an outage: a serialization failure or deadlock is ordinary contention,
and an exhausted pool is this service's own saturation; both are only counted. An outage whose
latest failure was ``locked`` ends only with a successful write (``wrote``; the store decides
what proves one, see ``database._wrote``): reads go on while another process holds SQLite's
write lock, and must not end it.

A success costs one attribute read while no outage is under way: the lock is taken only when
the state changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ticket_dispatcher.store.faults import StoreFaultKind

log = logging.getLogger(__name__)
# Where logging is not configured (``ticket-dispatcher migrate``), the outage is the command's
# own one-line error, not also a bare line from logging's last-resort handler; configured
# logging (``serve``) still gets every record through the root logger.
log.addHandler(logging.NullHandler())

SUMMARY_SECONDS = 60.0
# Counted, never an outage (see the module's docstring).
NOT_OUTAGES = frozenset({StoreFaultKind.SERIALIZATION.value, StoreFaultKind.POOL_EXHAUSTED.value})


class StoreHealthListener(Protocol):
    """What follows the outage signal (``ticket_dispatcher.metrics.Metrics`` does)."""

    def database_available(self, available: bool) -> None:
        """The database came back (True) or an outage started (False); called once on
        subscription with the current state."""

    def store_failed(self, kind: str) -> None:
        """One more ``StoreUnavailable`` of ``kind`` (any kind, outage or not)."""


@dataclass
class _Outage:
    started: float
    first_kind: str
    latest_kind: str
    failures: int = 1
    warned: bool = False


class StoreHealth:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._outage: _Outage | None = None
        self._last_warning: float | None = None
        self._listeners: list[StoreHealthListener] = []

    @property
    def available(self) -> bool:
        """False from the first failure of an outage to the first success after it."""
        return self._outage is None

    def subscribe(self, listener: StoreHealthListener) -> None:
        with self._lock:
            self._listeners.append(listener)
            self._call(listener.database_available, self._outage is None)

    def failed(self, kind: str) -> None:
        """Record one ``StoreUnavailable`` of ``kind``."""
        with self._lock:
            for listener in self._listeners:
                self._call(listener.store_failed, kind)
            if kind in NOT_OUTAGES:
                return
            now = self._monotonic()
            outage = self._outage
            if outage is None:
                outage = self._outage = _Outage(started=now, first_kind=kind, latest_kind=kind)
                for listener in self._listeners:
                    self._call(listener.database_available, False)
            else:
                outage.failures += 1
                outage.latest_kind = kind
            if self._last_warning is None or now - self._last_warning >= SUMMARY_SECONDS:
                self._warn(outage, now)

    def succeeded(self, wrote: bool = False) -> None:
        """Record a unit of work that ended cleanly; ``wrote``: it proved writes work."""
        outage = self._outage
        if outage is None:  # the hot path: no lock while the database answers
            return
        if outage.latest_kind == StoreFaultKind.LOCKED and not wrote:
            return
        with self._lock:
            outage = self._outage
            if outage is None:
                return
            self._outage = None
            for listener in self._listeners:
                self._call(listener.database_available, True)
            if outage.warned:
                seconds = self._monotonic() - outage.started
                log.info("database available again", extra={
                    "reason": f"unavailable for {seconds:.1f} s, {outage.failures} failures",
                    "outage_seconds": round(seconds, 3), "failures": outage.failures})

    def _warn(self, outage: _Outage, now: float) -> None:
        self._last_warning = now
        if not outage.warned:
            outage.warned = True
            log.warning("database unavailable", extra={"reason": outage.latest_kind})
            return
        seconds = now - outage.started
        log.warning("database still unavailable", extra={
            "reason": f"{outage.latest_kind}; {outage.failures} failures in {seconds:.0f} s",
            "outage_seconds": round(seconds, 3), "failures": outage.failures})

    @staticmethod
    def _call(method: Callable[..., object], *args: object) -> None:
        try:
            method(*args)
        except Exception:  # a broken listener must not break the unit of work reporting
            log.exception("a store health listener failed")
