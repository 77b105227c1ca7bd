"""The forms of an engineer's page, for operators: their time zone, working hours and cap, and
their time off (add one, end one).

Each form posts to a route of its own, which ``ConsoleGate`` guards like every console POST
(operator role, CSRF token, same origin). A form's fields become the body the API takes
(``PUT /engineers/{email}``, ``POST …/time-off``) and go through the same code: the settings
through ``availability_update``, time off through ``parse_time_off``, so the rules and their
messages are the API's. What they refuse is shown on the engineer's page, above the form, with
what was typed kept (400); what they save sends the browser back to the page (303), which says
so. Ending time off asks first, like the dispatch switch, and removes the entry as
``DELETE …/time-off/{id}`` does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from urllib.parse import quote

import falcon

from ticket_dispatcher.console.actions import Action, Done, console_author
from ticket_dispatcher.console.engineers import DAYS, EngineerPage, engineer_url
from ticket_dispatcher.console.web import Console, Page, see_other, url
from ticket_dispatcher.domain.availability_parsing import parse_time_off
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.auth import OPERATOR
from ticket_dispatcher.http.engineers import availability_update, checked_email
from ticket_dispatcher.timeutil import zone_named

WHOLE_NUMBER = re.compile(r"-?[0-9]{1,12}")


def routes(console: Console, ID: str) -> list[tuple[str, Page]]:
    page = EngineerPage(console)
    return [
        ("/engineers/{email}/availability", AvailabilityForm(console, page)),
        ("/engineers/{email}/time-off", TimeOffForm(console, page)),
        (f"/engineers/{{email}}/time-off/{{entry_id:{ID}}}/end", EndTimeOff(console)),
    ]


def availability_body(form: Mapping[str, str]) -> dict[str, object]:
    """The settings form as the API's body: ``timezone``; ``working_hours`` None when "any
    time" is ticked, else each day's comma-separated spans (a blank day is not worked);
    ``max_open_issues`` None when blank, a whole number as such, anything else as typed, for
    the domain's rule to name."""
    cap = form.get("max_open_issues", "").strip()
    hours = None if form.get("any_time") == "yes" else {
        day: [span.strip() for span in typed.split(",") if span.strip()]
        for day in DAYS if (typed := form.get(f"hours_{day}", "")).strip()}
    return {"timezone": form.get("timezone", "").strip(), "working_hours": hours,
            "max_open_issues": (None if not cap
                                else int(cap) if WHOLE_NUMBER.fullmatch(cap) else cap)}


def time_off_body(form: Mapping[str, str]) -> dict[str, object]:
    """The time-off form as the API's body: ``start`` and ``end`` typed as local times of the
    zone the form names (the viewer's, which the page shows every time in) become RFC 3339
    times with that zone's offset; one that is no date and time goes as typed, for the
    domain's rule to name; a blank one is left out, which the domain says is required."""
    zone = zone_named(form.get("zone", ""))
    if zone is None:
        raise InvalidInput("the form names no time zone; reload the page and try again",
                           [Problem("zone", "is not a known time zone")])
    body: dict[str, object] = {}
    for name in ("start", "end"):
        typed = form.get(name, "").strip()
        if not typed:
            continue
        try:
            local = datetime.fromisoformat(typed)
        except ValueError:
            body[name] = typed
            continue
        body[name] = (local if local.tzinfo else local.replace(tzinfo=zone)).isoformat()
    if form.get("reason", "").strip():
        body["reason"] = form["reason"].strip()
    return body


class _EngineerForm(Page):
    """A form of the engineer's page: ``save`` it, or show the page with what was wrong."""

    console_roles = {"POST": OPERATOR}
    name = ""  # the form's name on the page and in ``?saved=``

    def __init__(self, console: Console, page: EngineerPage) -> None:
        super().__init__(console)
        self._page = page

    def save(self, req: falcon.Request, email: str, form: Mapping[str, str]) -> None:
        raise NotImplementedError

    def on_post(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = checked_email(email)  # 400
        form = req.context.form
        try:
            self.save(req, email, form)
        except InvalidInput as exc:
            self._page.show(req, resp, email, status=falcon.HTTP_400, failed=exc,
                            form_name=self.name, form=form)
            return
        see_other(resp, url(f"/engineers/{quote(email, safe='@')}", saved=self.name))


class AvailabilityForm(_EngineerForm):
    """``POST /engineers/{email}/availability``: the time zone, working hours and cap."""

    name = "availability"

    def save(self, req: falcon.Request, email: str, form: Mapping[str, str]) -> None:
        store = self.services.store
        engineer = store.engineers.get(email)  # 404: ``put`` would create them
        changes = availability_update(store, email, availability_body(form))
        self.services.changes.put_engineer(console_author(req), email,
                                           dispatch_enabled=engineer.dispatch_enabled,
                                           availability=changes)


class TimeOffForm(_EngineerForm):
    """``POST /engineers/{email}/time-off``: one entry of time off."""

    name = "time-off"

    def save(self, req: falcon.Request, email: str, form: Mapping[str, str]) -> None:
        entry, problems = parse_time_off(time_off_body(form), email)
        if entry is None:
            raise InvalidInput("the time off is not valid", list(problems))
        self.services.changes.add_time_off(console_author(req), entry)  # 404


class EndTimeOff(Action):
    """``POST /engineers/{email}/time-off/{id}/end``: remove one entry, after asking."""

    title = "End time off"
    danger = True

    def back(self, req: falcon.Request, email: str, entry_id: int) -> str:
        return engineer_url(checked_email(email))

    def question(self, req: falcon.Request, email: str, entry_id: int) -> str:
        email = checked_email(email)
        self.services.store.engineers.get(email)  # 404
        return (f"End time off {entry_id} of {email}? The entry is removed, so from now on "
                "it keeps them from no assignment. An entry of a calendar feed comes back at "
                "the feed's next refresh if the feed still holds it.")

    def apply(self, req: falcon.Request, email: str, entry_id: int) -> Done:
        email = checked_email(email)
        # 404 when gone meanwhile
        self.services.changes.delete_time_off(console_author(req), email, entry_id)
        return Done(f"Time off {entry_id} of {email} has ended: the entry is removed.",
                    engineer_url(email), f"Back to {email}")
