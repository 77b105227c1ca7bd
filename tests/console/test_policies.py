"""The policies pages: the list with its filters, one version with its family's history, the
side-by-side diff, the validator, and the lifecycle actions (activate, roll back, switch off)
and the dry run, each for an operator only."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from tests.console.conftest import form_token, main_text
from tests.factories import EXAMPLES, policy_body
from ticket_dispatcher.console.policies import TEST_SOURCE, side_by_side
from ticket_dispatcher.domain.catalog import SOURCE
from ticket_dispatcher.domain.fanout import reserved_role
from ticket_dispatcher.domain.model import Policy, PolicyStatus
from ticket_dispatcher.domain.validation import parse_policy_spec

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class Policies:
    """Versions written straight to the store, as the API would store them."""

    def __init__(self, harness):
        self.store, self.clock = harness.store, harness.clock

    def create(self, **body) -> Policy:
        return self.store.policies.create(self._spec(body), now=self.clock.now())

    def replace(self, policy: Policy, **body) -> Policy:
        return self.store.policies.create_replacement(policy.id, self._spec(body),
                                                      now=self.clock.now())

    def activate(self, policy: Policy) -> Policy:
        return self.store.policies.activate(policy.id, now=self.clock.now())

    def get(self, policy: Policy) -> Policy:
        return self.store.policies.get(policy.id)

    def _spec(self, body: dict):
        return parse_policy_spec(policy_body(**body), self.store.registry)


@pytest.fixture
def policies(harness) -> Policies:
    return Policies(harness)


@pytest.fixture
def family(policies) -> tuple[Policy, Policy]:
    """Version 1 superseded by version 2, which is active."""
    first = policies.activate(policies.create(description="round robin over the squad"))
    second = policies.activate(policies.replace(first, description="balanced over the squad"))
    return policies.get(first), second


def rows(html: str) -> list[str]:
    """The text of each body row of the page's first table."""
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [main_text("<main id=\"main\"><tr" + row + "</main>") for row in body.split("<tr")[1:]]


def post_forms(html: str) -> list[str]:
    return re.findall(r'<form method="post" action="([^"]+)"', html.split('<main id="main"')[1])


# --- the list ---------------------------------------------------------------------------------


def test_the_list_filters_by_status_and_family_in_the_url(console, policies, family):
    other = policies.create(name="Other family")
    console.sign_in("viewer")

    active = console.get("/console/policies", params={"status": "active"})
    drafts = console.get("/console/policies", params={"status": "draft", "family_id": ""})
    of_family = console.get("/console/policies", params={"family_id": family[0].family_id})

    assert active.status_code == 200
    assert [r.split()[:2] for r in rows(active.text)] == [["Policy", str(family[1].id)]]
    assert [r.split()[:2] for r in rows(drafts.text)] == [["Policy", str(other.id)]]
    assert len(rows(of_family.text)) == 2 and "Other family" not in main_text(of_family.text)
    assert '<option value="active" selected>' in active.text  # the form shows the filter
    assert f'value="{family[0].family_id}"' in of_family.text
    assert f'href="/console/policies/{family[1].id}"' in active.text


def test_the_list_pages_with_limit_and_offset_keeping_the_filters(console, policies):
    made = [policies.create(name=f"Policy number {n}") for n in range(5)]
    console.sign_in("viewer")

    first = console.get("/console/policies", params={"status": "draft", "limit": "2"})
    following = re.search(r'href="([^"]+)" rel="next"', first.text)[1]
    second = console.get(unescape(following))

    assert "1–2 of 5" in main_text(first.text)
    assert [r.split()[1] for r in rows(first.text)] == [str(p.id) for p in made[:2]]
    assert "status=draft" in following and "limit=2" in following and "offset=2" in following
    assert [r.split()[1] for r in rows(second.text)] == [str(p.id) for p in made[2:4]]
    assert 'rel="prev"' in second.text


@pytest.mark.parametrize("query", [{"status": "gone"}, {"limit": "0"}, {"offset": "-1"}])
def test_a_bad_filter_is_a_400_page_naming_it(console, query):
    console.sign_in("viewer")

    answer = console.get("/console/policies", params=query)

    assert answer.status_code == 400
    assert next(iter(query)) in main_text(answer.text)


