"""Triggers: the list with the API's filters, and replaying a failed one."""

from __future__ import annotations

from datetime import timedelta

import falcon

from ticket_dispatcher.console.actions import Action, Done
from ticket_dispatcher.console.web import Page, Query, url
from ticket_dispatcher.domain.catalog import SOURCE
from ticket_dispatcher.domain.execution import Trigger, TriggerStatus
from ticket_dispatcher.domain.fanout import reserved_role
from ticket_dispatcher.errors import Conflict, InvalidInput, Problem
from ticket_dispatcher.http.dispatch import encode_cursor, trigger_filters
from ticket_dispatcher.timeutil import format_time

FILTERS = ("status", "source", "issue_key", "created_after", "created_before", "limit")
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
            since_choices=SINCE, statuses=list(TriggerStatus),
            next_page=(url("/triggers", **dict(filters, since=since,  # the same filters
                                              cursor=encode_cursor(following)))
                       if following else None),
            first_page=url("/triggers", **dict(filters, since=since))
            if req.get_param("cursor") else None)


class TriggerReplay(Action):
    title = "Replay trigger"

    def _failed(self, trigger_id: int) -> Trigger:
        trigger = self.services.store.triggers.get(trigger_id)
        if trigger.status is not TriggerStatus.FAILED:
            raise Conflict(f"trigger {trigger_id} is {trigger.status.value}; only a failed "
                           "trigger is replayed")
        return trigger

    def back(self, req: falcon.Request, trigger_id: int) -> str:
        return url("/triggers", issue_key=self._failed(trigger_id).issue_key)

    def question(self, req: falcon.Request, trigger_id: int) -> str:
        trigger = self._failed(trigger_id)
        text = (f"Post a new {trigger.source} trigger for {trigger.issue_key}, as Jira "
                f"Automation would. It reads the issue as it is now")
        if reserved_role(trigger.source):
            text += ("; a notification runs only if the issue still carries its role label "
                     "(re-add it in Jira first if the workflow took it off)")
        return text + "."

    def apply(self, req: falcon.Request, trigger_id: int) -> Done:
        trigger = self._failed(trigger_id)
        assert SOURCE(trigger.source)
        replay = self.services.running().accept_trigger(
            trigger.source, trigger.issue_key, policy_id=trigger.policy_id,
            dryrun=trigger.dryrun)
        return Done(f"Trigger {replay.id} was posted for {trigger.issue_key} "
                    f"(a replay of trigger {trigger.id}); it is {replay.status.value}.",
                    url("/executions", trigger_id=replay.id),
                    f"Follow trigger {replay.id}'s executions")
