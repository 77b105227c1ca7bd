"""Parked waits: every execution waiting for its ``wake_at``, the soonest first, with the action
it waits in, whom it waits for and until when; the list refreshes itself.

The list is read from the database, not from this process's pool: with several replicas on one
database each pool knows only the waits it parked, and the runtime's admin view shows only the
soonest of those. A parked wait gives its lease back, so the rows say what waits on every
replica, whichever wakes it.
"""

from __future__ import annotations

import falcon

from ticket_dispatcher.actors.runtime import RETRYING_LOAD
from ticket_dispatcher.console.web import Console, Page, Query
from ticket_dispatcher.domain.actions.notification_state import (
    PageState,
    card_state_of,
    notification_state,
)
from ticket_dispatcher.domain.actions.state import StateError
from ticket_dispatcher.domain.execution import ActionStatus, Execution
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.http.binding import paging
from ticket_dispatcher.timeutil import format_time


def routes(console: Console, ID: str) -> list[tuple[str, Page]]:
    return [("/parked", ParkedList(console))]


def waiting_in(execution: Execution) -> dict:
    """What a parked execution waits in: the action (``rule: index:type``), a page's attempt
    and absolute ACK deadline, and the person the notification is about; or, parked after a
    failed issue load, the load it retries and how many have failed."""
    view: dict = {"action": "", "attempt": None, "deadline": None, "target": None}
    if execution.load_attempts:
        return view | {"action": RETRYING_LOAD, "attempt": execution.load_attempts}
    try:
        for rule in execution.rule_executions:
            for action in rule.action_executions:
                if action.status is not ActionStatus.EXECUTING:
                    continue
                state = notification_state(action)
                page = state if isinstance(state, PageState) else None
                target = state.target if state is not None else None
                if target is None:  # the card's plan saw whom the workflow is about
                    card = card_state_of(execution)
                    target = card.target if card is not None else None
                return view | {"action": f"{rule.name}: {action.index}:{action.type}",
                               "attempt": page.attempt if page else None,
                               "deadline": page.deadline if page else None,
                               "target": target}
    except (StateError, TypeError):  # a state written by a newer release: say what is known
        pass
    return view


def _row(execution: Execution) -> dict:
    return {"execution": execution, "wake_at": execution.wake_at,
            "wake_iso": format_time(execution.wake_at), **waiting_in(execution)}


class ParkedList(Page):
    # Takes its own connection, so that an outage answers this page saying so.
    uses_database = False

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = Query(req)
        limit, offset = paging(query)
        store = self.services.store
        rows, total, counted_all, database_up = [], 0, True, True
        try:
            with store.connection():
                parked, total, counted_all = store.executions.parked(limit=limit,
                                                                     offset=offset)
            rows = [_row(execution) for execution in parked]
        except StoreUnavailable:
            database_up = False
        # htmx swaps only a successful answer: its refresh must get the notice at 200, or the
        # list it shows would stay as it was, silently; a page load says 503.
        refresh = req.get_header("HX-Request") == "true"
        status = falcon.HTTP_200 if database_up or refresh else falcon.HTTP_503
        self.console.render(req, resp, "parked.html", status=status, rows=rows, total=total,
                            counted_all=counted_all,
                            limit=limit, offset=offset, query=query.values("limit", "offset"),
                            paging=query.values("limit"), database_up=database_up)
