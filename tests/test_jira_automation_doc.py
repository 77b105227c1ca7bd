"""docs/jira-automation.md works as written: each documented "Send web request" (method, URL,
headers, Custom data body), with the smart values replaced as Jira replaces them, is posted to a
real server whose automation key is configured by the guide's own TOML table, after the rule's
"Edit issue" step; it is accepted (202) and reaches the example policy it is meant for, and
without the automation key it is refused (401). The documented JQL conditions name the projects
of those policies, and each notification rule adds the label they require."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.process import wait_until
from ticket_dispatcher.config import AccessRole, load_config
from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES
from ticket_dispatcher.http.auth import authenticate
from ticket_dispatcher.service import Service

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "jira-automation.md"
POLICIES = ROOT / "ops" / "examples" / "policies"
BASE = "/api/v1/ticketmanager"
AUTOMATION_KEY = "jira-automation-key-0123456789abcdef"
VIEWER_KEY = "viewer-key-0123456789abcdef01234567"
SOURCES = ("jira_automation", "jira_assignment_assignee", "jira_assignment_l2_assignee")
# The sample issue each rule runs on, the label its Edit issue step adds, and the example policy
# it must reach (ops/examples/sandbox.json: GTOC-1 is a P1 issue of alice, L2 dave).
RULES = {
    "jira_automation": ("TCID-2", "auto-dispatch", "Assign TCID tickets"),
    "jira_assignment_assignee": ("GTOC-1", "notify-assignee",
                                 "Assignment Notification - Priority Assignee"),
    "jira_assignment_l2_assignee": ("GTOC-1", "notify-l2-assignee",
                                    "Assignment Notification - Priority L2"),
}

_MARKED_BLOCK = re.compile(r"<!-- jira-(web-request|jql): (\S+) -->\s*\n\s*```\w*\n(.*?)\n\s*```",
                           re.DOTALL)
_KEY_CONFIG = re.compile(r"<!-- jira-key-config -->\s*\n\s*```toml\n(.*?)\n\s*```", re.DOTALL)


@dataclass(frozen=True)
class WebRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: str

    def as_jira_sends_it(self, host: str, key: str | None, issue_key: str) -> WebRequest:
        """Smart values replaced by their text, as Jira does; the placeholders filled in."""
        headers = {name: value.replace("<the automation key>", key or "")
                   for name, value in self.headers.items()
                   if key is not None or name != "X-API-KEY"}
        return WebRequest(self.method, self.url.replace("https://<host>", host), headers,
                          self.body.replace("{{issue.key}}", issue_key))


def marked_blocks(kind: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for block_kind, source, text in _MARKED_BLOCK.findall(GUIDE.read_text(encoding="utf-8")):
        if block_kind == kind:
            assert source not in found, f"two {kind} blocks for {source}"
            found[source] = text
    return found


def parse_request(text: str) -> WebRequest:
    head, _, body = text.partition("\n\n")
    request_line, *header_lines = head.splitlines()
    method, url = request_line.split(" ")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return WebRequest(method, url, headers, body.strip())


def documented_requests() -> dict[str, WebRequest]:
    return {source: parse_request(text) for source, text in marked_blocks("web-request").items()}


# --- what the guide says ---------------------------------------------------------------------


def test_the_guide_gives_a_web_request_and_a_jql_condition_for_each_source():
    assert set(documented_requests()) == set(SOURCES)
    assert set(marked_blocks("jql")) == set(SOURCES)


@pytest.mark.parametrize("source", SOURCES)
def test_each_web_request_is_the_trigger_intake_with_both_headers(source):
    request = documented_requests()[source]

    assert (request.method, request.url) == (
        "POST", "https://<host>/api/v1/ticketmanager/dispatch/triggers")
    assert request.headers == {"Content-Type": "application/json",
                               "X-API-KEY": "<the automation key>"}
    body = json.loads(request.as_jira_sends_it("", "", "TCID-12345").body)
    assert body == {"source": source, "input": {"issue_key": "TCID-12345"}}


def example_policies() -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(POLICIES.glob("*.json"))]


def projects_in(jql: str) -> set[str]:
    match = re.search(r"project (?:= (\w+)|in \(([^)]*)\))", jql)
    assert match, jql
    return {match.group(1)} if match.group(1) else {
        name.strip() for name in match.group(2).split(",")}


@pytest.mark.parametrize("source", SOURCES)
def test_each_jql_condition_names_the_projects_of_the_policies_for_its_source(source):
    wanted: set[str] = set()
    for policy in example_policies():
        sources = policy["trigger"]["source_in"]
        reserved = {role.source for role in NOTIFICATION_ROLES}
        if source in sources or (not sources and source not in reserved):
            wanted |= set(policy["trigger"]["project_key_in"])

    assert projects_in(marked_blocks("jql")[source]) == wanted


@pytest.mark.parametrize("role", NOTIFICATION_ROLES, ids=lambda role: role.source)
def test_each_notification_rule_adds_the_label_its_policies_require(role):
    guide = GUIDE.read_text(encoding="utf-8")
    section = guide[guide.index(f"`{role.source}`\n"):]
    section = section[:section.index("<!-- jira-web-request")]

    assert f'{{"update": {{"labels": [{{"add": "{role.label}"}}]}}}}' in section
    for policy in example_policies():
        if role.source in policy["trigger"]["source_in"]:
            assert role.label in policy["trigger"]["issue_label_all"]


# --- posted to a real server -----------------------------------------------------------------


def documented_key_config(tmp_path: Path) -> Path:
    """The guide's ``[[auth.api_keys]]`` table, with the SHA-256 of ``AUTOMATION_KEY``."""
    [table] = _KEY_CONFIG.findall(GUIDE.read_text(encoding="utf-8"))
    text = "\n".join(line.strip() for line in table.splitlines())
    path = tmp_path / "td.toml"
    path.write_text(text.replace("<the SHA-256 from step 1>",
                                 hashlib.sha256(AUTOMATION_KEY.encode()).hexdigest()))
    return path


