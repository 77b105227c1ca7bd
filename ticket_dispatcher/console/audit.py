"""The audit trail: who changed what, how, and the values before and after, newest first,
filtered as the API filters it (docs/console.md, "Audit"). Operators only, as in the API."""

from __future__ import annotations

from typing import Any

import falcon

from ticket_dispatcher.console.web import Page, Query, cursor_pages, url
from ticket_dispatcher.http.audit import audit_filter
from ticket_dispatcher.http.auth import OPERATOR
from ticket_dispatcher.http.binding import query_int
from ticket_dispatcher.http.dispatch import decode_cursor
from ticket_dispatcher.store.audit import AuditRecord

FILTERS = ("actor", "object_type", "object_id", "action", "since", "until")
# Where each kind of object is shown, to link a record to it (a trigger or a context has no
# page of its own).
OBJECT_PAGES = {"policy": "/policies/{}", "engineer": "/engineers/{}",
                "execution": "/executions/{}"}


def object_url(record: AuditRecord) -> str | None:
    """The page of the record's object, while it can still exist."""
    page = OBJECT_PAGES.get(record.object_type)
    if page is None or record.action.endswith(".deleted"):
        return None
    return url(page.format(record.object_id))


class AuditPage(Page):
    console_roles = {"GET": OPERATOR}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = Query(req)
        cursor = query.get_param("cursor")
        records, following = self.services.store.audit.page(
            audit_filter(query), cursor=decode_cursor(cursor) if cursor else None,
            limit=query_int(query, "limit", default=50, minimum=1, maximum=200))
        filters = query.values(*FILTERS)
        rows: list[dict[str, Any]] = [{"record": record, "object_url": object_url(record)}
                                      for record in records]
        self.console.render(
            req, resp, "audit.html", rows=rows, filters=dict.fromkeys(FILTERS, "") | filters,
            **cursor_pages("/audit", filters, following, paged=bool(cursor)))
