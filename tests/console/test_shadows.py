"""The shadows pages on both engines: every shadow with its agreement, one report with each
difference beside the live execution it stands next to, and starting and stopping a shadow
(operator only, asked first)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import QueryCounter
from tests.console.conftest import form_token, main_text
from tests.fakes import RecordingAction
from tests.harness import Harness, rule
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.model import PolicySpec, RuleSpec
from ticket_dispatcher.domain.shadow import Decision

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def harness(store):
    """The real runtime on each engine (the console fixtures take this one here)."""
    h = Harness(store, RecordingAction("test_noop"), RecordingAction("test_wait", park_for=60))
    h.start()
    yield h
    h.stop()


def candidate(harness, live, *rules: dict, name: str = "candidate"):
    """A replacement draft of ``live``'s family with ``rules``."""
    return harness.store.policies.create_replacement(live.id, PolicySpec(
        name=name, trigger=live.spec.trigger, rules=tuple(
            RuleSpec(r["name"], r["priority"], r["when"], r["then"], OnSuccess.TERMINATE)
            for r in rules)), now=harness.clock.now())


@pytest.fixture
def family(harness):
    """The live version (matches "rule", runs test_noop) and a draft that renames the rule."""
    live = harness.policy(rule("test_noop", name="rule"))
    return live, candidate(harness, live, rule("test_noop", name="renamed"))


def record(harness, draft, trigger_id: int, execution_id: int, decision: Decision) -> None:
    harness.store.shadows.record(
        policy_id=draft.id, family_id=draft.family_id, trigger_id=trigger_id,
        issue_key="TCID-1", live_execution_id=execution_id, shadow=decision,
        now=harness.clock.now())


def section(html: str, heading_id: str) -> str:
    return main_text('<main id="main"' + html.split(f'id="{heading_id}"', 1)[1].split(
        "</section>", 1)[0] + "</main>")


def post_forms(html: str) -> list[str]:
    return re.findall(r'<form method="post" action="([^"]+)"', html.split('<main id="main"')[1])


# --- start, report, stop ----------------------------------------------------------------------


def test_starting_a_shadow_asks_first_then_lists_it_with_its_report(console, harness, family):
    live, draft = family
    console.sign_in("operator")

    asked = console.post(f"/console/policies/{draft.id}/shadow/start")
    assert not harness.store.shadows.is_shadow(draft.id)  # only asked
    done = console.post(f"/console/policies/{draft.id}/shadow/start", {"confirmed": "yes"})
    listed = console.get("/console/shadows")
    report = console.get(f"/console/policies/{draft.id}/shadow")

    assert asked.status_code == 200
    assert f"Put version 2 of “candidate” (policy {draft.id}) in shadow" in main_text(asked.text)
    assert done.status_code == 200
    assert f"Policy {draft.id} is in shadow for family {draft.family_id}." in main_text(done.text)
    assert f'href="/console/policies/{draft.id}/shadow"' in done.text
    assert harness.store.shadows.is_shadow(draft.id)
    running = section(listed.text, "running")
    assert f"candidate · version 2 (policy {draft.id})" in running
    assert "— (none settled)" in running
    assert section(listed.text, "stopped").endswith("None.")
    assert post_forms(listed.text) == [f"/console/policies/{draft.id}/shadow/stop"]
    shown = main_text(report.text)
    assert report.status_code == 200
    assert "In shadow since 2026-11-30" in shown
    assert f"beside the live version 1 (policy {live.id})" in shown
    assert "No difference yet." in shown


def test_a_difference_links_the_live_execution_beside_the_shadows_decision(console, harness,
                                                                          family):
    live, draft = family
    harness.store.shadows.start(draft.id, now=harness.clock.now())
    trigger = harness.post_trigger("TCID-1")  # the live version runs; the shadow decides
    [execution_id] = trigger.execution_ids
    harness.wait_until(lambda: harness.store.shadows.report(draft.id).seen == 1)
    harness.wait_idle()
    console.sign_in("viewer")

    report = console.get(f"/console/policies/{draft.id}/shadow")
    listed = console.get("/console/shadows")

    assert report.status_code == 200
    cases = section(report.text, "cases")
    assert f'<a href="/console/executions/{execution_id}">Execution {execution_id}</a>' \
        in report.text
    live_cell, shadow_cell = re.findall(
        r'<td data-label="(?:Live|Shadow) decided">(.*?)</td>\s*(?=<td)', report.text, re.S)
    assert "Rules rule Actions test_noop" in main_text(f'<main id="main">{live_cell}</main>')
    assert "Rules renamed Actions test_noop" in main_text(f'<main id="main">{shadow_cell}</main>')
    assert "other_rule" in cases and f"trigger {trigger.id}" in cases
    kinds = section(report.text, "kinds")
    assert "other_rule 1" in kinds and "no_match 0" in kinds
    assert "Agreement 0% 0 of 1 settled" in main_text(report.text)
    running = section(listed.text, "running")
    assert "candidate · version 2" in running and "0% (0 of 1 settled)" in running


