"""How a receiver takes turns, as assign plans and the console shows it: whom a receiver
names, who may be chosen now, and whose turn it is."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.fakes import FakeDirectory, FakeOnCall
from ticket_dispatcher.domain.availability import CandidateVerdict
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.domain.ports import GroupMember, Responder
from ticket_dispatcher.domain.rotation import (
    dedupe,
    listed_emails,
    next_in_turn,
    receiver_emails,
    turn_candidates,
)

A, B, C = "a@x.com", "b@x.com", "c@x.com"


def test_each_address_counts_once_lower_cased_in_configured_order():
    assert dedupe([" B@x.com", A, "b@x.com", "", "  ", None, 7, C]) == [B, A, C]


def test_only_a_user_or_users_receiver_lists_its_engineers():
    assert listed_emails({"type": "user", "user": "A@x.com"}) == [A]
    assert listed_emails({"type": "users", "users": [B, A, B.upper()]}) == [B, A]
    assert listed_emails({"type": "group", "group": "l1"}) == []
    assert listed_emails({"type": "oncall_team", "oncall_team": "l1"}) == []


def test_a_group_resolves_to_its_active_members_and_a_team_to_its_responders():
    directory = FakeDirectory({"l1": [GroupMember(B), GroupMember(A, active=False),
                                      GroupMember(C), GroupMember(B)]})
    oncall = FakeOnCall({"night": [Responder(C), Responder(A)]})

    assert receiver_emails({"type": "group", "group": "l1"}, directory, oncall) == [B, C]
    assert receiver_emails({"type": "oncall_team", "oncall_team": "night"}, directory,
                           oncall) == [C, A]
    assert receiver_emails({"type": "users", "users": [A, A]}, directory, oncall) == [A]


def verdict(email: str, eligible: bool = True, preferred: bool = True) -> CandidateVerdict:
    return CandidateVerdict(email, eligible, eligible and preferred)


def test_those_passed_over_are_left_out_and_the_preferred_go_alone_when_any():
    assert turn_candidates([A, B, C], [verdict(A, eligible=False)]) == [B, C]
    assert turn_candidates([A, B, C], [verdict(B, preferred=False)]) == [A, C]
    assert turn_candidates([A, B], [verdict(A, preferred=False),
                                    verdict(B, preferred=False)]) == [A, B]
    assert turn_candidates([A], [verdict(A, eligible=False)]) == []


def test_the_turn_is_the_never_dispatched_then_the_oldest_then_configured_order():
    old = datetime(2026, 11, 1, tzinfo=UTC)
    new = datetime(2026, 11, 2, tzinfo=UTC)

    assert next_in_turn([Engineer(A, last_dispatched_at=old), Engineer(B)]).email == B
    assert next_in_turn([Engineer(A, last_dispatched_at=new),
                         Engineer(B, last_dispatched_at=old)]).email == B
    assert next_in_turn([Engineer(A, last_dispatched_at=old),
                         Engineer(B, last_dispatched_at=old)]).email == A
