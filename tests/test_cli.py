"""The ``ticket-dispatcher`` command line: exit codes, output, no tracebacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.factories import EXAMPLES, example_policy, policy_body
from ticket_dispatcher import __version__
from ticket_dispatcher.cli import main
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    ExecutionMode,
    ExecutionStatus,
    RuleExecution,
    RuleOutcome,
)
from ticket_dispatcher.domain.model import Issue, PolicySpec, PolicyStatus
from ticket_dispatcher.domain.shadow import Decision
from ticket_dispatcher.errors import ConfigError

SECRET = "jira-api-token-never-printed"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """Only the test's own settings: a developer's TICKET_DISPATCHER_* must not leak in."""
    for name in list(os.environ):
        if name.startswith("TICKET_DISPATCHER_") and not name.startswith("TICKET_DISPATCHER_TEST_"):
            monkeypatch.delenv(name)


@pytest.fixture
def write_json(tmp_path):
    def write(name: str, value) -> str:
        path = tmp_path / name
        path.write_text(value if isinstance(value, str) else json.dumps(value))
        return str(path)

    return write


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def jira_issue(priority: str = "P1") -> dict:
    """A ``GET /rest/api/2/issue/{key}`` answer."""
    return {
        "key": "TCID-12345",
        "fields": {
            "summary": "database is down",
            "project": {"key": "TCID"},
            "environment": None,
            "reporter": {"accountId": "r-1", "accountType": "atlassian",
                         "emailAddress": "Reporter@Example.com", "displayName": "R",
                         "active": True},
            "assignee": None,
            "created": "2021-01-17T12:34:00.000+0000",
            "components": [{"name": "db"}],
            "labels": ["auto-dispatch"],
            "priority": {"name": priority},
            "status": {"name": "Open"},
            "customfield_10053": None,
            "customfield_10076": {"value": "S1"},
        },
    }


def snapshot_issue(priority: str = "P3") -> dict:
    """The issue snapshot (``model.Issue``)."""
    return Issue(
        key="TCID-7", project_key="TCID", priority=priority, status="Open",
        created_at=datetime(2026, 11, 30, tzinfo=UTC),
    ).to_json()


# --- version and config ------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys):
    assert run(capsys, "version") == (0, f"ticket-dispatcher {__version__}\n", "")


def test_config_show_prints_the_effective_configuration_masked(capsys, tmp_path, monkeypatch):
    path = tmp_path / "td.toml"
    path.write_text(f'[jira]\napi_token = "{SECRET}"\n[http]\nport = 9000\n')
    monkeypatch.setenv("TICKET_DISPATCHER_AUTH_API_KEYS", f"jira:automation:{SECRET}-key")

    code, out, err = run(capsys, "config", "show", "--config", str(path))

    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert SECRET not in out
    assert shown["http"]["port"] == 9000
    assert shown["jira"]["api_token"] == "***"
    assert shown["auth"]["api_keys"] == [
        {"name": "jira", "role": "automation", "key_sha256": "***"}
    ]
    assert shown["trigger_defer_interval"] == "5s"


def test_config_option_may_come_before_the_command(capsys, tmp_path):
    path = tmp_path / "td.toml"
    path.write_text("execution_slots = 2\n")

    code, out, _ = run(capsys, "--config", str(path), "config", "show")

    assert (code, json.loads(out)["execution_slots"]) == (0, 2)


def test_config_path_from_the_environment(capsys, tmp_path, monkeypatch):
    path = tmp_path / "td.toml"
    path.write_text("execution_slots = 3\n")
    monkeypatch.setenv("TICKET_DISPATCHER_CONFIG", str(path))

    code, out, _ = run(capsys, "config", "show")

    assert (code, json.loads(out)["execution_slots"]) == (0, 3)


def test_bad_configuration_is_one_line_naming_the_key(capsys, monkeypatch):
    monkeypatch.setenv("TICKET_DISPATCHER_HTTP_PORT", "abc")
    monkeypatch.setenv("TICKET_DISPATCHER_JIRA_API_TOKEN", SECRET)

    code, out, err = run(capsys, "config", "show")

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "TICKET_DISPATCHER_HTTP_PORT: expected an integer between 1 and 65535" in err
    assert SECRET not in err


def test_missing_config_file_is_a_usage_error(capsys, tmp_path):
    code, _, err = run(capsys, "config", "show", "--config", str(tmp_path / "absent.toml"))

    assert code == 2
    assert_one_line_error(err)
    assert "absent.toml" in err


@pytest.mark.parametrize(
    "argv",
    [["frobnicate"], ["serve", "--port", "70000"], ["policy", "test", "p.json"], ["config", "x"]],
)
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)

    assert (code, out) == (2, "")
    assert_one_line_error(err)


def test_group_without_a_subcommand_shows_its_help_and_exits_2(capsys):
    code, _, err = run(capsys, "policy")

    assert code == 2
    assert "validate" in err and "test" in err


# --- policy validate ---------------------------------------------------------------------------


def test_policy_validate_accepts_a_valid_policy(capsys, write_json):
    assert run(capsys, "policy", "validate", write_json("p.json", policy_body())) == (
        0, "valid\n", ""
    )


def test_policy_validate_accepts_the_shipped_assign_example(capsys):
    path = EXAMPLES / "policies" / "assign-tcid.json"
    code, out, _ = run(capsys, "policy", "validate", str(path))

    assert (code, out) == (0, "valid\n")


@pytest.mark.parametrize("name", ["severity-assignee", "priority-l2", "priority-assignee"])
def test_policy_validate_accepts_the_notification_examples(capsys, name):
    # Validated against the product registry, which now runs every notification action.
    code, out, _ = run(capsys, "policy", "validate", str(EXAMPLES / "policies" / f"{name}.json"))

    assert (code, out) == (0, "valid\n")


def test_policy_validate_quotes_the_values_it_rejects(capsys, write_json):
    body = policy_body()
    body["rules"][0]["when"] = {"all": [
        {"field": "issue.foo", "operator": "eq", "value": "x"},
        {"field": "now", "operator": "time_window", "time_window": {
            "timezone": "Mars/Olympus", "weekdays": ["mon"], "start": "09:00", "end": "18:00"}},
    ]}

    code, out, _ = run(capsys, "policy", "validate", write_json("p.json", body))

    assert code == 1
    assert out.splitlines() == [
        'rules[0].when.all[0].field: unknown field "issue.foo"; see GET /dispatch/options',
        'rules[0].when.all[1].time_window.timezone: unknown time zone "Mars/Olympus"; use an '
        'IANA name like "Asia/Shanghai"',
    ]


def test_policy_validate_prints_every_problem_with_its_path(capsys, write_json):
    body = policy_body()
    body["rules"][0]["when"] = {"field": "issue.priority", "operator": "regex", "value": "("}
    body["rules"][0]["then"][0]["assign"]["strategy"] = "weighted"

    code, out, err = run(capsys, "policy", "validate", write_json("p.json", body))

    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 2
    assert any(line.startswith("rules[0].when.value: ") for line in lines)
    assert any(line.startswith("rules[0].then[0].assign.strategy: ") for line in lines)
    assert "2 problems" in err


def _deep_policy_text(key: str, levels: int) -> str:
    # Written as text: json.dumps itself recurses.
    leaf = '{"field": "issue.priority", "operator": "eq", "value": "P1"}'
    opening, closing = ('{"not": ', "}") if key == "not" else ('{"all": [', "]}")
    return json.dumps(policy_body()).replace(
        json.dumps(policy_body()["rules"][0]["when"]), opening * levels + leaf + closing * levels)


@pytest.mark.parametrize(("key", "levels"), [("not", 100), ("all", 100)])
def test_policy_validate_reports_deep_conditions_as_one_problem(capsys, write_json, key, levels):
    code, out, err = run(capsys, "policy", "validate",
                         write_json("p.json", _deep_policy_text(key, levels)))

    assert code == 1
    [line] = out.splitlines()
    assert line.startswith("rules[0].when.")
    assert line.endswith(": conditions nest deeper than 16 levels of all, any and not")
    assert "Traceback" not in err


@pytest.mark.parametrize(("key", "levels"), [("not", 500), ("all", 5_000)])
def test_policy_validate_calls_a_file_nested_beyond_the_json_cap_unreadable(
    capsys, write_json, key, levels
):
    code, _, err = run(capsys, "policy", "validate",
                       write_json("p.json", _deep_policy_text(key, levels)))

    assert code == 2
    assert "nests deeper than 256 levels" in err
    assert "Traceback" not in err and "RecursionError" not in err


def test_policy_validate_names_the_regex_construct_re2_cannot_run(capsys, write_json):
    body = policy_body()
    body["rules"][0]["when"] = {"field": "issue.summary", "operator": "regex",
                                "value": "db(?!-test)"}

    code, out, _ = run(capsys, "policy", "validate", write_json("p.json", body))

    assert (code, out) == (1, 'rules[0].when.value: negative lookahead assertions are not '
                              'supported (RE2 syntax): "db(?!-test)"\n')


@pytest.mark.parametrize("content", [None, "{not json", "\udcff"])
def test_policy_validate_unreadable_file_exits_2(capsys, tmp_path, content):
    path = tmp_path / "p.json"
    if content == "\udcff":
        path.write_bytes(b"\xff\xfe{")
    elif content is not None:
        path.write_text(content)

    code, out, err = run(capsys, "policy", "validate", str(path))

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "p.json" in err


# --- policy test -------------------------------------------------------------------------------

ASSIGN_TCID = str(EXAMPLES / "policies" / "assign-tcid.json")
TUESDAY_11_SHANGHAI = "2026-12-01T03:00:00Z"
TUESDAY_21_SHANGHAI = "2026-12-01T13:00:00Z"


def test_policy_test_explains_rules_for_a_jira_issue(capsys, write_json):
    issue = write_json("issue.json", jira_issue("P1"))

    code, out, err = run(
        capsys, "policy", "test", ASSIGN_TCID, "--issue", issue, "--now", TUESDAY_11_SHANGHAI
    )

    assert (code, err) == (0, "")
    assert "TCID-12345" in out
    assert "rule 'business hours' (priority 10): matched" in out
    assert '"oncall_team": "sre"' in out  # the action that would run
    assert "rule 'everything else' (priority 20): not_evaluated" in out
    assert "alice@example.com" not in out  # that rule's action would not run


def test_policy_test_reads_a_snapshot_and_prints_json(capsys, write_json):
    issue = write_json("issue.json", snapshot_issue("P1"))

    code, out, _ = run(
        capsys, "policy", "test", ASSIGN_TCID, "--issue", issue,
        "--now", TUESDAY_21_SHANGHAI, "--json",
    )

    report = json.loads(out)
    assert code == 0
    assert (report["issue_key"], report["now"]) == ("TCID-7", "2026-12-01T13:00:00.000Z")
    assert [(r["name"], r["outcome"]) for r in report["rules"]] == [
        ("business hours", "not_matched"),  # 21:00 in Shanghai is outside the window
        ("everything else", "matched"),
    ]
    assert report["rules"][0]["reason"]
    assert report["rules"][1]["actions"][0]["type"] == "assign"
    assert report["warnings"] == []


def test_policy_test_uses_the_configured_severity_field(capsys, write_json, tmp_path):
    raw = jira_issue()
    raw["fields"]["customfield_20000"] = raw["fields"].pop("customfield_10076")
    config = tmp_path / "td.toml"
    config.write_text('[jira]\nseverity_field_id = "customfield_20000"\n')
    policy = policy_body()
    policy["rules"][0]["when"] = {
        "field": "issue.custom_fields.severity", "operator": "eq", "value": "S1"
    }

    code, out, _ = run(
        capsys, "policy", "test", write_json("p.json", policy),
        "--issue", write_json("issue.json", raw), "--config", str(config), "--json",
    )

    assert code == 0
    assert json.loads(out)["rules"][0]["outcome"] == "matched"


def test_policy_test_reports_validation_problems_as_warnings(capsys, write_json):
    policy = policy_body()
    policy["rules"][0]["then"][0]["assign"]["strategy"] = "weighted"

    code, out, _ = run(
        capsys, "policy", "test", write_json("p.json", policy),
        "--issue", write_json("issue.json", snapshot_issue("P0")), "--now", TUESDAY_11_SHANGHAI,
    )

    assert code == 0
    assert "warnings" in out
    assert "rules[0].then[0].assign.strategy" in out
    assert "rule 'urgent' (priority 10): matched" in out


def test_policy_test_with_a_malformed_policy_exits_1(capsys, write_json):
    code, out, err = run(
        capsys, "policy", "test", write_json("p.json", {"name": 3, "rules": []}),
        "--issue", write_json("issue.json", snapshot_issue()),
    )

    assert code == 1
    assert "name: " in out
    assert_one_line_error(err)


@pytest.mark.parametrize("now", ["yesterday", "2026-12-01T03:00:00",
                                 # past what the calendar shows in every zone
                                 "9999-12-31T23:00:00Z", "0001-01-01T00:00:00+14:00"])
def test_policy_test_bad_now_exits_2(capsys, write_json, now):
    code, out, err = run(
        capsys, "policy", "test", ASSIGN_TCID,
        "--issue", write_json("issue.json", snapshot_issue()), "--now", now,
    )

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "--now" in err


@pytest.mark.parametrize("issue", [{"fields": {}}, [], {"key": "X-1"}, "not json"])
def test_policy_test_bad_issue_file_exits_2(capsys, write_json, issue):
    code, out, err = run(
        capsys, "policy", "test", ASSIGN_TCID, "--issue", write_json("issue.json", issue)
    )

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "issue.json" in err


def test_policy_test_defaults_now_to_the_current_time(capsys, write_json):
    before = datetime.now(UTC)

    code, out, _ = run(
        capsys, "policy", "test", ASSIGN_TCID,
        "--issue", write_json("issue.json", snapshot_issue()), "--json",
    )

    now = datetime.fromisoformat(json.loads(out)["now"])
    assert code == 0
    assert (now - before).total_seconds() > -1 and (now - before).total_seconds() < 60


# --- serve and migrate -------------------------------------------------------------------------


@pytest.fixture
def fake_server(monkeypatch):
    """Stands in for ``ticket_dispatcher.service``: records the call instead of serving."""
    calls: list[tuple[Config, dict]] = []
    module = types.ModuleType("ticket_dispatcher.service")

    def serve(config, **options):
        calls.append((config, options))
        if module.error is not None:
            raise module.error
        return 0

    module.serve = serve
    module.error = None
    monkeypatch.setitem(sys.modules, "ticket_dispatcher.service", module)
    module.calls = calls
    return module


def test_serve_passes_the_configuration_and_options(capsys, fake_server, monkeypatch):
    monkeypatch.setenv("TICKET_DISPATCHER_EXECUTION_SLOTS", "4")

    code = main(["serve", "--host", "0.0.0.0", "--port", "9999", "--sandbox"])

    ((config, options),) = fake_server.calls
    assert code == 0
    assert config.execution_slots == 4
    assert options == {
        "host": "0.0.0.0", "port": 9999, "sandbox": True, "insecure_no_auth": False
    }


def test_serve_defaults_leave_host_and_port_to_the_configuration(capsys, fake_server):
    assert main(["serve", "--insecure-no-auth"]) == 0

    ((_, options),) = fake_server.calls
    assert options == {"host": None, "port": None, "sandbox": False, "insecure_no_auth": True}


def test_serve_refusing_to_start_is_one_line_not_a_traceback(capsys, fake_server):
    fake_server.error = ConfigError("no API keys are configured; refusing to start")

    code, _, err = run(capsys, "serve")

    assert code == 2
    assert_one_line_error(err)
    assert "no API keys are configured" in err


def test_migrate_applies_then_reports_up_to_date(capsys, tmp_path, monkeypatch):
    from ticket_dispatcher.store.migrations import latest_version

    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", f"sqlite:///{tmp_path / 'td.db'}")
    latest = latest_version()

    first = run(capsys, "migrate")
    second = run(capsys, "migrate")

    assert first[0] == 0
    assert first[1].startswith(f"schema at version {latest}, applied [1")
    assert second == (0, f"schema up to date at version {latest}\n", "")


# --- the module entry point --------------------------------------------------------------------


def test_python_dash_m_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "ticket_dispatcher", "version"],
        capture_output=True, text=True, cwd=ROOT, timeout=30, check=False,
    )

    assert (result.returncode, result.stdout) == (0, f"ticket-dispatcher {__version__}\n")


def test_sqlite_database_in_a_missing_directory_is_a_config_error(capsys, monkeypatch):
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", "sqlite:////nonexistent-dir/td.db")

    code, out, err = run(capsys, "migrate")

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "database_url" in err and "does not exist" in err


def test_unreachable_postgres_is_one_line_without_the_password(capsys, monkeypatch):
    pytest.importorskip("psycopg")
    url = f"postgresql://dispatcher:{SECRET}@127.0.0.1:1/td?connect_timeout=1"
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", url)

    code, out, err = run(capsys, "migrate")

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "postgresql://dispatcher:***@127.0.0.1:1/td" in err
    assert SECRET not in err


# --- a policy as the API returns it ------------------------------------------------------------

SERVER_FIELDS_NOTE = ("ignored server-assigned fields: id, family_id, version, status, "
                      "created_at, updated_at, activated_at, origin, rules[].id")


def as_the_api_returns_it(body: dict) -> dict:
    """``body`` the way ``GET /dispatch/policies/{id}`` answers it."""
    return {"id": 7, "family_id": "pf_abc", "version": 2, "status": "active", **body,
            "rules": [{"id": 10 + index, **rule} for index, rule in enumerate(body["rules"])],
            "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z",
            "activated_at": None, "origin": "api"}


def test_policy_validate_reads_a_policy_as_the_api_returns_it_with_a_note(capsys, write_json):
    path = write_json("p.json", as_the_api_returns_it(policy_body()))

    code, out, err = run(capsys, "policy", "validate", path)

    assert (code, out) == (0, "valid\n")
    assert err == (f"ticket-dispatcher: note: {path}: {SERVER_FIELDS_NOTE} (a create or edit "
                   "body must not carry them)\n")


def test_policy_validate_judges_the_rest_of_a_fetched_policy(capsys, write_json):
    body = as_the_api_returns_it(policy_body())
    body["trigger"]["source_in"] = ["Jira Automation"]

    code, out, err = run(capsys, "policy", "validate", write_json("p.json", body))

    assert code == 1
    assert out.startswith('trigger.source_in[0]: "Jira Automation" is not a lower-case source '
                          "name like jira_automation")
    assert SERVER_FIELDS_NOTE in err and "1 problem" in err


def test_policy_test_reads_a_policy_as_the_api_returns_it(capsys, write_json):
    policy = write_json("p.json", as_the_api_returns_it(example_policy("assign-tcid")))

    code, out, err = run(capsys, "policy", "test", policy, "--issue",
                         write_json("issue.json", snapshot_issue("P1")),
                         "--now", TUESDAY_11_SHANGHAI, "--json")

    assert code == 0
    assert json.loads(out)["warnings"] == []
    assert [r["outcome"] for r in json.loads(out)["rules"]] == ["matched", "not_evaluated"]
    assert SERVER_FIELDS_NOTE in err


def broken_timezone_policy() -> dict:
    body = example_policy("assign-tcid")
    body["rules"][0]["when"]["all"][1]["time_window"]["timezone"] = "Asia/Shangai"
    return body


def test_policy_test_lists_invalid_conditions_as_warnings_and_walks_the_rules(capsys,
                                                                              write_json):
    code, out, err = run(
        capsys, "policy", "test", write_json("p.json", broken_timezone_policy()),
        "--issue", write_json("issue.json", snapshot_issue("P1")), "--now", TUESDAY_11_SHANGHAI,
    )

    zone = ('rules[0].when.all[1].time_window.timezone: unknown time zone "Asia/Shangai"; use '
            'an IANA name like "Asia/Shanghai"')
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "policy 'Assign TCID tickets' on TCID-7 at 2026-12-01T03:00:00.000Z",
        "warnings (1 problem; it could not be activated):",
        f"  {zone}",
        "rule 'business hours' (priority 10): condition_error",
        "  reason: the condition cannot be evaluated: when.all[1].time_window.timezone: unknown "
        'time zone "Asia/Shangai"; use an IANA name like "Asia/Shanghai"',
        "rule 'everything else' (priority 20): not_evaluated",
        "  reason: not evaluated: the execution fails at rule 'business hours' (condition_error)",
    ]


def test_policy_test_json_reports_the_condition_error_on_its_rule(capsys, write_json):
    code, out, _ = run(
        capsys, "policy", "test", write_json("p.json", broken_timezone_policy()),
        "--issue", write_json("issue.json", snapshot_issue("P1")), "--json",
    )

    report = json.loads(out)
    assert code == 0
    assert [w["path"] for w in report["warnings"]] == [
        "rules[0].when.all[1].time_window.timezone"]
    assert [(r["name"], r["outcome"]) for r in report["rules"]] == [
        ("business hours", "condition_error"), ("everything else", "not_evaluated")]


# --- exit codes, as README.md "Command line" documents them ------------------------------------


def test_version_exits_0(capsys):
    assert run(capsys, "version")[0] == 0


def test_config_show_exits_0_and_2_for_a_bad_configuration(capsys, monkeypatch):
    assert run(capsys, "config", "show")[0] == 0
    monkeypatch.setenv("TICKET_DISPATCHER_EXECUTION_SLOTS", "0")
    assert run(capsys, "config", "show")[0] == 2


def test_migrate_with_postgres_but_without_its_driver_is_a_configuration_error_exit_2(
    capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now fails
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", "postgresql://td@127.0.0.1:1/td")

    code, out, err = run(capsys, "migrate")

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "postgres' extra" in err


def test_serve_exits_1_when_the_database_cannot_be_reached(capsys, fake_server):
    from peewee import OperationalError

    fake_server.error = OperationalError("connection refused")

    code, out, err = run(capsys, "serve")

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "connection refused" in err


@pytest.mark.parametrize(("argv", "code"), [
    (["frobnicate"], 2),
    (["policy", "validate"], 2),
    (["migrate", "--frobnicate"], 2),
])
def test_usage_errors_exit_2_for_every_command(capsys, argv, code):
    assert run(capsys, *argv)[0] == code


def test_an_interrupted_command_exits_130(capsys, fake_server):
    fake_server.error = KeyboardInterrupt()

    assert run(capsys, "serve")[0] == 130


def test_policy_test_exit_codes(capsys, write_json):
    issue = write_json("issue.json", snapshot_issue())

    assert run(capsys, "policy", "test", ASSIGN_TCID, "--issue", issue)[0] == 0
    assert run(capsys, "policy", "test", write_json("p.json", {"rules": 1}),
               "--issue", issue)[0] == 1
    assert run(capsys, "policy", "test", ASSIGN_TCID, "--issue", "absent.json")[0] == 2


def _commands(parser, prefix: str = "") -> list[str]:
    """Every runnable command of the parser: ``serve``, ``config show``, ``policy test``..."""
    found = []
    for action in parser._actions:
        for name, sub in (getattr(action, "choices", None) or {}).items():
            if isinstance(sub, type(parser)):
                nested = _commands(sub, f"{prefix}{name} ")
                found += nested or [f"{prefix}{name}"]
    return found


def test_readme_gives_the_exit_codes_of_every_command():
    from ticket_dispatcher.cli import _build_parser

    rows = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0].startswith("`ticket-dispatcher ") and len(cells) == 3:
            words = cells[0].strip("`").split()[1:]
            command = " ".join(w for w in words if re.fullmatch(r"[a-z]+(-[a-z]+)*", w))
            rows[command] = cells[2]

    assert set(rows) == set(_commands(_build_parser()))
    assert all(codes.startswith("0") for codes in rows.values()), rows


# --- policy shadow-report ------------------------------------------------------------------------

SHADOW_NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


def live_execution(execution_id: int, rule: str, assignee: str) -> Execution:
    """A live execution that ended, as the store's ``settle`` reads it: ``rule`` matched and
    assigned ``assignee``."""
    action = ActionExecution(0, "assign", {"type": "assign", "assign": {}},
                             ActionStatus.SUCCEEDED, context={"assign": {"assignee": assignee}})
    return Execution(execution_id, execution_id, "TCID-1", ExecutionMode.LIVE, 1, "pf_x", 1, [
        RuleExecution(0, 1, rule, 10, {"always": True}, OnSuccess.TERMINATE, [action],
                      RuleOutcome.MATCHED)], status=ExecutionStatus.SUCCEEDED)


@pytest.fixture
def shadowed(store, db_url, monkeypatch) -> int:
    """A draft in shadow beside the active version of its family, with three decisions: one
    agreed, one for another assignee (TCID-7), one still pending; the CLI reads this database."""
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", db_url)
    spec = PolicySpec.from_json(policy_body())
    live = store.policies.activate(store.policies.create(spec, now=SHADOW_NOW).id, now=SHADOW_NOW)
    draft = store.policies.create_replacement(live.id, spec, now=SHADOW_NOW)
    store.shadows.start(draft.id, now=SHADOW_NOW)
    for trigger_id, key, assignee in ((1, "TCID-1", "a@example.com"),
                                      (2, "TCID-7", "b@example.com"),
                                      (3, "TCID-8", "a@example.com")):
        store.shadows.record(policy_id=draft.id, family_id=draft.family_id,
                             trigger_id=trigger_id, issue_key=key, live_execution_id=trigger_id,
                             shadow=Decision(["rule"], ["assign"], assignee), now=SHADOW_NOW)
    for execution_id in (1, 2):
        store.shadows.settle(live_execution(execution_id, "rule", "a@example.com"), SHADOW_NOW)
    return draft.id


def test_policy_shadow_report_prints_the_counts_the_kinds_and_the_latest_cases(capsys, shadowed,
                                                                               store):
    family = store.policies.get(shadowed).family_id

    code, out, err = run(capsys, "policy", "shadow-report", str(shadowed))

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"policy {shadowed} (family {family}): in shadow since 2026-12-01T03:00:00.000Z",
        "seen 3: agreed 1, differed 1, pending 1; dropped 0 (not evaluated: busy)",
        "differences: no_match 0, other_rule 0, other_actions 0, other_assignee 1",
        "latest 1 differing case, newest first:",
        "  TCID-7 other_assignee (trigger 2, live execution 2, 2026-12-01T03:00:00.000Z)",
        "    live:   rules 'rule' -> assign; assignee a@example.com",
        "    shadow: rules 'rule' -> assign; assignee b@example.com",
    ]


def test_policy_shadow_report_json_is_the_report_the_api_answers(capsys, shadowed, store):
    answered = store.shadows.report(shadowed).to_json()  # before the CLI binds its own store

    code, out, _ = run(capsys, "policy", "shadow-report", str(shadowed), "--json")

    assert code == 0
    assert json.loads(out) == answered


def test_policy_shadow_report_of_a_policy_never_shadowed_shows_zero_counts(capsys, shadowed,
                                                                           store):
    live = store.policies.page(status=PolicyStatus.ACTIVE, limit=1, offset=0)[0][0]

    code, out, _ = run(capsys, "policy", "shadow-report", str(live.id))

    assert code == 0
    assert out.splitlines()[:3] == [
        f"policy {live.id} (family {live.family_id}): not in shadow",
        "seen 0: agreed 0, differed 0, pending 0; dropped 0 (not evaluated: busy)",
        "differences: no_match 0, other_rule 0, other_actions 0, other_assignee 0"]


def test_policy_shadow_report_of_an_unknown_policy_exits_1(capsys, shadowed):
    code, out, err = run(capsys, "policy", "shadow-report", "999999")

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "policy 999999 not found" in err


@pytest.mark.parametrize("policy_id", ["0", "x", "-3"])
def test_policy_shadow_report_bad_policy_id_exits_2(capsys, policy_id):
    code, out, err = run(capsys, "policy", "shadow-report", "--", policy_id)

    assert (code, out) == (2, "")
    assert_one_line_error(err)


def test_policy_shadow_report_on_an_unmigrated_database_says_to_migrate(capsys, tmp_path,
                                                                       monkeypatch):
    from ticket_dispatcher.store import Store

    url = f"sqlite:///{tmp_path / 'td.db'}"
    Store.for_url(url).ping()  # an empty database file, no schema
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", url)

    code, out, err = run(capsys, "policy", "shadow-report", "1")

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "schema at version 0" in err and "ticket-dispatcher migrate" in err


def test_policy_shadow_report_never_creates_a_missing_sqlite_file(capsys, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", f"sqlite:///{tmp_path / 'absent.db'}")

    code, out, err = run(capsys, "policy", "shadow-report", "1")

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "no such file" in err
    assert not (tmp_path / "absent.db").exists()


def test_policy_shadow_report_exit_codes(capsys, shadowed):
    assert run(capsys, "policy", "shadow-report", str(shadowed))[0] == 0
    assert run(capsys, "policy", "shadow-report", "999999")[0] == 1
    assert run(capsys, "policy", "shadow-report")[0] == 2
