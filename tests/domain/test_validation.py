"""The policy validator: each rule accepted and rejected, every problem at once.

``PRODUCT`` is this build's registry. ``WITH_NOTIFICATIONS`` replaces its notification executors
with recording stand-ins (tests/fakes.py) that check their configuration with the real checks,
so the assignment-notification family rules and the notification configs are exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes import RecordingAction, notification_stand_ins
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.validation import (
    parse_policy_spec,
    shape_problems,
    validate_policy,
    without_server_fields,
)
from ticket_dispatcher.errors import InvalidInput, Problem

EXAMPLES = Path(__file__).resolve().parents[2] / "ops" / "examples" / "policies"
FAMILIES = ("priority-assignee.json", "priority-l2.json", "severity-assignee.json")
PRODUCT = product_registry()
WITH_NOTIFICATIONS = product_registry()
for _stand_in in notification_stand_ins():
    WITH_NOTIFICATIONS.register(_stand_in)


def validate(body, registry: ActionRegistry = WITH_NOTIFICATIONS) -> list[Problem]:
    return validate_policy(body, registry)


def example(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text())


def ordinary() -> dict:
    return example("assign-tcid.json")


def severity() -> dict:
    return example("severity-assignee.json")


def paths(problems) -> list[tuple[str, str]]:
    return [(problem.path, problem.kind) for problem in problems]


def page(**changes) -> dict:
    config = {"attempt": 1, "ack_pending_statuses": ["Todo"], "ack_timeout": "5m",
              "poll_interval": "5s"}
    config.update(changes)
    return {"type": "page_assignment", "page_assignment": config}


def with_action(action: dict) -> dict:
    """The ordinary policy with its first rule's action replaced."""
    body = ordinary()
    body["rules"][0]["then"] = [action]
    return body


def in_urgent_rule(action: dict) -> dict:
    """The severity family with the urgent rule's actions replaced by one action."""
    body = severity()
    body["rules"][1]["then"] = [action]
    return body


# --- accepted -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*FAMILIES, "assign-tcid.json"])
def test_example_policies_are_valid_exactly_as_written(name):
    assert validate(example(name)) == []


def test_the_ordinary_example_is_valid_in_this_build():
    assert validate(ordinary(), PRODUCT) == []


@pytest.mark.parametrize("name", FAMILIES)
def test_example_families_are_valid_now_every_notification_action_has_an_executor(name):
    body = example(name)
    assert {a["type"] for rule in body["rules"] for a in rule["then"]} <= set(PRODUCT.types())
    assert validate(body, PRODUCT) == []


def test_config_of_an_action_type_without_executor_is_not_checked():
    without = ActionRegistry(PRODUCT.get(t) for t in PRODUCT.types()
                             if t != "escalate_assignment_to_leader")
    body = severity()
    body["rules"][1]["then"] = [{"type": "escalate_assignment_to_leader",
                                 "escalate_assignment_to_leader": {"max_hops": 2}}]
    assert [p.path for p in validate(body, without)] == ["rules[1].then[0].type"]


def test_unknown_action_type_lists_the_types_this_build_runs():
    problems = validate(with_action({"type": "close"}), PRODUCT)
    assert [(p.path, p.message) for p in problems] == [
        ("rules[0].then[0].type", 'unknown action type "close"; allowed: assign, assign_l2, '
                                  "triage, send_assignment_notification, "
                                  "mark_assignment_message_urgent, page_assignment, "
                                  "escalate_assignment_to_leader")]


def test_a_test_only_action_is_valid_once_registered():
    registry = product_registry()
    body = with_action({"type": "test_noop", "test_noop": {}})
    assert [p.path for p in validate(body, registry)] == ["rules[0].then[0].type"]
    registry.register(RecordingAction("test_noop"))
    assert validate(body, registry) == []


def test_the_severity_family_is_the_seed_template_verbatim():
    body = severity()
    assert body["trigger"] == {
        "enable": True, "source_in": ["jira_assignment_assignee"],
        "project_key_in": ["TCID", "ST", "APID", "JPID", "EMID", "NAID", "TCB"],
        "issue_label_all": ["notify-assignee"]}
    assert [a["type"] for a in body["rules"][1]["then"]] == [
        "mark_assignment_message_urgent", "page_assignment", "page_assignment",
        "page_assignment", "escalate_assignment_to_leader"]


def test_priority_families_follow_the_replacement_table():
    assignee, l2 = example("priority-assignee.json"), example("priority-l2.json")
    for body, source, role, label, statuses in (
        (assignee, "jira_assignment_assignee", "assignee", "notify-assignee",
         ["Todo", "ESCALATE TO L3"]),
        (l2, "jira_assignment_l2_assignee", "l2_assignee", "notify-l2-assignee", ["Todo"]),
    ):
        assert body["trigger"]["source_in"] == [source]
        assert body["trigger"]["project_key_in"] == ["TCOC", "GTOC", "TCT"]
        assert body["rules"][0]["then"][0]["send_assignment_notification"] == {
            "role": role, "label": label}
        assert body["rules"][1]["when"] == {
            "field": "issue.priority", "operator": "in", "values": ["P0", "P1"]}
        pages = [a for a in body["rules"][1]["then"] if a["type"] == "page_assignment"]
        assert [p["page_assignment"]["ack_pending_statuses"] for p in pages] == [statuses] * 3