def test_agreement_counts_the_settled_decisions_only(console, harness, family):
    live, draft = family
    waiting = harness.policy(rule("test_wait"), projects=("WAIT",))
    ended = [harness.post_trigger("TCID-1").execution_ids[0] for _ in range(3)]
    [parked] = harness.post_trigger("TCID-1", policy_id=waiting.id).execution_ids
    harness.store.shadows.start(draft.id, now=harness.clock.now())
    record(harness, draft, 1, ended[0], Decision(["rule"], ["test_noop"]))  # agrees
    record(harness, draft, 2, ended[1], Decision(["rule"], ["test_noop"]))  # agrees
    record(harness, draft, 3, ended[2], Decision())  # no_match
    record(harness, draft, 4, parked, Decision())  # pending: its live one still runs
    console.sign_in("viewer")

    listed = section(console.get("/console/shadows").text, "running")
    report = main_text(console.get(f"/console/policies/{draft.id}/shadow").text)

    assert "candidate · version 2" in listed and "67% (2 of 3 settled)" in listed
    assert "Agreement 67% 2 of 3 settled Seen 4 live triggers Pending 1" in report
    assert "Differed 1" in report


def test_stopping_asks_then_keeps_the_report_as_no_longer_in_shadow(console, harness, family):
    live, draft = family
    harness.store.shadows.start(draft.id, now=harness.clock.now())
    [execution_id] = harness.post_trigger("TCID-1").execution_ids
    harness.wait_until(lambda: harness.store.shadows.report(draft.id).seen == 1)
    console.sign_in("operator")

    asked = console.post(f"/console/policies/{draft.id}/shadow/stop")
    done = console.post(f"/console/policies/{draft.id}/shadow/stop", {"confirmed": "yes"})
    listed = console.get("/console/shadows")
    report = console.get(f"/console/policies/{draft.id}/shadow")

    assert "it decides beside no more live triggers" in main_text(asked.text)
    assert f"The shadow of policy {draft.id} is stopped; its report stays." in main_text(done.text)
    assert not harness.store.shadows.is_shadow(draft.id)
    assert section(listed.text, "running").endswith(
        "Put one in shadow from its policy page (usually a replacement of a live version).")
    stopped = section(listed.text, "stopped")
    assert f"candidate · version 2 (policy {draft.id})" in stopped and "draft" in stopped
    assert "Not in shadow now: what it decided while it was." in main_text(report.text)
    assert f"/console/executions/{execution_id}" in report.text
    assert post_forms(report.text) == [f"/console/policies/{draft.id}/shadow/start"]


def test_an_activated_shadow_is_listed_as_no_longer_in_shadow(console, harness, family):
    live, draft = family
    harness.store.shadows.start(draft.id, now=harness.clock.now())
    harness.post_trigger("TCID-1")  # other_rule
    harness.wait_until(lambda: harness.store.shadows.report(draft.id).seen == 1)
    harness.wait_idle()
    harness.store.policies.activate(draft.id, now=harness.clock.now())
    console.sign_in("viewer")

    listed = console.get("/console/shadows")

    stopped = section(listed.text, "stopped")
    assert f"(policy {draft.id})" in stopped and "active" in stopped
    assert "0% (0 of 1 settled)" in stopped


def test_a_version_never_shadowed_reports_zero_counts(console, family):
    console.sign_in("viewer")

    report = console.get(f"/console/policies/{family[0].id}/shadow")

    assert report.status_code == 200
    assert "This version has never decided in shadow." in main_text(report.text)


# --- refusals and roles -----------------------------------------------------------------------


