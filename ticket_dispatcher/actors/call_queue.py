"""The calls of one client pool, from a caller's arrival to its answer: a plain object with no
thread and no actor of its own, which ``ClientPool`` (actors/client_pool.py) runs over its
client actors and the tests drive directly.

A call goes to an idle worker at once, or waits in the one FIFO queue for the first worker that
frees; it is never queued behind a busy worker, so a slow peer holds only its own caller.

Two separate limits bound a caller:

- ``queue_timeout``: how long it waits for a free worker. A caller that gives up while queued
  is removed from the queue and its call never starts (``IntegrationError``: nothing happened).
- ``call_timeout``: how long it waits for the answer once its call was handed to a worker. A
  caller that gives up then gets ``OutcomeUnknown``: the call is still running and may take
  effect; the worker rejoins the queue's idle ones only when the call really ends.

``call_each`` runs a batch of calls for one caller concurrently: at most ``bound`` of them are
in the pool at a time, the next one joining the queue as one ends, so other callers' calls
queued meanwhile go first. Each call of a batch keeps both limits of its own.

Every transition (queued → running → done) happens under the queue's one lock; each caller
waits on its own condition of that lock, so a hand-off wakes exactly the caller it concerns.
The queue hands a call to a worker through the ``send`` it is built with (a client actor's
inbox); the worker, in its own thread, runs it with ``run`` and so hands itself back.
"""

from __future__ import annotations

import enum
import functools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import (
    Any,
    Concatenate,
    Generic,
    NamedTuple,
    NotRequired,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
)

from ticket_dispatcher.errors import CallAbandoned, IntegrationError, OutcomeUnknown, fault_of
from ticket_dispatcher.integrations.call_policy import first_calls
from ticket_dispatcher.integrations.transport import send_guard
from ticket_dispatcher.metrics import Metrics

ClientT = TypeVar("ClientT")
P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F")

# What a caller requires at the moment its call would begin (a lease still held), checked in
# the worker's thread just before the client call and again before each request it sends; an
# exception it raises is the call's answer.
Guard = Callable[[], None]


@dataclass(frozen=True)
class Call(Generic[ClientT, R]):
    """``client.<method>(*args, **kwargs)`` on a ``ClientT``, answering an ``R``.

    Built with ``Call.of(JiraClient.load_issue, key)``: mypy checks the arguments against the
    method and carries its return type. The worker looks the method up by its name on the
    client it holds, so a test's stand-in client with a method of that name serves it too."""

    method: str  # the client method's name: also the ``operation`` label of its metrics
    args: tuple[object, ...] = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, method: Callable[Concatenate[ClientT, P], R], /, *args: P.args,
           **kwargs: P.kwargs) -> Call[ClientT, R]:
        """The call of ``method``, a method of the client class, with these arguments."""
        return cls(method.__name__, args, kwargs)


class Settled(NamedTuple, Generic[R]):
    """What one call of a batch came to: its ``value``, or the ``error`` that ``call`` would
    have raised for it alone."""

    value: R | None
    error: BaseException | None


class Worker(Protocol):
    """What the queue hands calls to: a client actor's ref, named by its URN."""

    @property
    def actor_urn(self) -> str: ...


W = TypeVar("W", bound=Worker)


class LatencyStats(TypedDict):
    """Call durations in milliseconds (monotonic, not business time); None before any call."""

    last_latency_ms: float | None
    mean_latency_ms: float | None
    max_latency_ms: float | None


class SiteStats(TypedDict):
    """A service's calls over the last hour, and the seconds every call was held by its rate
    limit (integrations/call_policy.py ``LastHour``)."""

    calls: int
    held_seconds: float


class ClientStats(LatencyStats):
    """One client pool as ``GET /admin/actors`` shows it."""

    actors: int  # live workers, idle or busy
    busy: int  # workers running a call (also one whose caller gave up)
    queue_length: int
    longest_wait_seconds: float  # the oldest queued caller's, so far
    calls: int  # client calls begun
    errors: dict[str, int]  # by exception class
    in_flight: int  # callers waiting for an answer
    gave_up_queued: int  # calls never made: their callers stopped waiting first
    unknown_outcomes: int
    abandoned: bool
    last_hour: NotRequired[SiteStats]  # a client with a rate gate (Jira)


class _State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"  # sent to a worker (which was idle, so it starts at once)
    DONE = "done"  # answered, failed, refused, or skipped because its caller had left