@pytest.mark.parametrize(
    "body",
    [
        {"name": "minimal", "rules": [{"name": "r", "priority": 0, "when": {"always": True},
                                        "then": [{"type": "assign", "assign": {
                                            "receiver": {"type": "user", "user": "a@x.io"},
                                            "strategy": "first"}}]}]},
        with_action({"type": "assign_l2", "assign_l2": {
            "receiver": {"type": "group", "group": "l2-sre"}, "strategy": "first"}}),
        with_action({"type": "triage", "triage": {"labels_add": ["x"], "labels_remove": ["y"]}}),
        with_action({"type": "triage", "triage": {"priority": "P2", "components": [],
                                                  "fields": {"customfield_1": {"value": "a"}}}}),
        # a raw field no other key writes: the labels set whole, beside a priority
        with_action({"type": "triage", "triage": {"priority": "P2",
                                                  "fields": {"labels": ["x"]}}}),
    ],
)
def test_ordinary_bodies_accepted(body):
    assert validate(body) == []


def test_ordinary_policy_lists_ordinary_sources_freely():
    body = ordinary()
    body["trigger"]["source_in"] = ["jira", "manual", "jira_assignment"]
    assert validate(body) == []


def test_equal_rule_priorities_are_fine_in_ordinary_policies():
    body = ordinary()
    body["rules"][1]["priority"] = body["rules"][0]["priority"]
    assert validate(body) == []


def test_notification_actions_without_config_accept_absent_null_or_empty():
    body = severity()
    body["rules"][1]["then"][0] = {"type": "mark_assignment_message_urgent",
                                   "mark_assignment_message_urgent": {}}
    body["rules"][1]["then"][4] = {"type": "escalate_assignment_to_leader",
                                   "escalate_assignment_to_leader": None}
    assert validate(body) == []


def test_each_page_action_is_checked_on_its_own():
    # Each page is checked alone: attempts need not be 1/2/3, ACK settings need not agree.
    body = severity()
    body["rules"][1]["then"] = [page(attempt=7), page(attempt=2, ack_pending_statuses=["A", "B"],
                                                       ack_timeout="1m", poll_interval="1m")]
    assert validate(body) == []


def test_urgent_rule_may_hold_any_notification_actions_in_any_order():
    body = severity()
    body["rules"][1]["then"] = [{"type": "escalate_assignment_to_leader"}, page()]
    body["rules"][1]["transition"] = {"on_success": "continue"}
    assert validate(body) == []


def test_notification_rule_order_comes_from_priority_not_list_position():
    body = severity()
    body["rules"].reverse()
    assert validate(body) == []


# --- rejected: shapes and generic rules -----------------------------------------------------


def mutate(change):
    def build() -> dict:
        body = ordinary()
        change(body)
        return body
    return build


def rule0(body: dict) -> dict:
    return body["rules"][0]


def action0(body: dict) -> dict:
    return body["rules"][0]["then"][0]


def assign0(body: dict) -> dict:
    return body["rules"][0]["then"][0]["assign"]


