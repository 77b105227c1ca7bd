"""The sandbox mounted on the real app (public under the API-key middleware), the clients'
URLs, and the real clients against the served sandbox (both sides of each service's API)."""

from __future__ import annotations

from falcon import testing

from tests.clocks import ManualClock
from tests.sandbox.calls import CONTROL, JIRA, JIRA_AUTH
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.sandbox import mount_sandbox, service_urls


def test_sandbox_is_public_under_the_api_key_middleware(sqlite_store, sandbox):
    config = load_config(None, environ={
        "TICKET_DISPATCHER_AUTH_API_KEYS": "op:operator:op-key-0123456789abcdefghij"})
    app = create_app(Services(store=sqlite_store, config=config, clock=ManualClock()))
    mount_sandbox(app, sandbox)
    client = testing.TestClient(app)

    control = client.simulate_get(f"{CONTROL}/issues")
    jira = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)
    api = client.simulate_get("/api/v1/ticketmanager/engineers")

    assert control.status_code == 200 and jira.status_code == 200
    assert api.status_code == 401


def test_service_urls_point_the_clients_at_the_mount():
    assert service_urls("http://127.0.0.1:8080/") == {
        "jira": "http://127.0.0.1:8080/sandbox/jira",
        "lark": "http://127.0.0.1:8080/sandbox/lark",
        "oncall": "http://127.0.0.1:8080/sandbox/oncall",
        "core": "http://127.0.0.1:8080/sandbox/core",
    }


def test_the_real_clients_speak_the_sandbox(served, sandbox):
    from ticket_dispatcher.config import CoreConfig, JiraConfig, LarkConfig, OncallConfig
    from ticket_dispatcher.integrations.core import CoreClient
    from ticket_dispatcher.integrations.jira import JiraClient
    from ticket_dispatcher.integrations.lark import LarkClient
    from ticket_dispatcher.integrations.oncall import OncallClient

    no_wait = {"sleep": lambda seconds: None}
    jira = JiraClient(JiraConfig(base_url=served["jira"], email="bot@example.com",
                                 api_token="token"), **no_wait)
    lark = LarkClient(LarkConfig(base_url=served["lark"], app_id="cli", app_secret="secret"),
                      **no_wait)
    oncall = OncallClient(OncallConfig(base_url=served["oncall"], token="t"), **no_wait)
    core = CoreClient(CoreConfig(base_url=served["core"], token="t"), **no_wait)
    sandbox.traffic.add_fault("jira", status=429, retry_after=0)

    alice = jira.find_user_by_email("ALICE@example.com")
    jira.assign("TCID-1", alice.account_id)
    jira.edit_labels("TCID-1", remove=["auto-dispatch"])
    issue = jira.load_issue("TCID-1")
    open_id = lark.open_ids_by_email(["alice@example.com"])["alice@example.com"]
    message_id = lark.send_card(open_id, {"elements": []}, "exec-1-card")
    sandbox.lark.mark_read(message_id, open_id)
    sandbox.lark.revoke_tokens()  # the client must refresh on code 99991663

    assert (issue.assignee.email, issue.labels) == ("alice@example.com", ())
    assert lark.send_card(open_id, {"elements": []}, "exec-1-card") == message_id
    assert lark.read_user_ids(message_id) == ["ou_alice"]
    assert [r.email for r in oncall.responders("sre")] == ["bob@example.com", "alice@example.com"]
    assert oncall.page("bob@example.com", "t", "m", "TCID-1", "d").call_error == "no_phone_number"
    assert core.leader("alice@example.com").email == "dora@example.com"
    # retried after the 429
    assert [r["fault"] for r in sandbox.traffic.requests()][:2] == [429, None]
    for client in (jira, lark, oncall, core):
        client.close()
