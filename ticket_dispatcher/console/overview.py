"""The overview: is the database up, which replicas serve, and what is waiting or failing."""

from __future__ import annotations

from typing import TypedDict

import falcon

from ticket_dispatcher.console.triggers import SINCE
from ticket_dispatcher.console.web import Page
from ticket_dispatcher.errors import StoreUnavailable

# The window of the failures counted, as the triggers page's "created in the last" choice that
# lists them.
FAILED_SINCE = "1h"
FAILED_WINDOW = SINCE[FAILED_SINCE]
# failed triggers and executions counted exactly up to this; beyond it the page says "200+"
COUNT_CAP = 200


class Facts(TypedDict):
    """What the overview read from the database; None where it could not be read."""

    triggers: dict[str, tuple[int, float]] | None  # status → (count, oldest's age in seconds)
    executions: dict[str, dict] | None  # "created"/"executing" → mode → (count, age)
    failed: int | None  # triggers failed in the window, counted up to COUNT_CAP
    failed_more: bool  # more than COUNT_CAP failed
    failed_executions: int | None  # executions failed in the window, up to COUNT_CAP
    failed_executions_more: bool


class Overview(Page):
    # Renders while the database is down (that is what it must show): each read takes its own
    # connection and an outage is shown, not answered 503.
    uses_database = False

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        store, now = self.services.store, self.services.clock.now()
        runtime = self.services.runtime
        status = runtime.status() if runtime is not None else None
        since = now - FAILED_WINDOW
        database_up = store.ping()
        facts: Facts = {"triggers": None, "executions": None, "failed": None,
                        "failed_more": False, "failed_executions": None,
                        "failed_executions_more": False}
        if database_up:
            try:
                with store.connection():
                    facts["triggers"] = store.triggers.backlog(now)
                    created, executing = store.executions.backlog(now)
                    facts["executions"] = {"created": created, "executing": executing}
                    failed = store.triggers.failed_since(since, COUNT_CAP + 1)
                    facts["failed"] = min(failed, COUNT_CAP)
                    facts["failed_more"] = failed > COUNT_CAP
                    failed = store.executions.failed_since(since, COUNT_CAP + 1)
                    facts["failed_executions"] = min(failed, COUNT_CAP)
                    facts["failed_executions_more"] = failed > COUNT_CAP
            except StoreUnavailable:
                database_up = False
        self.console.render(req, resp, "overview.html", status_view=status,
                            database_up=database_up, facts=facts,
                            failed_since=FAILED_SINCE, count_cap=COUNT_CAP,
                            mode=self.services.config.cluster.mode)
