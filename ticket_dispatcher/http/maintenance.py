"""Maintenance windows (docs/operations.md, "Maintenance windows"): created and ended early by
operators, listed by state for viewers."""

from __future__ import annotations

import falcon

from ticket_dispatcher.domain.maintenance import WindowState, parse_window
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.binding import query_choice, read_json
from ticket_dispatcher.http.changes import author_of
from ticket_dispatcher.http.services import Services

STATES = ", ".join(state.value for state in WindowState)


class MaintenanceWindowCollection:
    roles = {"GET": VIEWER, "POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state = query_choice(req, "state", WindowState, f"one of {STATES}")
        now = self._services.clock.now()
        windows = self._services.store.maintenance.listed(now, state)
        resp.media = {"windows": [window.to_json(now) for window in windows]}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        services = self._services
        raw = read_json(req, services.max_body_bytes, max_depth=services.max_json_depth)
        window, problems = parse_window(raw, services.clock.now(),
                                        services.config.maintenance.max_duration)
        if window is None:
            raise InvalidInput("the maintenance window is not valid", list(problems))
        made = services.changes.add_window(author_of(req), window)
        resp.status = falcon.HTTP_201
        resp.location = f"{req.path}/{made.id}"
        resp.media = made.to_json(services.clock.now())


class MaintenanceWindowEnd:
    roles = {"POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, window_id: int) -> None:
        ended = self._services.changes.end_window(author_of(req), window_id)
        resp.media = ended.to_json(self._services.clock.now())