# --- one version and its family -----------------------------------------------------------------


def test_a_version_shows_its_rules_and_its_family_history_after_a_replacement(
        console, policies, family):
    first, second = family
    draft = policies.replace(second, name="Third try")
    console.sign_in("viewer")

    page = console.get(f"/console/policies/{second.id}")

    text = main_text(page.text)
    assert page.status_code == 200
    assert "Assign TCID tickets version 2" in text and "balanced over the squad" in text
    assert 'issue.priority in ["P0", "P1"]' in text and "assign" in text
    assert "priority 10 · on success: terminate" in text
    assert '"family_id": "' + second.family_id + '"' in unescape(page.text)  # the raw document
    history = text.split("Version history", 1)[1]
    assert [r.split()[:5] for r in rows(page.text.split('id="history"', 1)[1])] == [
        ["3", "Policy", str(draft.id), "draft", "—"],
        ["2", "this", "one", "Policy", str(second.id)],
        ["1", "Policy", str(first.id), "superseded", "2026-11-30"],
    ]
    assert f"/console/policies/diff?a={first.id}&amp;b={second.id}" in page.text
    assert f"/console/policies/diff?a={second.id}&amp;b={draft.id}" in page.text
    assert "Diff version 1 with this one" in history
    # The form to diff any two versions of the family.
    assert '<select id="diff-a" name="a">' in page.text and 'name="b"' in page.text


def test_the_history_is_one_query_whatever_the_family_size(console, policies, family,
                                                           harness):
    from tests.conftest import QueryCounter

    console.sign_in("viewer")
    with QueryCounter(harness.store.db) as few:
        console.get(f"/console/policies/{family[1].id}")
    for _ in range(6):
        policies.replace(family[1])
    with QueryCounter(harness.store.db) as many:
        page = console.get(f"/console/policies/{family[1].id}")

    assert len(rows(page.text.split('id="history"', 1)[1])) == 8
    assert many.count == few.count


def test_an_unknown_version_is_a_404_page(console):
    console.sign_in("viewer")

    answer = console.get("/console/policies/999999")

    assert answer.status_code == 404
    assert "policy 999999 not found" in main_text(answer.text)


def test_hostile_names_and_descriptions_are_escaped(console, policies, family):
    hostile = policies.create(name=f"Policy {HOSTILE}", description=f"About {HOSTILE}")
    console.sign_in("operator")

    for path in ("/console/policies", f"/console/policies/{hostile.id}",
                 f"/console/policies/diff?a={family[0].id}&b={hostile.id}"):
        page = console.get(path)
        main = page.text.split('<main id="main"', 1)[1]
        assert page.status_code == 200, path
        assert "<script>" not in main and "<img" not in main, path
        assert "&lt;script&gt;" in main, path
        assert f"Policy {HOSTILE}" in main_text(page.text), path
    # In the confirmation of an action too.
    confirm = console.post(f"/console/policies/{hostile.id}/activate")
    assert "<script>" not in confirm.text.split('<main id="main"', 1)[1]


# --- the diff ---------------------------------------------------------------------------------


def test_the_diff_shows_the_changed_line_on_both_sides(console, family):
    first, second = family
    console.sign_in("viewer")

    page = console.get("/console/policies/diff", params={"a": first.id, "b": second.id})

    assert page.status_code == 200
    rows_changed = re.findall(
        r'<td class="mark del">−</td><td class="del">([^<]*)</td>\s*<td class="num">\d*</td>'
        r'\s*<td class="mark add">\+</td><td class="add">([^<]*)</td>', page.text)
    pairs = [(unescape(a).strip(), unescape(b).strip()) for a, b in rows_changed]
    assert ('"description": "round robin over the squad",',
            '"description": "balanced over the squad",') in pairs
    assert pairs == [('"description": "round robin over the squad",',
                      '"description": "balanced over the squad",')]  # no id, status or time
    assert "unchanged lines" in main_text(page.text)  # the long equal runs are folded
    assert "changed lines" in main_text(page.text)


def test_the_diff_folds_long_equal_runs_and_keeps_context():
    left = [f"line {n}" for n in range(20)]
    right = list(left)
    right[10] = "changed"

    diff = side_by_side(left, right)

    assert [row.kind for row in diff] == ["folded", "same", "same", "same", "changed", "same",
                                          "same", "same", "folded"]
    assert (diff[0].folded, diff[-1].folded) == (7, 6)
    assert (diff[4].left, diff[4].right, diff[4].left_number) == ("line 10", "changed", 11)


