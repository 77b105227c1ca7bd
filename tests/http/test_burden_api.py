"""``GET /reports/burden``: the report as JSON and CSV, who may read it, and the 400s."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.store.test_burden import assign, notify
from ticket_dispatcher.timeutil import format_time


@pytest.fixture
def recorded(api):
    """An assignment and a paged card read seven minutes after it was sent."""
    store, now = api.services.store, api.services.clock.now()
    assign(store, at=now - timedelta(hours=2), counts={"a@x.io": 1, "b@x.io": 0})
    sent = now - timedelta(hours=1)
    notify(store, at=sent, page_at=sent, ack=("card_read", sent + timedelta(minutes=7)))
    return now


def test_the_report_names_its_fields_for_the_last_28_days_by_default(api, recorded):
    answer = api.as_role("viewer").get("/reports/burden")

    assert answer.status_code == 200, answer.text
    report = answer.json
    assert report["to"] == format_time(recorded)
    assert report["from"] == format_time(recorded - timedelta(days=28))
    assert report["complete_from"] is not None
    a = next(p for p in report["people"] if p["email"] == "a@x.io")
    assert (a["assigned"], a["cards"], a["pages"], a["urgent"]) == (1, 1, 1, 0)
    assert sum(a["interruptions"].values()) == 1
    assert a["ack_seconds"]["by_source"]["card_read"]["p50"] == 420.0
    [rotation] = report["rotations"]
    assert {m["email"] for m in rotation["members"]} == {"a@x.io", "b@x.io"}


def test_csv_has_a_header_and_one_row_per_person(api, recorded):
    answer = api.get("/reports/burden", params={"format": "csv"})

    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/csv")
    header, *rows = [line.split(",") for line in answer.text.strip().split("\n")]
    assert header[:3] == ["email", "assigned", "assigned[p]"]
    assert [row[0] for row in rows] == ["a@x.io", "b@x.io"]
    assert rows[0][header.index("pages")] == "1"
    assert rows[0][header.index("ack_card_read_p50_seconds")] == "420.0"


def test_automation_keys_and_strangers_may_not_read_names(api, recorded):
    assert api.as_role("automation").get("/reports/burden").status_code == 403
    assert api.as_role(None).get("/reports/burden").status_code == 401


@pytest.mark.parametrize("params, parameter", [
    ({"from": "2026-12-02T00:00:00Z", "to": "2026-12-01T00:00:00Z"}, "from"),
    ({"from": "2025-01-01T00:00:00Z", "to": "2026-12-01T00:00:00Z"}, "to"),
    ({"from": "yesterday"}, "from"),
    ({"policy": "nothing by this name"}, "policy"),
    ({"project": "NOPE"}, "project"),
    ({"format": "xml"}, "format"),
])
def test_a_bad_period_or_a_scope_naming_nothing_is_a_400_naming_it(api, recorded, params,
                                                                     parameter):
    answer = api.get("/reports/burden", params=params)

    assert answer.status_code == 400, answer.text
    assert parameter in answer.text
