"""Threads for short-lived actors: each one, once its actor has stopped, waits a while to run
the next actor's loop.

pykka gives every actor a thread of its own, started when the actor starts; ``Thread.start``
returns only once the new thread runs. One execution actor lives for one execution (or one
step of it, until it parks), so the pool, which starts them all from its one thread, would
start a thread and wait for it at every execution; with the interpreter lock passed between
a dozen busy threads, that wait was a quarter of the pool's time under load. Here a stopped
actor's thread is handed the next actor's loop instead, and a new thread starts only when
every kept one is busy: as many threads as actors run at once, never a bound on them (an
actor stuck in a call keeps its thread, and the next actor gets another).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from datetime import timedelta

KEEP = timedelta(seconds=60)  # how long a thread without an actor waits for the next one


class ActorThreads:
    def __init__(self, name: str, keep: timedelta = KEEP):
        self._name = name
        self._keep = keep.total_seconds()
        self._lock = threading.Lock()
        self._waiting: list[queue.SimpleQueue] = []  # the inbox of each thread without an actor
        self._numbers = itertools.count(1)

    def run(self, loop: Callable[[], None]) -> None:
        """Run ``loop`` (an actor's whole life) on a waiting thread, or on a new one."""
        with self._lock:
            inbox = self._waiting.pop() if self._waiting else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), daemon=True,
                             name=f"{self._name}-{next(self._numbers)}").start()
        inbox.put(loop)

    def waiting(self) -> int:
        """How many threads wait for an actor."""
        with self._lock:
            return len(self._waiting)

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while True:
            try:
                loop = inbox.get(timeout=self._keep)
            except queue.Empty:
                with self._lock:
                    if inbox in self._waiting:  # nobody took it meanwhile
                        self._waiting.remove(inbox)
                        return
                continue  # handed an actor as the wait ended: it is on its way
            loop()  # pykka's actor loop handles the actor's own failures
            with self._lock:
                self._waiting.append(inbox)