def test_lines_only_on_one_side_leave_the_other_empty():
    diff = side_by_side(["a", "b"], ["a", "b", "c"])

    assert [(r.kind, r.left_number, r.right_number, r.right) for r in diff] == [
        ("same", 1, 1, "a"), ("same", 2, 2, "b"), ("changed", None, 3, "c")]


@pytest.mark.parametrize("query, status", [({"a": "1"}, 400), ({}, 400),
                                           ({"a": "1", "b": "x"}, 400),
                                           ({"a": "1", "b": "999999"}, 404)])
def test_a_diff_without_two_known_versions_is_a_4xx_page(console, family, query, status):
    console.sign_in("viewer")
    query = {k: (str(family[0].id) if v == "1" else v) for k, v in query.items()}

    answer = console.get("/console/policies/diff", params=query)

    assert answer.status_code == status
    assert "Traceback" not in answer.text and "<h1>" in answer.text


# --- validate -----------------------------------------------------------------------------------


def validate(console, text: str):
    console.sign_in("viewer")
    return console.post("/console/policies/validate", {"document": text})


def problems(html: str) -> list[tuple[str, str]]:
    return [(unescape(path), unescape(message)) for path, message in
            re.findall(r"<li><code>([^<]*)</code>: ([^<]*)</li>", html)]


def textarea(html: str) -> str:
    return unescape(re.search(r"<textarea[^>]*>\n?(.*?)</textarea>", html, re.S)[1])


def test_the_validator_form_is_labelled(console):
    console.sign_in("viewer")

    page = console.get("/console/policies/validate")

    assert page.status_code == 200
    assert '<label for="document">' in page.text and '<textarea id="document"' in page.text


def test_a_bad_document_shows_every_problem_with_its_path_and_keeps_the_text(console):
    body = policy_body()
    body["rules"][0]["then"][0]["assign"]["strategy"] = "least_busy"
    body["rules"][0]["when"] = {"field": "issue.priority", "operator": "in"}
    text = json.dumps(body, indent=2)

    answer = validate(console, text)

    shown = main_text(answer.text)
    assert answer.status_code == 200
    assert "The document is not valid: 2 problems." in shown
    assert problems(answer.text) == [
        ("rules[0].when.values", "in needs values"),
        ("rules[0].then[0].assign.strategy",
         '"least_busy" is not one of first, round_robin, balanced, random')]
    assert textarea(answer.text).replace("\r\n", "\n") == text


def test_the_example_assign_policy_is_valid(console):
    text = (EXAMPLES / "policies" / "assign-tcid.json").read_text()

    answer = validate(console, text)

    assert answer.status_code == 200
    assert "The document is valid" in main_text(answer.text)


def test_a_version_copied_from_its_page_is_valid_with_a_note(console, family):
    answer = validate(console, json.dumps(family[1].to_json()))

    shown = main_text(answer.text)
    assert "The document is valid" in shown
    assert "Left out, as the server assigns them: id, family_id, version" in shown


@pytest.mark.parametrize("text, message", [
    ('{"name": "x",', "The document is not valid JSON: Expecting"),
    ("[" * 100 + "]" * 100, "The document nests deeper than 64 levels"),
    ('{"name": "a\\u0000b"}', "The document holds control characters"),
    ("   ", "Paste a policy document first."),
])
def test_a_document_that_is_not_readable_says_why_and_keeps_the_text(console, text, message):
    answer = validate(console, text)

    assert answer.status_code == 400
    assert message in main_text(answer.text)
    assert textarea(answer.text) == text
    assert "Traceback" not in answer.text


def test_a_document_over_the_body_limit_is_refused(console):
    answer = validate(console, json.dumps({"name": "x" * 1_048_600}))

    assert answer.status_code == 413
    assert "the limit is" in main_text(answer.text)


def test_a_viewer_may_validate_but_needs_the_token(console):
    console.sign_in("viewer")

    forged = console.post("/console/policies/validate", {"document": "{}"}, token="made-up")

    assert forged.status_code == 403


# --- activate, roll back, switch off ------------------------------------------------------------