ORDINARY_REJECTIONS = [
    (mutate(lambda b: b.pop("name")), "name", "shape"),
    (mutate(lambda b: b.update(name=5)), "name", "shape"),
    (mutate(lambda b: b.update(name="  ")), "name", "rule"),
    (mutate(lambda b: b.update(description=["x"])), "description", "shape"),
    (mutate(lambda b: b.update(urgent=["P0"])), "urgent", "shape"),
    (mutate(lambda b: b.update(trigger=[])), "trigger", "shape"),
    (mutate(lambda b: b["trigger"].update(enable="yes")), "trigger.enable", "shape"),
    (mutate(lambda b: b["trigger"].update(source_in="jira")), "trigger.source_in", "shape"),
    (mutate(lambda b: b["trigger"].update(project_key_in=[1])), "trigger.project_key_in", "shape"),
    (mutate(lambda b: b["trigger"].update(issue_label_all=[""])),
     "trigger.issue_label_all[0]", "rule"),
    (mutate(lambda b: b["trigger"].update(label_any=["x"])), "trigger.label_any", "shape"),
    (mutate(lambda b: b.pop("rules")), "rules", "shape"),
    (mutate(lambda b: b.update(rules={})), "rules", "shape"),
    (mutate(lambda b: b.update(rules=[])), "rules", "rule"),
    (mutate(lambda b: b["rules"].append("rule")), "rules[2]", "shape"),
    (mutate(lambda b: rule0(b).pop("name")), "rules[0].name", "shape"),
    (mutate(lambda b: rule0(b).update(name="")), "rules[0].name", "rule"),
    (mutate(lambda b: rule0(b).pop("priority")), "rules[0].priority", "shape"),
    (mutate(lambda b: rule0(b).update(priority="10")), "rules[0].priority", "shape"),
    (mutate(lambda b: rule0(b).update(priority=True)), "rules[0].priority", "shape"),
    (mutate(lambda b: rule0(b).pop("when")), "rules[0].when", "shape"),
    (mutate(lambda b: rule0(b).update(when={"always": False})), "rules[0].when.always", "rule"),
    (mutate(lambda b: rule0(b)["when"]["all"][0].update(field="issue.team")),
     "rules[0].when.all[0].field", "rule"),
    (mutate(lambda b: rule0(b).pop("then")), "rules[0].then", "shape"),
    (mutate(lambda b: rule0(b).update(then={})), "rules[0].then", "shape"),
    (mutate(lambda b: rule0(b).update(then=[])), "rules[0].then", "rule"),
    (mutate(lambda b: rule0(b).update(transition="terminate")), "rules[0].transition", "shape"),
    (mutate(lambda b: rule0(b)["transition"].update(on_success="stop")),
     "rules[0].transition.on_success", "shape"),
    (mutate(lambda b: rule0(b)["transition"].update(on_failure="stop")),
     "rules[0].transition.on_failure", "shape"),
    (mutate(lambda b: rule0(b).update(enabled=True)), "rules[0].enabled", "shape"),
    # actions
    (lambda: with_action("assign"), "rules[0].then[0]", "shape"),
    (lambda: with_action({"assign": {}}), "rules[0].then[0].type", "shape"),
    (lambda: with_action({"type": 3}), "rules[0].then[0].type", "shape"),
    (lambda: with_action({"type": "close"}), "rules[0].then[0].type", "rule"),
    (lambda: with_action({"type": "assign"}), "rules[0].then[0].assign", "shape"),
    (lambda: with_action({"type": "assign", "assign": []}), "rules[0].then[0].assign", "shape"),
    (mutate(lambda b: action0(b).update(triage={})), "rules[0].then[0].triage", "shape"),
    (mutate(lambda b: assign0(b).pop("strategy")), "rules[0].then[0].assign.strategy", "shape"),
    (mutate(lambda b: assign0(b).update(strategy="weighted")),
     "rules[0].then[0].assign.strategy", "rule"),
    (mutate(lambda b: assign0(b).update(strategy=1)), "rules[0].then[0].assign.strategy", "shape"),
    (mutate(lambda b: assign0(b).update(fallback="x")),
     "rules[0].then[0].assign.fallback", "shape"),
    (mutate(lambda b: assign0(b).pop("receiver")), "rules[0].then[0].assign.receiver", "shape"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "team", "team": "x"})),
     "rules[0].then[0].assign.receiver.type", "rule"),
    (mutate(lambda b: assign0(b).update(receiver={"oncall_team": "x"})),
     "rules[0].then[0].assign.receiver.type", "shape"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "oncall_team"})),
     "rules[0].then[0].assign.receiver.oncall_team", "shape"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "oncall_team", "oncall_team": ""})),
     "rules[0].then[0].assign.receiver.oncall_team", "rule"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "group", "group": "g", "user": "a@b"})),
     "rules[0].then[0].assign.receiver.user", "shape"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "user", "user": "alice"})),
     "rules[0].then[0].assign.receiver.user", "rule"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "user", "user": ["a@b.c"]})),
     "rules[0].then[0].assign.receiver.user", "shape"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "users", "users": []})),
     "rules[0].then[0].assign.receiver.users", "rule"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "users", "users": ["a@b.c", "bob"]})),
     "rules[0].then[0].assign.receiver.users[1]", "rule"),
    (mutate(lambda b: assign0(b).update(receiver={"type": "users", "users": "a@b.c"})),
     "rules[0].then[0].assign.receiver.users", "shape"),
    (lambda: with_action({"type": "triage", "triage": {}}), "rules[0].then[0].triage", "rule"),
    (lambda: with_action({"type": "triage", "triage": {"labels_add": ["a", "b"],
                                                       "labels_remove": ["b"]}}),
     "rules[0].then[0].triage.labels_remove", "rule"),
    (lambda: with_action({"type": "triage", "triage": {"components": "db"}}),
     "rules[0].then[0].triage.components", "shape"),
    (lambda: with_action({"type": "triage", "triage": {"fields": []}}),
     "rules[0].then[0].triage.fields", "shape"),
    (lambda: with_action({"type": "triage", "triage": {"priority": ""}}),
     "rules[0].then[0].triage.priority", "rule"),
    (mutate(lambda b: b.update(name="n" * 201)), "name", "rule"),
    # Jira refuses an edit naming a field under both "fields" and "update" (the labels)
    (lambda: with_action({"type": "triage", "triage": {"labels_add": ["triaged"],
                                                       "fields": {"labels": ["x"]}}}),
     "rules[0].then[0].triage.fields.labels", "rule"),
    (lambda: with_action({"type": "triage", "triage": {"priority": "P1",
                                                       "fields": {"priority": {"name": "P2"}}}}),
     "rules[0].then[0].triage.fields.priority", "rule"),
    (lambda: with_action({"type": "triage", "triage": {"components": ["db"],
                                                       "fields": {"components": []}}}),
     "rules[0].then[0].triage.fields.components", "rule"),
]


def test_triage_with_only_unknown_keys_reports_both_facts():
    body = with_action({"type": "triage", "triage": {"assignee": "a@b.c"}})
    assert paths(validate(body)) == [
        ("rules[0].then[0].triage.assignee", "shape"), ("rules[0].then[0].triage", "rule")]


@pytest.mark.parametrize(("build", "path", "kind"), ORDINARY_REJECTIONS)
def test_ordinary_policy_rejection(build, path, kind):
    assert paths(validate(build())) == [(path, kind)]


@pytest.mark.parametrize("raw", [None, [], "policy", 3])
def test_body_must_be_an_object(raw):
    assert paths(validate(raw)) == [("", "shape")]


@pytest.mark.parametrize(
    "key", ["id", "family_id", "version", "status", "created_at", "updated_at", "activated_at",
            "origin"]
)
def test_server_assigned_policy_keys_are_rejected(key):
    body = ordinary()
    body[key] = "x"
    problems = validate(body)
    assert paths(problems) == [(key, "shape")]
    assert problems[0].message == "is assigned by the server"


def test_server_assigned_rule_id_is_rejected():
    body = ordinary()
    body["rules"][1]["id"] = 11
    problems = validate(body)
    assert paths(problems) == [("rules[1].id", "shape")]
    assert problems[0].message == "is assigned by the server"


# --- page_assignment ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "key", "kind"),
    [
        ({"attempt": 0}, "attempt", "rule"),
        ({"attempt": -1}, "attempt", "rule"),
        ({"attempt": True}, "attempt", "shape"),
        ({"attempt": "1"}, "attempt", "shape"),
        ({"ack_pending_statuses": []}, "ack_pending_statuses", "rule"),
        ({"ack_pending_statuses": ["Todo", "Todo"]}, "ack_pending_statuses", "rule"),
        ({"ack_pending_statuses": "Todo"}, "ack_pending_statuses", "shape"),
        ({"ack_timeout": "5 minutes"}, "ack_timeout", "rule"),
        ({"ack_timeout": "0s"}, "ack_timeout", "rule"),
        ({"ack_timeout": 300}, "ack_timeout", "shape"),
        ({"poll_interval": "0ms"}, "poll_interval", "rule"),
        ({"poll_interval": "6m"}, "poll_interval", "rule"),
    ],
)
def test_page_assignment_config_rejection(changes, key, kind):
    problems = validate(in_urgent_rule(page(**changes)))
    assert paths(problems) == [(f"rules[1].then[0].page_assignment.{key}", kind)]


