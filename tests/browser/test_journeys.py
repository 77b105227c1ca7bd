"""What people do in the console, end to end in a real browser against a real ``serve`` process:
a newcomer finds why a ticket went where it went, a parked notification counts down and leaves
once read, markup in attacker-controlled text stays text, a viewer can change nothing, and an
operator replays a failed trigger."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import serious_violations
from tests.browser.demo import ACTION_MS, EXPECT_MS, WAIT_SECONDS, sign_in

pytestmark = pytest.mark.browser

# Markup a reporter can put in a summary and an operator in a policy's names: without quotes, so
# it reads the same whether a page shows it as text or inside a JSON string.
PAYLOAD = "<img src=x onerror=window.__xss=1><script>window.__xss=1</script>"


def nav_link(page, label: str):
    return page.get_by_role("navigation", name="Console").get_by_role("link", name=label,
                                                                      exact=True)


def trigger_row(page, trigger_id: int):
    """The row of the trigger list whose Id cell is ``trigger_id``."""
    return page.locator("main tbody tr").filter(has=page.locator(
        'td[data-label="Id"]', has_text=re.compile(rf"^\s*{trigger_id}(\s|$)")))


def assigned(execution: dict) -> tuple[dict, dict]:
    """(the rule that matched, its assign action's context) of a finished execution."""
    [rule] = [r for r in execution["rule_executions"] if r["outcome"] == "matched"]
    [assign] = [a["context"]["assign"] for a in rule["action_executions"]
                if a["type"] == "assign" and a["status"] == "succeeded"]
    return rule, assign


def test_a_newcomer_clicks_from_the_overview_to_why_a_ticket_was_assigned(sandbox, page):
    trigger = sandbox.dispatch("TCID-2")  # README "Try it", as Jira Automation posts it
    [execution_id] = trigger["output"]["execution_ids"]
    rule, assign = assigned(sandbox.finished(execution_id))

    page.goto(sandbox.url + "/console/")
    nav_link(page, "Triggers").click()
    expect(page).to_have_url(sandbox.url + "/console/triggers")
    row = trigger_row(page, trigger["id"])
    expect(row).to_contain_text("TCID-2")
    row.get_by_role("link", name="1 execution").click()
    expect(page).to_have_url(f"{sandbox.url}/console/executions?trigger_id={trigger['id']}")
    page.locator(f'main a[href="/console/executions/{execution_id}"]').first.click()

    expect(page).to_have_url(f"{sandbox.url}/console/executions/{execution_id}")
    main = page.locator("main")
    expect(main).to_contain_text("TCID-2")
    # The rule that matched, and why the one before it did not: TCID-2 is P3, the business
    # hours rule wants P0 or P1 in Shanghai office hours; each leaf says why, whatever the hour.
    assert rule["name"] == "everything else"
    expect(main).to_contain_text("everything else")
    expect(main).to_contain_text("business hours")
    expect(main).to_contain_text('issue.priority "P3" not in ["P0","P1"]')
    expect(main).to_contain_text(re.compile(
        r"now \S+ \(\w{3} \d\d:\d\d local\) is (within|outside) "
        r"mon,tue,wed,thu,fri 09:00-18:00 Asia/Shanghai"))
    # Whom the round robin chose, and why.
    expect(main).to_contain_text(assign["assignee"])
    expect(main).to_contain_text(assign["reason"])


def test_a_parked_notification_counts_down_then_leaves_the_page_once_read(sandbox, world,
                                                                          page):
    trigger = sandbox.dispatch("GTOC-1", "jira_assignment_assignee")  # README, notifications
    [execution_id] = trigger["output"]["execution_ids"]
    sandbox.parked(execution_id)

    page.goto(sandbox.url + "/console/parked")
    link = f'a[href="/console/executions/{execution_id}"]'
    row = page.locator("main tr, main li").filter(has=page.locator(link))
    expect(row).to_have_count(1, timeout=EXPECT_MS)
    expect(row).to_contain_text("GTOC-1")
    countdown = row.locator("[data-countdown]")
    expect(countdown).to_have_count(1)
    shown = countdown.inner_text()
    expect(countdown).not_to_have_text(shown, timeout=3_000)  # console.js ticks every second

    page.evaluate("window.__stillThisPage = true")
    sandbox.ack("GTOC-1")  # alice presses Acknowledge on the card in Lark

    # Within a poll of the ACK watcher (5 s) and a refresh of the page, with no reload.
    expect(row).to_have_count(0, timeout=WAIT_SECONDS * 1000)
    assert page.evaluate("window.__stillThisPage === true"), "the page was reloaded"
    expect(page.locator("main")).to_contain_text(world.parked_issue)  # the other one waits on
    execution = sandbox.finished(execution_id)
    assert execution["status"] == "succeeded", execution

    page.goto(f"{sandbox.url}/console/executions/{execution_id}")
    main = page.locator("main")
    expect(main).to_contain_text("page_assignment")
    expect(main).to_contain_text(re.compile(r"\back\b"))  # the first page's wait: its outcome
    expect(main).to_contain_text("acknowledged")


def xss_world(server) -> tuple[int, int]:
    """An issue whose summary is markup, a policy named with markup that conditions on the
    summary (so the evaluation reason quotes it), and its execution: (policy id, execution
    id)."""
    server.control("POST", "/issues", (200, 201), json={
        "key": "XSS-1", "summary": f"Summary {PAYLOAD}", "priority": "P3", "status": "Todo",
        "reporter_email": "erin@example.com"})
    policy = server.call("POST", "/dispatch/policies", (201,), json={
        "name": f"Policy {PAYLOAD}", "description": f"Description {PAYLOAD}",
        "trigger": {"enable": True, "source_in": [], "project_key_in": ["XSS"],
                    "issue_label_all": []},
        "rules": [{"name": f"Rule {PAYLOAD}", "priority": 10,
                   "when": {"field": "issue.summary", "operator": "contains",
                            "value": "<script>"},
                   "then": [{"type": "assign", "assign": {
                       "receiver": {"type": "users", "users": ["alice@example.com"]},
                       "strategy": "round_robin"}}],
                   "transition": {"on_success": "terminate"}}]})
    server.call("POST", f"/dispatch/policies/{policy['id']}/activate")
    trigger = server.dispatch("XSS-1")
    [execution_id] = trigger["output"]["execution_ids"]
    server.finished(execution_id)
    return policy["id"], execution_id


def test_markup_in_a_summary_or_a_policy_stays_inert_text_on_every_page(sandbox, world, page):
    policy_id, execution_id = xss_world(sandbox)
    shown = {  # page → what of it the page prints
        f"/console/executions/{execution_id}": PAYLOAD,  # the rule's name, the reason
        "/console/policies": PAYLOAD,
        f"/console/policies/{policy_id}": PAYLOAD,
        f"/console/policies/diff?a={world.assign_policy_id}&b={policy_id}": PAYLOAD,
        "/console/triggers?issue_key=XSS-1": "XSS-1",
        "/console/executions?issue_key=XSS-1": "XSS-1",
        "/console/": "Overview",
    }
    for path, text in shown.items():
        response = page.goto(sandbox.url + path)
        assert response.status == 200, (path, response.status)
        expect(page.locator("main"), path).to_contain_text(text)
        assert page.locator('main img[src="x"], main script').count() == 0, path
        assert page.evaluate("typeof window.__xss") == "undefined", path

    # A pasted document's names come back in the validation problems: as text too.
    page.goto(sandbox.url + "/console/policies/validate")
    form = page.locator("main form").filter(has=page.locator("textarea"))
    form.locator("textarea").fill(json.dumps({"name": "x", PAYLOAD: 1}))
    form.locator('button[type="submit"], input[type="submit"]').first.click()
    expect(page.locator("main")).to_contain_text(PAYLOAD)
    assert page.locator('main img[src="x"], main script').count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"
    # (A CSP violation on any of these pages fails the test too: tests/browser/conftest.py.)


ACTION_PAGES = ("triggers", "execution-notification", "engineers", "policy", "shadow")


def post_forms(page):
    return page.locator('main form[method="post" i]')


def test_a_viewer_sees_no_action_and_a_forged_post_is_refused(guarded, guarded_ids,
                                                              new_context):
    viewer, operator = new_context().new_page(), new_context().new_page()
    sign_in(viewer, guarded, "viewer")
    sign_in(operator, guarded, "operator")

    forms = {}
    for name in ACTION_PAGES:
        url = guarded.url + guarded_ids.path(name)
        for who, page in (("viewer", viewer), ("operator", operator)):
            response = page.goto(url)
            assert response.status == 200, (who, url, response.status)
        forms[name] = (post_forms(viewer).count(), post_forms(operator).count())
    assert all(v == 0 for v, _ in forms.values()), f"(viewer, operator) forms: {forms}"
    assert all(o > 0 for _, o in forms.values()), f"(viewer, operator) forms: {forms}"

    # The buttons are only hidden: the server must refuse the viewer whatever she sends, with
    # the page's CSRF token (valid for her session) or without one.
    replay = f"/console/triggers/{guarded_ids.failed_trigger_id}/replay"
    dispatch = "/console/engineers/alice@example.com/dispatch"
    before = guarded.call("GET", "/dispatch/triggers", params={"issue_key": "NOPE-1"})["items"]
    statuses = viewer.evaluate("""async (posts) => {
        const token = document.querySelector('meta[name="csrf-token"]').content;
        const statuses = [];
        for (const [path, fields, withToken] of posts) {
            const body = new URLSearchParams(fields);
            if (withToken) { body.set("csrf_token", token); }
            statuses.push((await fetch(path, {method: "POST", body})).status);
        }
        return statuses;
    }""", [[replay, {"confirmed": "yes"}, True], [replay, {"confirmed": "yes"}, False],
           [dispatch, {"enabled": "false", "confirmed": "yes"}, True],
           [dispatch, {"enabled": "false", "confirmed": "yes"}, False]])

    assert statuses == [403, 403, 403, 403]
    after = guarded.call("GET", "/dispatch/triggers", params={"issue_key": "NOPE-1"})["items"]
    assert len(after) == len(before)
    assert guarded.call("GET", "/engineers/alice@example.com")["dispatch_enabled"] is True


def test_an_operator_replays_a_failed_trigger_through_the_forms(guarded, guarded_ids, page):
    failed_id = guarded_ids.failed_trigger_id
    sign_in(page, guarded, "operator")
    nav_link(page, "Triggers").click()
    filters = page.locator("form.filters")
    filters.get_by_label("Status").select_option("failed")
    filters.get_by_label("Issue key").fill("NOPE-1")
    filters.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"status=failed.*issue_key=NOPE-1"))

    trigger_row(page, failed_id).get_by_role("button", name="Replay").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Replay trigger")
    expect(page.locator("main")).to_contain_text("NOPE-1")
    assert guarded.call("GET", "/dispatch/triggers",
                        params={"issue_key": "NOPE-1"})["items"][0]["id"] == failed_id, \
        "the confirmation page acted already"
    assert serious_violations(page) == []
    page.get_by_role("button", name="Yes, replay trigger").click()

    done = page.get_by_role("status")
    expect(done).to_contain_text(re.compile(
        rf"Trigger \d+ was posted for NOPE-1 \(a replay of trigger {failed_id}\); it is \w+\."),
        timeout=ACTION_MS)
    replay_id = int(re.search(r"Trigger (\d+)", done.inner_text())[1])
    assert guarded.trigger(replay_id)["input"] == {"issue_key": "NOPE-1"}
    assert serious_violations(page) == []
    with page.expect_response(re.compile(rf"/console/executions\?trigger_id={replay_id}$")) \
            as answer:
        page.get_by_role("link", name=f"Follow trigger {replay_id}'s executions").click()
    assert answer.value.status == 200
