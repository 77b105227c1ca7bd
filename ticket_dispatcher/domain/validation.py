"""The one policy validator: every problem at once, each with its JSON path.

What it refuses and why is documented in docs/policies.md, "Validation: what is refused, and why".

``validate_policy(raw, registry)`` checks the policy's shape, its conditions
(``conditions.py``) and the assignment-notification family rules here, and asks the action
registry for each action's executor: the executor checks its own configuration
(``validate_config``), and an action type no executor runs in this build is a problem at
``rules[i].then[j].type``. Every message quotes the value it rejects (``checks.quote``).

Problems of kind ``shape`` (wrong JSON type, unknown, missing or server-assigned key, an enum
value the typed model cannot hold) make a body unreadable: HTTP 400. Problems of kind ``rule``
make a readable policy unfit to run: a draft may be saved with them, activation needs none (422).

Assignment-notification policies (docs/policies.md, "Assignment-notification policies") —
choices where the design leaves room:
- A policy is judged by the family rules when it names a reserved source, or when it has
  notification actions and no ordinary ones. Reserved sources without notification actions, or
  notification actions beside ordinary ones without a reserved source, are reported where they
  stand instead (notification actions only in such policies, and such policies only with a
  reserved source).
- ``issue_label_all`` must contain the role's pending-marker label and not the other role's:
  every family routes on source + project + label, and a label-less family would
  fire on triggers whose marker was already consumed.
- Only notification actions may appear in them: rule 1 is exactly one
  ``send_assignment_notification``; rule 2 may hold ``mark_assignment_message_urgent``,
  ``page_assignment`` and ``escalate_assignment_to_leader`` in any number and order,
  but no ``assign``/``triage``: these policies lock per family and re-check the role target as
  their guard, so an action that changes the target inside them would break both.
- Which projects use priority or severity is not checked: the policy carries it, so the
  validator keeps no project whitelist.
- The family rules are policy-shape rules and hold whether or not this build runs the
  notification actions; without their executors such a policy is invalid for that alone too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.catalog import (
    LABEL,
    NOTIFICATION_ROLES,
    PROJECT,
    RESERVED_SOURCES,
    SOURCE,
    URGENCY_FIELDS,
    ActionType,
    NameRule,
    NotificationRole,
    OnSuccess,
)
from ticket_dispatcher.domain.checks import (
    Problems,
    at,
    check_int,
    check_keys,
    check_names,
    check_object,
    check_text,
    check_text_list,
    quote,
)
from ticket_dispatcher.domain.conditions import compile_condition
from ticket_dispatcher.domain.matching import (
    is_notification_action_type,
    is_notification_policy,
    is_reserved_source,
)
from ticket_dispatcher.domain.model import PolicySpec
from ticket_dispatcher.errors import InvalidInput, Problem

_SERVER_KEYS = frozenset(
    {"id", "family_id", "version", "status", "created_at", "updated_at", "activated_at",
     "origin"}
)
_POLICY_KEYS = ("name", "description", "trigger", "rules")
_TRIGGER_KEYS = ("enable", "source_in", "project_key_in", "issue_label_all")
# Each trigger list holds names the intake and Jira judge by these rules: an entry they would
# never produce could never match, so it is refused (domain/catalog.py).
_TRIGGER_NAMES: dict[str, NameRule] = {
    "source_in": SOURCE, "project_key_in": PROJECT, "issue_label_all": LABEL,
}
_RULE_KEYS = ("name", "priority", "when", "then", "transition")
_SEND = ActionType.SEND_ASSIGNMENT_NOTIFICATION.value
_CATALOG_ACTION_TYPES = frozenset(t.value for t in ActionType)


def validate_policy(raw: Any, registry: ActionRegistry) -> list[Problem]:
    """Every problem of a policy create/edit/replacement body, shapes and rules together;
    ``registry`` says which action types can run and checks their configurations."""
    problems = Problems()
    if not isinstance(raw, dict):
        problems.shape("", "a policy must be a JSON object")
        return problems
    check_keys(raw, "", _POLICY_KEYS, problems, server_keys=_SERVER_KEYS)
    _check_name(raw, "", problems)
    if "description" in raw and not isinstance(raw["description"], str):
        problems.shape("description", "description must be a string")
    if "trigger" in raw:
        _check_trigger(raw["trigger"], problems)
    _check_rules(raw, registry, problems)
    if is_notification_policy(raw):
        _check_notification_family(raw, registry, problems)
    return problems


# Who a policy's receivers name: each email -> its dispatch switch, for those who are engineers.
EngineerSwitches = Callable[[list[str]], Mapping[str, bool]]
_ASSIGN_TYPES = (ActionType.ASSIGN.value, ActionType.ASSIGN_L2.value)


def receiver_warnings(raw: Any, switches: EngineerSwitches,
                      errors: Sequence[Problem] = ()) -> list[Problem]:
    """What will fail, though it is no error: each email a ``user`` or ``users`` receiver (or
    fallback) of an ``assign``/``assign_l2`` names that is not a dispatch-enabled engineer
    today, at its path (``rules[0].then[0].assign.receiver.users[1]``). Not an error, since
    the engineer may be added or enabled before the policy runs; until then the assignment
    passes over them. An email already at an error's path is not warned about again."""
    if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list):
        return []
    erred = {problem.path for problem in errors}
    named = [(path, email) for path, email in _listed_receivers(raw["rules"])
             if path not in erred]
    if not named:
        return []
    known = switches([email for _, email in named])
    warnings = []
    for path, email in named:
        enabled = known.get(email.strip().lower())
        if enabled is None:
            why = "no engineer has this email (a typo, or one to create)"
        elif not enabled:
            why = "dispatch is disabled for this engineer"
        else:
            continue
        warnings.append(Problem(path, f"{quote(email)} is not a dispatch-enabled engineer: "
                                      f"{why}; an assignment passes over them", "warning"))
    return warnings


