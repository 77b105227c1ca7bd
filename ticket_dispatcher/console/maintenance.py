"""Maintenance windows (docs/operations.md, "Maintenance windows"): the current, planned and
past ones, read-only; operators create and end them through the API."""

from __future__ import annotations

import falcon

from ticket_dispatcher.console.web import Console, Page
from ticket_dispatcher.domain.maintenance import WindowState

PAST_SHOWN = 50


def routes(console: Console, ID: str) -> list[tuple[str, Page]]:
    return [("/maintenance", MaintenanceList(console))]


class MaintenanceList(Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        now = self.services.clock.now()
        windows = self.services.store.maintenance.listed(now)
        by_state = {state: [window for window in windows if window.state(now) is state]
                    for state in WindowState}
        self.console.render(req, resp, "maintenance.html", at=now,
                            current=by_state[WindowState.CURRENT],
                            planned=by_state[WindowState.PLANNED][::-1],  # soonest first
                            past=by_state[WindowState.ENDED][:PAST_SHOWN],
                            past_shown=PAST_SHOWN)