def test_page_assignment_needs_every_key():
    action = page()
    del action["page_assignment"]["poll_interval"]
    assert paths(validate(in_urgent_rule(action))) == [
        ("rules[1].then[0].page_assignment.poll_interval", "shape")]


def test_poll_interval_may_equal_ack_timeout():
    assert validate(in_urgent_rule(page(ack_timeout="5s", poll_interval="5s"))) == []


# --- keys a notification action may not carry are unknown keys -----------------------------


def test_terminal_statuses_is_rejected():
    action = page()
    action["page_assignment"]["terminal_statuses"] = ["Done"]
    problems = validate(in_urgent_rule(action))
    assert paths(problems) == [("rules[1].then[0].page_assignment.terminal_statuses", "shape")]
    assert problems[0].message == "unknown key"


def test_max_hops_is_rejected():
    action = {"type": "escalate_assignment_to_leader",
              "escalate_assignment_to_leader": {"max_hops": 2}}
    problems = validate(in_urgent_rule(action))
    assert paths(problems) == [
        ("rules[1].then[0].escalate_assignment_to_leader.max_hops", "shape")]


@pytest.mark.parametrize(
    ("action", "path"),
    [
        ({"type": "mark_assignment_message_urgent", "urgent_values": ["S1"]},
         "rules[1].then[0].urgent_values"),
        ({"type": "mark_assignment_message_urgent",
          "mark_assignment_message_urgent": {"urgent_priorities": ["P0", "P1"]}},
         "rules[1].then[0].mark_assignment_message_urgent.urgent_priorities"),
        ({**page(), "urgency": ["P0"]}, "rules[1].then[0].urgency"),
    ],
)
def test_action_level_urgency_lists_are_rejected(action, path):
    assert paths(validate(in_urgent_rule(action))) == [(path, "shape")]


def test_retry_labels_are_rejected():
    body = severity()
    body["rules"][0]["then"][0]["send_assignment_notification"]["retry_labels"] = [
        "notify-assignee-once", "notify-assignee-twice"]
    assert paths(validate(body)) == [
        ("rules[0].then[0].send_assignment_notification.retry_labels", "shape")]


# --- assignment-notification families ------------------------------------------------------


def fam(change):
    def build() -> dict:
        body = severity()
        change(body)
        return body
    return build


def send_config(body: dict) -> dict:
    return body["rules"][0]["then"][0]["send_assignment_notification"]


MARK_URGENT = {"type": "mark_assignment_message_urgent"}
SEND = {"type": "send_assignment_notification",
        "send_assignment_notification": {"role": "assignee", "label": "notify-assignee"}}
ASSIGN = {"type": "assign", "assign": {"receiver": {"type": "user", "user": "a@b.c"},
                                       "strategy": "first"}}

FAMILY_REJECTIONS = [
    (fam(lambda b: b["trigger"].update(source_in=[])), ["trigger.source_in"]),
    (fam(lambda b: b["trigger"].pop("source_in")), ["trigger.source_in"]),
    (fam(lambda b: b["trigger"].update(source_in=["jira_assignment_assignee", "jira"])),
     ["trigger.source_in"]),
    (fam(lambda b: b["trigger"].update(
        source_in=["jira_assignment_assignee", "jira_assignment_l2_assignee"])),
     ["trigger.source_in"]),
    (fam(lambda b: b["trigger"].update(source_in=["jira"])), ["trigger.source_in"]),
    # the role triple: source, role and label must belong together
    (fam(lambda b: b["trigger"].update(source_in=["jira_assignment_l2_assignee"])),
     ["trigger.issue_label_all", "trigger.issue_label_all",
      "rules[0].then[0].send_assignment_notification.role",
      "rules[0].then[0].send_assignment_notification.label"]),
    (fam(lambda b: send_config(b).update(role="l2_assignee")),
     ["rules[0].then[0].send_assignment_notification.role"]),
    (fam(lambda b: send_config(b).update(label="notify-l2-assignee")),
     ["rules[0].then[0].send_assignment_notification.label"]),
    (fam(lambda b: b["trigger"].update(issue_label_all=[])), ["trigger.issue_label_all"]),
    (fam(lambda b: b["trigger"].update(issue_label_all=["notify-assignee", "notify-l2-assignee"])),
     ["trigger.issue_label_all"]),
    (fam(lambda b: b["trigger"].update(project_key_in=[])), ["trigger.project_key_in"]),
    (fam(lambda b: b["trigger"].pop("project_key_in")), ["trigger.project_key_in"]),
    # exactly two rules, in a fixed order
    (fam(lambda b: b["rules"].pop()), ["rules"]),
    (fam(lambda b: b["rules"].append({**b["rules"][1], "priority": 30})), ["rules"]),
    (fam(lambda b: b["rules"][1].update(priority=10)), ["rules[1].priority"]),
    # rule 1
    (fam(lambda b: b["rules"][0].update(when={"not": {"always": True}})), ["rules[0].when"]),
    (fam(lambda b: b["rules"][0]["then"].append(MARK_URGENT)), ["rules[0].then"]),
    (fam(lambda b: b["rules"][0].update(then=[MARK_URGENT])), ["rules[0].then"]),
    (fam(lambda b: b["rules"][0].update(transition={"on_success": "terminate"})),
     ["rules[0].transition.on_success"]),
    (fam(lambda b: b["rules"][0].pop("transition")), ["rules[0].transition.on_success"]),
    # rule 2
    (fam(lambda b: b["rules"][1]["when"].update(operator="eq", value="S1", values=None)
         or b["rules"][1]["when"].pop("values")), ["rules[1].when"]),
    (fam(lambda b: b["rules"][1]["when"].update(field="issue.status")), ["rules[1].when"]),
    (fam(lambda b: b["rules"][1]["when"].update(values=[])), ["rules[1].when.values"]),
    (fam(lambda b: b["rules"][1].update(when={"all": [b["rules"][1]["when"]]})),
     ["rules[1].when"]),
    (fam(lambda b: b["rules"][1].update(when={"always": True})), ["rules[1].when"]),
    (fam(lambda b: b["rules"][1]["then"].append(SEND)), ["rules[1].then[5].type"]),
    # ordinary actions stay out of notification policies
    (fam(lambda b: b["rules"][1]["then"].insert(0, ASSIGN)), ["rules[1].then[0].type"]),
    (fam(lambda b: b["rules"][0]["then"].append(ASSIGN)),
     ["rules[0].then[1].type", "rules[0].then"]),
]


