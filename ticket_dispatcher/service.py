"""The composition root: ``ticket-dispatcher serve`` builds the store, the HTTP app, the clients
and the actor system, serves with waitress, and stops them in reverse."""

from __future__ import annotations

import logging
import math
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Protocol, cast

from waitress.server import create_server

from ticket_dispatcher import __version__, console, cpu
from ticket_dispatcher.actors.client_pool import ClientPool
from ticket_dispatcher.actors.client_ports import (
    CorePool,
    JiraPool,
    LarkPool,
    OncallPool,
    build_client_pools,
    configured_pool,
)
from ticket_dispatcher.actors.cluster import for_mode
from ticket_dispatcher.actors.runtime import Runtime, stop_remaining_actors
from ticket_dispatcher.actors.stopping import Deadline, await_stopped
from ticket_dispatcher.calendars.refresher import CalendarRefresher
from ticket_dispatcher.clock import SystemClock, TimerClock
from ticket_dispatcher.config import Config, HttpConfig
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.lark_callbacks import CallbackKeys
from ticket_dispatcher.domain.ports import (
    NotConfiguredDirectory,
    NotConfiguredJira,
    NotConfiguredMessenger,
    NotConfiguredOnCall,
    Ports,
)
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.integrations.calendar_fetch import FeedFetcher
from ticket_dispatcher.logging import configure_logging
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.sandbox import (
    LARK_VERIFICATION_TOKEN,
    WEBHOOK_SECRET,
    Sandbox,
    load_examples,
    mount_sandbox,
    service_urls,
)
from ticket_dispatcher.sandbox.lark import CardCallbacks
from ticket_dispatcher.seeding import seed_store
from ticket_dispatcher.store import Store, connection_budget
from ticket_dispatcher.store.card_presses import ExecutionPresses
from ticket_dispatcher.store.cluster import ClusterLink
from ticket_dispatcher.store.maintenance import ExecutionWindows

log = logging.getLogger(__name__)


EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "ops" / "examples"


class ServerWakeUp(Protocol):
    """The serving loop's wake-up pipe (waitress's ``trigger``)."""

    def pull_trigger(self, thunk: Callable[[], None] | None = None) -> None:
        """Wake the loop, which runs ``thunk`` in its thread."""

    def del_channel(self) -> None:
        """Leave the loop's socket map, the pipe still open."""


class ListeningServer(Protocol):
    """What the service uses of waitress's server of one listening socket (types-waitress
    lacks its ``effective_host`` and ``effective_port`` and types its ``trigger`` as an int)."""

    effective_host: str
    effective_port: int
    trigger: ServerWakeUp

    def run(self) -> None: ...

    def del_channel(self) -> None: ...

    def close(self) -> None: ...


