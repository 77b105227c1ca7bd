"""``GET /dispatch/triggers``: a viewer's list of triggers, newest first, filtered by status,
source, issue key and creation time, paged by an opaque cursor; every bad parameter a 400 that
names it, on both engines."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from falcon import testing

from tests.clocks import ManualClock
from tests.http.conftest import API_KEYS, Api
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.dispatch import decode_cursor, encode_cursor
from ticket_dispatcher.http.services import Services

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


@pytest.fixture
def viewer(store) -> Api:
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
    services = Services(store=store, config=config, clock=ManualClock(T0))
    return Api(testing.TestClient(create_app(services)), services).as_role("viewer")


@pytest.fixture
def triggers(store) -> list[int]:
    """Five triggers a minute apart from T0, oldest first; the second and fourth failed, the
    third waits for its next try after a passing fault."""
    ids = [store.triggers.create(source, key, policy_id=None, dryrun=None,
                                 now=T0 + timedelta(minutes=minute)).id
           for minute, (source, key) in enumerate([
               ("jira_automation", "TCID-1"), ("jira_automation", "TCID-2"),
               ("jira_assignment_assignee", "GTOC-1"), ("jira_automation", "TCID-2"),
               ("jira_automation", "TCID-3")])]
    for failed in (ids[1], ids[3]):
        store.triggers.fail(failed, "issue load failed: HTTP 404", T0 + timedelta(hours=1))
    assert store.triggers.claim(ids[2], T0 + timedelta(minutes=5), owner="me") is not None
    store.triggers.retry(ids[2], T0 + timedelta(minutes=6), "HTTP 503", T0 + timedelta(
        minutes=5), since=T0 + timedelta(minutes=5))  # waits for its next try
    return ids


def listed(result) -> list[int]:
    assert result.status_code == 200, result.json
    return [item["id"] for item in result.json["items"]]


def test_viewer_lists_triggers_newest_first_as_each_reads_alone(viewer, triggers):
    result = viewer.get("/dispatch/triggers")

    assert listed(result) == triggers[::-1]
    assert result.json["next_cursor"] is None
    assert set(result.json) == {"items", "next_cursor"}
    for item in result.json["items"]:
        assert item == viewer.get(f"/dispatch/triggers/{item['id']}").json


def test_the_list_is_for_viewers_and_operators_not_automation(viewer, triggers):
    assert viewer.as_role("operator").get("/dispatch/triggers").status_code == 200
    assert viewer.as_role("automation").get("/dispatch/triggers").status_code == 403
    assert viewer.as_role(None).get("/dispatch/triggers").status_code == 401
    # the automation key still reads the trigger it posted
    assert viewer.as_role("automation").get(f"/dispatch/triggers/{triggers[0]}").status_code \
        == 200


@pytest.mark.parametrize("params,expected", [
    ({"status": "failed"}, [3, 1]),
    ({"status": "pending"}, [4, 2, 0]),
    ({"status": "completed"}, []),
    ({"source": "jira_assignment_assignee"}, [2]),
    ({"issue_key": "TCID-2"}, [3, 1]),
    ({"issue_key": "TCID-2", "status": "failed", "source": "jira_automation"}, [3, 1]),
    ({"created_after": "2026-11-30T01:01:00Z", "created_before": "2026-11-30T01:03:00Z"},
     [2, 1]),
    ({"created_after": "2026-11-30T09:03:00+08:00"}, [4, 3]),
    ({"created_before": "2026-11-30T01:00:00.001Z"}, [0]),
    ({"status": "retrying"}, [2]),
    ({"execution_failed": "false", "status": "failed"}, [3, 1]),
    ({"execution_failed": "true"}, []),
])
def test_filters(viewer, triggers, params, expected):
    assert listed(viewer.get("/dispatch/triggers", params=params)) == [
        triggers[i] for i in expected]


def test_a_cursor_walks_every_page_once_then_is_null(viewer, triggers):
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        result = viewer.get("/dispatch/triggers", params=params)
        seen += listed(result)
        pages += 1
        cursor = result.json["next_cursor"]
        if cursor is None:
            break

    assert seen == triggers[::-1]
    assert pages == 3


def test_a_cursor_keeps_the_filters_it_is_sent_with(viewer, triggers):
    first = viewer.get("/dispatch/triggers", params={"status": "failed", "limit": 1})
    second = viewer.get("/dispatch/triggers", params={
        "status": "failed", "limit": 1, "cursor": first.json["next_cursor"]})

    assert listed(first) + listed(second) == [triggers[3], triggers[1]]
    assert second.json["next_cursor"] is None


def test_a_new_trigger_does_not_shift_the_pages_being_read(viewer, triggers, store):
    first = viewer.get("/dispatch/triggers", params={"limit": 2})
    store.triggers.create("jira_automation", "TCID-9", policy_id=None, dryrun=None,
                          now=T0 + timedelta(hours=2))
    second = viewer.get("/dispatch/triggers", params={"limit": 2,
                                                      "cursor": first.json["next_cursor"]})

    assert listed(second) == [triggers[2], triggers[1]]


def test_cursors_round_trip_and_are_opaque():
    cursor = encode_cursor(12345)

    assert decode_cursor(cursor) == 12345
    assert "12345" not in cursor


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("params,path", [
    ({"status": "FAILED"}, "status"),
    ({"status": "done"}, "status"),
    ({"status": "RETRYING"}, "status"),
    ({"execution_failed": "yes"}, "execution_failed"),
    ({"source": "Jira Automation"}, "source"),
    ({"source": "1abc"}, "source"),
    ({"issue_key": "tcid-1"}, "issue_key"),
    ({"issue_key": "TCID"}, "issue_key"),
    ({"created_after": "yesterday"}, "created_after"),
    ({"created_after": "2026-11-30T01:00:00"}, "created_after"),  # no offset
    ({"created_after": "2026-11-30"}, "created_after"),
    ({"created_before": "2026-11-30T25:00:00Z"}, "created_before"),
    ({"created_before": "9999-12-31T23:59:59-01:00"}, "created_before"),  # past year 9999 UTC
    ({"created_after": "0001-01-01T00:00:00+01:00"}, "created_after"),  # before year 1 UTC
    ({"created_after": "2026-11-30T02:00:00Z", "created_before": "2026-11-30T01:00:00Z"},
     "created_before"),
    ({"created_after": "2026-11-30T01:00:00Z", "created_before": "2026-11-30T09:00:00+08:00"},
     "created_before"),  # the same instant: an empty range
    ({"limit": "0"}, "limit"),
    ({"limit": "201"}, "limit"),
    ({"limit": "ten"}, "limit"),
    ({"cursor": "not a cursor"}, "cursor"),
    ({"cursor": "!!!!"}, "cursor"),
    ({"cursor": "dDE6"}, "cursor"),  # "t1:" without an id
    ({"cursor": b64("t1:0")}, "cursor"),
    ({"cursor": b64("t1:-5")}, "cursor"),
    ({"cursor": b64("t1:99999999999999999999")}, "cursor"),  # beyond any id
    ({"cursor": b64("t2:5")}, "cursor"),
    ({"cursor": b64("t1:5") + "="}, "cursor"),
    ({"cursor": "x" * 65}, "cursor"),
    ({"cursor": base64.urlsafe_b64encode(b"\xff\xfe").decode()}, "cursor"),
    ({"offset": "50"}, "offset"),
])
def test_a_bad_parameter_is_400_naming_it(viewer, triggers, params, path):
    result = viewer.get("/dispatch/triggers", params=params)

    assert result.status_code == 400, result.json
    assert result.json["code"] == "validation_failed"
    assert [problem["path"] for problem in result.json["errors"]] == [path]
