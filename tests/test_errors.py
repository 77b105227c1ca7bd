"""What an integration call ended in, judged in one place (``errors.fault_of``)."""

from __future__ import annotations

import pytest

from ticket_dispatcher.errors import (
    CallAbandoned,
    Fault,
    FaultCause,
    FaultKind,
    IntegrationError,
    LeaseLost,
    OutcomeUnknown,
    ServiceNotConfigured,
    StoreUnavailable,
    fault_of,
)
from ticket_dispatcher.integrations.http import (
    IntegrationLost,
    IntegrationRejected,
    IntegrationTimeout,
)


def jira(status: int | None = None, retry_after: float | None = None) -> IntegrationError:
    return IntegrationRejected("jira failed", status=status, service="jira",
                               retry_after=retry_after)


@pytest.mark.parametrize("error,kind,cause", [
    (IntegrationError("jira GET /x: connection failed (ConnectTimeout)", service="jira"),
     FaultKind.NOT_SENT, FaultCause.CONNECTION),
    (IntegrationError("jira load_issue: no free client within 5 s; the call was not made",
                      service="jira"), FaultKind.NOT_SENT, FaultCause.CONNECTION),
    (IntegrationTimeout("jira GET /x: no answer", service="jira"),
     FaultKind.UNKNOWN, FaultCause.NO_ANSWER),
    (IntegrationLost("jira GET /x: the connection broke", service="jira"),
     FaultKind.UNKNOWN, FaultCause.NO_ANSWER),
    (OutcomeUnknown("jira assign: no answer within 30 s", service="jira"),
     FaultKind.UNKNOWN, FaultCause.NO_ANSWER),
    (jira(500), FaultKind.UNKNOWN, FaultCause.SERVER_ERROR),
    (jira(503), FaultKind.UNKNOWN, FaultCause.SERVER_ERROR),
    (jira(429), FaultKind.HELD, FaultCause.RATE_LIMITED),
], ids=["connection", "queue timeout", "read timeout", "broken after sending",
        "caller stopped waiting", "500", "503", "429"])
def test_a_passing_fault_is_judged_by_what_reached_the_peer(error, kind, cause):
    fault = fault_of(error)

    assert (fault.kind, fault.cause) == (kind, cause)
    assert fault.passing
    assert fault.cause_label == cause.value


@pytest.mark.parametrize("error", [
    jira(400), jira(401), jira(403), jira(404), jira(409),
    jira(200),  # answered, with a body the call cannot read
    ServiceNotConfigured("oncall is not configured (page)", service="oncall"),
    StoreUnavailable("database is locked", kind="locked"),
    LeaseLost("another holder took over"),
    ValueError("a bug"),
    CallAbandoned("the service is shutting down"),
], ids=["400", "401", "403", "404", "409", "malformed", "not configured", "store", "lease",
        "not ours", "abandoned"])
def test_an_answer_that_will_not_change_and_anything_else_is_permanent(error):
    fault = fault_of(error)

    assert fault == Fault(FaultKind.PERMANENT)
    assert not fault.passing and not fault.repeatable and not fault.answer_lost


def test_only_a_call_refused_for_certain_may_simply_be_made_again():
    assert fault_of(jira(429)).repeatable
    assert fault_of(IntegrationError("refused", service="jira")).repeatable
    assert not fault_of(jira(503)).repeatable
    assert not fault_of(OutcomeUnknown("lost", service="jira")).repeatable


def test_only_a_lost_answer_is_read_again_at_once():
    assert fault_of(OutcomeUnknown("lost", service="jira")).answer_lost
    assert not fault_of(jira(503)).answer_lost  # the peer said it is failing


def test_the_wait_the_service_asked_for_goes_with_the_verdict():
    assert fault_of(jira(429, retry_after=30)).retry_after == 30
    assert fault_of(jira(503, retry_after=5)).retry_after == 5
    assert fault_of(jira(429)).retry_after is None


def test_a_permanent_fault_has_no_retry_cause():
    with pytest.raises(AssertionError):
        _ = fault_of(jira(404)).cause_label
