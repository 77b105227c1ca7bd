"""``policy export``, ``plan`` and ``apply`` against a real ``serve``: a directory of policy
files round-trips, applying twice changes nothing, drift is refused until ``--force``, and bad
input (an invalid file, a viewer's key, no server) is one clear error that changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.factories import policy_body
from tests.http.conftest import API_KEYS, KEYS
from tests.peer import FakeJira
from tests.process import free_port
from ticket_dispatcher.cli import main

BASE = "/api/v1/ticketmanager"


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        yield fake


@pytest.fixture
def cli(capsys, monkeypatch):
    """Runs the command line in this process with a role's key; (exit code, stdout, stderr)."""
    def run(role: str, *argv: str) -> tuple[int, str, str]:
        monkeypatch.setenv("TICKET_DISPATCHER_API_KEY", KEYS[role])
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err
    return run


def _call(server, method, path, role="operator", **kwargs):
    answer = requests.request(method, server.url + BASE + path, timeout=15,
                              headers={"X-API-KEY": KEYS[role]}, **kwargs)
    assert answer.status_code < 300, answer.text
    return answer.json()


def _active_policy(server, body: dict) -> dict:
    """A family made and activated through the API, as the console or a script would."""
    made = _call(server, "POST", "/dispatch/policies", json=body)
    return _call(server, "POST", f"/dispatch/policies/{made['id']}/activate")


def _policies(server, **params) -> list[dict]:
    return _call(server, "GET", "/dispatch/policies", params={"limit": 200, **params})["items"]


def _write(directory: Path, name: str, value) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    return path


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_export_plan_and_apply_round_trip(processes, db_url, jira, cli, tmp_path):
    server = processes.start(db_url, jira, AUTH_API_KEYS=API_KEYS).wait_serving()
    made_in_api = _active_policy(server, policy_body())
    repo = tmp_path / "policies"

    code, out, _ = cli("viewer", "policy", "export", str(repo), "--server", server.url)
    assert code == 0, out
    exported = _snapshot(repo)
    assert list(exported) == ["Assign TCID tickets.json"]
    assert cli("viewer", "policy", "export", str(repo), "--server", server.url)[0] == 0
    assert _snapshot(repo) == exported  # byte-identical
    assert json.loads(exported["Assign TCID tickets.json"]) == {
        key: value for key, value in made_in_api.items()
        if key in ("name", "description", "trigger")} | {
        "rules": [{k: v for k, v in rule.items() if k != "id"}
                  for rule in made_in_api["rules"]]}
    assert cli("viewer", "policy", "plan", str(repo), "--server", server.url)[:2] == \
        (0, "no change\n")

    edited = json.loads(exported["Assign TCID tickets.json"])
    edited["rules"][0]["priority"] = 5
    edited["rules"].append({**edited["rules"][0], "name": "the rest", "priority": 50,
                            "when": {"field": "issue.priority", "operator": "exists"}})
    _write(repo, "Assign TCID tickets.json", edited)
    _write(repo, "ops.json", policy_body(name="Ops", trigger={"project_key_in": ["OPS"]}))
    code, out, err = cli("viewer", "policy", "plan", str(repo), "--server", server.url)
    assert code == 2, err
    assert "~ policy 'Assign TCID tickets': new version from" in out
    assert "~ rule 'urgent'\n        priority: 10 -> 5\n" in out
    assert "+ rule 'the rest'" in out
    assert "+ policy 'Ops': new family from" in out
    assert out.endswith("plan: 1 to create, 1 to replace, 0 to deactivate\n")

    code, out, err = cli("operator", "policy", "apply", str(repo), "--server", server.url)
    assert code == 0, err
    assert "replaced and activated policy 'Assign TCID tickets': version 2" in out
    assert out.endswith("applied 2 changes\n")
    assert cli("operator", "policy", "apply", str(repo), "--server", server.url)[:2] == \
        (0, "no change\n")
    assert cli("viewer", "policy", "plan", str(repo), "--server", server.url)[0] == 0
    active = {p["name"]: p for p in _policies(server, status="active")}
    assert {p["origin"] for p in active.values()} == {"apply"}
    assert active["Assign TCID tickets"]["family_id"] == made_in_api["family_id"]  # adopted

    (repo / "ops.json").unlink()
    code, out, _ = cli("viewer", "policy", "plan", str(repo), "--server", server.url,
                       "--prune")
    assert code == 2 and "- policy 'Ops': deactivate the active version 1" in out
    assert cli("operator", "policy", "apply", str(repo), "--server", server.url,
               "--prune")[0] == 0
    assert sorted(p["name"] for p in _policies(server, status="active")) == \
        ["Assign TCID tickets"]

    records = _call(server, "GET", "/audit", params={"actor": "operator-key",
                                                     "object_type": "policy"})["records"]
    by_cli = [r for r in records if r["via"] == "cli"]
    assert {r["action"] for r in by_cli} == {"policy.created", "policy.activated",
                                             "policy.deactivated"}
    assert len(by_cli) == 5  # two made, two activated, one deactivated
    assert server.log_problems() == []