def _listed_receivers(rules: list) -> Iterator[tuple[str, str]]:
    """(path, email) of every email a ``user``/``users`` receiver or fallback of an assign
    action names, in document order."""
    for path, action in _actions_with_paths(rules):
        kind = action.get("type")
        config = action.get(kind) if kind in _ASSIGN_TYPES else None
        if not isinstance(config, dict):
            continue
        for key in ("receiver", "fallback"):
            receiver = config.get(key)
            if not isinstance(receiver, dict):
                continue
            where = f"{path}.{kind}.{key}"
            if receiver.get("type") == "user" and isinstance(receiver.get("user"), str) \
                    and receiver["user"].strip():
                yield f"{where}.user", receiver["user"]
            elif receiver.get("type") == "users" and isinstance(receiver.get("users"), list):
                for index, email in enumerate(receiver["users"]):
                    if isinstance(email, str) and email.strip():
                        yield f"{where}.users[{index}]", email


def without_server_fields(raw: Any) -> tuple[Any, list[str]]:
    """``raw`` without the fields the server assigns (a policy as ``GET /dispatch/policies/{id}``
    answers it), and their names in body order, each rule's ``id`` named once as
    ``rules[].id``. The command line reads such a file as the body it came from; the API
    refuses these fields, so a body names only what its author chooses."""
    if not isinstance(raw, dict):
        return raw, []
    body = {key: value for key, value in raw.items() if key not in _SERVER_KEYS}
    ignored = [key for key in raw if key in _SERVER_KEYS]
    rules = body.get("rules")
    if isinstance(rules, list) and any(isinstance(r, dict) and "id" in r for r in rules):
        body["rules"] = [{k: v for k, v in r.items() if k != "id"} if isinstance(r, dict) else r
                         for r in rules]
        ignored.append("rules[].id")
    return body, ignored


def shape_problems(raw: Any, registry: ActionRegistry) -> list[Problem]:
    return [problem for problem in validate_policy(raw, registry) if problem.kind == "shape"]


def parse_policy_spec(raw: Any, registry: ActionRegistry) -> PolicySpec:
    """The typed spec of a readable body (rule problems allowed: drafts may hold them)."""
    problems = shape_problems(raw, registry)
    if problems:
        raise InvalidInput("policy body is malformed", problems)
    return PolicySpec.from_json(raw)


# --- generic pieces -------------------------------------------------------------------------


# A policy's name labels its executions' outcomes in /metrics, and is shown in every list.
MAX_POLICY_NAME = 200


def _check_name(raw: dict, path: str, problems: Problems) -> None:
    if "name" not in raw:
        problems.shape(at(path, "name"), "missing key")
    elif check_text(raw["name"], at(path, "name"), problems) and \
            len(raw["name"]) > MAX_POLICY_NAME:
        problems.rule(at(path, "name"), f"must be at most {MAX_POLICY_NAME} characters, "
                                        f"not {len(raw['name'])}")


# --- trigger and rules ----------------------------------------------------------------------


