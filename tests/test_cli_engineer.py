"""``ticket-dispatcher engineer``: an engineer's availability and time off through the configured
database, on both engines, as the API changes them; bad input is one line and exit 1 or 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import policy_body
from tests.test_cli import run

ALICE = "alice@example.com"


@pytest.fixture
def database(store, db_url, monkeypatch):
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", db_url)
    return store


def test_set_then_show_an_engineers_hours_and_cap(capsys, database):
    code, out, err = run(capsys, "engineer", "set", ALICE, "--timezone", "Asia/Shanghai",
                         "--working-hours", '{"mon": ["09:00-18:00"]}', "--max-open-issues", "5")
    shown_code, shown, _ = run(capsys, "engineer", "show", ALICE, "--json")

    assert (code, out, err) == (0, f"created {ALICE}\n", "")
    record = json.loads(shown)
    assert shown_code == 0
    assert record["timezone"] == "Asia/Shanghai"
    assert record["working_hours"]["mon"] == ["09:00-18:00"]
    assert record["max_open_issues"] == 5
    assert record["dispatch_enabled"] is True
    assert set(record["availability"]) == {"available", "reasons", "until"}


def test_time_off_is_added_listed_shown_and_deleted(capsys, database):
    run(capsys, "engineer", "set", ALICE, "--timezone", "UTC")
    start = datetime.now(UTC) - timedelta(hours=1)
    end = start + timedelta(days=3)

    code, added, _ = run(capsys, "engineer", "time-off", "add", ALICE, "--start",
                         start.isoformat(), "--end", end.isoformat(), "--reason", "vacation")
    entry_id = added.split()[0]
    _, listed, _ = run(capsys, "engineer", "time-off", "list", ALICE)
    _, shown, _ = run(capsys, "engineer", "show", ALICE)
    deleted = run(capsys, "engineer", "time-off", "delete", ALICE, entry_id)

    assert code == 0 and "vacation" in added
    assert listed.split()[0] == entry_id
    assert shown.splitlines()[0].startswith(f"{ALICE}: not available now, until ")
    assert "on time off until" in shown
    assert deleted[0] == 0
    assert run(capsys, "engineer", "time-off", "list", ALICE)[1] == ""


@pytest.mark.parametrize("arguments,expected", [
    (["set", ALICE, "--timezone", "Mars/Base"], "timezone"),
    (["set", ALICE, "--timezone", "UTC", "--working-hours", '{"mon": ["25:00-26:00"]}'],
     "working_hours.mon[0]"),
    (["set", ALICE, "--max-open-issues", "-2"], "max_open_issues"),
])
def test_bad_settings_are_one_line_each_and_exit_1(capsys, database, arguments, expected):
    code, out, err = run(capsys, "engineer", *arguments)

    assert code == 1
    assert err.startswith(expected)
    assert "Traceback" not in err


def test_usage_errors_exit_2(capsys, database):
    assert run(capsys, "engineer", "set", "not-an-email", "--timezone", "UTC")[0] == 2
    assert run(capsys, "engineer", "set", ALICE)[0] == 2  # nothing to set
    assert run(capsys, "engineer", "set", ALICE, "--working-hours", "{oops")[0] == 2


def test_an_engineers_jira_account_is_set_for_a_private_email(capsys, database):
    # Jira Cloud leaves a private profile's email out of its user search
    code, out, _ = run(capsys, "engineer", "set", ALICE, "--jira-account-id", "acc-alice-1")
    shown = json.loads(run(capsys, "engineer", "show", ALICE, "--json")[1])
    refused = run(capsys, "engineer", "set", ALICE, "--jira-account-id", " ")

    assert (code, out) == (0, f"created {ALICE}\n")
    assert shown["jira_account_id"] == "acc-alice-1"
    assert refused[0] == 2 and "is not a Jira account id" in refused[2]


@pytest.mark.parametrize("given", ["0", "9223372036854775808", "9" * 5000, "+5", "٥", "1_0"])
def test_a_time_off_id_no_database_holds_is_refused_as_one(capsys, database, given):
    code, _, err = run(capsys, "engineer", "time-off", "delete", ALICE, given)

    assert code == 2
    assert "is not a time-off entry id" in err and "Traceback" not in err


def test_show_says_when_an_engineer_has_no_cap(capsys, database):
    run(capsys, "engineer", "set", ALICE, "--timezone", "UTC")

    code, out, _ = run(capsys, "engineer", "show", ALICE)

    assert code == 0
    assert "max_open_issues no cap;" in out and "None" not in out


def test_time_off_of_an_unknown_engineer_or_id_fails_plainly(capsys, database):
    code, _, err = run(capsys, "engineer", "time-off", "add", "nobody@example.com", "--start",
                       "2026-12-01T00:00:00Z", "--end", "2026-12-02T00:00:00Z")
    run(capsys, "engineer", "set", ALICE, "--timezone", "UTC")
    missing = run(capsys, "engineer", "time-off", "delete", ALICE, "99")
    backwards = run(capsys, "engineer", "time-off", "add", ALICE, "--start",
                    "2026-12-02T00:00:00Z", "--end", "2026-12-01T00:00:00Z")

    assert (code, err.strip()) == (
        1, "ticket-dispatcher: engineer nobody@example.com not found; create it with PUT "
           "/api/v1/ticketmanager/engineers/nobody@example.com (body "
           '{"dispatch_enabled": true}) or '
           "`ticket-dispatcher engineer set nobody@example.com --dispatch-enabled true`")
    assert missing[0] == 1 and "not found" in missing[2]
    assert backwards[0] == 1 and backwards[2].startswith("--end: ")


def test_policy_test_judges_the_listed_engineers_with_availability(capsys, database, tmp_path):
    """The example assign policy's 'everything else' rule lists alice, bob and carol; carol is
    on time off and dave is no engineer at all."""
    from tests.test_cli import ASSIGN_TCID, snapshot_issue

    for email in ("alice@example.com", "bob@example.com", "carol@example.com"):
        run(capsys, "engineer", "set", email, "--timezone", "UTC")
    start = datetime(2026, 12, 4, tzinfo=UTC)
    run(capsys, "engineer", "time-off", "add", "carol@example.com", "--start",
        start.isoformat(), "--end", (start + timedelta(days=3)).isoformat(),
        "--reason", "offsite")
    issue = tmp_path / "issue.json"
    issue.write_text(json.dumps(snapshot_issue()))

    code, out, _ = run(capsys, "policy", "test", ASSIGN_TCID, "--issue", str(issue), "--now",
                       "2026-12-05T02:00:00Z", "--availability")
    json_code, document, _ = run(capsys, "policy", "test", ASSIGN_TCID, "--issue", str(issue),
                                 "--now", "2026-12-05T02:00:00Z", "--availability", "--json")

    assert code == json_code == 0
    assert "    alice@example.com: eligible" in out
    assert ("    carol@example.com: passed over: on time off until Mon 2026-12-07 00:00 UTC "
            "(offsite)") in out
    [rule] = [r for r in json.loads(document)["rules"] if r["outcome"] == "matched"]
    assert [(v["email"], v["eligible"]) for v in rule["candidates"][0]] == [
        ("alice@example.com", True), ("bob@example.com", True), ("carol@example.com", False)]


def test_policy_test_without_availability_reads_no_database(capsys, tmp_path, monkeypatch):
    from tests.test_cli import ASSIGN_TCID, snapshot_issue

    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", "sqlite:////nonexistent-dir/td.db")
    issue = tmp_path / "issue.json"
    issue.write_text(json.dumps(snapshot_issue()))

    assert run(capsys, "policy", "test", ASSIGN_TCID, "--issue", str(issue))[0] == 0
    assert run(capsys, "policy", "test", ASSIGN_TCID, "--issue", str(issue),
               "--availability")[0] == 2  # its directory does not exist: a configuration error


def test_policy_validate_with_engineers_warns_about_a_receiver_naming_no_engineer(
        capsys, database, tmp_path):
    run(capsys, "engineer", "set", "a@example.com", "--timezone", "UTC")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(policy_body()))  # users a@example.com and b@example.com
    path = str(path)

    offline = run(capsys, "policy", "validate", path)
    checked = run(capsys, "policy", "validate", path, "--engineers")

    assert offline == (0, "valid\n", "")
    assert checked == (0, 'warning: rules[0].then[0].assign.receiver.users[1]: '
                          '"b@example.com" is not a dispatch-enabled engineer: no engineer has '
                          'this email (a typo, or one to create); an assignment passes over '
                          'them\nvalid\n', "")


def test_changes_from_the_command_line_are_audited_as_cli(capsys, database, db_url):
    from ticket_dispatcher.store import Store
    from ticket_dispatcher.store.audit import AuditFilter, Via

    run(capsys, "engineer", "set", ALICE, "--timezone", "Asia/Shanghai")
    start = datetime.now(UTC) + timedelta(days=1)
    run(capsys, "engineer", "time-off", "add", ALICE, "--start", start.isoformat(),
        "--end", (start + timedelta(days=1)).isoformat())

    reader = Store.for_url(db_url)  # the command closed the connection it opened
    try:
        records, _ = reader.audit.page(AuditFilter(object_id=ALICE))
    finally:
        reader.close()
    assert [(r.action, r.via) for r in records] == [("engineer.time_off_added", Via.CLI),
                                                    ("engineer.changed", Via.CLI)]
    assert records[1].before is None and records[1].after["timezone"] == "Asia/Shanghai"
    assert records[0].actor == records[1].actor != ""
