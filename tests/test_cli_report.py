"""``ticket-dispatcher report burden``: the burden report read from the configured database,
on both engines; bad input is one line and exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.store.test_burden import assign, notify
from tests.test_cli import assert_one_line_error, run


@pytest.fixture
def database(store, db_url, monkeypatch):
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", db_url)
    now = datetime.now(UTC)
    assign(store, at=now - timedelta(hours=3))
    notify(store, at=now - timedelta(hours=2), page_at=now - timedelta(hours=2))
    return store


def test_the_report_is_a_table_of_people_and_rotations(capsys, database):
    code, out, err = run(capsys, "report", "burden")

    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("burden from ")
    a_line = next(line for line in lines if line.startswith("a@x.io "))  # people come first
    assert a_line.split()[1:7] == ["1", "-", "1", "0", "1", "0"]  # assigned .. pages, esc in
    assert any(line.startswith("rotation group:sre (p)") for line in lines)


def test_json_is_what_the_api_answers(capsys, database):
    code, out, _ = run(capsys, "report", "burden", "--project", "TCID", "--json")

    report = json.loads(out)
    assert code == 0
    assert report["scope"] == {"kind": "project", "value": "TCID"}
    assert [p["email"] for p in report["people"]] == ["a@x.io", "b@x.io"]


@pytest.mark.parametrize("arguments, named", [
    (["--from", "tomorrow"], "--from"),
    (["--from", "2026-12-02T00:00:00Z", "--to", "2026-12-01T00:00:00Z"], "from"),
    (["--project", "NOPE"], "project"),
    (["--project", "A", "--policy", "B"], "--policy"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, database, arguments, named):
    code, out, err = run(capsys, "report", "burden", *arguments)

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert named in err
