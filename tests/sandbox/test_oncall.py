"""The fake Oncall: responders primary first, pages and their dedup, forced page
outcomes (and what the real client makes of them); the internal services' Bearer token."""

from __future__ import annotations

import threading

import pytest

from tests.sandbox.calls import BEARER, CONTROL, CORE, ONCALL, page
from ticket_dispatcher.config import OncallConfig
from ticket_dispatcher.domain.ports import PageOutcome
from ticket_dispatcher.integrations.oncall import OncallClient


def test_oncall_responders_primary_first(client):
    result = client.simulate_get(f"{ONCALL}/teams/sre/responders", headers=BEARER)

    assert result.json == {"responders": [{"email": "bob@example.com", "name": "Bob Li"},
                                          {"email": "alice@example.com", "name": "Alice Wang"}]}


def test_oncall_unknown_team_is_404(client):
    result = client.simulate_get(f"{ONCALL}/teams/nope/responders", headers=BEARER)

    assert result.status_code == 404 and "error" in result.json


def test_oncall_page_is_accepted_for_someone_with_a_phone(client, sandbox):
    result = page(client, "alice@example.com")

    assert result.json["accepted"] is True and result.json["call_error"] == ""
    assert result.json["call_id"]
    [recorded] = sandbox.oncall.pages()
    assert (recorded.email, recorded.issue_key, recorded.accepted) == \
        ("alice@example.com", "TCID-1", True)


def test_oncall_page_without_a_phone_is_not_accepted(client):
    result = page(client, "bob@example.com")

    assert result.json == {"accepted": False, "call_error": "no_phone_number"}


def test_oncall_repeated_dedup_key_keeps_its_call_and_is_recorded(client, sandbox):
    first = page(client, "alice@example.com").json
    again = page(client, "alice@example.com").json

    assert first["call_id"] == again["call_id"]
    assert [p.repeated for p in sandbox.oncall.pages()] == [False, True]


def test_oncall_page_refuses_a_bad_body(client, sandbox):
    result = client.simulate_post(f"{ONCALL}/page", headers=BEARER,
                                  json={"email": "alice@example.com"})

    assert result.status_code == 400 and "error" in result.json
    assert sandbox.oncall.pages() == []


@pytest.mark.parametrize("method,path", [("GET", f"{ONCALL}/teams/sre/responders"),
                                         ("POST", f"{ONCALL}/page"),
                                         ("GET", f"{CORE}/groups/l1/members"),
                                         ("GET", f"{CORE}/users/alice@example.com")])
def test_internal_services_need_a_bearer_token(client, method, path):
    result = client.simulate_request(method, path, json={},
                                     headers={"Authorization": "Basic abc"})

    assert result.status_code == 401 and "error" in result.json


# --- forced outcomes -----------------------------------------------------------------------


def test_forced_outcome_refuses_what_oncall_cannot_answer(sandbox):
    with pytest.raises(ValueError):
        sandbox.oncall.force_outcome("busy")
    with pytest.raises(ValueError):
        sandbox.oncall.force_outcome("accepted", times=0)

    assert sandbox.oncall.outcome_overrides() == []


def test_forced_accepted_dedupes_like_a_real_call(sandbox):
    sandbox.oncall.force_outcome("accepted", email="bob@example.com")

    first = sandbox.oncall.page("bob@example.com", "t", "m", "TCID-1", "d-1")
    again = sandbox.oncall.page("BOB@example.com", "t", "m", "TCID-1", "d-1")

    assert (first.accepted, again.call_id, again.repeated, again.forced) == \
        (True, first.call_id, True, True)


def test_forced_outcome_times_are_used_up_once_under_concurrent_pages(sandbox):
    sandbox.oncall.force_outcome("call_error", times=40)
    start = threading.Barrier(8)

    def pager(worker: int) -> None:
        start.wait()
        for number in range(10):
            sandbox.oncall.page("alice@example.com", "t", "m", "TCID-1", f"d-{worker}-{number}")

    threads = [threading.Thread(target=pager, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    pages = sandbox.oncall.pages()
    assert len(pages) == 80
    assert sum(p.call_error == "call_failed" for p in pages) == 40
    assert sum(p.forced for p in pages) == 40
    assert sandbox.oncall.outcome_overrides() == []


@pytest.fixture
def oncall_client(served):
    """The real Oncall client against the sandbox served on a local port."""
    client = OncallClient(OncallConfig(base_url=served["oncall"], token="t"),
                          sleep=lambda _: None)
    yield client
    client.close()


@pytest.mark.parametrize("outcome,email,expected", [
    ("accepted", "bob@example.com", (PageOutcome.ACCEPTED, "")),
    ("no_phone_number", "alice@example.com", (PageOutcome.FAILED, "no_phone_number")),
    ("call_error", "alice@example.com", (PageOutcome.FAILED, "call_failed")),
])
def test_the_real_client_sees_the_forced_outcome(oncall_client, sandbox, outcome, email,
                                                 expected):
    sandbox.oncall.force_outcome(outcome)

    result = oncall_client.page(email, "t", "m", "TCID-1", "exec-1-page-1")

    # call_error is exactly Oncall's text: a failed call, not an HTTP or transport error
    assert (result.outcome, result.call_error) == expected
    assert bool(result.call_id) is (outcome == "accepted")
    assert [r["fault"] for r in sandbox.traffic.requests()] == [None]


def test_the_real_client_sees_the_outcome_forced_through_the_control_api(oncall_client,
                                                                         client):
    client.simulate_put(f"{CONTROL}/oncall/outcome",
                        json={"outcome": "call_error", "email": "alice@example.com", "times": 1})

    failed = oncall_client.page("alice@example.com", "t", "m", "TCID-1", "d-1")
    normal = oncall_client.page("alice@example.com", "t", "m", "TCID-1", "d-2")
    no_phone = oncall_client.page("bob@example.com", "t", "m", "TCID-1", "d-3")

    assert (failed.outcome, failed.call_error) == (PageOutcome.FAILED, "call_failed")
    assert normal.outcome == PageOutcome.ACCEPTED and normal.call_id
    assert (no_phone.outcome, no_phone.call_error) == (PageOutcome.FAILED, "no_phone_number")