@pytest.mark.parametrize(("build", "expected"), FAMILY_REJECTIONS)
def test_notification_family_rejection(build, expected):
    problems = validate(build())
    assert [p.path for p in problems] == expected, problems
    assert {p.kind for p in problems} == {"rule"}


def test_urgent_rule_running_first_is_rejected():
    body = severity()
    body["rules"][1]["priority"] = 5  # the urgent rule would now run before the card
    assert [p.path for p in validate(body)] == [
        "rules[1].when", "rules[1].then", "rules[1].transition.on_success", "rules[0].when",
        "rules[0].then[0].type"]


def test_notification_action_in_ordinary_policy_is_rejected():
    body = ordinary()
    body["rules"][1]["then"].append(page())
    problems = validate(body)
    assert paths(problems) == [("rules[1].then[1].type", "rule")]
    assert "reserved source" in problems[0].message


def test_notification_only_policy_without_reserved_source_gets_the_family_checks():
    body = severity()
    body["trigger"]["source_in"] = []
    body["rules"][0]["transition"]["on_success"] = "terminate"
    assert [p.path for p in validate(body)] == [
        "trigger.source_in", "rules[0].transition.on_success"]


def test_reserved_source_in_ordinary_policy_is_rejected():
    body = ordinary()
    body["trigger"]["source_in"] = ["jira", "jira_assignment_l2_assignee"]
    problems = validate(body)
    assert paths(problems) == [("trigger.source_in[1]", "rule")]
    assert "assignment-notification" in problems[0].message


# --- every problem at once ------------------------------------------------------------------


def test_all_problems_are_returned_at_once_with_paths():
    body = ordinary()
    body["id"] = 3  # 1: server-assigned
    body["trigger"]["enable"] = "yes"  # 2: wrong type
    body["rules"][0]["when"]["all"][1]["time_window"]["timezone"] = "Asia/Nowhere"  # 3
    body["rules"][1]["then"][0]["assign"]["strategy"] = "weighted"  # 4
    body["rules"][1]["transition"]["on_success"] = "stop"  # 5
    assert paths(validate(body)) == [
        ("id", "shape"),
        ("trigger.enable", "shape"),
        ("rules[0].when.all[1].time_window.timezone", "rule"),
        ("rules[1].then[0].assign.strategy", "rule"),
        ("rules[1].transition.on_success", "shape"),
    ]


def test_shape_problems_keeps_only_shape_problems():
    body = ordinary()
    body["rules"][0]["name"] = ""  # rule
    body["rules"][0]["colour"] = "red"  # shape
    assert paths(validate(body)) == [("rules[0].colour", "shape"), ("rules[0].name", "rule")]
    assert paths(shape_problems(body, WITH_NOTIFICATIONS)) == [("rules[0].colour", "shape")]


# --- parse_policy_spec ----------------------------------------------------------------------


def test_parse_policy_spec_builds_the_typed_spec():
    spec = parse_policy_spec(severity(), WITH_NOTIFICATIONS)
    assert spec.name == "Assignment Notification - Severity Assignee"
    assert spec.trigger.source_in == ("jira_assignment_assignee",)
    assert [r.on_success for r in spec.rules] == [OnSuccess.CONTINUE, OnSuccess.TERMINATE]
    assert spec.rules[1].when["field"] == "issue.custom_fields.severity"


def test_parse_policy_spec_defaults_transition_to_terminate():
    body = ordinary()
    del body["rules"][0]["transition"]
    assert parse_policy_spec(body, WITH_NOTIFICATIONS).rules[0].on_success == OnSuccess.TERMINATE


def test_parse_policy_spec_accepts_a_draft_with_rule_problems():
    body = ordinary()
    body["rules"][0]["then"][0]["assign"]["strategy"] = "weighted"
    spec = parse_policy_spec(body, WITH_NOTIFICATIONS)
    assert spec.rules[0].then[0]["assign"]["strategy"] == "weighted"


def test_parse_policy_spec_refuses_shape_problems():
    body = ordinary()
    body["status"] = "active"
    with pytest.raises(InvalidInput) as caught:
        parse_policy_spec(body, WITH_NOTIFICATIONS)
    assert caught.value.message == "policy body is malformed"
    assert paths(caught.value.problems) == [("status", "shape")]


# --- hostile conditions ----------------------------------------------------------------------


def with_when(when: dict) -> dict:
    body = ordinary()
    body["rules"][0]["when"] = when
    return body


