"""The one admission rule: create, conflict, defer or nothing to do."""

from __future__ import annotations

from ticket_dispatcher.domain.admission import AdmissionOutcome, LockCandidate, admit

ORDINARY = LockCandidate(1, "TCID-1", "TCID-1#policy:1")
OTHER = LockCandidate(2, "TCID-1", "TCID-1#policy:2")
FAMILY = LockCandidate(3, "TCID-1", "TCID-1#family:pf_A")
DRY_RUN = LockCandidate(1, "TCID-1", None)


def test_nothing_busy_creates_every_candidate_in_order():
    admission = admit([ORDINARY, OTHER], set(), explicit=False)

    assert (admission.outcome, admission.admitted) == (AdmissionOutcome.CREATE, (0, 1))


def test_auto_match_skips_the_busy_policy_and_creates_the_idle_one():
    admission = admit([ORDINARY, OTHER], {ORDINARY.live_lock_key}, explicit=False)

    assert (admission.outcome, admission.admitted) == (AdmissionOutcome.CREATE, (1,))
    assert "1" in admission.reason


def test_auto_match_with_every_policy_busy_is_a_noop():
    admission = admit([ORDINARY], {ORDINARY.live_lock_key}, explicit=False)

    assert (admission.outcome, admission.admitted) == (AdmissionOutcome.NOOP, ())


def test_a_busy_explicit_policy_is_a_conflict():
    admission = admit([ORDINARY], {ORDINARY.live_lock_key}, explicit=True)

    assert admission.outcome is AdmissionOutcome.CONFLICT
    assert admission.reason == "policy 1 already has a live execution for TCID-1"


def test_a_dry_run_is_never_excluded():
    admission = admit([DRY_RUN], {ORDINARY.live_lock_key}, explicit=True)

    assert (admission.outcome, admission.admitted) == (AdmissionOutcome.CREATE, (0,))


def test_busy_family_with_the_role_label_still_on_the_issue_defers():
    admission = admit([FAMILY], {FAMILY.live_lock_key}, explicit=False,
                      role_label="notify-assignee", issue_labels=("notify-assignee",))

    assert admission.outcome is AdmissionOutcome.DEFERRED


def test_busy_family_with_the_role_label_gone_is_a_noop():
    admission = admit([FAMILY], {FAMILY.live_lock_key}, explicit=False,
                      role_label="notify-assignee", issue_labels=("other",))

    assert admission.outcome is AdmissionOutcome.NOOP
