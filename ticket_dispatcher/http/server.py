"""``ticket-dispatcher serve``: migrate, start, serve with waitress, stop cleanly (SPEC §3, §13)."""

from __future__ import annotations

import logging
import signal
from types import FrameType

import waitress

from ticket_dispatcher.actors.clock import Clock, SystemClock
from ticket_dispatcher.actors.runtime import Ports, Runtime
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.http.app import Services, create_app
from ticket_dispatcher.logging import configure_logging
from ticket_dispatcher.store import Store

log = logging.getLogger(__name__)


class Service:
    """The whole running service: store, app and HTTP server, started and stopped in order."""

    def __init__(self, config: Config, *, host: str | None = None, port: int | None = None,
                 sandbox: bool = False, insecure_no_auth: bool = False,
                 clock: Clock | None = None):
        self.config = config
        self.auth_enabled = _auth_enabled(config, sandbox=sandbox,
                                          insecure_no_auth=insecure_no_auth)
        clock = clock or SystemClock()
        self.store = Store.open(config.database_url)
        applied = self.store.migrate()
        if applied:
            log.info("database migrated", extra={"reason": f"applied {applied}"})
        self.runtime = Runtime(config, self.store, clock, ports=Ports(),
                               registry=product_registry(config.jira.auto_assign_label))
        services = Services(store=self.store, config=config, clock=clock, runtime=self.runtime)
        self.app = create_app(services, auth_enabled=self.auth_enabled)
        host = host or config.http.host
        port = config.http.port if port is None else port
        try:  # binds the port now; serves from run()
            self.server = waitress.create_server(self.app, host=host, port=port,
                                                 threads=config.http.threads,
                                                 ident="ticket-dispatcher")
        except OSError as exc:
            self.store.close()
            raise ConfigError(f"http: cannot listen on {host}:{port}: {exc.strerror}") from None
        try:
            self.runtime.start()  # boot recovery; if it cannot run, the start fails
        except BaseException:
            self.server.close()
            self.store.close()
            raise

    @property
    def port(self) -> int:
        return self.server.effective_port

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (raised as SystemExit inside waitress's loop)."""
        log.info(f"serving on http://{self.server.effective_host}:{self.port}")
        self.server.run()

    def close(self) -> None:
        """Stop accepting requests, then stop the actors (nothing is marked failed)."""
        self.server.close()
        self.runtime.stop()
        self.store.close()


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


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def serve(config: Config, *, host: str | None = None, port: int | None = None,
          sandbox: bool = False, insecure_no_auth: bool = False) -> int:
    configure_logging(level=config.log_level, secrets=config.secrets())
    service = Service(config, host=host, port=port, sandbox=sandbox,
                      insecure_no_auth=insecure_no_auth)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        service.run()
    finally:
        log.info("shutting down")
        service.close()
    return 0