def test_rolling_back_to_an_older_version_asks_then_makes_it_live(console, policies, family):
    first, second = family
    console.sign_in("operator")
    page = console.get(f"/console/policies/{first.id}")
    assert "Roll back to version 1" in page.text

    asked = console.post(f"/console/policies/{first.id}/activate")
    assert policies.get(first).status is PolicyStatus.SUPERSEDED  # nothing yet
    done = console.post(f"/console/policies/{first.id}/activate", {"confirmed": "yes"})

    question = main_text(asked.text)
    assert asked.status_code == 200
    assert (f"Roll back to version 1: version 1 of “Assign TCID tickets” (policy {first.id}) "
            f"becomes the family's active version, and version 2 (policy {second.id}), active "
            "now, becomes superseded") in question
    assert done.status_code == 200
    assert (f"Rolled back. Version 1 of “Assign TCID tickets” (policy {first.id}) is active now; "
            f"version 2 (policy {second.id}) is superseded.") in main_text(done.text)
    assert f'href="/console/policies/{first.id}"' in done.text
    assert policies.get(first).status is PolicyStatus.ACTIVE
    assert policies.get(second).status is PolicyStatus.SUPERSEDED
    live, _ = policies.store.policies.page(status=PolicyStatus.ACTIVE)
    assert [p.id for p in live] == [first.id]
    # Going forward again is no rollback.
    assert "Activate version 2 again" in console.get(f"/console/policies/{second.id}").text


def test_activating_a_draft_supersedes_the_live_version(console, policies, family):
    draft = policies.replace(family[1], name="Fourth")
    console.sign_in("operator")

    page = console.get(f"/console/policies/{draft.id}")
    done = console.post(f"/console/policies/{draft.id}/activate", {"confirmed": "yes"})

    assert "Activate version 3" in page.text
    assert "Rolled back" not in main_text(done.text)
    assert policies.get(draft).status is PolicyStatus.ACTIVE
    assert policies.get(family[1]).status is PolicyStatus.SUPERSEDED


def test_an_invalid_version_is_refused_with_its_problems_and_nothing_changes(
        console, policies, family):
    bad = policies.replace(family[1], rules=[{
        "name": "nobody", "priority": 10, "when": {"always": True},
        "then": [{"type": "assign", "assign": {"receiver": {"type": "users", "users": ["bob"]},
                                               "strategy": "round_robin"}}],
        "transition": {"on_success": "terminate"}}])
    console.sign_in("operator")

    asked = console.post(f"/console/policies/{bad.id}/activate")
    forced = console.post(f"/console/policies/{bad.id}/activate", {"confirmed": "yes"})

    for answer in (asked, forced):
        assert answer.status_code == 422
        shown = main_text(answer.text)
        assert "is not valid" in shown and "rules[0].then[0].assign.receiver.users[0]" in shown
    assert policies.get(bad).status is PolicyStatus.DRAFT
    assert policies.get(family[1]).status is PolicyStatus.ACTIVE


def test_activating_the_live_version_is_a_409_page(console, family):
    console.sign_in("operator")

    answer = console.post(f"/console/policies/{family[1].id}/activate", {"confirmed": "yes"})

    assert answer.status_code == 409
    assert "live already" in main_text(answer.text)


def test_switching_a_policy_off_asks_then_leaves_no_version_live(console, policies, family):
    console.sign_in("operator")

    asked = console.post(f"/console/policies/{family[1].id}/deactivate")
    done = console.post(f"/console/policies/{family[1].id}/deactivate", {"confirmed": "yes"})
    again = console.post(f"/console/policies/{family[1].id}/deactivate", {"confirmed": "yes"})

    assert "it becomes inactive and its family has no active version" in main_text(asked.text)
    assert 'class="danger"' in asked.text
    assert "is inactive; its family has no active version now." in main_text(done.text)
    assert policies.get(family[1]).status is PolicyStatus.INACTIVE
    assert again.status_code == 409
    page = console.get(f"/console/policies/{family[1].id}")
    assert "Activate version 2 again" in page.text


