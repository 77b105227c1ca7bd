"""An operator sets an engineer's time zone, working hours and cap, and adds and ends their
time off, from the engineer's page in Chromium against a real ``serve --sandbox``, on a desktop
and on a phone; a bad value is shown on the page; a viewer sees none of the forms. Every time
shows in the browser's zone, which the page names once.

Set ``CONSOLE_SHOTS`` to a directory to keep the screenshots of each step."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import serious_violations
from tests.browser.demo import ACTION_MS, EXPECT_MS, VIEWPORTS, sign_in

pytestmark = pytest.mark.browser

ZONE = "Europe/Berlin"


def shoot(page, name: str) -> None:
    directory = os.environ.get("CONSOLE_SHOTS")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(directory) / f"{name}.png"), full_page=True)


def post_forms(page):
    return page.locator('main form[method="post" i]')


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_an_operator_sets_hours_and_time_off_and_a_bad_value_is_explained(guarded, new_context,
                                                                           viewport):
    email = f"dora-{viewport}@example.com"
    guarded.call("PUT", f"/engineers/{email}", (200, 201), json={"dispatch_enabled": False})
    page = new_context(viewport, timezone_id=ZONE).new_page()
    sign_in(page, guarded, "operator")

    page.goto(f"{guarded.url}/console/engineers/{email}")
    expect(page.locator("footer")).to_contain_text(f"Times in {ZONE}")
    assert page.locator("header nav").count() == 1
    settings = page.locator("form.settings").first
    settings.get_by_label("Time zone").fill("Asia/Shanghai")
    settings.get_by_label("Any time (no working hours)").uncheck()
    settings.get_by_label("Mon").fill("09:00-12:00, 13:00-18:00")
    settings.get_by_label("Tue").fill("09:00-18:00")
    settings.get_by_label("Cap of open issues").fill("5")
    settings.get_by_role("button", name="Save").click()

    expect(page.get_by_role("status")).to_have_text(
        "Saved: the time zone, working hours and cap.", timeout=ACTION_MS)
    facts = page.locator("main dl.facts").first
    text = " ".join(facts.inner_text().split())
    assert "Time zone Asia/Shanghai" in text and "Cap of open issues 5" in text
    assert "mon 09:00-12:00, 13:00-18:00; tue 09:00-18:00" in text
    stored = guarded.call("GET", f"/engineers/{email}")
    assert (stored["timezone"], stored["max_open_issues"]) == ("Asia/Shanghai", 5)
    shoot(page, f"engineer-saved-{viewport}")

    # a cap of 0 is refused, with the API's own words, and the typed value stays
    page.locator("form.settings").first.get_by_label("Cap of open issues").fill("0")
    with page.expect_response(re.compile(r"/availability$")) as answer:
        page.locator("form.settings").first.get_by_role("button", name="Save").click()
    assert answer.value.status == 400
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Not saved")
    expect(alert).to_contain_text("max_open_issues: 0 is not at least 1; use null for no cap")
    expect(page.locator("form.settings").first.get_by_label("Cap of open issues")) \
        .to_have_value("0")
    assert guarded.call("GET", f"/engineers/{email}")["max_open_issues"] == 5
    assert serious_violations(page) == []
    shoot(page, f"engineer-refused-{viewport}")

    # time off, typed in the browser's zone
    start = (datetime.now(UTC) + timedelta(days=3)).astimezone(ZoneInfo(ZONE)).replace(
        hour=9, minute=0, second=0, microsecond=0)
    end = start + timedelta(days=2, hours=9)
    adding = page.locator("form.settings").nth(1)
    expect(adding).to_contain_text(f"In {ZONE}, as every time on this page.")
    adding.get_by_label("From").fill(f"{start:%Y-%m-%dT%H:%M}")
    adding.get_by_label("Until").fill(f"{end:%Y-%m-%dT%H:%M}")
    adding.get_by_label("Reason").fill("vacation")
    adding.get_by_role("button", name="Add time off").click()

    expect(page.get_by_role("status")).to_have_text("The time off was added.",
                                                    timeout=ACTION_MS)
    row = page.locator("table.time-off tbody tr").first
    expect(row).to_contain_text(f"{start:%Y-%m-%d %H:%M:%S}")
    expect(row).to_contain_text(f"{end:%Y-%m-%d %H:%M:%S}")
    [entry] = guarded.call("GET", f"/engineers/{email}/time-off")["items"]
    assert datetime.fromisoformat(entry["start"]) == start
    assert page.evaluate("document.body.innerText").count(ZONE) == 2  # footer, time-off form
    assert serious_violations(page) == []
    width, window = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= window, f"the page is {width} px wide in a {window} px window"
    shoot(page, f"engineer-time-off-{viewport}")

    row.get_by_role("button", name="End").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("End time off")
    page.get_by_role("button", name="Yes, end time off").click()
    expect(page.get_by_role("status")).to_contain_text("has ended", timeout=ACTION_MS)
    page.get_by_role("link", name=f"Back to {email}").click()
    expect(page.locator("table.time-off")).to_contain_text("No time off to come",
                                                           timeout=EXPECT_MS)
    assert guarded.call("GET", f"/engineers/{email}/time-off")["items"] == []


def test_a_viewer_sees_the_settings_but_none_of_the_forms(guarded, new_context):
    email = "dora-viewer@example.com"
    guarded.call("PUT", f"/engineers/{email}", (200, 201),
                 json={"dispatch_enabled": False, "timezone": "Asia/Shanghai"})
    page = new_context("phone", timezone_id=ZONE).new_page()
    sign_in(page, guarded, "viewer")

    page.goto(f"{guarded.url}/console/engineers/{email}")

    expect(page.locator("main dl.facts").first).to_contain_text("Asia/Shanghai")
    assert post_forms(page).count() == 0
    shoot(page, "engineer-viewer-phone")


def test_the_signed_out_page_shows_only_the_sign_in(guarded, new_context):
    page = new_context("phone").new_page()
    page.goto(f"{guarded.url}/console/engineers")

    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    assert page.locator("header nav").count() == 0
    assert page.get_by_role("link", name="Triggers").count() == 0
    shoot(page, "sign-in-phone")
