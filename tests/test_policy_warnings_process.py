"""Through the real server (``serve --sandbox``): validation warns about what will fail. A
misspelt or disabled engineer in a ``users`` receiver is a warning at its path on validate,
create and replacement, never an error; an unknown engineer's 404 says how to create one; an
engineer shown in UTC is given working hours in UTC."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from tests.process import sandbox_in_thread

BASE = "/api/v1/ticketmanager"
EXAMPLE = Path(__file__).parents[1] / "ops/examples/policies/assign-tcid.json"


@pytest.fixture
def sandbox_service(tmp_path):
    with sandbox_in_thread(tmp_path) as service:
        yield service, f"http://127.0.0.1:{service.port}"


def test_a_misspelt_or_disabled_engineer_is_a_warning_on_validate_create_and_replace(
        sandbox_service):
    _, url = sandbox_service
    document = json.loads(EXAMPLE.read_text())
    [(index, assign)] = [(i, rule["then"][0]["assign"]) for i, rule
                         in enumerate(document["rules"])
                         if rule["then"][0]["assign"]["receiver"]["type"] == "users"]
    users = assign["receiver"]["users"]
    users[0] = "alcie@example.com"  # a typo of alice's
    turned_off = requests.put(f"{url}{BASE}/engineers/{users[1]}", timeout=10,
                              json={"dispatch_enabled": False})
    assert turned_off.status_code == 200
    where = f"rules[{index}].then[0].assign.receiver.users"
    expected = [
        {"path": f"{where}[0]", "message": '"alcie@example.com" is not a dispatch-enabled '
         "engineer: no engineer has this email (a typo, or one to create); an assignment "
         "passes over them"},
        {"path": f"{where}[1]", "message": f'"{users[1]}" is not a dispatch-enabled '
         "engineer: dispatch is disabled for this engineer; an assignment passes over them"}]

    validated = requests.post(f"{url}{BASE}/dispatch/policies/validate", json=document,
                              timeout=10)
    created = requests.post(f"{url}{BASE}/dispatch/policies", json=document, timeout=10)
    replaced = requests.post(f"{url}{BASE}/dispatch/policies/{created.json()['id']}/"
                             "replacements", json=document, timeout=10)

    assert validated.status_code == 200
    assert validated.json() == {"valid": True, "errors": [], "warnings": expected}
    assert (created.status_code, created.json()["warnings"]) == (201, expected)
    assert (replaced.status_code, replaced.json()["warnings"]) == (201, expected)
    assert replaced.json()["version"] == 2
    # the stored policy holds no warnings: they belong to the answer, not to the policy
    stored = requests.get(f"{url}{BASE}/dispatch/policies/{created.json()['id']}", timeout=10)
    assert "warnings" not in stored.json()


def test_an_unknown_engineer_s_404_says_how_to_create_one(sandbox_service):
    _, url = sandbox_service

    missing = requests.get(f"{url}{BASE}/engineers/nobody@example.com", timeout=10)
    time_off = requests.post(f"{url}{BASE}/engineers/nobody@example.com/time-off", timeout=10,
                             json={"start": "2026-12-01T00:00:00Z",
                                   "end": "2026-12-02T00:00:00Z"})
    created = requests.put(f"{url}{BASE}/engineers/nobody@example.com", timeout=10,
                           json={"dispatch_enabled": True})

    says = ("engineer nobody@example.com not found; create it with PUT "
            f"{BASE}/engineers/nobody@example.com (body {{\"dispatch_enabled\": true}}) or "
            "`ticket-dispatcher engineer set nobody@example.com --dispatch-enabled true`")
    assert (missing.status_code, missing.json()["description"]) == (404, says)
    assert (time_off.status_code, time_off.json()["description"]) == (404, says)
    assert created.status_code == 201  # as the message said


def test_an_engineer_shown_in_utc_takes_working_hours_in_utc(sandbox_service):
    _, url = sandbox_service
    created = requests.put(f"{url}{BASE}/engineers/zoe@example.com", timeout=10,
                           json={"dispatch_enabled": True})
    assert created.json()["timezone"] == "UTC"

    hours = requests.put(f"{url}{BASE}/engineers/zoe@example.com", timeout=10,
                         json={"dispatch_enabled": True,
                               "working_hours": {"mon": ["09:00-18:00"]}})

    assert hours.status_code == 200, hours.text
    assert (hours.json()["timezone"], hours.json()["working_hours"]["mon"]) == (
        "UTC", ["09:00-18:00"])