def summary_regex(pattern: str) -> dict:
    return {"field": "issue.summary", "operator": "regex", "value": pattern}


def chain(levels: int, key: str) -> dict:
    condition = summary_regex("down")
    for _ in range(levels):
        condition = {"not": condition} if key == "not" else {key: [condition]}
    return condition


@pytest.mark.parametrize("pattern", ["(a+)+$", "(?i)^db-(outage|down)", r"\bP[01]\b", "(x*)*y"])
def test_re2_patterns_validate_including_formerly_catastrophic_ones(pattern):
    assert validate(with_when(summary_regex(pattern))) == []


def test_regex_ignore_case_validates():
    assert validate(with_when({**summary_regex("^DB"), "ignore_case": True})) == []


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(a)\1", r'backreferences are not supported (RE2 syntax): "(a)\1"'),
        ("(?P<x>a)(?P=x)", 'backreferences are not supported (RE2 syntax): "(?P<x>a)(?P=x)"'),
        ("db(?=x)", 'lookahead assertions are not supported (RE2 syntax): "db(?=x)"'),
        ("db(?!x)", 'negative lookahead assertions are not supported (RE2 syntax): "db(?!x)"'),
        ("(?<=x)db", 'lookbehind assertions are not supported (RE2 syntax): "(?<=x)db"'),
        ("(?<!x)db",
         'negative lookbehind assertions are not supported (RE2 syntax): "(?<!x)db"'),
        ("a++", 'possessive quantifiers are not supported (RE2 syntax): "a++"'),
        ("(?>a)", 'atomic groups are not supported (RE2 syntax): "(?>a)"'),
        ("(down", 'invalid regular expression "(down": missing ): (down'),
    ],
)
def test_regex_re2_cannot_run_is_a_rule_problem_naming_the_construct(pattern, message):
    problems = validate(with_when({"any": [{"always": True}, summary_regex(pattern)]}))
    assert [(p.path, p.kind, p.message) for p in problems] == [
        ("rules[0].when.any[1].value", "rule", message)]


DEPTH_MESSAGE = "conditions nest deeper than 16 levels of all, any and not"


@pytest.mark.parametrize("key", ["not", "all", "any"])
def test_conditions_nested_16_levels_are_valid(key):
    assert validate(with_when(chain(16, key))) == []


@pytest.mark.parametrize(("key", "step"), [("not", ".not"), ("all", ".all[0]")])
def test_conditions_nested_17_levels_are_a_shape_problem_with_the_path(key, step):
    problems = validate(with_when(chain(17, key)))
    assert [(p.path, p.kind, p.message) for p in problems] == [
        ("rules[0].when" + step * 16, "shape", DEPTH_MESSAGE)]


@pytest.mark.parametrize("key", ["not", "all"])
def test_500_deep_conditions_are_one_problem_never_a_recursion_error(key):
    body = with_when(chain(500, key))
    assert [p.message for p in validate(body)] == [DEPTH_MESSAGE]
    with pytest.raises(InvalidInput) as caught:
        # a shape problem: the body is refused, never stored
        parse_policy_spec(body, WITH_NOTIFICATIONS)
    assert [p.message for p in caught.value.problems] == [DEPTH_MESSAGE]


def test_depth_is_checked_per_rule_and_other_problems_still_reported():
    body = with_when(chain(40, "not"))
    body["rules"].append({**body["rules"][0], "name": "second", "priority": 20,
                          "when": {"all": [chain(40, "any"), summary_regex(r"(a)\1")]}})
    last = len(body["rules"]) - 1
    problems = validate(body)
    assert [(p.path.split(".")[0], p.message.split(" (")[0]) for p in problems] == [
        ("rules[0]", DEPTH_MESSAGE),
        (f"rules[{last}]", DEPTH_MESSAGE),
        (f"rules[{last}]", "backreferences are not supported"),
    ]


# --- every message quotes the value it rejects --------------------------------------------


def in_condition(leaf: dict) -> dict:
    return with_when({"all": [leaf]})


def window(**changes) -> dict:
    spec = {"timezone": "Asia/Shanghai", "weekdays": ["mon"], "start": "09:00", "end": "18:00"}
    spec.update(changes)
    return {"field": "now", "operator": "time_window", "time_window": spec}


def receiver(value: dict) -> dict:
    return with_action({"type": "assign", "assign": {"receiver": value, "strategy": "first"}})


