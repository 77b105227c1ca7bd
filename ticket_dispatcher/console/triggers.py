"""Triggers: the list with the API's filters, and replaying a failed one."""

from __future__ import annotations

from datetime import timedelta

import falcon

from ticket_dispatcher.console.actions import Action, Done, console_author
from ticket_dispatcher.console.web import Page, Query, cursor_pages, url
from ticket_dispatcher.domain.execution import Trigger
from ticket_dispatcher.domain.replay import Replay, replay_of_trigger
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.dispatch import (
    STATUS_FILTERS,
    post_replay,
    trigger_filters,
)
from ticket_dispatcher.timeutil import format_time

FILTERS = ("status", "execution_failed", "source", "issue_key", "created_after",
           "created_before", "limit")
# The "since" shortcut of the form: created in the last …
SINCE = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "24h": timedelta(hours=24),
         "7d": timedelta(days=7)}


class TriggerList(Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        since = req.get_param("since") or ""
        overrides: dict[str, str | None] = {}
        if since:
            if since not in SINCE:
                raise InvalidInput("since must be one of " + ", ".join(SINCE),
                                   [Problem("since", "must be one of " + ", ".join(SINCE))])
            overrides["created_after"] = format_time(self.services.clock.now() - SINCE[since])
        query = Query(req, **overrides)
        items, following = self.services.store.triggers.page(**trigger_filters(query))
        filters = Query(req).values(*FILTERS)
        self.console.render(
            req, resp, "triggers.html", items=items, since=since,
            filters=dict.fromkeys(FILTERS, "") | filters,
            since_choices=SINCE, statuses=STATUS_FILTERS,
            **cursor_pages("/triggers", dict(filters, since=since), following,
                           paged=bool(req.get_param("cursor"))))


class TriggerReplay(Action):
    title = "Replay trigger"

    def _replay(self, trigger_id: int) -> Replay:
        return replay_of_trigger(self.services.store.triggers.get(trigger_id))

    def back(self, req: falcon.Request, trigger_id: int) -> str:
        return url("/triggers", issue_key=self._replay(trigger_id).issue_key)

    def question(self, req: falcon.Request, trigger_id: int) -> str:
        return replay_question(self._replay(trigger_id))

    def apply(self, req: falcon.Request, trigger_id: int) -> Done:
        replay = post_replay(self.services, self._replay(trigger_id), console_author(req),
                             ("trigger", trigger_id))
        return replay_done(replay, f"trigger {trigger_id}")


def replay_question(replay: Replay) -> str:
    """A replay's confirmation text: what it posts, and what it reads."""
    text = (f"Post a new {replay.source} trigger for {replay.issue_key}"
            f"{f' (policy {replay.policy_id} only)' if replay.policy_id else ''}, as Jira "
            "Automation would. It reads the issue as it is now")
    if replay.needs_role_label:
        text += ("; a notification runs only if the issue still carries its role label "
                 "(re-add it in Jira first if the workflow took it off)")
    return text + "."


def replay_done(trigger: Trigger, replayed: str) -> Done:
    """A replay's result page: the new trigger, and where to follow it."""
    return Done(f"Trigger {trigger.id} was posted for {trigger.issue_key} (a replay of "
                f"{replayed}); it is {trigger.status.value}.",
                url("/executions", trigger_id=trigger.id),
                f"Follow trigger {trigger.id}'s executions")
