"""What ``policy plan`` shows and ``policy apply`` does, decided from files and stored
versions: matching by name, per-rule diffs, drift, pruning, and the export text."""

from __future__ import annotations

import copy
import json

import pytest

from tests.factories import policy_body
from ticket_dispatcher.domain.policy_plan import (
    PlanError,
    PolicyFile,
    StoredVersion,
    file_name,
    make_plan,
    normalized,
    policy_changes,
    policy_file_text,
)


def _file(body: dict, path: str = "") -> PolicyFile:
    return PolicyFile(path or f"policies/{body['name']}.json", normalized(body))


def _stored(body: dict, *, id: int = 1, family: str = "pf_A", version: int = 1,
            status: str = "active", origin: str | None = "apply") -> StoredVersion:
    return StoredVersion(id=id, family_id=family, version=version, status=status,
                         origin=origin, body=copy.deepcopy(body))


def _rule(name: str, priority: int = 10, values: tuple[str, ...] = ("P0",)) -> dict:
    rule = copy.deepcopy(policy_body()["rules"][0])
    rule.update(name=name, priority=priority)
    rule["when"]["values"] = list(values)
    return rule


def test_a_file_equal_to_the_active_version_plans_no_change():
    body = policy_body()
    plan = make_plan([_file(body)], [_stored(body)])
    assert not plan.changed
    assert plan.lines() == ["no change"]


def test_defaults_rule_order_and_key_order_do_not_make_a_change():
    stored = policy_body(rules=[_rule("late", 20), _rule("early", 10)])
    written = copy.deepcopy(stored)
    del written["trigger"]["issue_label_all"]  # a default
    for rule in written["rules"]:
        del rule["transition"]  # the default: terminate
        rule["when"] = dict(reversed(list(rule["when"].items())))
    server_side = copy.deepcopy(stored)
    server_side["rules"].reverse()  # the service answers in run order
    assert not make_plan([_file(written)], [_stored(server_side)]).changed


def test_a_new_name_is_a_new_family_activated():
    plan = make_plan([_file(policy_body(name="New"))], [_stored(policy_body())])
    assert [c.file.name for c in plan.creations] == ["New"]
    assert plan.lines()[:2] == ["+ policy 'New': new family from policies/New.json, activated",
                                "    + rule 'urgent'"]
    assert plan.changed


def test_a_changed_file_shows_each_rule_added_removed_or_changed_by_name():
    old = policy_body(rules=[_rule("urgent", 10), _rule("gone", 30)])
    new = policy_body(description="changed", rules=[_rule("urgent", 5, ("P0", "P1")),
                                                    _rule("added", 40)])
    plan = make_plan([_file(new)], [_stored(old, id=7, version=3)])
    [replacement] = plan.replacements
    assert replacement.active.id == 7
    assert replacement.changes == [
        'description: "round robin over the TCID squad" -> "changed"',
        "~ rule 'urgent'",
        "    priority: 10 -> 5",
        '    when: {"field": "issue.priority", "operator": "in", "values": ["P0"]} -> '
        '{"field": "issue.priority", "operator": "in", "values": ["P0", "P1"]}',
        "+ rule 'added'",
        "- rule 'gone'",
    ]
    assert plan.lines()[0] == ("~ policy 'Assign TCID tickets': new version from "
                               "policies/Assign TCID tickets.json, replacing the active "
                               "version 3 (policy 7, family pf_A)")
    assert plan.summary() == "plan: 0 to create, 1 to replace, 0 to deactivate"


def test_trigger_changes_are_named_by_key():
    new = policy_body(trigger={"enable": False, "project_key_in": ["TCID", "OPS"]})
    changes = policy_changes(normalized(policy_body()), normalized(new))
    assert changes == ['trigger.enable: true -> false',
                       'trigger.project_key_in: ["TCID"] -> ["TCID", "OPS"]']


def test_reordering_rules_of_one_priority_is_a_change():
    old = policy_body(rules=[_rule("a"), _rule("b")])
    new = policy_body(rules=[_rule("b"), _rule("a")])
    assert policy_changes(normalized(old), normalized(new)) == ["rule order: 'a', 'b' -> 'b', 'a'"]