def test_a_refused_start_or_stop_is_a_4xx_page(console, harness, family):
    live, draft = family
    other = candidate(harness, live, rule("test_noop"), name="another")
    console.sign_in("operator")

    not_a_draft = console.post(f"/console/policies/{live.id}/shadow/start")
    not_in_shadow = console.post(f"/console/policies/{draft.id}/shadow/stop")
    console.post(f"/console/policies/{draft.id}/shadow/start", {"confirmed": "yes"})
    twice = console.post(f"/console/policies/{draft.id}/shadow/start", {"confirmed": "yes"})
    second = console.post(f"/console/policies/{other.id}/shadow/start")
    unknown = console.get("/console/policies/999999/shadow")

    assert not_a_draft.status_code == 409
    assert "only a draft can be put in shadow" in main_text(not_a_draft.text)
    assert not_in_shadow.status_code == 404
    assert "is not in shadow" in main_text(not_in_shadow.text)
    assert twice.status_code == 409 and "in shadow already" in main_text(twice.text)
    assert second.status_code == 409
    assert f"has a shadow already: policy {draft.id}" in main_text(second.text)
    assert unknown.status_code == 404


def test_a_viewer_sees_no_action_and_a_forged_post_is_refused(console, harness, family):
    live, draft = family
    other = candidate(harness, live, rule("test_noop"), name="another")
    harness.store.shadows.start(draft.id, now=harness.clock.now())
    console.sign_in("viewer")
    pages = [console.get(path) for path in ("/console/shadows",
                                            f"/console/policies/{draft.id}/shadow",
                                            f"/console/policies/{other.id}/shadow")]

    assert all(post_forms(page.text) == [] for page in pages)
    token = form_token(pages[0].text)
    stop = console.post(f"/console/policies/{draft.id}/shadow/stop", {"confirmed": "yes"},
                        token=token)
    assert stop.status_code == 403
    assert "this needs the operator role" in main_text(stop.text)
    assert harness.store.shadows.is_shadow(draft.id)


def test_hostile_policy_names_are_escaped(console, harness):
    live = harness.policy(rule("test_noop", name=f"rule {HOSTILE}"))
    draft = candidate(harness, live, rule("test_noop", name=f"renamed {HOSTILE}"),
                      name=f"candidate {HOSTILE}")
    harness.store.shadows.start(draft.id, now=harness.clock.now())
    harness.post_trigger("TCID-1")
    harness.wait_until(lambda: harness.store.shadows.report(draft.id).seen == 1)
    harness.wait_idle()
    console.sign_in("viewer")

    for path in ("/console/shadows", f"/console/policies/{draft.id}/shadow"):
        page = console.get(path)
        main = page.text.split('<main id="main"', 1)[1]
        assert "<script>" not in main and "&lt;script&gt;" in main, path
        assert f"candidate {HOSTILE}" in main_text(page.text)


# --- bounded reads ----------------------------------------------------------------------------


def test_the_shadows_list_costs_the_same_queries_for_one_shadow_or_many(console, harness):
    def shadow(n: int):
        live = harness.policy(rule("test_noop"), projects=(f"P{n}",))
        draft = candidate(harness, live, rule("test_noop"))
        harness.store.shadows.start(draft.id, now=harness.clock.now())
        return draft

    console.sign_in("viewer")
    first = shadow(0)
    with QueryCounter(harness.store.db) as one:
        console.get("/console/shadows")
    drafts = [shadow(n) for n in range(1, 6)]
    for draft in drafts[:3]:  # and some stopped, with decisions left behind
        record(harness, draft, 1, 1, Decision())
        harness.store.shadows.stop(draft.id)
    with QueryCounter(harness.store.db) as many:
        page = console.get("/console/shadows")

    assert many.count == one.count
    assert f"(policy {first.id})" in section(page.text, "running")
    assert all(f"(policy {d.id})" in section(page.text, "stopped") for d in drafts[:3])


def test_the_overview_lists_the_newest_stopped_shadows_first_and_at_most_so_many(harness):
    live = harness.policy(rule("test_noop"))
    drafts = []
    for n in range(4):
        draft = candidate(harness, live, rule("test_noop"), name=f"try {n}")
        harness.store.shadows.start(draft.id, now=harness.clock.now())
        record(harness, draft, n, 1, Decision())
        harness.store.shadows.stop(draft.id)
        drafts.append(draft)
    harness.store.shadows.start(drafts[1].id, now=harness.clock.now())  # running again

    summaries = harness.store.shadows.overview(stopped=2)

    assert [(s.policy_id, s.report.shadowing) for s in summaries] == [
        (drafts[1].id, True), (drafts[3].id, False), (drafts[2].id, False)]
    assert all(s.report.verdicts[None] == 1 for s in summaries)
