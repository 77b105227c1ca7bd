"""The configuration checks of the four assignment-notification actions (docs/policies.md,
"The assignment-notification actions").

Their executors answer ``validate_config`` with these: notification_card.py,
notification_urgent.py, notification_page.py and notification_escalate.py. The rules that
span a whole policy family (one card per policy, the urgency rule, the page attempts) are the
policy validator's (``domain/validation.py``); tests register stand-in executors that use
these checks to exercise those rules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES, ActionType
from ticket_dispatcher.domain.checks import (
    Problems,
    check_config_object,
    check_int,
    check_keys,
    check_object,
    check_text,
    check_text_list,
    quote,
    quoted,
    reason,
)
from ticket_dispatcher.errors import Problem
from ticket_dispatcher.timeutil import parse_duration

_PAGE_KEYS = ("attempt", "ack_pending_statuses", "ack_timeout", "poll_interval")
# What a page does when its target is on time off: nothing different unless it says
# "escalate" (no page, straight on to the escalation).
WHEN_UNAVAILABLE = ("escalate",)
# The longest ACK wait or poll, far above any real one. The wait's deadline and wake-up are
# clock times: a duration of centuries overflows the scheduler's timer wait, of millennia the
# date range, and either would break at run time what validation let through.
MAX_PAGE_WAIT = timedelta(days=7)


def validate_send_config(config: Any, path: str) -> list[Problem]:
    """``send_assignment_notification``: ``role`` and ``label``. That they match the policy's
    reserved source is a family rule, checked by the policy validator."""
    problems = Problems()
    if check_config_object(config, path, problems):
        check_keys(config, path, ("role", "label"), problems, required=("role", "label"))
        roles = [role.role for role in NOTIFICATION_ROLES]
        if "role" in config:
            role = config["role"]
            if not isinstance(role, str):
                problems.shape(f"{path}.role", f"must be one of {', '.join(roles)}")
            elif role not in roles:
                problems.rule(f"{path}.role", f"{quote(role)} is not one of {', '.join(roles)}")
        if "label" in config:
            check_text(config["label"], f"{path}.label", problems)
    return problems


def validate_page_config(config: Any, path: str) -> list[Problem]:
    """``page_assignment``, each one on its own (how the attempts fit together is a family
    rule); ``terminal_statuses`` is an unknown key: an ACK is leaving the pending statuses."""
    problems = Problems()
    if not check_config_object(config, path, problems):
        return problems
    check_keys(config, path, (*_PAGE_KEYS, "when_unavailable"), problems, required=_PAGE_KEYS)
    if "when_unavailable" in config and config["when_unavailable"] not in WHEN_UNAVAILABLE:
        problems.rule(f"{path}.when_unavailable", f"{quote(config['when_unavailable'])} is not "
                      f"one of {quoted(WHEN_UNAVAILABLE)}")
    if "attempt" in config and check_int(config["attempt"], f"{path}.attempt", problems):
        if config["attempt"] <= 0:
            problems.rule(f"{path}.attempt", f"must be a positive integer, not "
                          f"{config['attempt']}")
    if "ack_pending_statuses" in config:
        check_text_list(config["ack_pending_statuses"], f"{path}.ack_pending_statuses",
                        problems, non_empty=True, unique=True)
    timeout = _duration(config, "ack_timeout", path, problems)
    poll = _duration(config, "poll_interval", path, problems)
    if timeout and poll and poll > timeout:
        problems.rule(f"{path}.poll_interval", f"{quote(config['poll_interval'])} must not be "
                      f"longer than ack_timeout {quote(config['ack_timeout'])}")
    return problems


def validate_no_config(config: Any, path: str) -> list[Problem]:
    """``mark_assignment_message_urgent`` and ``escalate_assignment_to_leader`` take nothing:
    the key may be absent, null or ``{}``; anything in it (``max_hops``: escalation is one hop;
    urgency lists: the policy's urgency rule decides) is an unknown key."""
    problems = Problems()
    if config is not None and check_object(config, path, problems):
        check_keys(config, path, (), problems)
    return problems


NOTIFICATION_CONFIG_CHECKS: dict[str, Callable[[Any, str], list[Problem]]] = {
    ActionType.SEND_ASSIGNMENT_NOTIFICATION.value: validate_send_config,
    ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value: validate_no_config,
    ActionType.PAGE_ASSIGNMENT.value: validate_page_config,
    ActionType.ESCALATE_ASSIGNMENT_TO_LEADER.value: validate_no_config,
}


def _duration(config: dict, key: str, path: str, problems: Problems) -> timedelta | None:
    if key not in config:
        return None
    value = config[key]
    if not isinstance(value, str):
        problems.shape(f"{path}.{key}", "must be a duration string like '5m' or '5s'")
        return None
    try:
        duration = parse_duration(value)
    except ValueError as exc:
        problems.rule(f"{path}.{key}", reason(exc, value))
        return None
    if duration.total_seconds() <= 0:
        problems.rule(f"{path}.{key}", f"{quote(value)} must be longer than zero")
        return None
    if duration > MAX_PAGE_WAIT:
        problems.rule(f"{path}.{key}", f"{quote(value)} is longer than the maximum of "
                      f"{MAX_PAGE_WAIT.days}d")
        return None
    return duration
