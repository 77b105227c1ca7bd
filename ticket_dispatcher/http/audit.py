"""``GET /audit``: the audit trail, newest first, filtered and paged by cursor; ``format=jsonl``
exports the same records as JSON lines. Operators only: it tells who changed what."""

from __future__ import annotations

import json

import falcon

from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.auth import OPERATOR
from ticket_dispatcher.http.binding import QueryParams, query_choice, query_int
from ticket_dispatcher.http.dispatch import decode_cursor, encode_cursor, query_time
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store.audit import MAX_LIMIT, AuditFilter

FORMATS = ("json", "jsonl")


def audit_filter(req: QueryParams) -> AuditFilter:
    """The query's filters; a bad value is a 400 naming its parameter."""
    since, until = query_time(req, "since"), query_time(req, "until")
    if since is not None and until is not None and since >= until:
        raise InvalidInput("since must be earlier than until",
                           [Problem("until", "must be later than since")])
    return AuditFilter(actor=req.get_param("actor"), object_type=req.get_param("object_type"),
                       object_id=req.get_param("object_id"), action=req.get_param("action"),
                       since=since, until=until)


class AuditTrail:
    roles = {"GET": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        where = audit_filter(req)
        shape = query_choice(req, "format", _format, "json or jsonl") or "json"
        cursor = req.get_param("cursor")
        records, following = self._services.store.audit.page(
            where, cursor=decode_cursor(cursor) if cursor is not None else None,
            limit=query_int(req, "limit", default=100, minimum=1, maximum=MAX_LIMIT))
        next_cursor = encode_cursor(following) if following is not None else None
        if shape == "jsonl":
            resp.content_type = "application/x-ndjson"
            resp.text = "".join(json.dumps(record.to_json(), ensure_ascii=False) + "\n"
                                for record in records)
            if next_cursor is not None:
                resp.set_header("X-Next-Cursor", next_cursor)
            return
        resp.media = {"records": [record.to_json() for record in records],
                      "next_cursor": next_cursor}


def _format(text: str) -> str:
    if text not in FORMATS:
        raise ValueError(text)
    return text
