"""The service's falcon app for a bench to time: ``create_app`` with the console mounted (as
tests/console/conftest.py ``build_app`` does), authentication on, over a real actor runtime
(tests/harness.py) on a bench's store, its clock stopped at the bench's "now".

A bench runs as ``python bench/NAME.py``, which puts only ``bench/`` on ``sys.path``; importing
this module adds the repository root, where ``tests`` lives.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from falcon import testing  # noqa: E402

from tests.clocks import ManualClock  # noqa: E402
from tests.console.conftest import Console, build_app  # noqa: E402
from tests.harness import Harness  # noqa: E402
from tests.http.conftest import API_KEYS, KEYS  # noqa: E402
from ticket_dispatcher.config import load_config  # noqa: E402
from ticket_dispatcher.http.services import Services  # noqa: E402
from ticket_dispatcher.store import Store  # noqa: E402


@contextmanager
def signed_in(store: Store, now: datetime, role: str,
              ) -> Iterator[tuple[Console, testing.TestClient]]:
    """The console signed in as ``role`` and an API client with ``role``'s key, both of one
    app over a runtime on ``store``; the runtime stops on leaving."""
    harness = Harness(store, clock=ManualClock(now)).start()
    try:
        config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
                                            "TICKET_DISPATCHER_CONSOLE_SECURE_COOKIE": "false"})
        services = Services(store=harness.store, config=config, clock=harness.clock,
                            runtime=harness.runtime)
        app = build_app(services)
        console = Console(testing.TestClient(app), services)
        if console.sign_in(role).status_code != 303:
            raise SystemExit("could not sign in to the console")
        yield console, testing.TestClient(app, headers={"X-API-KEY": KEYS[role]})
    finally:
        harness.stop()