def _check_trigger(trigger: Any, problems: Problems) -> None:
    if not check_object(trigger, "trigger", problems):
        return
    check_keys(trigger, "trigger", _TRIGGER_KEYS, problems)
    if "enable" in trigger and not isinstance(trigger["enable"], bool):
        problems.shape("trigger.enable", "must be true or false")
    for key, rule in _TRIGGER_NAMES.items():
        if key in trigger and check_text_list(trigger[key], f"trigger.{key}", problems):
            check_names(trigger[key], f"trigger.{key}", rule, problems)


def _check_rules(raw: dict, registry: ActionRegistry, problems: Problems) -> None:
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
        _check_rule(rule, f"rules[{index}]", registry, problems)


def _check_rule(rule: Any, path: str, registry: ActionRegistry, problems: Problems) -> None:
    if not check_object(rule, path, problems):
        return
    required = ("name", "priority", "when", "then")
    check_keys(rule, path, _RULE_KEYS, problems, required=required, server_keys=frozenset({"id"}))
    if "name" in rule:
        check_text(rule["name"], f"{path}.name", problems)
    if "priority" in rule:
        check_int(rule["priority"], f"{path}.priority", problems)
    if "when" in rule:
        problems.extend(compile_condition(rule["when"], f"{path}.when")[1])
    if "then" in rule:
        _check_then(rule["then"], f"{path}.then", registry, problems)
    if "transition" in rule and check_object(rule["transition"], f"{path}.transition", problems):
        transition = rule["transition"]
        check_keys(transition, f"{path}.transition", ("on_success",), problems)
        if "on_success" in transition:
            _check_on_success(transition["on_success"], f"{path}.transition.on_success", problems)


def _check_on_success(value: Any, path: str, problems: Problems) -> None:
    # A shape problem, not a rule one: the typed RuleSpec cannot hold any other value.
    allowed = [member.value for member in OnSuccess]
    if value not in allowed:
        shown = f"{quote(value)} is not" if isinstance(value, str) else "must be"
        problems.shape(path, f"{shown} one of {', '.join(allowed)}")


def _check_then(then: Any, path: str, registry: ActionRegistry, problems: Problems) -> None:
    if not isinstance(then, list):
        problems.shape(path, "must be a list of actions")
        return
    if not then:
        problems.rule(path, "a rule needs at least one action")
    for index, action in enumerate(then):
        _check_action(action, f"{path}[{index}]", registry, problems)


# --- actions: the executor checks its own configuration ------------------------------------


def _check_action(action: Any, path: str, registry: ActionRegistry, problems: Problems) -> None:
    if not check_object(action, path, problems):
        return
    action_type = action.get("type")
    executor = registry.get(action_type) if isinstance(action_type, str) else None
    if "type" not in action:
        problems.shape(f"{path}.type", "missing key")
    elif not isinstance(action_type, str):
        problems.shape(f"{path}.type", "must be a string")
    elif executor is None:
        problems.rule(f"{path}.type", _no_executor(action_type, registry))
    for key in action if isinstance(action_type, str) else ():  # else: only the type is wrong
        if key not in ("type", action_type):
            problems.shape(f"{path}.{key}", "unknown key")
    if executor is not None:
        # None when the key is absent or null; the executor decides whether it needs one.
        problems.extend(executor.validate_config(action.get(action_type),
                                                 f"{path}.{action_type}"))


def _no_executor(action_type: str, registry: ActionRegistry) -> str:
    if action_type in _CATALOG_ACTION_TYPES:
        # The catalog names it, but nothing in this build runs it: activating would only make
        # every execution fail with plan_failed.
        return f"no executor runs action type {quote(action_type)} in this build"
    return (f"unknown action type {quote(action_type)}; allowed: "
            + ", ".join(registry.types()))


# --- assignment-notification families ------------------------------------------------------


def _check_notification_family(raw: dict, registry: ActionRegistry, problems: Problems) -> None:
    trigger = raw["trigger"] if isinstance(raw.get("trigger"), dict) else {}
    rules = raw["rules"] if isinstance(raw.get("rules"), list) else []
    actions = list(_actions_with_paths(rules))
    sources = trigger.get("source_in", [])
    kinds = {_action_kind(action, registry) for _, action in actions}
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
                      "its projects")
    for path, action in actions:
        _check_notification_action(action, path, role, registry, problems)
    if len(rules) != 2:
        problems.rule("rules", "an assignment-notification policy has exactly two rules: "
                      "the notification rule and the urgent rule")
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


def _action_kind(action: dict, registry: ActionRegistry) -> str:
    """``notification`` by type, whether or not this build runs it; ``ordinary`` for
    any other type an executor runs; ``""`` for a type nothing runs (reported already)."""
    action_type = action.get("type")
    if is_notification_action_type(action_type):
        return "notification"
    return "ordinary" if isinstance(action_type, str) and registry.get(action_type) else ""


