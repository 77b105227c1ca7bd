"""Writes that callers on several threads ask for at the same moment, done as one.

Each accepted trigger is one INSERT, and under a burst every HTTP thread makes its own round
trip, its own commit and, on PostgreSQL, its own statement for a backend to parse, plan and
flush to the WAL. ``GroupedWrites`` lets them share: the first caller writes its row at once,
alone, so a lone request waits for nothing; callers that arrive while that write is under way
queue, and when it ends the first of them writes every queued row in one go (``write_many``).
Nobody's row is acknowledged before it is committed: each caller returns only when the write
that holds its row has committed, or raises that write's failure.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ticket_dispatcher.errors import StoreUnavailable

Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_GROUP = 64  # rows in one write at most; the rest wait for the next one

_ALONE = object()  # the group's write failed for one of its rows: write your own alone


class _Waiting(Generic[Item, Result]):
    """One queued caller: its row, then what became of it."""

    __slots__ = ("item", "ready", "leads", "result", "error")

    def __init__(self, item: Item):
        self.item = item
        self.ready = threading.Event()
        self.leads = False  # woken to write the queue itself
        self.result: object = None
        self.error: BaseException | None = None


class GroupedWrites(Generic[Item, Result]):
    """``write`` one row; rows asked for together are written together.

    When a write of several rows fails because of the database (``StoreUnavailable``: gone,
    locked, timed out), every caller in it raises that failure, as each would have alone.
    Any other failure may be one row's (a constraint it breaks), so each caller then writes its
    own row again, alone (``write_one``), and only that row's own failure is raised.
    """

    def __init__(self, write_one: Callable[[Item], Result],
                 write_many: Callable[[Sequence[Item]], list[Result]]):
        self._write_one = write_one
        self._write_many = write_many
        self._lock = threading.Lock()
        self._queue: list[_Waiting[Item, Result]] = []
        self._busy = False  # a write is under way, or a queued caller is about to start one

    def write(self, item: Item) -> Result:
        with self._lock:
            waiting = None
            if self._busy:
                waiting = _Waiting(item)
                self._queue.append(waiting)
            else:
                self._busy = True
        if waiting is None:
            try:
                return self._write_one(item)
            finally:
                self._pass_on()
        waiting.ready.wait()
        if waiting.leads:
            self._lead(waiting)
        if waiting.error is not None:
            raise waiting.error
        if waiting.result is _ALONE:
            return self._write_one(item)
        return waiting.result  # type: ignore[return-value]

    def _pass_on(self) -> None:
        """The write under way has ended: the first queued caller writes the queue next."""
        with self._lock:
            if not self._queue:
                self._busy = False
                return
            first = self._queue[0]
        first.leads = True
        first.ready.set()

    def _lead(self, leader: _Waiting[Item, Result]) -> None:
        """Write the queue (``leader`` first in it), then settle every caller in it."""
        with self._lock:
            group, self._queue = self._queue[:MAX_GROUP], self._queue[MAX_GROUP:]
        results: list[object] = [_ALONE] * len(group)  # if the write never returns
        error: BaseException | None = None
        try:
            if len(group) == 1:
                try:
                    results = [self._write_one(leader.item)]
                except Exception as exc:  # the leader's own: raised as it is
                    error = exc
            else:
                try:
                    results = list(self._write_many([waiting.item for waiting in group]))
                except StoreUnavailable as exc:
                    error = exc
                except Exception:
                    pass  # results stay _ALONE
        finally:
            self._pass_on()
            for index, waiting in enumerate(group):
                if error is not None:
                    waiting.error = error if waiting is leader else copy.copy(error)
                else:
                    waiting.result = results[index]
                if waiting is not leader:
                    waiting.ready.set()