def test_drift_is_shown_by_plan_and_refused_by_apply_until_force(processes, tmp_path, jira,
                                                                   cli):
    server = processes.start(f"sqlite:///{tmp_path / 'db.sqlite'}", jira,
                             AUTH_API_KEYS=API_KEYS).wait_serving()
    repo = tmp_path / "policies"
    _write(repo, "assign.json", policy_body())
    assert cli("operator", "policy", "apply", str(repo), "--server", server.url)[0] == 0
    [applied] = _policies(server, status="active")
    fix = _call(server, "POST", f"/dispatch/policies/{applied['id']}/replacements",
                json=policy_body(description="a quick fix in the API"))
    _call(server, "POST", f"/dispatch/policies/{fix['id']}/activate")

    code, out, _ = cli("viewer", "policy", "plan", str(repo), "--server", server.url)
    assert code == 2
    assert (f"drift: policy 'Assign TCID tickets': the active version 2 (policy {fix['id']}, "
            f"family {applied['family_id']}) was made by api, not by apply") in out
    assert 'description: "a quick fix in the API" -> "round robin over the TCID squad"' in out

    code, out, err = cli("operator", "policy", "apply", str(repo), "--server", server.url)
    assert code == 1
    assert f"the active version 2 (policy {fix['id']}" in err
    assert "apply refused: nothing was changed" in err
    assert len(_policies(server)) == 2

    code, out, err = cli("operator", "policy", "apply", str(repo), "--server", server.url,
                         "--force")
    assert code == 0, err
    [active] = _policies(server, status="active")
    assert (active["version"], active["origin"]) == (3, "apply")
    assert active["description"] == "round robin over the TCID squad"
    assert cli("viewer", "policy", "plan", str(repo), "--server", server.url)[0] == 0


def test_bad_input_is_one_clear_error_that_changes_nothing(processes, tmp_path, jira, cli):
    server = processes.start(f"sqlite:///{tmp_path / 'db.sqlite'}", jira,
                             AUTH_API_KEYS=API_KEYS).wait_serving()
    repo = tmp_path / "policies"
    _write(repo, "good.json", policy_body(name="Good"))
    bad = policy_body(name="Bad", trigger={"project_key_in": ["not a project"]})
    bad["rules"][0]["then"][0]["type"] = "no_such_action"
    _write(repo, "bad.json", bad)
    _write(repo, "broken.json", '{"name": ')

    code, out, err = cli("operator", "policy", "apply", str(repo), "--server", server.url)
    assert code == 1
    assert f"{repo / 'bad.json'}: trigger.project_key_in[0]:" in err
    assert f"{repo / 'bad.json'}: rules[0].then[0].type:" in err
    assert f"policy file {repo / 'broken.json'}" in err
    assert "4 problems in" in err and "nothing was applied" in err
    assert cli("viewer", "policy", "plan", str(repo), "--server", server.url)[0] == 1
    assert _policies(server) == []

    (repo / "bad.json").unlink()
    (repo / "broken.json").unlink()
    code, _, err = cli("viewer", "policy", "apply", str(repo), "--server", server.url)
    assert code == 1
    assert "HTTP 403 forbidden" in err and "operator's key" in err
    assert KEYS["viewer"] not in err
    assert _policies(server) == []

    unnamable = _active_policy(server, policy_body(name="ops/night"))
    code, _, err = cli("viewer", "policy", "export", str(tmp_path / "out"), "--server",
                       server.url)
    assert code == 1 and "policy 'ops/night' (version 1" in err
    assert "cannot be a file name" in err and not (tmp_path / "out").exists()
    _call(server, "POST", f"/dispatch/policies/{unnamable['id']}/deactivate")

    _active_policy(server, policy_body(name="Twice"))
    _active_policy(server, policy_body(name="Twice"))
    for command in ("export", "plan", "apply"):
        code, _, err = cli("operator", "policy", command, str(repo), "--server", server.url)
        assert code == 1
        assert "two active families share the name 'Twice'" in err
    assert not (repo / "Twice.json").exists()


@pytest.mark.parametrize("command", ["export", "plan", "apply"])
def test_an_unreachable_server_is_one_line_and_exit_1(command, cli, tmp_path):
    _write(tmp_path / "policies", "good.json", policy_body())
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = cli("operator", "policy", command, str(tmp_path / "policies"),
                         "--server", url)
    assert code == 1
    assert err.startswith(f"ticket-dispatcher: cannot reach the service at {url}: ")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_no_key_is_an_error_not_a_change(cli, monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("TICKET_DISPATCHER_API_KEY", raising=False)
    code = main(["policy", "plan", str(tmp_path), "--server", "http://127.0.0.1:1"])
    assert code == 1
    assert "TICKET_DISPATCHER_API_KEY is not set" in capsys.readouterr().err