@dataclass(eq=False)
class PooledCall:
    """One pooled call, from the caller's arrival to its end. Guarded by the queue's lock."""

    call: Call[Any, Any]
    ready: threading.Condition  # a condition of the queue's lock, notified on every change
    queued_at: float
    guard: Guard | None = None  # the caller's
    # the caller's work goes first (a notification's: integrations/call_policy.py
    # ``first_calls``): queued ahead of the other calls, and first for a budget's slots
    first: bool = field(default_factory=first_calls.get)
    sent_at: float | None = None  # handed to a worker (``call_timeout`` runs from here)
    state: _State = _State.QUEUED
    started: bool = False  # the worker began the client call: from here it may take effect
    caller_gone: bool = False  # the caller stopped waiting: an unstarted call must not start
    result: Any = None  # what the client method ``call.method`` answered: the call's ``R``
    error: BaseException | None = None


class CallQueue(Generic[W]):
    """The calls of one pool named ``name``, handed to its workers by ``send`` (False: that
    worker has stopped).

    ``call`` returns the client's answer or raises its exception in the caller's thread. It
    adds ``IntegrationError`` (no free worker within ``queue_timeout``, the call was not made;
    or the queue is closed), ``OutcomeUnknown`` (no answer within ``call_timeout``, the call
    still runs) and ``CallAbandoned`` (after ``abandon()``).
    """

    def __init__(self, name: str, send: Callable[[W, PooledCall], bool], *,
                 call_timeout: float, queue_timeout: float, metrics: Metrics):
        self.name = name
        self.call_timeout = call_timeout
        self.queue_timeout = queue_timeout
        self._send = send
        self._lock = threading.Lock()
        self._workers: list[W] = []  # live workers, idle or busy
        self._idle: deque[W] = deque()
        self._queue: deque[PooledCall] = deque()  # callers waiting for a worker, oldest first
        self._running: dict[str, PooledCall] = {}  # by worker URN
        self._started = False
        self._stopped = False
        self._abandoned = False
        self._calls = 0
        self._errors: Counter[str] = Counter()
        self._waiting_on_calls = 0
        self._gave_up_queued = 0
        self._unknown_outcomes = 0
        self._latency = _Latency()
        self._metrics = metrics

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, start_workers: Callable[[], Sequence[W]]) -> None:
        """Open the queue over the workers ``start_workers`` starts; once only."""
        with self._lock:
            if self._started:
                return
            self._started = True
        workers = start_workers()
        with self._lock:
            self._workers = list(workers)
            self._idle = deque(workers)

    def close(self, stop_worker: Callable[[W], F]) -> list[F]:
        """Refuse every queued and later call, and ``stop_worker`` each worker: under the lock,
        so no call can be sent to a worker behind its stop."""
        with self._lock:
            self._started = self._stopped = True
            self._fail_queued_locked()
            self._idle.clear()
            return [stop_worker(worker) for worker in self._workers]

    def check_sending(self, guard: Guard | None) -> None:
        """Right before a running call writes a request (the first, or one after a wait at
        the service's rate limit): ``CallAbandoned`` once the queue is abandoned, so nothing
        leaves during a shutdown; then the caller's ``guard``."""
        if self._abandoned:  # a bool, set once: read without the lock
            raise CallAbandoned(f"{self.name}: the service is shutting down; the request was "
                                f"not sent")
        if guard is not None:
            guard()

    def abandon(self) -> None:
        """Shutdown: every caller waiting for a worker or for a started call raises
        ``CallAbandoned`` now, and so does every later call, without starting; a call sent to a
        worker but not yet begun never begins. Running calls go on in their workers (their
        outcome is left to recovery after the restart). Never blocks."""
        with self._lock:
            self._abandoned = True
            waiting = list(self._queue) + list(self._running.values())
            self._queue.clear()
            for pooled in waiting:
                pooled.ready.notify_all()

    # -- calls (in the caller's thread) ---------------------------------------------------------

    def call(self, call: Call[Any, R], guard: Guard | None = None) -> R:
        """Run ``call`` on a free worker and return its answer (see the class)."""
        with self._lock:
            self._check_open_locked(call.method)
            pooled = PooledCall(call, threading.Condition(self._lock),
                                queued_at=time.monotonic(), guard=guard)
            self._dispatch_locked(pooled)
            self._await_worker_locked(pooled)
            self._await_answer_locked(pooled)
        if pooled.error is not None:
            raise pooled.error
        return pooled.result  # what the method ``call`` names answered: its ``R``

    def call_each(self, calls: Sequence[Call[Any, R]], at_once: int, guard: Guard | None = None,
                  ) -> list[Settled[R]]:
        """Run every call of ``calls`` concurrently, at most ``at_once`` at a time, and answer
        ``Settled`` for each, in order. An error is what ``call`` would have raised for that
        call alone; one failing call does not stop the others. Only ``CallAbandoned``
        (shutdown), or a queue that is not open, ends the whole batch: it is raised, and the
        calls not yet begun never begin."""
        if not calls:
            return []
        batch = _Batch(list(calls), threading.Condition(self._lock), at_once, guard)
        with self._lock:
            self._check_open_locked(calls[0].method)
            self._waiting_on_calls += 1
            try:
                while not self._abandoned:
                    self._top_up_locked(batch)
                    self._settle_locked(batch)
                    if batch.finished:
                        break
                    if not batch.can_top_up():
                        batch.ready.wait(timeout=self._next_deadline(batch))
            finally:
                self._waiting_on_calls -= 1
            if self._abandoned and not batch.finished:
                self._leave_batch_locked(batch)
                raise CallAbandoned(f"{self.name} {calls[0].method}: the service is shutting "
                                    f"down; calls of the batch not begun were not made")
        return batch.answers()

    def _top_up_locked(self, batch: _Batch) -> None:
        """Hand the batch's next calls to the queue while fewer than its bound are in it."""
        while batch.can_top_up():
            index = batch.next_index
            batch.next_index += 1
            pooled = PooledCall(batch.calls[index], batch.ready, queued_at=time.monotonic(),
                                guard=batch.guard)
            batch.in_pool[index] = pooled
            if self._stopped:  # closed mid-batch: no worker would ever take it
                self._refuse_locked(pooled)
            else:
                self._dispatch_locked(pooled)

    def _settle_locked(self, batch: _Batch) -> None:
        """Take the answer of every call of the batch that ended, and give up on every call
        past its limit, exactly as ``call`` would."""
        now = time.monotonic()
        for index, pooled in list(batch.in_pool.items()):
            if pooled.state is _State.DONE:
                batch.settle(index, Settled(pooled.result, pooled.error))
            elif pooled.state is _State.QUEUED and now >= pooled.queued_at + self.queue_timeout:
                pooled.caller_gone = True
                if pooled in self._queue:
                    self._queue.remove(pooled)
                self._gave_up_queued += 1
                batch.settle(index, Settled(None, self._no_free_worker(pooled)))
            elif (pooled.state is _State.RUNNING and pooled.sent_at is not None
                  and now >= pooled.sent_at + self.call_timeout):
                pooled.caller_gone = True
                batch.settle(index, Settled(None, self._overdue_locked(pooled)))

    def _overdue_locked(self, pooled: PooledCall) -> IntegrationError:
        method = pooled.call.method
        if not pooled.started:  # only when the worker was stopping: it never took the call
            self._gave_up_queued += 1
            return IntegrationError(f"{self.name} {method}: the client did not take the call "
                                    f"within {self.call_timeout:g} s; the call was not made",
                                    service=self.name)
        self._unknown_outcomes += 1
        return OutcomeUnknown(f"{self.name} {method}: no answer within {self.call_timeout:g} "
                              f"s; the call is still running and may take effect",
                              service=self.name)

    def _no_free_worker(self, pooled: PooledCall) -> IntegrationError:
        return IntegrationError(f"{self.name} {pooled.call.method}: no free client within "
                                f"{self.queue_timeout:g} s; the call was not made",
                                service=self.name)

    def _next_deadline(self, batch: _Batch) -> float:
        """Seconds until the first limit of a call of the batch runs out."""
        deadlines = [pooled.queued_at + self.queue_timeout if pooled.state is _State.QUEUED
                     else (pooled.sent_at or pooled.queued_at) + self.call_timeout
                     for pooled in batch.in_pool.values()]
        return max(0.0, min(deadlines, default=0.0) - time.monotonic())

    def _leave_batch_locked(self, batch: _Batch) -> None:
        """The caller stops waiting: no call of the batch that has not begun ever begins."""
        for pooled in batch.in_pool.values():
            pooled.caller_gone = True
            if pooled in self._queue:
                self._queue.remove(pooled)

    def _check_open_locked(self, method: str) -> None:
        if self._abandoned:
            raise CallAbandoned(f"{self.name} {method}: the service is shutting down")
        if not self._started:
            raise IntegrationError(f"{self.name} client is not started", service=self.name)
        if self._stopped or not self._workers:
            raise self._stopped_error(method)

    def _await_worker_locked(self, pooled: PooledCall) -> None:
        """Queue phase: wait until a worker runs the call (or the queue refuses it)."""
        if pooled.state is not _State.QUEUED:
            return
        pooled.ready.wait_for(
            lambda: pooled.state is not _State.QUEUED or self._abandoned,
            timeout=self.queue_timeout)
        if pooled.state is not _State.QUEUED:
            return  # handed a worker (perhaps just as the wait ran out): the call has started
        pooled.caller_gone = True
        if pooled in self._queue:
            self._queue.remove(pooled)  # so no worker is ever handed to a caller who left
        if self._abandoned:
            raise CallAbandoned(f"{self.name} {pooled.call.method}: the service is shutting "
                                f"down; the call was not made")
        self._gave_up_queued += 1
        raise self._no_free_worker(pooled)

    def _await_answer_locked(self, pooled: PooledCall) -> None:
        """Call phase: wait for the answer at most ``call_timeout``."""
        self._waiting_on_calls += 1
        try:
            pooled.ready.wait_for(lambda: pooled.state is _State.DONE or self._abandoned,
                                  timeout=self.call_timeout)
        finally:
            self._waiting_on_calls -= 1
        if pooled.state is _State.DONE:
            return
        pooled.caller_gone = True  # from now on, a call not yet begun never begins
        method = pooled.call.method
        if self._abandoned:
            made = ("the call was running and may still take effect" if pooled.started
                    else "the call was not made")
            raise CallAbandoned(f"{self.name} {method}: the service is shutting down; {made}")
        raise self._overdue_locked(pooled)

    # -- in the worker's thread -----------------------------------------------------------------

    def run(self, worker: W, pooled: PooledCall, client: object) -> None:
        """Make ``pooled``'s call on ``client`` (unless its guard refuses it now, or its caller
        has left), answer its caller, and hand ``worker`` to the next queued call or back to
        the idle ones."""
        refused = _refusal(pooled)
        if refused is not None or not self._begin(pooled):  # not made: skipped
            self._finish(worker, pooled, None, refused, None)
            return
        started = time.monotonic()
        result: Any = None
        error: BaseException | None = None
        # checked again before each write to a socket
        guard = send_guard.set(functools.partial(self.check_sending, pooled.guard))
        first = first_calls.set(pooled.first)
        try:
            result = _invoke(client, pooled.call)
        except Exception as exc:  # the caller's to raise, not the worker's
            error = exc
        except BaseException as exc:  # the worker stops, but its caller still gets an answer
            error = exc
            raise
        finally:
            first_calls.reset(first)
            send_guard.reset(guard)
            self._finish(worker, pooled, result, error, time.monotonic() - started)

    def retire(self, worker: W) -> None:
        """The worker is stopping. A call sent to it and not yet run (its message still behind
        the stop) never started, so it goes to another worker or is refused."""
        with self._lock:
            self._forget_locked(worker)
            pooled = self._running.pop(worker.actor_urn, None)
            if pooled is not None and pooled.state is _State.RUNNING:
                pooled.state = _State.QUEUED
                if pooled.caller_gone:
                    pooled.state = _State.DONE  # nobody waits for it: it just never runs
                elif self._stopped or self._abandoned:
                    self._refuse_locked(pooled)
                else:
                    self._dispatch_locked(pooled, front=True)
            if not self._workers:
                self._fail_queued_locked()

    def _begin(self, pooled: PooledCall) -> bool:
        """Just before the client call: may it start?"""
        with self._lock:
            if pooled.caller_gone:
                return False
            pooled.started = True
            self._calls += 1
            return True

    def _finish(self, worker: W, pooled: PooledCall, result: Any,
                error: BaseException | None, seconds: float | None) -> None:
        """The worker's job ended (``seconds`` is None when the call was skipped): answer the
        caller if it still waits, then hand the worker to the oldest queued caller or back to
        idle."""
        with self._lock:
            pooled.state, pooled.result, pooled.error = _State.DONE, result, error
            self._running.pop(worker.actor_urn, None)
            if seconds is not None:
                self._latency.add(seconds)
                self._metrics.integration_call(self.name, pooled.call.method,
                                               _call_outcome(error), seconds)
            if error is not None:
                self._errors[type(error).__name__] += 1
            pooled.ready.notify_all()
            if self._stopped or worker not in self._workers:
                return  # a stop message waits in its inbox
            if self._queue:
                self._send_locked(worker, self._queue.popleft())
            else:
                self._idle.append(worker)

    # -- hand-offs (always under the lock) ------------------------------------------------------

    def _dispatch_locked(self, pooled: PooledCall, *, front: bool = False) -> None:
        """Send ``pooled`` to an idle worker, else queue it (at the front when it had already
        waited its turn)."""
        while self._idle:  # the last freed: its thread is the likeliest to be warm
            if self._send_locked(self._idle.pop(), pooled):
                return
        if not self._workers:
            self._refuse_locked(pooled)
        elif front:
            self._queue.appendleft(pooled)
        elif pooled.first:  # behind the other first calls, ahead of the rest
            ahead = next((i for i, queued in enumerate(self._queue) if not queued.first),
                         len(self._queue))
            self._queue.insert(ahead, pooled)
        else:
            self._queue.append(pooled)

    def _send_locked(self, worker: W, pooled: PooledCall) -> bool:
        if not self._send(worker, pooled):  # stopped from outside the pool, not yet retired
            self._forget_locked(worker)
            return False
        pooled.state = _State.RUNNING
        pooled.sent_at = time.monotonic()
        self._running[worker.actor_urn] = pooled
        pooled.ready.notify_all()
        self._metrics.client_queue_wait(self.name, time.monotonic() - pooled.queued_at)
        return True

    def _forget_locked(self, worker: W) -> None:
        if worker in self._workers:
            self._workers.remove(worker)
        if worker in self._idle:
            self._idle.remove(worker)

    def _fail_queued_locked(self) -> None:
        while self._queue:
            self._refuse_locked(self._queue.popleft())

    def _refuse_locked(self, pooled: PooledCall) -> None:
        pooled.state, pooled.error = _State.DONE, self._stopped_error(pooled.call.method)
        pooled.ready.notify_all()

    def _stopped_error(self, method: str) -> IntegrationError:
        return IntegrationError(f"{self.name} {method}: the client is stopped; the call was "
                                f"not made", service=self.name)

    # -- admin view ---------------------------------------------------------------------------

    def stats(self) -> ClientStats:
        """What ``GET /admin/actors`` shows for this client. ``busy`` counts workers running a
        call (also one whose caller gave up); ``in_flight`` counts callers waiting for an
        answer; latencies are call time only, never queue time."""
        with self._lock:
            now = time.monotonic()
            oldest = self._queue[0].queued_at if self._queue else now
            return {
                "actors": len(self._workers),
                "busy": len(self._running),
                "queue_length": len(self._queue),
                "longest_wait_seconds": round(now - oldest, 3),
                "calls": self._calls,
                "errors": dict(self._errors),
                "in_flight": self._waiting_on_calls,
                "gave_up_queued": self._gave_up_queued,
                "unknown_outcomes": self._unknown_outcomes,
                "abandoned": self._abandoned,
                **self._latency.stats(),
            }