QUOTED_REJECTIONS = [
    # conditions
    ("regex", lambda: in_condition(summary_regex("(unclosed")),
     "rules[0].when.all[0].value", '"(unclosed"'),
    ("field", lambda: in_condition({"field": "issue.foo", "operator": "eq", "value": "x"}),
     "rules[0].when.all[0].field", '"issue.foo"'),
    ("operator", lambda: in_condition({"field": "issue.summary", "operator": "approx",
                                       "value": "x"}),
     "rules[0].when.all[0].operator", '"approx"'),
    ("time", lambda: in_condition({"field": "now", "operator": "before", "value": "yesterday"}),
     "rules[0].when.all[0].value", '"yesterday"'),
    ("timezone", lambda: in_condition(window(timezone="Mars/Olympus")),
     "rules[0].when.all[0].time_window.timezone", '"Mars/Olympus"'),
    ("weekday", lambda: in_condition(window(weekdays=["mon", "funday"])),
     "rules[0].when.all[0].time_window.weekdays", '"funday"'),
    ("repeated weekday", lambda: in_condition(window(weekdays=["mon", "mon"])),
     "rules[0].when.all[0].time_window.weekdays", '"mon"'),
    ("clock time", lambda: in_condition(window(start="25:00")),
     "rules[0].when.all[0].time_window.start", '"25:00"'),
    ("window order", lambda: in_condition(window(start="18:00", end="09:00")),
     "rules[0].when.all[0].time_window.end", '"09:00"'),
    # actions
    ("action type", lambda: with_action({"type": "close"}), "rules[0].then[0].type", '"close"'),
    ("no executor", None, "rules[0].then[0].type", '"escalate_assignment_to_leader"'),
    ("strategy", lambda: with_action({"type": "assign", "assign": {
        "receiver": {"type": "user", "user": "a@b.c"}, "strategy": "weighted"}}),
     "rules[0].then[0].assign.strategy", '"weighted"'),
    ("receiver type", lambda: receiver({"type": "team", "team": "x"}),
     "rules[0].then[0].assign.receiver.type", '"team"'),
    ("email", lambda: receiver({"type": "user", "user": "alice"}),
     "rules[0].then[0].assign.receiver.user", '"alice"'),
    ("triage labels", lambda: with_action({"type": "triage", "triage": {
        "labels_add": ["a", "b"], "labels_remove": ["b"]}}),
     "rules[0].then[0].triage.labels_remove", '"b"'),
    ("transition", lambda: mutate(lambda b: rule0(b)["transition"].update(on_success="stop"))(),
     "rules[0].transition.on_success", '"stop"'),
    ("duration", lambda: in_urgent_rule(page(ack_timeout="5 minutes")),
     "rules[1].then[0].page_assignment.ack_timeout", '"5 minutes"'),
    ("poll interval", lambda: in_urgent_rule(page(poll_interval="6m")),
     "rules[1].then[0].page_assignment.poll_interval", '"6m"'),
    ("statuses", lambda: in_urgent_rule(page(ack_pending_statuses=["Todo", "Todo"])),
     "rules[1].then[0].page_assignment.ack_pending_statuses", '"Todo"'),
    ("role", lambda: fam(lambda b: send_config(b).update(role="boss"))(),
     "rules[0].then[0].send_assignment_notification.role", '"boss"'),
    # notification families
    ("reserved source", lambda: mutate(lambda b: b["trigger"].update(
        source_in=["jira", "jira_assignment_l2_assignee"]))(),
     "trigger.source_in[1]", '"jira_assignment_l2_assignee"'),
    ("family label", lambda: fam(lambda b: send_config(b).update(label="notify-l2-assignee"))(),
     "rules[0].then[0].send_assignment_notification.label", '"notify-l2-assignee"'),
]


@pytest.mark.parametrize(("family", "build", "path", "shown"), QUOTED_REJECTIONS,
                         ids=[case[0] for case in QUOTED_REJECTIONS])
def test_every_rule_family_quotes_the_value_it_rejects(family, build, path, shown):
    if build is None:  # judged by the product registry, not the stand-ins
        problems = validate(with_action({"type": "escalate_assignment_to_leader"}), PRODUCT)
    else:
        problems = validate(build())
    messages = [p.message for p in problems if p.path == path]
    assert messages, problems
    assert shown in messages[0], messages


def test_a_quoted_value_is_cut_and_has_its_control_characters_escaped():
    field = "issue.\x1b[31m" + "x" * 500
    problems = validate(in_condition({"field": field, "operator": "eq", "value": "x"}))
    message = problems[0].message
    assert message.startswith('unknown field "issue.\\x1b[31m' + "x" * 20)
    assert '"…;' in message and "\x1b" not in message
    assert len(message) < 200


# --- names: the rule the intake, Jira or the clients apply, never a looser one ---------------


def trigger_with(**lists) -> dict:
    body = ordinary()
    body["trigger"].update(lists)
    return body


@pytest.mark.parametrize("source", ["Jira Automation", "Jira_Automation", "1abc", "_x",
                                    "jira automation", "a" * 65, "jira\u00e9"])
def test_source_in_entry_the_intake_would_refuse_is_a_rule_problem(source):
    problems = validate(trigger_with(source_in=["jira_automation", source]))

    assert paths(problems) == [("trigger.source_in[1]", "rule")]
    assert problems[0].message.startswith(
        f'"{source}" is not a lower-case source name like jira_automation (1 to 64 characters')


@pytest.mark.parametrize("source", ["jira_automation", "manual", "a", "a" * 64, "policy.check-2"])
def test_source_in_accepts_every_source_the_intake_accepts(source):
    assert validate(trigger_with(source_in=[source])) == []


@pytest.mark.parametrize("key", ["tcid", "Tcid", "1TC", "TC-ID", "TC ID", "\u00dcX", "A" * 33])
def test_project_key_that_no_issue_key_can_carry_is_a_rule_problem(key):
    problems = validate(trigger_with(project_key_in=["TCID", key]))

    assert paths(problems) == [("trigger.project_key_in[1]", "rule")]
    assert "is not a Jira project key like TCID" in problems[0].message


def test_project_keys_accept_what_issue_keys_carry():
    assert validate(trigger_with(project_key_in=["TCID", "T", "A_1", "A" * 32])) == []


@pytest.mark.parametrize("label", ["notify assignee", "tab\there", "x" * 256])
def test_issue_label_jira_cannot_hold_is_a_rule_problem(label):
    problems = validate(trigger_with(issue_label_all=["auto-dispatch", label]))

    assert paths(problems) == [("trigger.issue_label_all[1]", "rule")]
    assert "is not a Jira label (no spaces, at most 255 characters)" in problems[0].message


def test_a_blank_trigger_entry_is_reported_once():
    problems = validate(trigger_with(source_in=[" "], project_key_in=[""]))

    assert [(p.path, p.message) for p in problems] == [
        ("trigger.source_in[0]", "must not be empty"),
        ("trigger.project_key_in[0]", "must not be empty"),
    ]