class Service:
    """The whole running service: store, app, HTTP server, clients and actors, started in
    order and stopped in reverse."""

    def __init__(self, config: Config, *, host: str | None = None, port: int | None = None,
                 sandbox: bool = False, insecure_no_auth: bool = False,
                 clock: TimerClock | None = None):
        self.auth_enabled = _auth_enabled(config, sandbox=sandbox,
                                          insecure_no_auth=insecure_no_auth)
        self.clock = clock or SystemClock()
        # The actions this build runs: the runtime executes them, and the store, the API and
        # /dispatch/options judge policies by them.
        self.registry = product_registry(config.jira.auto_assign_label,
                                     config.transient_retry_budget)
        # One pool of connections, sized for every thread that may hold one at once
        # (docs/operations.md, "PostgreSQL connections").
        self.store = Store.for_url(config.database_url, registry=self.registry,
                                max_connections=connection_budget(config),
                                database=config.database,
                                audit_retention=config.audit.retention)
        # A single process or one of several replicas: decided here, once (actors/cluster.py).
        self.cluster = for_mode(config.cluster)
        self.runtime: Runtime | None = None
        self.calendars: CalendarRefresher | None = None  # with calendar feeds configured
        self.link: ClusterLink | None = None
        try:
            self.store.claim_for_serving()  # a SQLite file has one serving process
            self.store.check_capacity(config)  # refuse what the database cannot serve
            applied = self.store.migrate()
            if self.store.engine.several_processes:  # the mode lock, a replica's work channel
                self.link = ClusterLink(self.store.db, lock=self.cluster.mode_lock,
                                        on_work=self._work_arrived)
                self.link.start()
        except BaseException:
            if self.link is not None:
                self.link.close()
            self.store.close()
            raise
        if applied:
            log.info("database migrated", extra={"reason": f"applied {applied}"})
        self.metrics = Metrics(version=__version__, mode=config.cluster.mode)
        self.store.health.subscribe(self.metrics)  # database_up and store_errors_total
        self.services = Services(store=self.store, config=config, clock=self.clock,
                                 registry=self.registry, metrics=self.metrics)
        self.console = (console.Console(self.services, auth_enabled=self.auth_enabled,
                                        cluster=self.cluster)
                        if config.console.enabled else None)
        self.app = create_app(self.services, auth_enabled=self.auth_enabled,
                              gates=[console.ConsoleGate(self.console)] if self.console else [])
        if self.console is not None:
            console.mount(self.app, self.console)
        self.sandbox = Sandbox() if sandbox else None
        if self.sandbox is not None:
            mount_sandbox(self.app, self.sandbox)
        self.server = self._listen(host or config.http.host,
                                   config.http.port if port is None else port)
        self.clients: dict[str, ClientPool] = {}
        try:
            self.config = (self._sandboxed(config, self.sandbox) if self.sandbox is not None
                           else config)
            self.services.config = self.config  # the HTTP app reads what the service runs with
            self.clients = clients = build_client_pools(
                self.config, self.clock, metrics=self.metrics,
                site_limits=self.cluster.site_limits(self.store, self.clock, "jira",
                                                     self.config.leases.duration))
            self.runtime = Runtime(
                self.config, self.store, self.clock, ports=Ports(
                    jira=configured_pool(clients, "jira", JiraPool) or NotConfiguredJira(),
                    lark=configured_pool(clients, "lark", LarkPool) or NotConfiguredMessenger(),
                    oncall=(configured_pool(clients, "oncall", OncallPool)
                            or NotConfiguredOnCall()),
                    core=configured_pool(clients, "core", CorePool) or NotConfiguredDirectory(),
                    engineers=self.store.engineers, triggers=self.store.triggers,
                    contexts=self.store.contexts,
                    maintenance=ExecutionWindows(self.store.maintenance, self.store.policies,
                                                 self.store.triggers),
                    presses=ExecutionPresses(self.store.card_presses,
                                             buttons=self.config.lark.callbacks)),
                registry=self.registry, metrics=self.metrics, cluster=self.cluster)
            self.services.runtime = self.runtime
            self.runtime.start()  # boot recovery; if it cannot run, the start fails
            self.calendars = self._calendars(self.runtime)
        except BaseException:
            for pool in self.clients.values():
                pool.abandon()
            await_stopped(self._stop_clients(), Deadline(5))
            self.server.close()
            self._close_store(forget_replica=False)
            raise
        self._shutdown: Deadline | None = None  # from the SIGTERM on
        # ``stop_serving`` may come (the drain's timer) after the serving loop closed its
        # sockets, its wake-up pipe among them: the lock and flag make it a no-op then.
        self._serving_lock = threading.Lock()
        self._server_closed = False

    def _calendars(self, runtime: Runtime) -> CalendarRefresher | None:
        """The refresher of the configured calendar feeds, started (None without feeds)."""
        availability = self.config.availability
        if not availability.feeds:
            return None
        integrations = self.config.integrations
        fetcher = FeedFetcher(connect_timeout=integrations.connect_timeout.total_seconds(),
                              read_timeout=integrations.read_timeout.total_seconds(),
                              max_bytes=availability.max_feed_bytes)
        refresher = CalendarRefresher(availability, store=self.store, clock=self.clock,
                                      scheduler=runtime.scheduler, fetcher=fetcher,
                                      metrics=self.metrics)
        refresher.start()
        return refresher

    def _work_arrived(self) -> None:
        if self.runtime is not None and self.runtime.recovered:
            self.runtime.work_arrived()

    def begin_shutdown(self, deadline: Deadline) -> None:
        """At SIGTERM: stop taking requests once the drain is over, by a scheduler timer.

        A single process does not drain: it stops taking requests at once. A replica drains
        (readiness false, no new work taken, the steps under way finish) while triggers are
        still accepted for the other replicas, for ``cluster.drain``, so a load balancer has
        stopped sending before the port closes (actors/cluster.py). ``close`` then stops the
        rest, and a replica hands back what is still held. ``deadline`` (``shutdown_timeout``
        from the signal) bounds the whole."""
        self._shutdown = deadline
        runtime = self._started()
        drain = self.cluster.drain(runtime.drain, deadline)
        runtime.scheduler.call_at(self.clock.now() + drain, self.stop_serving, label="drain")

    def _started(self) -> Runtime:
        """The runtime, which only a ``Service`` still being built lacks (``_work_arrived``
        may come before it exists)."""
        assert self.runtime is not None, "a built Service has its runtime"
        return self.runtime

    def _listen(self, host: str, port: int) -> ListeningServer:
        """Bind the port now (serving starts in ``run``), or say clearly why not. The socket
        map the serving loop runs on (the listening socket, every connection, the loop's
        wake-up pipe) is this service's, given to ``create_server``: ``stop_serving`` closes
        what is in it."""
        self._sockets: dict = {}
        try:
            # cast: a host of one address gives waitress's server of one socket (a
            # TcpWSGIServer), which has what ListeningServer names; the service has always
            # listened on one address (a host of several would give a MultiSocketServer).
            return cast(ListeningServer, create_server(
                self.app, map=self._sockets, host=host, port=port, ident="ticket-dispatcher",
                **server_limits(self.services.config.http)))
        except OSError as exc:
            self.store.close()
            raise ConfigError(f"http: cannot listen on {host}:{port}: {exc.strerror}") from None
        except ValueError:  # waitress: the host is no address, nor a name that resolves
            self.store.close()
            raise ConfigError(f"http.host: {host!r} is not an address or a host name this "
                              f"machine can resolve") from None

    def _sandboxed(self, config: Config, sandbox: Sandbox) -> Config:
        """Load ``ops/examples``, point every client at the sandbox on this server, turn the
        assignment notification on, and, when no webhook secret is configured, take Jira
        webhooks signed with the sandbox's (``sandbox.WEBHOOK_SECRET``)."""
        if not EXAMPLES_DIR.is_dir():
            raise ConfigError(f"--sandbox needs the examples at {EXAMPLES_DIR} (run it from a "
                              "clone of the repository)")
        load_examples(sandbox, EXAMPLES_DIR)
        seeded = seed_store(self.store, EXAMPLES_DIR, self.clock.now())
        log.info("sandbox loaded", extra={"reason": str(seeded)})
        host = self.server.effective_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        urls = service_urls(f"http://{host}:{self.port}")
        lark = replace(config.lark, base_url=urls["lark"], app_id="sandbox", app_secret="sandbox")
        if not lark.callbacks:  # the sandbox's Lark presses buttons, signed with its token
            lark = replace(lark, verification_token=LARK_VERIFICATION_TOKEN)
        sandbox.lark.callbacks = CardCallbacks(
            f"http://{host}:{self.port}{API_BASE}/lark/card-actions",
            CallbackKeys(lark.encrypt_key, lark.verification_token))
        return replace(
            config,
            # the example notification families are active in the sandbox: let them run
            notifications=replace(config.notifications, enabled=True),
            jira=replace(config.jira, base_url=urls["jira"], email="sandbox@example.com",
                         api_token="sandbox",
                         webhook_secrets=config.jira.webhook_secrets or (WEBHOOK_SECRET,)),
            lark=lark,
            oncall=replace(config.oncall, base_url=urls["oncall"], token="sandbox"),
            core=replace(config.core, base_url=urls["core"], token="sandbox"),
        )

    @property
    def port(self) -> int:
        return self.server.effective_port

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (raised as SystemExit inside waitress's loop)."""
        log.info(f"serving on http://{self.server.effective_host}:{self.port}")
        self.server.run()

    def stop_serving(self) -> None:
        """Make ``run`` return; safe from any thread, and at any time: once the server is
        closed there is nothing to stop. The serving loop closes its own sockets (closing them
        from another thread would pull them out from under its select)."""
        with self._serving_lock:
            if not self._server_closed:
                self.server.trigger.pull_trigger(self._close_sockets)

    def _close_sockets(self) -> None:
        with self._serving_lock:  # the wake-up pipe is one of them: no pull after this
            self._server_closed = True
            for channel in list(self._sockets.values()):
                if channel is self.server or channel is self.server.trigger:
                    # Out of the loop's map but still open. The port is released last, by
                    # ``close``, so no second instance starts beside one still stopping; the
                    # wake-up pipe closes with it, since a request still in a worker thread
                    # pulls it when its answer is ready.
                    channel.del_channel()
                else:
                    channel.close()  # the loop runs while its map holds a socket

    def close(self) -> None:
        """Stop everything within ``shutdown_timeout``, whatever is in flight.

        The serving loop has already returned, so no request is taken any more. The calendar
        refresher is told to stop (its download in flight is cut off) and awaited last. The
        actors stop first (callers blocked on an integration are woken), then the client
        actors, then whatever actor is left (the backstop). Nothing is marked failed: running
        work stays ``executing`` and resumes at the next start. After a clean stop the process's
        heartbeat row goes (it stopped, it was not lost). The store closes and the port
        is released last, so no second instance can start beside one still stopping.
        """
        deadline = self._shutdown or Deadline(self.config.shutdown_timeout.total_seconds())
        if self.calendars is not None:
            self.calendars.stop()  # never blocks
        stopped = False
        try:
            stopped = self._started().stop(deadline.remaining())
            if not stopped:
                log.warning("the actor runtime did not stop within the shutdown deadline")
        finally:
            try:
                await_stopped(self._stop_clients(), deadline)
                stop_remaining_actors(deadline)
                if self.calendars is not None and not self.calendars.join(deadline.remaining()):
                    log.warning("the calendar refresher did not stop within the shutdown "
                                "deadline; it writes nothing more")
            finally:
                self._close_store_within(deadline, forget_replica=stopped)
                with self._serving_lock:
                    self._server_closed = True
                    self.server.close()  # what the loop did not close itself

    def _close_store_within(self, deadline: Deadline, *, forget_replica: bool) -> None:
        """Close the store within what is left of ``deadline``. A connection another thread
        is still in (a request waiting for SQLite's write lock, a statement a dead server
        never answers) cannot close before that thread lets go; the process then exits
        without it, and the database rolls back what the connection held, as after a lost
        process."""
        closing = threading.Thread(target=self._close_store, args=(forget_replica,),
                                   name="store-close", daemon=True)
        closing.start()
        closing.join(deadline.remaining())
        if closing.is_alive():
            log.warning("the store did not close within the shutdown deadline: a connection "
                        "is still in use; the process exits without it")

    def _close_store(self, forget_replica: bool) -> None:
        """Close the store; first, after a clean stop, remove this process's heartbeat row
        (a stopped replica, not a lost one)."""
        if forget_replica:
            self._started().forget_replica()
        if self.link is not None:
            self.link.close()  # gives the mode lock back
        self.store.close()

    def _stop_clients(self) -> list:
        """Tell every client actor to stop; the futures say when they have."""
        return [future for pool in self.clients.values() for future in pool.stop(block=False)]


def server_limits(http: HttpConfig) -> dict:
    """waitress's adjustments from ``[http]``.

    - ``connection_limit`` / ``channel_timeout``: idle and half-sent connections are closed
      after the timeout (waitress counts whole seconds) and may not fill the server before it.
    - ``cleanup_interval``: waitress looks for idle connections only this often (30 s by
      default), so a short timeout needs a check at least as frequent.
    - ``asyncore_use_poll``: ``select()`` cannot watch a descriptor numbered 1024 or more, which
      a connection limit of 1000 reaches; ``poll()`` has no such ceiling.
    - ``backlog``: the kernel queue of connections not yet accepted, at least as deep as the
      limit so a burst waits there rather than being refused.
    """
    timeout = max(1, math.ceil(http.channel_timeout.total_seconds()))
    return {
        "threads": http.threads,
        "connection_limit": http.connection_limit,
        "channel_timeout": timeout,
        "cleanup_interval": max(1, min(30, timeout // 2)),
        "asyncore_use_poll": True,
        "backlog": max(1024, http.connection_limit),
    }


def _auth_enabled(config: Config, *, sandbox: bool, insecure_no_auth: bool) -> bool:
    if config.auth.api_keys:
        return True
    if not (sandbox or insecure_no_auth):
        raise ConfigError(
            "no API keys are configured ([[auth.api_keys]] or TICKET_DISPATCHER_AUTH_API_KEYS); "
            "refusing to start without authentication (use --sandbox or --insecure-no-auth "
            "for a local run)"
        )
    log.warning("AUTHENTICATION IS OFF: every request is treated as an operator. "
                "Never run like this where anyone else can reach the port.")
    return False


def _on_stop_signal(begin: Callable[[Deadline], None], name: str,
                    shutdown_seconds: float) -> Callable[[int, FrameType | None], None]:
    """The SIGTERM (and SIGINT) handler: ``shutdown_timeout`` runs from the signal, and
    ``begin`` starts the shutdown in a thread of its own (a signal handler must not log, nor
    take the lock the serving loop may hold): ``Service.begin_shutdown``, not SystemExit in
    the loop, after which waitress would first wait up to 5 s of its own for requests in
    flight, outside the deadline; a replica's drain goes on while the serving loop does."""

    def handler(signum: int, frame: FrameType | None) -> None:
        # Once: a second signal must not cut the shutdown short, which has its own deadline.
        signal.signal(signal.SIGTERM, _already_stopping)
        signal.signal(signal.SIGINT, _already_stopping)
        threading.Thread(target=begin, args=(Deadline(shutdown_seconds),), name=name,
                         daemon=True).start()

    return handler


def _already_stopping(signum: int, frame: FrameType | None) -> None:
    """Ignored: the shutdown under way ends within ``shutdown_timeout`` (no logging here: a
    signal handler must not take the logging lock the interrupted code may hold)."""


def serve(config: Config, *, host: str | None = None, port: int | None = None,
          sandbox: bool = False, insecure_no_auth: bool = False) -> int:
    configure_logging(level=config.log_level, secrets=config.secrets())
    # Once, before any thread of the service starts; unset, the affinity stays the operator's.
    pinned = cpu.pin(config.cpu_affinity)
    if pinned is not None:
        log.info("running on one CPU", extra={"reason": f"cpu_affinity: CPU {pinned}"})
    service = Service(config, host=host, port=port, sandbox=sandbox,
                      insecure_no_auth=insecure_no_auth)
    stop = _on_stop_signal(service.begin_shutdown, "shutdown",
                           config.shutdown_timeout.total_seconds())
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        service.run()
    finally:
        log.info("shutting down", extra={
            "deadline": f"{config.shutdown_timeout.total_seconds():g} s"})
        service.close()
        log.info("stopped")
    return 0
