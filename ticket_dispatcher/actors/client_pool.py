"""The client pool: a few actors per integration, each owning one client, used like one client.

The typed pools of actors/client_ports.py serve the ports of domain/ports.py on top of it:
``JiraPool.load_issue("TCID-1")`` runs ``JiraClient.load_issue`` on one of the pool's actors and
answers in the caller's thread. Requests only flow down into client actors, which ask nobody,
so these calls cannot deadlock.

A call names the client method itself: ``self.call(JiraClient.load_issue, key)``. ``call`` is
typed with ``ParamSpec``, so mypy checks the arguments against ``JiraClient.load_issue`` and the
answer is an ``Issue``; the pool's type parameter (``JiraPool`` is a ``ClientPool[JiraClient]``)
lets through only methods of its own client class. A batch is built the same way, one
``Call.of(JiraClient.approximate_count, jql)`` per call. Across the actor boundary a call
travels as the method's name and its arguments, and the actor looks that name up on the
client it holds. It does not apply the function it was given: a test's stand-in client
(``tests/fakes.py``) is no ``JiraClient``, and must run its own method of that name, not the
real code on the fake.

The logic is a plain object, ``CallQueue`` (actors/call_queue.py): the one FIFO queue, the
hand-off of each call to a free actor, ``queue_timeout`` and ``call_timeout``, the batches and
the figures of the admin view. ``ClientActor`` is a thin shell around one client that runs what
the queue hands it; ``ClientPool`` starts and stops the actors and is what callers hold.

Handing a call to an actor is a plain ``tell``, not one of actors/activity.py: the caller waits
for the answer while its own message, counted there, is still being handled, so the call is
counted already; and a call whose caller stopped waiting (an unknown outcome, a shutdown) may
never end, so it must not hold "nothing in flight" (docs/design.md, "The parts").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Self, TypeVar, overload

import pykka

from ticket_dispatcher.actors.call_queue import (
    Call,
    CallQueue,
    ClientStats,
    Guard,
    PooledCall,
    Settled,
    SiteStats,
)
from ticket_dispatcher.actors.stopping import Deadline, await_stopped
from ticket_dispatcher.metrics import Metrics

log = logging.getLogger(__name__)

ClientT = TypeVar("ClientT")
P = ParamSpec("P")
R = TypeVar("R")

# What a caller requires at the moment its call would begin (a lease still held:
# actors/leases.py), checked in the client actor's thread just before the client call. Set
# around a call by the caller; an exception it raises is the call's answer, and the call is not
# made.
call_guard: ContextVar[Guard | None] = ContextVar("call_guard", default=None)


@dataclass(frozen=True)
class _Job:
    """The message a pool sends to its actor: run this call, then hand yourself back."""

    pooled: PooledCall


class ClientActor(pykka.ThreadingActor):
    """One client and its session; calls run one at a time in this actor's thread."""

    # A call can sit in a socket read for the whole read timeout. Shutdown stops these actors
    # and abandons their callers, but must never wait for such a read: a daemon thread cannot
    # keep the process alive past its shutdown deadline.
    use_daemon_thread = True

    def __init__(self, client: object, calls: CallQueue[pykka.ActorRef[Any]]):
        super().__init__()
        self._client = client
        self._calls = calls

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Job):
            self._calls.run(self.actor_ref, message.pooled, self._client)
        else:
            log.warning("client actor ignored %s", type(message).__name__)
        return None

    def on_stop(self) -> None:
        self._calls.retire(self.actor_ref)
        close = getattr(self._client, "close", None)
        if callable(close):
            close()

    def on_failure(self, *exc_info: Any) -> None:
        self._calls.retire(self.actor_ref)


def _hand_over(actor: pykka.ActorRef[Any], pooled: PooledCall) -> bool:
    """Tell ``actor`` to run ``pooled`` (a plain tell: see the module docstring); False when
    the actor has stopped."""
    try:
        actor.tell(_Job(pooled))
    except pykka.ActorDeadError:  # stopped from outside the pool and not yet retired
        return False
    return True