def test_a_viewer_sees_no_action_and_a_forged_post_is_refused(console, policies, family):
    draft = policies.replace(family[1])
    console.sign_in("viewer")
    pages = {policy.id: console.get(f"/console/policies/{policy.id}")
             for policy in (family[0], family[1], draft)}
    token = form_token(pages[draft.id].text)

    assert all(post_forms(page.text) == [] for page in pages.values())
    assert all("Roll back" not in page.text and "Dry-run" not in page.text
               for page in pages.values())
    for path in (f"/policies/{family[0].id}/activate", f"/policies/{family[1].id}/deactivate",
                 f"/policies/{draft.id}/test", f"/policies/{draft.id}/shadow/start"):
        forged = console.post("/console" + path, {"confirmed": "yes", "issue_key": "TCID-1"},
                              token=token)
        assert forged.status_code == 403, path
        assert "this needs the operator role" in main_text(forged.text)
    assert policies.get(family[0]).status is PolicyStatus.SUPERSEDED
    assert policies.get(family[1]).status is PolicyStatus.ACTIVE
    assert not policies.store.shadows.is_shadow(draft.id)


def test_an_operator_sees_the_actions_each_version_allows(console, policies, family):
    draft = policies.replace(family[1])
    console.sign_in("operator")

    def actions(policy):
        return post_forms(console.get(f"/console/policies/{policy.id}").text)

    base = "/console/policies/"
    assert actions(family[0]) == [f"{base}{family[0].id}/activate", f"{base}{family[0].id}/test"]
    assert actions(family[1]) == [f"{base}{family[1].id}/deactivate",
                                  f"{base}{family[1].id}/test"]
    assert actions(draft) == [f"{base}{draft.id}/activate", f"{base}{draft.id}/shadow/start",
                              f"{base}{draft.id}/test"]


# --- the dry run ----------------------------------------------------------------------------------


def test_the_console_source_is_an_ordinary_source():
    assert SOURCE(TEST_SOURCE) and reserved_role(TEST_SOURCE) is None


def test_a_dry_run_posts_a_trigger_for_this_version_and_leads_to_its_executions(
        console, harness, family):
    draft_id = family[0].id  # any version: a dry run names it and skips its status
    console.sign_in("operator")

    answer = console.post(f"/console/policies/{draft_id}/test",
                          {"issue_key": "TCID-1", "now": "2026-12-01T02:00:00Z"})

    assert answer.status_code == 303
    trigger_id = int(answer.headers["Location"].rsplit("=", 1)[1])
    assert answer.headers["Location"] == f"/console/executions?trigger_id={trigger_id}"
    harness.wait_idle()
    trigger = harness.trigger(trigger_id)
    assert (trigger.source, trigger.issue_key, trigger.policy_id) == \
        ("console", "TCID-1", draft_id)
    assert trigger.dryrun == {"overwrite_data": {"now": "2026-12-01T02:00:00Z"}}
    [execution] = harness.executions(trigger_id=trigger_id)
    assert execution.mode.value == "dry_run" and execution.policy_id == draft_id


def test_a_dry_run_without_a_time_runs_now(console, harness, family):
    console.sign_in("operator")

    answer = console.post(f"/console/policies/{family[1].id}/test", {"issue_key": "TCID-1"})

    trigger_id = int(answer.headers["Location"].rsplit("=", 1)[1])
    assert harness.trigger(trigger_id).dryrun == {"overwrite_data": {}}


@pytest.mark.parametrize("form, path", [
    ({"issue_key": "not a key"}, "issue_key"),
    ({"issue_key": ""}, "issue_key"),
    ({"issue_key": "TCID-1", "now": "tomorrow"}, "now"),
    ({"issue_key": "TCID-1", "now": "2026-12-01T02:00:00"}, "now"),
])
def test_a_bad_dry_run_is_a_400_page_and_posts_nothing(console, harness, family, form, path):
    console.sign_in("operator")

    answer = console.post(f"/console/policies/{family[1].id}/test", form)

    assert answer.status_code == 400
    assert path in main_text(answer.text)
    items, _ = harness.store.triggers.page(status=None, source=None, issue_key=None,
                                           created_after=None, created_before=None,
                                           before_id=None, limit=10)
    assert items == []


def test_a_dry_run_of_an_unknown_version_is_a_404_page(console):
    console.sign_in("operator")

    answer = console.post("/console/policies/999999/test", {"issue_key": "TCID-1"})

    assert answer.status_code == 404
