"""The console's audit page: operators read who changed what and how, filtered as the API
filters; a viewer neither sees it in the menu nor may open it; each object's page links to its
own history."""

from __future__ import annotations

from tests.console.conftest import main_text
from tests.harness import rule


def test_an_operator_reads_changes_made_from_the_console_with_their_history(console, harness):
    policy = harness.policy(rule("test_noop"), active=False)
    console.sign_in("operator")
    page = console.get(f"/console/policies/{policy.id}")
    history = f"/console/audit?object_type=policy&amp;object_id={policy.id}"
    assert history in page.text

    console.post(f"/console/policies/{policy.id}/activate", {"confirmed": "yes"})
    audit = console.get("/console/audit")
    text = main_text(audit.text)

    assert audit.status_code == 200
    assert "operator-key console policy.activated" in " ".join(text.split())
    assert "console.signed_in" in text
    one = main_text(console.get(f"/console/audit?object_type=policy&object_id={policy.id}").text)
    assert "policy.activated" in one and "console.signed_in" not in one
    assert '<a href="/console/audit" aria-current="page">Audit</a>' in audit.text


def test_a_viewer_has_no_audit_page(console, harness):
    policy = harness.policy(rule("test_noop"))
    console.sign_in("viewer")
    page = console.get(f"/console/policies/{policy.id}")

    assert console.get("/console/audit").status_code == 403
    assert ">Audit</a>" not in page.text and "History of changes" not in page.text


def test_a_bad_filter_is_a_clear_400(console, harness):
    console.sign_in("operator")
    answer = console.get("/console/audit?since=yesterday")
    assert answer.status_code == 400
    assert "since" in main_text(answer.text)