def test_repeated_rule_names_are_matched_in_order():
    old = policy_body(rules=[_rule("same", 10), _rule("same", 20)])
    new = policy_body(rules=[_rule("same", 10), _rule("same", 20, ("P2",))])
    changes = policy_changes(normalized(old), normalized(new))
    assert changes[0] == "~ rule 'same' (#2 of that name)"


def test_active_families_without_a_file_are_deactivated_only_with_prune():
    kept = _stored(policy_body(name="Kept"), id=4, family="pf_K")
    assert make_plan([], [kept]).changed is False
    assert "no file (kept; --prune deactivates it)" in make_plan([], [kept]).lines()[0]
    plan = make_plan([], [kept], prune=True)
    assert [d.active.id for d in plan.deactivations] == [4]
    assert plan.lines()[0].startswith("- policy 'Kept': deactivate the active version 1")


def test_inactive_versions_are_not_matched():
    body = policy_body()
    plan = make_plan([_file(body)], [_stored(body, status="inactive")])
    assert len(plan.creations) == 1


def test_the_first_apply_adopts_a_family_made_elsewhere():
    body = policy_body()
    assert not make_plan([_file(body)], [_stored(body, origin="console")]).changed
    changed = make_plan([_file(policy_body(description="x"))], [_stored(body, origin="api")])
    assert len(changed.replacements) == 1 and changed.drifts == []


def test_a_version_made_elsewhere_after_an_apply_is_drift():
    body = policy_body()
    applied = _stored(body, id=1, version=1, status="superseded", origin="apply")
    quick_fix = _stored(policy_body(description="fixed in the console"), id=2, version=2,
                        origin="console")
    plan = make_plan([_file(body)], [applied, quick_fix])
    [drift] = plan.drifts
    assert drift.active.id == 2 and not drift.same_as_file
    assert plan.changed
    assert plan.lines()[0] == (
        "drift: policy 'Assign TCID tickets': the active version 2 (policy 2, family pf_A) "
        "was made by console, not by apply; apply refuses it unless --force")
    assert plan.summary().endswith("; 1 drifted")


def test_drift_matching_the_file_is_still_shown_and_replaced_under_force():
    body = policy_body()
    applied = _stored(body, id=1, status="superseded", origin="apply")
    same = _stored(body, id=2, version=2, origin="api")
    plan = make_plan([_file(body)], [applied, same])
    assert plan.drifts[0].same_as_file
    assert [r.changes for r in plan.replacements] == [[]]


def test_two_active_families_with_one_name_are_an_error_naming_them():
    body = policy_body()
    with pytest.raises(PlanError) as raised:
        make_plan([_file(body)], [_stored(body, id=1, family="pf_A"),
                                  _stored(body, id=2, family="pf_B")])
    assert "two active families share the name 'Assign TCID tickets'" in str(raised.value)
    assert "family pf_A" in str(raised.value) and "family pf_B" in str(raised.value)


def test_two_files_with_one_name_are_an_error_naming_them():
    body = policy_body()
    with pytest.raises(PlanError, match="a.json and b.json hold the same policy name"):
        make_plan([_file(body, "a.json"), _file(body, "b.json")], [])


def test_the_export_text_is_stable_and_reads_back_unchanged():
    body = policy_body(rules=[_rule("late", 20), _rule("early", 10)])
    text = policy_file_text(body)
    assert text.endswith("}\n")
    assert policy_file_text(json.loads(text)) == text
    assert list(json.loads(text)) == ["name", "description", "trigger", "rules"]
    assert [rule["name"] for rule in json.loads(text)["rules"]] == ["early", "late"]


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "a\\b", "tab\there", " padded",
                                  "what?", "x" * 251])
def test_names_that_cannot_be_a_file_name_are_refused(name):
    assert file_name(name) is None


def test_ordinary_names_are_file_names():
    assert file_name("Assign TCID tickets") == "Assign TCID tickets.json"
    assert file_name("派单 - L2") == "派单 - L2.json"