@pytest.mark.parametrize("email", ["alice@localhost", "alice", "a@b@c.d", "a b@c.d",
                                   "a@" + "b" * 250 + ".com"])
def test_receiver_email_no_engineer_record_can_have_is_a_rule_problem(email):
    body = ordinary()
    body["rules"][1]["then"][0]["assign"]["receiver"] = {"type": "users",
                                                         "users": ["alice@example.com", email]}
    body["rules"][0]["then"][0]["assign"]["receiver"] = {"type": "user", "user": email}

    problems = validate(body)

    assert paths(problems) == [("rules[0].then[0].assign.receiver.user", "rule"),
                               ("rules[1].then[0].assign.receiver.users[1]", "rule")]
    assert problems[0].message.endswith("is not an email address")


def test_receiver_email_in_capitals_is_accepted_as_engineer_emails_are_compared_lower_case():
    body = ordinary()
    body["rules"][0]["then"][0]["assign"]["receiver"] = {"type": "user",
                                                         "user": "Alice@Example.COM"}
    assert validate(body) == []


@pytest.mark.parametrize("kind", ["group", "oncall_team"])
@pytest.mark.parametrize("name", ["..", ".", " sre", "sre "])
def test_group_or_team_name_no_client_url_can_address_is_a_rule_problem(kind, name):
    body = ordinary()
    body["rules"][0]["then"][0]["assign"]["receiver"] = {"type": kind, kind: name}

    problems = validate(body)

    assert paths(problems) == [(f"rules[0].then[0].assign.receiver.{kind}", "rule")]
    assert "is not a group or team name (not . or .., and no spaces around it)" in (
        problems[0].message)


@pytest.mark.parametrize("name", ["sre", "l2-sre", "SRE on call", "a/b", "..."])
def test_group_names_the_clients_can_address_are_accepted(name):
    body = ordinary()
    body["rules"][0]["then"][0]["assign"]["receiver"] = {"type": "group", "group": name}
    assert validate(body) == []


@pytest.mark.parametrize("key", ["labels_add", "labels_remove"])
def test_triage_label_jira_would_refuse_is_a_rule_problem(key):
    problems = validate(with_action({"type": "triage", "triage": {key: ["ok", "needs review"]}}))

    assert paths(problems) == [(f"rules[0].then[0].triage.{key}[1]", "rule")]


@pytest.mark.parametrize(("key", "value"), [("ack_timeout", "8d"), ("ack_timeout", "4000000d"),
                                            ("poll_interval", "200000h")])
def test_page_wait_beyond_seven_days_is_a_rule_problem(key, value):
    changes = {key: value, "ack_timeout": "8d"} if key == "poll_interval" else {key: value}
    problems = validate(in_urgent_rule(page(**changes)))

    assert (f"rules[1].then[0].page_assignment.{key}", "rule") in paths(problems)
    messages = [p.message for p in problems if p.path.endswith(key)]
    assert messages == [f'"{changes[key]}" is longer than the maximum of 7d']


def test_page_wait_of_exactly_seven_days_is_accepted():
    assert validate(in_urgent_rule(page(ack_timeout="7d", poll_interval="1h"))) == []


# --- what the server assigns: read away for files, refused in bodies ------------------------


def as_the_api_returns_it(body: dict) -> dict:
    """``body`` the way ``GET /dispatch/policies/{id}`` answers it."""
    return {"id": 7, "family_id": "pf_abc", "version": 2, "status": "active", **body,
            "rules": [{"id": 10 + index, **rule} for index, rule in enumerate(body["rules"])],
            "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z",
            "activated_at": None, "origin": "api"}


def test_without_server_fields_gives_back_the_body_and_names_what_it_dropped():
    body = ordinary()

    stripped, ignored = without_server_fields(as_the_api_returns_it(body))

    assert stripped == body
    assert ignored == ["id", "family_id", "version", "status", "created_at", "updated_at",
                       "activated_at", "origin", "rules[].id"]


@pytest.mark.parametrize("raw", [ordinary(), [], "x", {"rules": ["not a rule"]}])
def test_without_server_fields_leaves_a_body_without_them_alone(raw):
    assert without_server_fields(raw) == (raw, [])


def test_a_body_as_the_api_returns_it_is_still_refused_by_the_validator():
    problems = validate(as_the_api_returns_it(ordinary()))

    assert {p.message for p in problems} == {"is assigned by the server"}
    assert len(problems) == 8 + len(ordinary()["rules"])


def test_receiver_warnings_name_each_email_that_is_no_dispatch_enabled_engineer_at_its_path():
    from ticket_dispatcher.domain.validation import receiver_warnings

    policy = {"rules": [{"then": [
        {"type": "triage", "triage": {"labels_add": ["x"]}},
        {"type": "assign_l2", "assign_l2": {
            "receiver": {"type": "users", "users": ["a@x.com", "typo@x.com", "off@x.com"]},
            "fallback": {"type": "user", "user": "A@X.com"}}},
        {"type": "assign", "assign": {"receiver": {"type": "core_group", "core_group": "g"}}},
    ]}]}
    asked: list[list[str]] = []

    def switches(emails: list[str]) -> dict[str, bool]:
        asked.append(emails)
        return {"a@x.com": True, "off@x.com": False}

    warnings = receiver_warnings(policy, switches)

    where = "rules[0].then[1].assign_l2.receiver.users"
    assert [(w.path, w.kind) for w in warnings] == [(f"{where}[1]", "warning"),
                                                    (f"{where}[2]", "warning")]
    assert "no engineer has this email" in warnings[0].message
    assert "dispatch is disabled" in warnings[1].message
    assert asked == [["a@x.com", "typo@x.com", "off@x.com", "A@X.com"]]  # one look for all
    assert receiver_warnings({"rules": []}, switches) == [] and len(asked) == 1