def _names_reserved_source(sources: Any) -> bool:
    return isinstance(sources, list) and any(is_reserved_source(source) for source in sources)


def _reject_notification_actions(actions: list[tuple[str, dict]], problems: Problems) -> None:
    for path, action in actions:
        if is_notification_action_type(action.get("type")):
            problems.rule(f"{path}.type", f"{quote(action['type'])} is only allowed in an "
                          "assignment-notification policy, whose trigger.source_in is exactly "
                          "one reserved source")


def _reject_reserved_sources(sources: Any, problems: Problems) -> None:
    for index, source in enumerate(sources if isinstance(sources, list) else ()):
        if is_reserved_source(source):
            problems.rule(f"trigger.source_in[{index}]", f"reserved source {quote(source)} is only "
                          "for assignment-notification policies")


def _role_for(sources: Any) -> NotificationRole | None:
    if not isinstance(sources, list) or len(sources) != 1:
        return None
    return next((role for role in NOTIFICATION_ROLES if role.source == sources[0]), None)


def _check_role_labels(labels: Any, role: NotificationRole, problems: Problems) -> None:
    if not isinstance(labels, list):
        return  # already a shape problem
    if role.label not in labels:
        problems.rule("trigger.issue_label_all", f"must contain {quote(role.label)}, the pending "
                      f"marker of {role.source}")
    for other in NOTIFICATION_ROLES:
        if other is not role and other.label in labels:
            problems.rule("trigger.issue_label_all", f"{quote(other.label)} is the marker of "
                          f"{other.source}; roles must not cross")


def _check_notification_action(
    action: dict, path: str, role: NotificationRole | None, registry: ActionRegistry,
    problems: Problems,
) -> None:
    action_type = action.get("type")
    if not isinstance(action_type, str):
        return  # already reported
    if not is_notification_action_type(action_type):
        if registry.get(action_type) is not None:  # else: unknown type, already reported
            problems.rule(f"{path}.type", f"{quote(action_type)} is not allowed in an "
                          "assignment-notification policy")
        return
    config = action.get(action_type)
    if action_type != _SEND or not isinstance(config, dict):
        return
    if role and isinstance(config.get("role"), str) and config["role"] != role.role:
        problems.rule(f"{path}.{action_type}.role", f"source {role.source} notifies role "
                      f"{quote(role.role)}, not {quote(config['role'])}")
    if role and isinstance(config.get("label"), str) and config["label"] != role.label:
        problems.rule(f"{path}.{action_type}.label", f"source {role.source} consumes label "
                      f"{quote(role.label)}, not {quote(config['label'])}")


def _run_order(rules: list, problems: Problems) -> tuple[int, int]:
    """Indices of the two rules in run order, ``(priority, index)``; equal priorities would
    leave the order to server-assigned ids, so they are rejected."""
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


def _check_notice_rule(rule: Any, path: str, problems: Problems) -> None:
    if not isinstance(rule, dict):
        return
    if "when" in rule and rule["when"] != {"always": True}:
        problems.rule(f"{path}.when", 'the first rule must be {"always": true}')
    then = rule.get("then")
    only_send = (
        isinstance(then, list) and len(then) == 1
        and isinstance(then[0], dict) and then[0].get("type") == _SEND
    )
    if isinstance(then, list) and not only_send:
        problems.rule(f"{path}.then", f"the first rule runs exactly one {_SEND} action")
    transition = rule.get("transition")
    on_success = transition.get("on_success") if isinstance(transition, dict) else None
    if on_success != OnSuccess.CONTINUE:
        problems.rule(f"{path}.transition.on_success", "the first rule must continue so the "
                      "urgent rule is evaluated")


def _check_urgent_rule(rule: Any, path: str, problems: Problems) -> None:
    if not isinstance(rule, dict):
        return
    when = rule.get("when")
    is_urgency_leaf = (
        isinstance(when, dict) and when.get("operator") == "in"
        and when.get("field") in URGENCY_FIELDS
    )
    if "when" in rule and not is_urgency_leaf:
        problems.rule(f"{path}.when", 'the urgent rule\'s condition must be one "in" leaf on '
                      + " or ".join(URGENCY_FIELDS))
    then = rule.get("then")
    for k, action in enumerate(then if isinstance(then, list) else ()):
        if isinstance(action, dict) and action.get("type") == _SEND:
            problems.rule(f"{path}.then[{k}].type", f"{_SEND} belongs to the first rule only")
