"""Judging a shadow's decision against the live one: the most telling difference first."""

from __future__ import annotations

from ticket_dispatcher.domain.shadow import Decision, ShadowVerdict, judge

LIVE = Decision(matched_rules=["urgent"], actions=["assign", "page_assignment"],
                assignee="a@x.io", notification_steps=["page_assignment#1"])


def shadow(**changes) -> Decision:
    return Decision(**{**LIVE.to_json(), **changes})


def test_the_same_rules_actions_steps_and_person_agree():
    assert judge(LIVE, shadow()) is ShadowVerdict.AGREED


def test_each_difference_is_named_the_most_telling_first():
    assert judge(LIVE, shadow(matched_rules=[], actions=[], assignee=None)) \
        is ShadowVerdict.NO_MATCH
    assert judge(LIVE, shadow(matched_rules=["routine"], assignee="b@x.io")) \
        is ShadowVerdict.OTHER_RULE
    assert judge(LIVE, shadow(notification_steps=["page_assignment#2"])) \
        is ShadowVerdict.OTHER_ACTIONS
    assert judge(LIVE, shadow(actions=["assign"], assignee="b@x.io")) is ShadowVerdict.OTHER_ACTIONS
    assert judge(LIVE, shadow(assignee="b@x.io")) is ShadowVerdict.OTHER_ASSIGNEE
    assert judge(Decision(), Decision()) is ShadowVerdict.AGREED  # neither matched


def test_a_decision_round_trips_through_json():
    assert Decision.from_json(LIVE.to_json()) == LIVE
    assert all(v.differs for v in ShadowVerdict if v is not ShadowVerdict.AGREED)
