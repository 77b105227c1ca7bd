"""The engineers page: the list with its filter and pages, switching an engineer's dispatch
(asked first, operators only), and the rotations of the active policies with whose turn it is,
the turn moving as assignments take it; a group's rotation as its newest run read it."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from urllib.parse import quote

import pytest
from falcon import testing

from tests.console.conftest import Console, build_app, main_text
from tests.fakes import issue
from tests.harness import Harness, assign, rule
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.ports import GroupMember
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store.audit import AuditFilter

ENGINEERS = ("a@example.com", "b@example.com", "c@example.com")
PAGE = "/console/engineers"


def staff(harness, *emails: str) -> None:
    for email in emails or ENGINEERS:
        harness.store.engineers.put(email, dispatch_enabled=True, now=harness.clock.now())
        harness.jira.add_user(email)


def rows(html: str) -> list[str]:
    """The engineers table's rows, as text."""
    table = html.split('<table class="rows engineers">', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [" ".join(re.sub(r"<[^>]+>", " ", "<tr" + row).split())
            for row in body.split("<tr")[1:]]


def rotation_text(html: str) -> str:
    return main_text(html).split("Rotations", 1)[1]


def turn(html: str) -> str:
    """Whom the (first) rotation's turn points at, as its Turn fact says."""
    return rotation_text(html).split(" Turn ", 1)[1].split(":", 1)[0].strip()


# -- the list -------------------------------------------------------------------------------------


def test_the_list_shows_each_engineer_and_filters_by_the_switch(console, harness):
    store, now = harness.store, harness.clock.now()
    store.engineers.put("b@example.com", dispatch_enabled=False, display_name="Bea", now=now)
    store.engineers.put("a@example.com", dispatch_enabled=True, display_name="Al",
                        jira_account_id="acc-a", now=now)
    store.engineers.update_dispatch_state("a@example.com", dispatched_at=now,
                                          issue_key="TCID-7", now=now)
    console.sign_in("viewer")

    page = console.get(PAGE).text

    assert rows(page) == [
        "a@example.com Al available not counted / no cap acc-a enabled "
        "2026-11-30 01:00:00 · TCID-7",
        "b@example.com Bea available not counted / no cap not known yet disabled "
        "never",
    ]
    assert 'href="/console/executions?issue_key=TCID-7"' in page
    disabled = console.get(PAGE, params={"dispatch_enabled": "false"}).text
    assert [row.split()[0] for row in rows(disabled)] == ["b@example.com"]
    assert '<option value="false" selected>disabled</option>' in disabled
    enabled = console.get(PAGE, params={"dispatch_enabled": "true"}).text
    assert [row.split()[0] for row in rows(enabled)] == ["a@example.com"]


def test_the_list_pages_like_the_api(console, harness):
    for n in range(5):
        harness.store.engineers.put(f"e{n}@example.com", dispatch_enabled=True,
                                    now=harness.clock.now())
    console.sign_in("viewer")

    first = console.get(PAGE, params={"limit": "2"}).text
    second = console.get(PAGE, params={"limit": "2", "offset": "2"}).text

    assert [row.split()[0] for row in rows(first)] == ["e0@example.com", "e1@example.com"]
    assert "1–2 of 5" in main_text(first)
    assert 'href="/console/engineers?limit=2&amp;offset=2" rel="next"' in first
    assert [row.split()[0] for row in rows(second)] == ["e2@example.com", "e3@example.com"]


@pytest.mark.parametrize("params", [{"dispatch_enabled": "maybe"}, {"limit": "0"},
                                    {"offset": "-1"}])
def test_a_bad_filter_is_a_400_page(console, params):
    console.sign_in("viewer")

    answer = console.get(PAGE, params=params)

    assert answer.status_code == 400
    assert answer.headers["Content-Type"].startswith("text/html")


# -- the switch -----------------------------------------------------------------------------------


def test_disabling_asks_first_then_disables_and_keeps_the_other_fields(console, harness):
    store = harness.store
    store.engineers.put("b@example.com", dispatch_enabled=True, display_name="Bea",
                        jira_account_id="acc-b", now=harness.clock.now())
    console.sign_in("operator")
    page = console.get(PAGE).text
    assert 'action="/console/engineers/b@example.com/dispatch"' in page
    assert '<input type="hidden" name="enabled" value="false">' in page

    asked = console.post("/console/engineers/b@example.com/dispatch", {"enabled": "false"})

    assert asked.status_code == 200
    assert main_text(asked.text).startswith("Disable dispatch Disable dispatch for Bea "
                                            "(b@example.com)? No assign action chooses them")
    assert '<input type="hidden" name="confirmed" value="yes">' in asked.text
    assert store.engineers.get("b@example.com").dispatch_enabled is True  # not yet

    harness.clock.advance(30)
    done = console.post("/console/engineers/B@Example.com/dispatch",
                        {"enabled": "false", "confirmed": "yes"})

    assert done.status_code == 200
    assert "Bea (b@example.com) is now disabled for dispatch." in main_text(done.text)
    engineer = store.engineers.get("b@example.com")
    assert engineer.dispatch_enabled is False
    assert (engineer.display_name, engineer.jira_account_id) == ("Bea", "acc-b")
    assert engineer.updated_at == harness.clock.now()
    listed = console.get(PAGE).text
    assert rows(listed) == ["b@example.com Bea available not counted / no cap acc-b "
                           "disabled never Enable"]

    console.post("/console/engineers/b@example.com/dispatch",
                 {"enabled": "true", "confirmed": "yes"})
    assert store.engineers.get("b@example.com").dispatch_enabled is True


def test_a_viewer_sees_no_switch_and_a_forged_post_is_refused(console, harness):
    staff(harness, "b@example.com")
    console.sign_in("viewer")

    page = console.get(PAGE).text
    forged = console.post("/console/engineers/b@example.com/dispatch",
                          {"enabled": "false", "confirmed": "yes"})

    assert "/dispatch" not in page and "<th scope=\"col\">Action</th>" not in page
    assert forged.status_code == 403
    assert "this needs the operator role" in main_text(forged.text)
    assert harness.store.engineers.get("b@example.com").dispatch_enabled is True


@pytest.mark.parametrize(("path", "form", "code", "says"), [
    ("/console/engineers/nobody@example.com/dispatch", {"enabled": "false"}, 404,
     "engineer nobody@example.com not found"),
    ("/console/engineers/nobody@example.com/dispatch", {"enabled": "false", "confirmed": "yes"},
     404, "engineer nobody@example.com not found"),
    ("/console/engineers/not-an-email/dispatch", {"enabled": "false"}, 400,
     "the path must name an engineer by email address"),
    ("/console/engineers/b@example.com/dispatch", {"enabled": "maybe"}, 400,
     "enabled must be true or false"),
    ("/console/engineers/b@example.com/dispatch", {}, 400, "enabled must be true or false"),
])
def test_a_bad_switch_answers_a_clear_page_and_changes_nothing(console, harness, path, form,
                                                               code, says):
    staff(harness, "b@example.com")
    console.sign_in("operator")

    answer = console.post(path, form)

    assert answer.status_code == code
    assert says in main_text(answer.text)
    assert harness.store.engineers.get("b@example.com").dispatch_enabled is True
    assert harness.store.engineers.page()[1] == 1  # nobody was created


# -- rotations ------------------------------------------------------------------------------------


@pytest.fixture
def world(store):
    """The console (authentication off) over a real runtime, on each engine."""
    harness = Harness(store).start()
    services = Services(store=harness.store, config=load_config(None, environ={}),
                        clock=harness.clock, runtime=harness.runtime)
    console = Console(testing.TestClient(build_app(services, auth_enabled=False)), services)
    yield harness, console
    harness.wait_idle()
    harness.stop()


def test_the_turn_points_at_the_next_member_and_moves_with_each_dispatch(world):
    harness, console = world
    staff(harness)
    harness.policy(rule(assign(*ENGINEERS), name="spread"))
    assert turn(console.get(PAGE).text) == "a@example.com"  # never dispatched, listed first

    for n, after in ((1, "b@example.com"), (2, "c@example.com"), (3, "a@example.com")):
        harness.jira.put(issue(key=f"TCID-{n}"))
        harness.post_trigger(f"TCID-{n}")
        harness.clock.advance(1)
        page = console.get(PAGE).text
        assert turn(page) == after, n
        assert f"Newest run: execution {n} for TCID-{n}" in rotation_text(page)

    text = rotation_text(page)
    assert "test policy · spread" in text and "0:assign , strategy round_robin" in text
    assert ("1 a@example.com enabled 2026-11-30 01:00:00 · TCID-1 next turn "
            "2 b@example.com enabled 2026-11-30 01:00:01 · TCID-2 "
            "3 c@example.com enabled 2026-11-30 01:00:02 · TCID-3 ") in text


def test_the_turn_skips_a_disabled_member_and_says_when_nobody_can_be_chosen(world):
    harness, console = world
    staff(harness)
    harness.policy(rule(assign(*ENGINEERS, "ghost@example.com")))
    harness.store.engineers.put("a@example.com", dispatch_enabled=False,
                                now=harness.clock.now())

    page = console.get(PAGE).text

    assert turn(page) == "b@example.com"
    text = rotation_text(page)
    assert "1 a@example.com disabled skipped" in text
    assert "4 ghost@example.com unknown not an engineer: skipped" in text
    assert "No run of this rule among the newest 10,000 executions." in text

    for email in ("b@example.com", "c@example.com"):
        harness.store.engineers.put(email, dispatch_enabled=False, now=harness.clock.now())
    assert ("Turn Nobody : no member is an enabled engineer"
            in rotation_text(console.get(PAGE).text))


def test_a_group_rotation_shows_the_members_its_newest_run_read(world):
    harness, console = world
    staff(harness)
    harness.directory.groups["tcoc-l1"] = [GroupMember("b@example.com"),
                                           GroupMember("c@example.com")]
    harness.policy(rule({"type": "assign", "assign": {
        "receiver": {"type": "group", "group": "tcoc-l1"}, "strategy": "round_robin"}}))
    before = rotation_text(console.get(PAGE).text)
    assert "Core group tcoc-l1 (members resolved at run time)" in before
    assert "Not known until an assignment runs." in before

    execution_id = harness.post_trigger().execution_ids[0]

    text = rotation_text(console.get(PAGE).text)
    assert "Members as the newest run read them" in text
    assert "Turn c@example.com : never dispatched, if the members are still the ones last read" \
        in text
    assert (f"Newest run: execution {execution_id} for TCID-1, 2026-11-30 01:00:00 . Read "
            "2 enabled candidates (b@example.com, c@example.com); chose b@example.com : "
            "round_robin: never dispatched before.") in text


def test_a_balanced_rotation_shows_the_counts_as_last_read(world):
    harness, console = world
    staff(harness)
    harness.jira.open_issues.update({"acc-a": 4, "acc-b": 2, "acc-c": 3})
    harness.policy(rule(assign(*ENGINEERS, strategy="balanced")))

    harness.post_trigger()

    text = rotation_text(console.get(PAGE).text)
    assert "By the fewest open issues, counted in Jira when an assignment runs" in text
    assert "Open issues, last counted 1 a@example.com enabled never 4" in text
    assert "2 b@example.com enabled 2026-11-30 01:00:00 · TCID-1 2" in text
    assert "chose b@example.com : balanced: fewest open issues (2)." in text
    assert "next turn" not in text


def test_only_active_policies_have_rotations(world):
    harness, console = world
    staff(harness)
    harness.policy(rule(assign(*ENGINEERS)), active=False)
    harness.policy(rule(assign(*ENGINEERS, strategy="first")))

    assert ("No active policy assigns by round_robin or balanced"
            in rotation_text(console.get(PAGE).text))


# -- availability ---------------------------------------------------------------------------------


def test_the_list_says_once_why_each_is_away_in_their_own_zone_labelled(console, harness):
    store, now = harness.store, harness.clock.now()  # Monday 01:00 UTC
    store.engineers.put("a@example.com", dispatch_enabled=True, now=now, availability={
        "timezone": "Asia/Shanghai", "working_hours": None, "max_open_issues": 6})
    store.engineers.put("b@example.com", dispatch_enabled=True, now=now, availability={
        "timezone": "Europe/Paris", "working_hours": {"mon": ["09:00-17:00"]}})
    store.time_off.add(TimeOff(None, "a@example.com", now - timedelta(days=1),
                               now + timedelta(days=2), "vacation", "api"), now)
    console.sign_in("viewer")

    listed = rows(console.get(PAGE).text)

    assert listed[0].startswith(
        "a@example.com — away on time off until Wed 2026-12-02 09:00 Asia/Shanghai (vacation) "
        "not counted / 6 ")
    assert listed[1].startswith(
        "b@example.com — away outside working hours: Mon 02:00 in Europe/Paris; next at "
        "Mon 09:00 not counted / no cap ")
    assert all(row.count("2026-12-02") <= 1 for row in listed)


def test_an_engineers_own_page_shows_time_off_in_the_viewers_zone_and_feed_status(
        console, harness):
    store, now = harness.store, harness.clock.now()
    for email in ("a@example.com", "b@example.com"):
        store.engineers.put(email, dispatch_enabled=True, now=now,
                            availability={"timezone": "Asia/Shanghai"})
    store.time_off.add(TimeOff(None, "a@example.com", now + timedelta(days=20),
                               now + timedelta(days=22), "conference", "api"), now)
    store.time_off.add(TimeOff(None, "a@example.com", now - timedelta(days=20),
                               now - timedelta(days=18), "old trip", "api"), now)
    store.calendar_feeds.replace_feed("hr", None, [
        TimeOff(None, email, now + timedelta(days=30 + n), now + timedelta(days=31 + n),
                "holiday", "hr") for n, email in enumerate(
                    ["a@example.com", "b@example.com", "b@example.com"])], now)
    console.sign_in("viewer")
    console.cookies["td_zone"] = "Europe/Berlin"  # as console.js sets it

    html = console.get(f"{PAGE}/a@example.com").text
    page = main_text(html)
    past = main_text(console.get(f"{PAGE}/a@example.com", params={"past": "true"}).text)

    assert "Available now available" in page
    assert "Time zone Asia/Shanghai" in page and "Local time" not in page
    assert "2026-12-20 02:00:00 2026-12-22 02:00:00 conference api" in page  # Berlin, UTC+1
    assert 'Times in <span data-zone-name>Europe/Berlin</span>' in html
    assert "holiday hr" in page and "old trip" not in page
    assert "old trip" in past
    assert "hr ok 2026-11-30 02:00:00 (0 s old) 1" in page  # a's 1 entry of the feed's 3
    assert console.get(f"{PAGE}/nobody@example.com").status_code == 404


def test_an_engineers_own_page_pages_through_a_long_list_of_time_off(console, harness):
    store, now = harness.store, harness.clock.now()
    store.engineers.put("a@example.com", dispatch_enabled=True, now=now)
    for day in range(1, 56):  # a daily calendar event makes as many
        store.time_off.add(TimeOff(None, "a@example.com", now + timedelta(days=day),
                                   now + timedelta(days=day, hours=1), f"day {day}"), now)
    console.sign_in("viewer")

    first = console.get(f"{PAGE}/a@example.com").text
    second = main_text(console.get(f"{PAGE}/a@example.com", params={"offset": "50"}).text)

    assert "1–50 of 55" in main_text(first) and "day 50 " in main_text(first)
    assert 'href="/console/engineers/a@example.com?offset=50" rel="next">Later →' in first
    assert "51–55 of 55" in second and "day 55 " in second and "day 50 " not in second


def test_an_engineers_own_page_links_to_itself_with_the_email_quoted(console, harness):
    email = "o'neil+ops#1@example.com"  # the API takes it; "#" would end a link's path
    harness.store.engineers.put(email, dispatch_enabled=True, now=harness.clock.now())
    console.sign_in("viewer")

    page = console.get(f"{PAGE}/{quote(email, safe='@')}").text

    assert f'href="/console/engineers/{quote(email, safe="@")}?past=true"' in page


def test_the_turn_skips_a_member_on_time_off_as_the_next_assignment_would(world):
    harness, console = world
    staff(harness)
    harness.policy(rule(assign(*ENGINEERS), name="spread"))
    now = harness.clock.now()
    harness.store.time_off.add(TimeOff(None, "a@example.com", now - timedelta(hours=1),
                                       now + timedelta(days=1), "vacation", "api"), now)

    page = console.get(PAGE).text
    harness.jira.put(issue(key="TCID-1"))
    harness.post_trigger("TCID-1")

    assert turn(page) == "b@example.com"  # a, never dispatched and first, is away
    assert "1 a@example.com enabled away skipped: on time off until" in rotation_text(page)
    assert harness.jira.issues["TCID-1"].assignee.email == "b@example.com"


# -- the engineer's own settings and time off, from the console ----------------------------------

ALICE = f"{PAGE}/a@example.com"


def refusal(html: str) -> str:
    """The text of the page's alert, as a reader sees it."""
    alert = html.split('role="alert">', 1)[1].split("</div>", 1)[0]
    return " ".join(unescape(re.sub(r"<[^>]+>", "", alert)).split())


def settings_form(**changes: str) -> dict[str, str]:
    form = {"timezone": "Asia/Shanghai", "hours_mon": "09:00-12:00, 13:00-18:00",
            "hours_tue": "09:00-18:00", "max_open_issues": "8"}
    return {**form, **changes}


def test_an_operator_sets_zone_hours_and_cap_as_the_api_would(console, harness):
    store, now = harness.store, harness.clock.now()
    store.engineers.put("a@example.com", dispatch_enabled=False, display_name="Al", now=now)
    console.sign_in("operator")

    saved = console.post(f"{ALICE}/availability", settings_form())

    assert saved.status_code == 303
    assert saved.headers["Location"] == f"{ALICE}?saved=availability"
    engineer = store.engineers.get("a@example.com")
    assert engineer.timezone == "Asia/Shanghai" and engineer.max_open_issues == 8
    assert {day: spans for day, spans in engineer.working_hours.items() if spans} == {
        "mon": ["09:00-12:00", "13:00-18:00"], "tue": ["09:00-18:00"]}
    assert (engineer.dispatch_enabled, engineer.display_name) == (False, "Al")
    text = main_text(console.get(saved.headers["Location"]).text)
    assert "Saved: the time zone, working hours and cap." in text
    assert "Time zone Asia/Shanghai" in text and "Cap of open issues 8" in text

    console.post(f"{ALICE}/availability", settings_form(any_time="yes", max_open_issues=""))
    engineer = store.engineers.get("a@example.com")
    assert (engineer.working_hours, engineer.max_open_issues) == (None, None)
    records, _ = store.audit.page(AuditFilter(object_id="a@example.com"))
    assert [(r.actor, r.via.value, r.action) for r in records] == [
        ("operator-key", "console", "engineer.changed")] * 2
    assert records[1].before["timezone"] == "UTC"
    assert records[1].after["timezone"] == "Asia/Shanghai"


@pytest.mark.parametrize(("changes", "says"), [
    ({"timezone": "Mars/Olympus"}, 'timezone: unknown time zone "Mars/Olympus"'),
    ({"hours_wed": "18:00-09:00"}, "working_hours.wed[0]:"),
    ({"max_open_issues": "0"}, "max_open_issues: 0 is not at least 1"),
    ({"max_open_issues": "lots"}, "max_open_issues: must be an integer"),
])
def test_a_bad_setting_is_shown_on_the_page_with_what_was_typed(console, harness, changes,
                                                                 says):
    harness.store.engineers.put("a@example.com", dispatch_enabled=True, now=harness.clock.now(),
                                availability={"max_open_issues": 3})
    console.sign_in("operator")

    refused = console.post(f"{ALICE}/availability", settings_form(**changes))

    assert refused.status_code == 400
    assert refusal(refused.text).startswith("Not saved") and says in refusal(refused.text)
    assert f'value="{next(iter(changes.values()))}"' in refused.text
    assert harness.store.engineers.get("a@example.com").max_open_issues == 3


def test_an_operator_adds_time_off_in_their_own_zone_then_ends_it(console, harness):
    store, now = harness.store, harness.clock.now()  # Monday 2026-11-30 01:00 UTC
    store.engineers.put("a@example.com", dispatch_enabled=True, now=now)
    console.sign_in("operator")
    console.cookies["td_zone"] = "Europe/Berlin"

    added = console.post(f"{ALICE}/time-off", {"zone": "Europe/Berlin", "reason": "dentist",
                                               "start": "2026-11-30T01:30",
                                               "end": "2026-12-01T18:00"})

    assert added.status_code == 303
    [entry], _ = store.time_off.page("a@example.com", now=now)
    assert (entry.start, entry.end) == (now.replace(hour=0, minute=30),
                                        now.replace(day=1, month=12, hour=17, minute=0))
    assert (entry.reason, entry.source) == ("dentist", "api")
    page = main_text(console.get(added.headers["Location"]).text)
    assert "The time off was added." in page
    assert "2026-11-30 01:30:00 2026-12-01 18:00:00 dentist api" in page
    assert "away on time off until Tue 2026-12-01 17:00 UTC (dentist)" in page

    asked = console.post(f"{ALICE}/time-off/{entry.id}/end")
    assert asked.status_code == 200 and "End time off" in asked.text
    assert store.time_off.page("a@example.com", now=now)[1] == 1
    ended = console.post(f"{ALICE}/time-off/{entry.id}/end", {"confirmed": "yes"})
    assert "has ended" in main_text(ended.text)
    assert store.time_off.page("a@example.com", now=now, past=True)[1] == 0
    assert "Available now available" in main_text(console.get(ALICE).text)


@pytest.mark.parametrize(("form", "says"), [
    ({"start": "2026-12-02T09:00", "end": "2026-12-01T09:00"}, "end:"),
    ({"start": "", "end": "2026-12-01T09:00"}, "start: missing key"),
    ({"start": "next week", "end": "2026-12-01T09:00"}, "start:"),
    ({"start": "2026-12-01T09:00", "end": "2026-12-02T09:00", "zone": "Nowhere/Land"},
     "zone: is not a known time zone"),
])
def test_bad_time_off_is_shown_on_the_page_and_nothing_is_added(console, harness, form, says):
    harness.store.engineers.put("a@example.com", dispatch_enabled=True, now=harness.clock.now())
    console.sign_in("operator")

    refused = console.post(f"{ALICE}/time-off", {"zone": "UTC", **form})

    assert refused.status_code == 400
    assert refusal(refused.text).startswith("Not saved") and says in refusal(refused.text)
    assert harness.store.time_off.page("a@example.com", now=harness.clock.now())[1] == 0


def test_a_viewer_sees_no_settings_form_and_a_forged_post_is_refused(console, harness):
    harness.store.engineers.put("a@example.com", dispatch_enabled=True, now=harness.clock.now())
    harness.store.time_off.add(TimeOff(None, "a@example.com", harness.clock.now(),
                                       harness.clock.now() + timedelta(days=1), "", "api"),
                               harness.clock.now())
    console.sign_in("viewer")

    page = console.get(ALICE).text
    assert 'method="post"' not in page.split('<main id="main"', 1)[1]
    for path, form in ((f"{ALICE}/availability", settings_form()),
                       (f"{ALICE}/time-off", {"zone": "UTC", "start": "2026-12-01T09:00",
                                              "end": "2026-12-02T09:00"}),
                       (f"{ALICE}/time-off/1/end", {"confirmed": "yes"})):
        assert console.post(path, form).status_code == 403
        assert console.post(path, {**form, "csrf_token": "forged"}).status_code == 403
    assert harness.store.engineers.get("a@example.com").timezone == ""
    assert harness.store.time_off.page("a@example.com", now=harness.clock.now())[1] == 1
