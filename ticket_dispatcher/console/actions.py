"""Operator actions: each a POST that first answers a confirmation page, then does the thing.

An action button posts its form without ``confirmed``; the answer is a page naming exactly what
will happen, with a "Yes" form carrying ``confirmed=yes`` (and the same fields and CSRF token) and
a way back. Only that second POST acts, and its answer says what was done, with a link to see
it. This works without JavaScript, and a reload of the result page asks again instead of
repeating the action. Who may post is checked by ``ConsoleGate`` from ``console_roles``,
whatever the page showed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import falcon

from ticket_dispatcher.console.web import BASE, Page
from ticket_dispatcher.http.auth import OPERATOR
from ticket_dispatcher.store.audit import Author, Via


def console_author(req: falcon.Request) -> Author:
    """Who acts from the console: the signed-in key's name, or the proxy's email."""
    viewer = req.context.viewer
    return Author(viewer.name if viewer is not None else "anonymous", Via.CONSOLE)


@dataclass(frozen=True)
class Done:
    """What an action did, for its result page."""

    message: str
    link: str
    link_label: str


class Action(Page):
    """Subclasses give ``question`` (the confirmation text) and ``apply`` (do it → Done).

    Each takes the route's parameters by name (``policy_id: int``): the base methods take
    any, so that each subclass may name its own."""

    console_roles = {"POST": OPERATOR}
    title = "Confirm"
    danger = False

    def question(self, req: falcon.Request, *args: Any, **params: Any) -> str:
        raise NotImplementedError

    def apply(self, req: falcon.Request, *args: Any, **params: Any) -> Done:
        raise NotImplementedError

    def back(self, req: falcon.Request, *args: Any, **params: Any) -> str:
        """Where "No, go back" leads."""
        return BASE + "/"

    def on_post(self, req: falcon.Request, resp: falcon.Response, **params: Any) -> None:
        form = req.context.form
        if form.get("confirmed") != "yes":
            question = self.question(req, **params)  # may refuse (404, 409) before asking
            fields = {k: v for k, v in form.items() if k not in ("csrf_token", "confirmed")}
            self.console.render(req, resp, "confirm.html", title=self.title,
                                question=question, action=req.path, fields=fields,
                                danger=self.danger, back=self.back(req, **params))
            return
        done = self.apply(req, **params)
        self.console.render(req, resp, "done.html", title=self.title, done=done)