class ClientPool(Generic[ClientT]):
    """``size`` ClientActors, each over a client built by ``factory``, used like one client.

    ``call(method, ...)`` returns the client's answer or raises its exception in the caller's
    thread; the typed pools (actors/client_ports.py) name each method of their port. It adds
    ``IntegrationError`` (no free actor within ``queue_timeout``, the call was not made; or the
    pool is stopped), ``OutcomeUnknown`` (no answer within ``call_timeout``, the call still
    runs) and ``CallAbandoned`` (after ``abandon()``): see actors/call_queue.py.
    """

    def __init__(self, name: str, factory: Callable[[], ClientT], size: int, *,
                 call_timeout: float, queue_timeout: float, metrics: Metrics,
                 last_hour: Callable[[], SiteStats] | None = None):
        """``last_hour``: the service's calls over the last hour, for ``stats``, when its
        clients share a rate gate (Jira)."""
        if size < 1:
            raise ValueError("a client pool needs at least one actor")
        self.name = name
        self.size = size
        self._factory = factory
        self._last_hour = last_hour
        self._calls: CallQueue[pykka.ActorRef[Any]] = CallQueue(
            name, _hand_over, call_timeout=call_timeout, queue_timeout=queue_timeout,
            metrics=metrics)

    @property
    def call_timeout(self) -> float:
        return self._calls.call_timeout

    @property
    def queue_timeout(self) -> float:
        return self._calls.queue_timeout

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        self._calls.start(self._start_actors)
        return self

    def _start_actors(self) -> list[pykka.ActorRef[Any]]:
        clients = [self._factory() for _ in range(self.size)]
        return [ClientActor.start(client, self._calls) for client in clients]

    @overload
    def stop(self, block: Literal[True] = True, timeout: float | None = 30) -> None: ...

    @overload
    def stop(self, block: Literal[False], timeout: float | None = 30,
             ) -> list[pykka.Future[bool]]: ...

    def stop(self, block: bool = True,
             timeout: float | None = 30) -> list[pykka.Future[bool]] | None:
        """Tell every actor to stop: an idle one stops now, a busy one after its running call
        (then closes its client). Queued callers fail at once, their calls not made.

        ``block=False`` returns the actors' stop futures without waiting (the runtime awaits all
        pools under one deadline); ``block=True`` waits for them, at most ``timeout`` seconds in
        all, and raises ``pykka.Timeout`` when that passes."""
        futures = self._calls.close(_stop_without_waiting)
        if not block:
            return futures
        if not await_stopped(futures, Deadline(timeout)):
            raise pykka.Timeout(f"{self.name} client actors did not stop within {timeout} s")
        return None

    def abandon(self) -> None:
        """Shutdown: every waiting caller raises ``CallAbandoned`` now, and so does every later
        call; running calls go on in their actors (``CallQueue.abandon``). Never blocks."""
        self._calls.abandon()

    # -- calls --------------------------------------------------------------------------------

    def call(self, method: Callable[Concatenate[ClientT, P], R], /, *args: P.args,
             **kwargs: P.kwargs) -> R:
        """Run ``method`` (a method of the pool's client class) with these arguments on a free
        actor's client, and return its answer (see the class)."""
        return self._calls.call(Call.of(method, *args, **kwargs), call_guard.get())

    def call_each(self, calls: Sequence[Call[ClientT, R]], at_once: int | None = None,
                  ) -> list[Settled[R]]:
        """Run every call of ``calls`` concurrently, at most ``size`` (or ``at_once``, when
        smaller: a background batch that must leave the pool to others) at a time, and answer
        ``Settled(value, None)`` or ``Settled(None, error)`` for each, in order. An error is
        what ``call`` would have raised for that call alone; only ``CallAbandoned`` (shutdown),
        or a pool that is not open, ends the whole batch (``CallQueue.call_each``)."""
        bound = min(self.size, at_once or self.size)
        return self._calls.call_each(calls, bound, call_guard.get())

    # -- admin view ---------------------------------------------------------------------------

    def stats(self) -> ClientStats:
        """What ``GET /admin/actors`` shows for this client (``CallQueue.stats``), with its
        last hour when it has one."""
        stats = self._calls.stats()
        if self._last_hour is not None:
            stats["last_hour"] = self._last_hour()
        return stats


def _stop_without_waiting(actor: pykka.ActorRef[Any]) -> pykka.Future[bool]:
    return actor.stop(block=False)
