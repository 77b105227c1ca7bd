"""Client actors: a small pool of actors per integration, each owning one client (SPEC §3).

Executions and triggers *ask* a ``ClientPool`` as if it were the client itself
(``pool.load_issue("TCID-1")``); the pool hands the call to its next actor, round-robin, and
returns the result or re-raises the client's exception in the asker's thread. Requests only
flow down into client actors, which ask nobody, so these asks cannot deadlock.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pykka

from ticket_dispatcher.clock import Clock
from ticket_dispatcher.config import Config
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.core import CoreClient
from ticket_dispatcher.integrations.http import IntegrationTimeout
from ticket_dispatcher.integrations.jira import JiraClient
from ticket_dispatcher.integrations.lark import LarkClient
from ticket_dispatcher.integrations.oncall import OncallClient

log = logging.getLogger(__name__)

DEFAULT_ASK_TIMEOUT = 60.0  # seconds; build_client_pools derives it from the HTTP timeouts


@dataclass(frozen=True)
class Call:
    """Ask a client actor to run ``client.<method>(*args, **kwargs)``."""

    method: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


class ClientActor(pykka.ThreadingActor):
    """One client and its session; calls run one at a time in this actor's thread."""

    def __init__(self, client: Any):
        super().__init__()
        self._client = client

    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, Call):
            log.warning("client actor ignored %s", type(message).__name__)
            return None
        # An exception goes back to the asker (pykka re-raises it there); the actor lives on.
        return getattr(self._client, message.method)(*message.args, **message.kwargs)

    def on_stop(self) -> None:
        close = getattr(self._client, "close", None)
        if callable(close):
            close()


class ClientPool:
    """``size`` ClientActors built by ``factory``, used like one client."""

    def __init__(self, name: str, factory: Callable[[], Any], size: int = 4, *,
                 ask_timeout: float = DEFAULT_ASK_TIMEOUT):
        if size < 1:
            raise ValueError("a client pool needs at least one actor")
        self.name = name
        self.size = size
        self.ask_timeout = ask_timeout
        self._factory = factory
        self._actors: list[pykka.ActorRef] = []
        self._methods: frozenset[str] = frozenset()
        self._next: Any = None
        self._lock = threading.Lock()
        self._calls = 0
        self._errors: Counter[str] = Counter()
        self._in_flight = 0
        self._last_latency_ms: float | None = None

    def start(self) -> ClientPool:
        if self._actors:
            return self
        clients = [self._factory() for _ in range(self.size)]
        self._methods = frozenset(
            name for name in dir(clients[0])
            if not name.startswith("_") and callable(getattr(clients[0], name)))
        self._actors = [ClientActor.start(client) for client in clients]
        self._next = itertools.cycle(self._actors)
        return self

    def stop(self, timeout: float = 30) -> None:
        actors, self._actors = self._actors, []
        self._next = None
        for actor in actors:
            actor.stop(block=True, timeout=timeout)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        # Only called for names the pool itself lacks: the client's public methods.
        if method.startswith("_") or method not in self._methods:
            raise AttributeError(f"{type(self).__name__} {self.__dict__.get('name')!r} "
                                 f"has no client method {method!r}")

        def routed(*args: Any, **kwargs: Any) -> Any:
            return self.call(method, *args, **kwargs)

        routed.__name__ = method
        return routed

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``client.<method>`` on the next actor and wait for its answer."""
        actor = self._pick()
        started = time.monotonic()
        with self._lock:
            self._calls += 1
            self._in_flight += 1
        try:
            return actor.ask(Call(method, args, kwargs), timeout=self.ask_timeout)
        except pykka.Timeout:
            self._count_error(IntegrationTimeout)
            raise IntegrationTimeout(
                f"{self.name} {method}: no answer from the client actor within "
                f"{self.ask_timeout:g} s", service=self.name) from None
        except pykka.ActorDeadError:
            self._count_error(pykka.ActorDeadError)
            raise IntegrationError(f"{self.name} client is stopped", service=self.name) from None
        except Exception as exc:
            self._count_error(type(exc))
            raise
        finally:
            with self._lock:
                self._in_flight -= 1
                self._last_latency_ms = round((time.monotonic() - started) * 1000, 1)

    def stats(self) -> dict:
        """What ``GET /admin/actors`` shows for this client."""
        with self._lock:
            return {
                "actors": len(self._actors),
                "calls": self._calls,
                "errors": dict(self._errors),
                "in_flight": self._in_flight,
                "last_latency_ms": self._last_latency_ms,
            }

    def _pick(self) -> pykka.ActorRef:
        with self._lock:
            if self._next is None:
                raise IntegrationError(f"{self.name} client is not started", service=self.name)
            return next(self._next)

    def _count_error(self, kind: type) -> None:
        with self._lock:
            self._errors[kind.__name__] += 1


def _seconds(value: Any) -> float:
    return value.total_seconds() if hasattr(value, "total_seconds") else float(value)


def build_client_pools(config: Config, clock: Clock, *, start: bool = True,
                       sleep: Callable[[float], None] = time.sleep) -> dict[str, ClientPool]:
    """A pool per configured integration (a service with an empty ``base_url``, or Lark
    without an ``app_id``, is left out), started unless ``start`` is False."""
    timeouts = {"connect_timeout": _seconds(config.integrations.connect_timeout),
                "read_timeout": _seconds(config.integrations.read_timeout),
                "clock": clock, "sleep": sleep}
    # Lark's base_url has a default, so it counts as configured only with an app id.
    factories: dict[str, tuple[bool, Callable[[], Any]]] = {
        "jira": (bool(config.jira.base_url), lambda: JiraClient(config.jira, **timeouts)),
        "lark": (bool(config.lark.base_url and config.lark.app_id),
                 lambda: LarkClient(config.lark, **timeouts)),
        "oncall": (bool(config.oncall.base_url),
                   lambda: OncallClient(config.oncall, **timeouts)),
        "core": (bool(config.core.base_url), lambda: CoreClient(config.core, **timeouts)),
    }
    ask_timeout = _ask_timeout(timeouts["connect_timeout"], timeouts["read_timeout"])
    pools = {name: ClientPool(name, factory, config.client_actors, ask_timeout=ask_timeout)
             for name, (configured, factory) in factories.items() if configured}
    if start:
        for pool in pools.values():
            pool.start()
    return pools


def _ask_timeout(connect: float, read: float) -> float:
    """Room for a call with its token fetch, its retries and their waits (HttpClient defaults:
    2 retries of at most 10 s), so an ask gives up only when something is truly stuck."""
    return 4 * (connect + read) + 2 * 10 + 5