def _invoke(client: object, call: Call[Any, Any]) -> Any:
    """The client's method of the name ``call`` carries (see ``Call``)."""
    return getattr(client, call.method)(*call.args, **call.kwargs)


def _refusal(pooled: PooledCall) -> Exception | None:
    """What the caller's guard raises now, at the last moment before the call; None when the
    call may begin."""
    if pooled.guard is None:
        return None
    try:
        pooled.guard()
    except Exception as exc:
        return exc
    return None


@dataclass(eq=False)
class _Batch:
    """The calls of one ``call_each`` and how far they got. Guarded by the queue's lock; every
    call of the batch notifies its one condition, ``ready``."""

    calls: list[Call[Any, Any]]
    ready: threading.Condition
    bound: int  # calls of the batch in the pool at a time, at most
    guard: Guard | None  # the caller's, for every call of the batch
    next_index: int = 0  # the next call to hand to the queue
    in_pool: dict[int, PooledCall] = field(default_factory=dict)  # by index, not yet settled
    settled: dict[int, Settled[Any]] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return len(self.settled) == len(self.calls)

    def can_top_up(self) -> bool:
        return self.next_index < len(self.calls) and len(self.in_pool) < self.bound

    def settle(self, index: int, outcome: Settled[Any]) -> None:
        del self.in_pool[index]
        self.settled[index] = outcome

    def answers(self) -> list[Settled[Any]]:
        return [self.settled[index] for index in range(len(self.calls))]


class _Latency:
    """Call durations (monotonic, not business time), in milliseconds for the admin view."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.last: float | None = None
        self.max: float | None = None

    def add(self, seconds: float) -> None:
        ms = seconds * 1000
        self.count += 1
        self.total += ms
        self.last = ms
        self.max = ms if self.max is None else max(self.max, ms)

    def stats(self) -> LatencyStats:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 1)

        return {"last_latency_ms": rounded(self.last),
                "mean_latency_ms": rounded(self.total / self.count if self.count else None),
                "max_latency_ms": rounded(self.max)}


def _call_outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    return "unknown" if fault_of(error).answer_lost else "error"
