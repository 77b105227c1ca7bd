"""``GET /reports/burden``: who carries the load, for a period and a scope
(docs/burden-report.md); ``format=csv`` answers the people rows as CSV. Viewers and operators
only: it names people."""

from __future__ import annotations

import csv
import io

import falcon

from ticket_dispatcher.domain.burden import BurdenQuery, csv_rows
from ticket_dispatcher.http.auth import VIEWER
from ticket_dispatcher.http.binding import QueryParams, query_choice
from ticket_dispatcher.http.dispatch import query_time
from ticket_dispatcher.http.services import Services

FORMATS = ("json", "csv")


def burden_query(req: QueryParams, services: Services) -> BurdenQuery:
    """The period and scope asked for; a bad one is a 400 naming its parameter."""
    return BurdenQuery.of(query_time(req, "from"), query_time(req, "to"), services.clock.now(),
                          policy=req.get_param("policy"), project=req.get_param("project"),
                          rotation=req.get_param("rotation"))


class BurdenReport:
    roles = {"GET": VIEWER}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        shape = query_choice(req, "format", _format, "json or csv") or "json"
        report = self._services.store.burden.report(burden_query(req, self._services))
        if shape == "csv":
            resp.content_type = "text/csv; charset=utf-8"
            resp.text = csv_text(report)
            return
        resp.media = report


def csv_text(report: dict) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(csv_rows(report))
    return out.getvalue()


def _format(text: str) -> str:
    if text not in FORMATS:
        raise ValueError(text)
    return text
