"""The one policy validator (SPEC §6, M§6, N§5.4): every problem at once, each with its JSON path.

Problems of kind ``shape`` (wrong JSON type, unknown, missing or server-assigned key, an enum
value the typed model cannot hold) make a body unreadable: HTTP 400. Problems of kind ``rule``
make a readable policy unfit to run: a draft may be saved with them, activation needs none (422).

Assignment-notification policies (N§5.4) — choices where the seeds leave room:
- A policy is judged by the family rules when it names a reserved source, or when it has
  notification actions and no ordinary ones. Reserved sources without notification actions, or
  notification actions beside ordinary ones without a reserved source, are reported where they
  stand instead (SPEC §6: notification actions only in such policies, and such policies only
  with a reserved source).
- ``issue_label_all`` must contain the role's pending-marker label and not the other role's:
  every family of N§5.1 routes on source + project + label (N§1.4), and a label-less family would
  fire on triggers whose marker was already consumed.
- Only notification actions may appear in them: rule 1 is exactly one
  ``send_assignment_notification``; rule 2 may hold ``mark_assignment_message_urgent``,
  ``page_assignment`` and ``escalate_assignment_to_leader`` in any number and order (N§5.4),
  but no ``assign``/``triage``: these policies lock per family (N§3.4) and re-check the role target
  as their guard (N§6.5), so an action that changes the target inside them would break both.
- Which projects use priority or severity is not checked: the policy carries it (N§5.4), so the
  validator keeps no project whitelist.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from ticket_dispatcher.domain.catalog import (
    NOTIFICATION_ROLES,
    RESERVED_SOURCES,
    URGENCY_FIELDS,
    ActionType,
    NotificationRole,
    OnSuccess,
    ReceiverType,
    Strategy,
)
from ticket_dispatcher.domain.conditions import compile_condition
from ticket_dispatcher.domain.matching import (
    is_notification_action_type,
    is_notification_policy,
    is_reserved_source,
)
from ticket_dispatcher.domain.model import PolicySpec
from ticket_dispatcher.domain.timeutil import parse_duration
from ticket_dispatcher.errors import InvalidInput, Problem

_SERVER_KEYS = frozenset(
    {"id", "family_id", "version", "status", "created_at", "updated_at", "activated_at"}
)
_POLICY_KEYS = ("name", "description", "trigger", "rules")
_TRIGGER_KEYS = ("enable", "source_in", "project_key_in", "issue_label_all")
_RULE_KEYS = ("name", "priority", "when", "then", "transition")
_NO_CONFIG_ACTIONS = frozenset(
    {ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT, ActionType.ESCALATE_ASSIGNMENT_TO_LEADER}
)
_SEND = ActionType.SEND_ASSIGNMENT_NOTIFICATION.value
_RECEIVER_TYPES = tuple(t.value for t in ReceiverType)
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")  # fullmatch; loose: the directory is the real check


class _Problems(list[Problem]):
    def shape(self, path: str, message: str) -> None:
        self.append(Problem(path, message, "shape"))

    def rule(self, path: str, message: str) -> None:
        self.append(Problem(path, message, "rule"))


def validate_policy(raw: Any) -> list[Problem]:
    """Every problem of a policy create/edit/replacement body, shapes and rules together."""
    problems = _Problems()
    if not isinstance(raw, dict):
        problems.shape("", "a policy must be a JSON object")
        return problems
    _check_keys(raw, "", _POLICY_KEYS, problems, server_keys=_SERVER_KEYS)
    _check_name(raw, "", problems)
    if "description" in raw and not isinstance(raw["description"], str):
        problems.shape("description", "description must be a string")
    if "trigger" in raw:
        _check_trigger(raw["trigger"], problems)
    _check_rules(raw, problems)
    if is_notification_policy(raw):
        _check_notification_family(raw, problems)
    return problems


def shape_problems(raw: Any) -> list[Problem]:
    return [problem for problem in validate_policy(raw) if problem.kind == "shape"]


def parse_policy_spec(raw: Any) -> PolicySpec:
    """The typed spec of a readable body (rule problems allowed: drafts may hold them)."""
    problems = shape_problems(raw)
    if problems:
        raise InvalidInput("policy body is malformed", problems)
    return PolicySpec.from_json(raw)


# --- generic pieces -------------------------------------------------------------------------


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check_keys(
    raw: dict,
    path: str,
    allowed: tuple[str, ...],
    problems: _Problems,
    *,
    required: tuple[str, ...] = (),
    server_keys: frozenset[str] = frozenset(),
) -> None:
    for key in raw:
        if key in server_keys:
            problems.shape(_at(path, key), "is assigned by the server")
        elif key not in allowed:
            problems.shape(_at(path, key), "unknown key")
    for key in required:
        if key not in raw:
            problems.shape(_at(path, key), "missing key")


def _check_name(raw: dict, path: str, problems: _Problems) -> None:
    if "name" not in raw:
        problems.shape(_at(path, "name"), "missing key")
    else:
        _check_text(raw["name"], _at(path, "name"), problems)


def _check_text(value: Any, path: str, problems: _Problems) -> bool:
    """A string (shape) that is not blank (rule)."""
    if not isinstance(value, str):
        problems.shape(path, "must be a string")
        return False
    if not value.strip():
        problems.rule(path, "must not be empty")
        return False
    return True


def _check_text_list(
    value: Any, path: str, problems: _Problems, *, non_empty: bool = False, unique: bool = False
) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.shape(path, "must be a list of strings")
        return None
    if non_empty and not value:
        problems.rule(path, "must not be empty")
    for index, item in enumerate(value):
        if not item.strip():
            problems.rule(_at(path, index), "must not be empty")
    if unique and len(set(value)) != len(value):
        problems.rule(path, "must not contain duplicates")
    return value


def _check_object(value: Any, path: str, problems: _Problems) -> bool:
    if not isinstance(value, dict):
        problems.shape(path, "must be a JSON object")
        return False
    return True


# Integers are stored in 32-bit columns (rule priority) or compared in the database; a value
# outside this range would fail there, so it makes the body unreadable, not just invalid.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _check_int(value: Any, path: str, problems: _Problems) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        problems.shape(path, "must be an integer")
        return False
    if not INT32_MIN <= value <= INT32_MAX:
        problems.shape(path, f"must be between {INT32_MIN} and {INT32_MAX}")
        return False
    return True


def _check_enum(value: Any, path: str, choices: type, problems: _Problems) -> None:
    allowed = [member.value for member in choices]
    if not isinstance(value, str):
        problems.shape(path, f"must be one of {', '.join(allowed)}")
    elif value not in allowed:
        problems.rule(path, f"{value!r} is not one of {', '.join(allowed)}")


# --- trigger and rules ----------------------------------------------------------------------


def _check_trigger(trigger: Any, problems: _Problems) -> None:
    if not _check_object(trigger, "trigger", problems):
        return
    _check_keys(trigger, "trigger", _TRIGGER_KEYS, problems)
    if "enable" in trigger and not isinstance(trigger["enable"], bool):
        problems.shape("trigger.enable", "must be true or false")
    for key in _TRIGGER_KEYS[1:]:
        if key in trigger:
            _check_text_list(trigger[key], f"trigger.{key}", problems)


def _check_rules(raw: dict, problems: _Problems) -> None:
    if "rules" not in raw:
        problems.shape("rules", "missing key")
        return
    rules = raw["rules"]
    if not isinstance(rules, list):
        problems.shape("rules", "must be a list of rules")
        return
    if not rules:
        problems.rule("rules", "a policy needs at least one rule")
    for index, rule in enumerate(rules):
        _check_rule(rule, f"rules[{index}]", problems)


def _check_rule(rule: Any, path: str, problems: _Problems) -> None:
    if not _check_object(rule, path, problems):
        return
    required = ("name", "priority", "when", "then")
    _check_keys(rule, path, _RULE_KEYS, problems, required=required, server_keys=frozenset({"id"}))
    if "name" in rule:
        _check_text(rule["name"], f"{path}.name", problems)
    if "priority" in rule:
        _check_int(rule["priority"], f"{path}.priority", problems)
    if "when" in rule:
        problems.extend(compile_condition(rule["when"], f"{path}.when")[1])
    if "then" in rule:
        _check_then(rule["then"], f"{path}.then", problems)
    if "transition" in rule and _check_object(rule["transition"], f"{path}.transition", problems):
        transition = rule["transition"]
        _check_keys(transition, f"{path}.transition", ("on_success",), problems)
        if "on_success" in transition:
            _check_on_success(transition["on_success"], f"{path}.transition.on_success", problems)


def _check_on_success(value: Any, path: str, problems: _Problems) -> None:
    # A shape problem, not a rule one: the typed RuleSpec cannot hold any other value.
    allowed = [member.value for member in OnSuccess]
    if value not in allowed:
        problems.shape(path, f"must be one of {', '.join(allowed)}")


def _check_then(then: Any, path: str, problems: _Problems) -> None:
    if not isinstance(then, list):
        problems.shape(path, "must be a list of actions")
        return
    if not then:
        problems.rule(path, "a rule needs at least one action")
    for index, action in enumerate(then):
        _check_action(action, f"{path}[{index}]", problems)


# --- actions (SPEC §4.4) --------------------------------------------------------------------


def _check_action(action: Any, path: str, problems: _Problems) -> None:
    if not _check_object(action, path, problems):
        return
    action_type = action.get("type")
    if "type" not in action:
        problems.shape(f"{path}.type", "missing key")
    elif not isinstance(action_type, str):
        problems.shape(f"{path}.type", "must be a string")
    elif action_type not in _CONFIG_CHECKS:
        problems.rule(f"{path}.type", f"unknown action type {action_type!r}; allowed: "
                      + ", ".join(t.value for t in ActionType))
    for key in action if isinstance(action_type, str) else ():  # else: only the type is wrong
        if key not in ("type", action_type):
            problems.shape(f"{path}.{key}", "unknown key")
    if isinstance(action_type, str) and action_type in _CONFIG_CHECKS:
        _check_action_config(ActionType(action_type), action, path, problems)


def _check_action_config(
    action_type: ActionType, action: dict, path: str, problems: _Problems
) -> None:
    config_path = f"{path}.{action_type.value}"
    config = action.get(action_type.value)
    if action_type in _NO_CONFIG_ACTIONS and config is None:
        return  # these take no configuration; the key may be absent, null or {}
    if action_type.value not in action:
        problems.shape(config_path, "missing key")
    elif _check_object(config, config_path, problems):
        _CONFIG_CHECKS[action_type](config, config_path, problems)


def _check_no_config(config: dict, path: str, problems: _Problems) -> None:
    _check_keys(config, path, (), problems)  # e.g. max_hops: escalation is one hop (N§7)


def _check_assign(config: dict, path: str, problems: _Problems) -> None:
    _check_keys(config, path, ("receiver", "strategy"), problems, required=("receiver", "strategy"))
    if "strategy" in config:
        _check_enum(config["strategy"], f"{path}.strategy", Strategy, problems)
    if "receiver" in config and _check_object(config["receiver"], f"{path}.receiver", problems):
        _check_receiver(config["receiver"], f"{path}.receiver", problems)


def _check_receiver(receiver: dict, path: str, problems: _Problems) -> None:
    kind = receiver.get("type")
    if "type" not in receiver:
        problems.shape(f"{path}.type", "missing key")
        return
    if isinstance(kind, str):
        _check_keys(receiver, path, ("type", kind), problems)
    _check_enum(kind, f"{path}.type", ReceiverType, problems)
    if kind not in _RECEIVER_TYPES:
        return
    target_path = f"{path}.{kind}"
    if kind not in receiver:
        problems.shape(target_path, "missing key")
    elif kind == ReceiverType.USERS:
        emails = _check_text_list(receiver[kind], target_path, problems, non_empty=True)
        for index, email in enumerate(emails or ()):
            _check_email(email, _at(target_path, index), problems)
    elif _check_text(receiver[kind], target_path, problems) and kind == ReceiverType.USER:
        _check_email(receiver[kind], target_path, problems)


def _check_email(email: str, path: str, problems: _Problems) -> None:
    if email.strip() and not _EMAIL.fullmatch(email):
        problems.rule(path, f"{email!r} is not an email address")


def _check_triage(config: dict, path: str, problems: _Problems) -> None:
    keys = ("priority", "components", "labels_add", "labels_remove", "fields")
    _check_keys(config, path, keys, problems)
    if not any(key in config for key in keys):
        problems.rule(path, f"triage needs at least one of {', '.join(keys)}")
    if "priority" in config:
        _check_text(config["priority"], f"{path}.priority", problems)
    lists = {
        key: _check_text_list(config[key], f"{path}.{key}", problems)
        for key in ("components", "labels_add", "labels_remove")
        if key in config
    }
    both = set(lists.get("labels_add") or ()) & set(lists.get("labels_remove") or ())
    if both:
        problems.rule(f"{path}.labels_remove", f"labels both added and removed: {sorted(both)}")
    if "fields" in config and _check_object(config["fields"], f"{path}.fields", problems):
        for key in config["fields"]:
            if not key.strip():
                problems.rule(f"{path}.fields", "field ids must not be empty")


def _check_send_notification(config: dict, path: str, problems: _Problems) -> None:
    _check_keys(config, path, ("role", "label"), problems, required=("role", "label"))
    roles = [role.role for role in NOTIFICATION_ROLES]
    if "role" in config:
        role = config["role"]
        if not isinstance(role, str):
            problems.shape(f"{path}.role", f"must be one of {', '.join(roles)}")
        elif role not in roles:
            problems.rule(f"{path}.role", f"{role!r} is not one of {', '.join(roles)}")
    if "label" in config:
        _check_text(config["label"], f"{path}.label", problems)


def _check_page(config: dict, path: str, problems: _Problems) -> None:
    keys = ("attempt", "ack_pending_statuses", "ack_timeout", "poll_interval")
    _check_keys(config, path, keys, problems, required=keys)  # terminal_statuses: N§6.5
    if "attempt" in config and _check_int(config["attempt"], f"{path}.attempt", problems):
        if config["attempt"] <= 0:
            problems.rule(f"{path}.attempt", "must be a positive integer")
    if "ack_pending_statuses" in config:
        _check_text_list(config["ack_pending_statuses"], f"{path}.ack_pending_statuses",
                         problems, non_empty=True, unique=True)
    timeout = _check_duration(config, "ack_timeout", path, problems)
    poll = _check_duration(config, "poll_interval", path, problems)
    if timeout and poll and poll > timeout:
        problems.rule(f"{path}.poll_interval", "must not be longer than ack_timeout")


def _check_duration(config: dict, key: str, path: str, problems: _Problems) -> Any:
    if key not in config:
        return None
    if not isinstance(config[key], str):
        problems.shape(f"{path}.{key}", "must be a duration string like '5m' or '5s'")
        return None
    try:
        value = parse_duration(config[key])
    except ValueError as exc:
        problems.rule(f"{path}.{key}", str(exc))
        return None
    if value.total_seconds() <= 0:
        problems.rule(f"{path}.{key}", "must be longer than zero")
        return None
    return value


_CONFIG_CHECKS: dict[ActionType, Callable[[dict, str, _Problems], None]] = {
    ActionType.ASSIGN: _check_assign,
    ActionType.ASSIGN_L2: _check_assign,
    ActionType.TRIAGE: _check_triage,
    ActionType.SEND_ASSIGNMENT_NOTIFICATION: _check_send_notification,
    ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT: _check_no_config,
    ActionType.PAGE_ASSIGNMENT: _check_page,
    ActionType.ESCALATE_ASSIGNMENT_TO_LEADER: _check_no_config,
}


# --- assignment-notification families (SPEC §6, N§5.4) --------------------------------------


def _check_notification_family(raw: dict, problems: _Problems) -> None:
    trigger = raw.get("trigger") if isinstance(raw.get("trigger"), dict) else {}
    rules = raw["rules"] if isinstance(raw.get("rules"), list) else []
    actions = list(_actions_with_paths(rules))
    sources = trigger.get("source_in", [])
    kinds = {_action_kind(action) for _, action in actions}
    if "notification" not in kinds:
        _reject_reserved_sources(sources, problems)
        return
    if "ordinary" in kinds and not _names_reserved_source(sources):
        # An ordinary policy with a stray notification action: point at the action rather
        # than judge the whole policy by the family rules it never meant to follow.
        _reject_notification_actions(actions, problems)
        return
    role = _role_for(sources)
    if role is None:
        problems.rule("trigger.source_in", "an assignment-notification policy needs exactly one "
                      "reserved source: " + " or ".join(sorted(RESERVED_SOURCES)))
    else:
        _check_role_labels(trigger.get("issue_label_all", []), role, problems)
    if trigger.get("project_key_in", []) == []:
        problems.rule("trigger.project_key_in", "an assignment-notification policy must list "
                      "its projects (N§5.4)")
    for path, action in actions:
        _check_notification_action(action, path, role, problems)
    if len(rules) != 2:
        problems.rule("rules", "an assignment-notification policy has exactly two rules: "
                      "the notification rule and the urgent rule (N§5.2)")
        return
    first, second = _run_order(rules, problems)
    _check_notice_rule(rules[first], f"rules[{first}]", problems)
    _check_urgent_rule(rules[second], f"rules[{second}]", problems)


def _actions_with_paths(rules: list) -> Iterator[tuple[str, dict]]:
    for i, rule in enumerate(rules):
        then = rule.get("then") if isinstance(rule, dict) else None
        for k, action in enumerate(then if isinstance(then, list) else ()):
            if isinstance(action, dict):
                yield f"rules[{i}].then[{k}]", action


def _action_kind(action: dict) -> str:
    action_type = action.get("type")
    if is_notification_action_type(action_type):
        return "notification"
    return "ordinary" if isinstance(action_type, str) and action_type in _CONFIG_CHECKS else ""


def _names_reserved_source(sources: Any) -> bool:
    return isinstance(sources, list) and any(is_reserved_source(source) for source in sources)


def _reject_notification_actions(actions: list[tuple[str, dict]], problems: _Problems) -> None:
    for path, action in actions:
        if _action_kind(action) == "notification":
            problems.rule(f"{path}.type", f"{action['type']} is only allowed in an "
                          "assignment-notification policy, whose trigger.source_in is exactly "
                          "one reserved source (SPEC §6)")


def _reject_reserved_sources(sources: Any, problems: _Problems) -> None:
    for index, source in enumerate(sources if isinstance(sources, list) else ()):
        if is_reserved_source(source):
            problems.rule(f"trigger.source_in[{index}]", f"reserved source {source!r} is only "
                          "for assignment-notification policies (N§3.3)")


def _role_for(sources: Any) -> NotificationRole | None:
    if not isinstance(sources, list) or len(sources) != 1:
        return None
    return next((role for role in NOTIFICATION_ROLES if role.source == sources[0]), None)


def _check_role_labels(labels: Any, role: NotificationRole, problems: _Problems) -> None:
    if not isinstance(labels, list):
        return  # already a shape problem
    if role.label not in labels:
        problems.rule("trigger.issue_label_all", f"must contain {role.label!r}, the pending "
                      f"marker of {role.source} (N§3.4, N§5.1)")
    for other in NOTIFICATION_ROLES:
        if other is not role and other.label in labels:
            problems.rule("trigger.issue_label_all", f"{other.label!r} is the marker of "
                          f"{other.source}; roles must not cross (N§3.3)")


def _check_notification_action(
    action: dict, path: str, role: NotificationRole | None, problems: _Problems
) -> None:
    action_type = action.get("type")
    if not isinstance(action_type, str) or action_type not in _CONFIG_CHECKS:
        return  # unknown type: already reported
    if not is_notification_action_type(action_type):
        problems.rule(f"{path}.type", f"{action_type} is not allowed in an "
                      "assignment-notification policy")
        return
    config = action.get(action_type)
    if action_type != _SEND or not isinstance(config, dict):
        return
    if role and isinstance(config.get("role"), str) and config["role"] != role.role:
        problems.rule(f"{path}.{action_type}.role", f"source {role.source} notifies role "
                      f"{role.role!r}, not {config['role']!r}")
    if role and isinstance(config.get("label"), str) and config["label"] != role.label:
        problems.rule(f"{path}.{action_type}.label", f"source {role.source} consumes label "
                      f"{role.label!r}, not {config['label']!r}")


def _run_order(rules: list, problems: _Problems) -> tuple[int, int]:
    """Indices of the two rules in run order, ``(priority, index)``; equal priorities would
    leave the order to server-assigned ids, so they are rejected (N§5.4)."""
    priorities = [
        rule.get("priority") if isinstance(rule, dict) and _is_int(rule.get("priority")) else None
        for rule in rules
    ]
    if priorities[0] is not None and priorities[0] == priorities[1]:
        problems.rule("rules[1].priority", "must differ from rules[0].priority so the rule "
                      "order is fixed")
    order = sorted(range(2), key=lambda i: (priorities[i] or 0, i))
    return order[0], order[1]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_notice_rule(rule: Any, path: str, problems: _Problems) -> None:
    if not isinstance(rule, dict):
        return
    if "when" in rule and rule["when"] != {"always": True}:
        problems.rule(f"{path}.when", 'the first rule must be {"always": true} (N§5.2)')
    then = rule.get("then")
    only_send = (
        isinstance(then, list) and len(then) == 1
        and isinstance(then[0], dict) and then[0].get("type") == _SEND
    )
    if isinstance(then, list) and not only_send:
        problems.rule(f"{path}.then", f"the first rule runs exactly one {_SEND} action (N§5.4)")
    transition = rule.get("transition")
    on_success = transition.get("on_success") if isinstance(transition, dict) else None
    if on_success != OnSuccess.CONTINUE:
        problems.rule(f"{path}.transition.on_success", "the first rule must continue so the "
                      "urgent rule is evaluated (N§5.2)")


def _check_urgent_rule(rule: Any, path: str, problems: _Problems) -> None:
    if not isinstance(rule, dict):
        return
    when = rule.get("when")
    is_urgency_leaf = (
        isinstance(when, dict) and when.get("operator") == "in"
        and when.get("field") in URGENCY_FIELDS
    )
    if "when" in rule and not is_urgency_leaf:
        problems.rule(f"{path}.when", 'the urgent rule\'s condition must be one "in" leaf on '
                      + " or ".join(URGENCY_FIELDS) + " (N§5.4)")
    then = rule.get("then")
    for k, action in enumerate(then if isinstance(then, list) else ()):
        if isinstance(action, dict) and action.get("type") == _SEND:
            problems.rule(f"{path}.then[{k}].type", f"{_SEND} belongs to the first rule only")
