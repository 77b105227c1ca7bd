"""How an assign action's receiver takes turns (docs/policies.md, "assign and assign_l2"): the
engineers a receiver names, each once; of those an assignment may choose, the ones inside their
working hours first when any is; and whose turn it is. ``assign`` plans by these rules, and
the console shows each rotation's turn by the same ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ticket_dispatcher.domain.availability import CandidateVerdict
from ticket_dispatcher.domain.catalog import ReceiverType
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.domain.ports import Directory, OnCall


def dedupe(emails: Iterable[object]) -> list[str]:
    """Lower-cased and trimmed, in configured order, each once; blanks and anything but text
    dropped."""
    seen: dict[str, None] = {}
    for email in emails:
        if isinstance(email, str):
            seen.setdefault(email.strip().lower(), None)
    return [email for email in seen if email]


def listed_emails(receiver: Mapping[str, Any]) -> list[str]:
    """The engineers a ``user`` or ``users`` receiver names, each once, in configured order;
    none for a group or an Oncall team, known only when an assignment asks for them."""
    kind = receiver.get("type")
    if kind == ReceiverType.USER:
        return dedupe([receiver.get("user")])
    if kind == ReceiverType.USERS:
        return dedupe(receiver.get("users") or [])
    return []


def receiver_emails(receiver: Mapping[str, Any], directory: Directory,
                    oncall: OnCall) -> list[str]:
    """Everyone ``receiver`` resolves to now, each once, in its order: the listed engineers,
    a Core group's active members, or an Oncall team's responders."""
    kind = ReceiverType(receiver["type"])
    if kind is ReceiverType.GROUP:
        return dedupe(m.email for m in directory.group_members(receiver["group"]) if m.active)
    if kind is ReceiverType.ONCALL_TEAM:
        return dedupe(r.email for r in oncall.responders(receiver["oncall_team"]))
    return listed_emails(receiver)


def turn_candidates(emails: Sequence[str], verdicts: Iterable[CandidateVerdict]) -> list[str]:
    """Those of ``emails`` (dispatch-enabled, in receiver order) an assignment may choose now:
    none passed over by their verdict, and only those inside their working hours when any is
    (where the action prefers them), else all of them. An email without a verdict had nothing
    to judge: it may be chosen, and is preferred."""
    verdict = {v.email: v for v in verdicts}
    eligible = [email for email in emails if email not in verdict or verdict[email].eligible]
    preferred = [email for email in eligible if email not in verdict or verdict[email].preferred]
    return preferred or eligible


def next_in_turn(candidates: Sequence[Engineer]) -> Engineer:
    """Whose turn it is in a round robin over ``candidates`` (in configured order, not empty):
    never-dispatched first, then the oldest ``last_dispatched_at``, ties by configured order.
    The one rule for a dry run's read-only choice, the console's rotations and
    ``EngineerStore.take_turn``."""
    never = datetime.min

    def age(indexed: tuple[int, Engineer]) -> tuple:
        index, engineer = indexed
        last = engineer.last_dispatched_at
        return (last is not None, last.replace(tzinfo=None) if last else never, index)

    _, chosen = min(enumerate(candidates), key=age)
    return chosen