def test_the_documented_key_table_configures_an_automation_key(tmp_path):
    config = load_config(str(documented_key_config(tmp_path)), environ={})

    key = authenticate(config.auth, AUTOMATION_KEY)
    assert key is not None and (key.name, key.role) == ("jira-automation", AccessRole.AUTOMATION)


@pytest.fixture
def server(tmp_path):
    """``serve --sandbox`` with authentication on: the guide's automation key (from its TOML
    table) and a viewer key (from the environment, which adds to the file's keys)."""
    config = load_config(str(documented_key_config(tmp_path)), environ={
        "TICKET_DISPATCHER_DATABASE_URL": f"sqlite:///{tmp_path / 'td.db'}",
        "TICKET_DISPATCHER_AUTH_API_KEYS": f"ops:viewer:{VIEWER_KEY}"})
    service = Service(config, port=0, sandbox=True)
    thread = threading.Thread(target=service.run, name="waitress", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{service.port}"
    service.stop_serving()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the server did not stop serving"
    service.close()


def edit_issue_adds_label(url: str, issue_key: str, label: str) -> None:
    """The rule's "Edit issue" step: add the label, keep the others."""
    control = f"{url}/sandbox/_control/issues/{issue_key}"
    labels = requests.get(control, timeout=10).json()["labels"]
    changed = requests.patch(control, json={"labels": sorted({*labels, label})}, timeout=10)
    assert changed.status_code == 200, changed.text


def send(request: WebRequest) -> requests.Response:
    return requests.request(request.method, request.url, headers=request.headers,
                            data=request.body.encode("utf-8"), timeout=10)


def viewer_get(url: str, path: str) -> dict:
    answer = requests.get(f"{url}{BASE}{path}", headers={"X-API-KEY": VIEWER_KEY}, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize("source", SOURCES)
def test_the_documented_request_is_accepted_and_reaches_its_policy(server, source):
    issue_key, label, policy_name = RULES[source]
    edit_issue_adds_label(server, issue_key, label)

    accepted = send(documented_requests()[source].as_jira_sends_it(server, AUTOMATION_KEY,
                                                                   issue_key))

    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["input"] == {"issue_key": issue_key}
    trigger_url = server + accepted.headers["Location"]

    def completed() -> dict | None:  # the automation key may follow its own trigger
        trigger = requests.get(trigger_url, headers={"X-API-KEY": AUTOMATION_KEY},
                               timeout=10).json()
        return trigger if trigger["status"] == "completed" else None

    trigger = wait_until(completed, 30, f"trigger {trigger_url} completed")
    [execution_id] = trigger["output"]["execution_ids"]
    execution = viewer_get(server, f"/dispatch/executions/{execution_id}")
    assert viewer_get(server, f"/dispatch/policies/{execution['policy_id']}")["name"] == (
        policy_name)


@pytest.mark.parametrize("key", [None, "not-the-automation-key-0123456789"])
def test_the_documented_request_without_the_automation_key_is_401(server, key):
    request = documented_requests()["jira_automation"].as_jira_sends_it(server, key, "TCID-2")

    refused = send(request)

    assert refused.status_code == 401, refused.text
    assert refused.headers["WWW-Authenticate"] == "X-API-KEY"
