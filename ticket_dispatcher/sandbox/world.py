"""The whole fake world: the four services' states over one directory of
people (and the webhooks registered in the fake Jira), and the traffic (injected faults, the
request log) they all go through."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from ticket_dispatcher.domain.issues import DEFAULT_L2_FIELD_ID, DEFAULT_SEVERITY_FIELD_ID
from ticket_dispatcher.sandbox.core import CoreState
from ticket_dispatcher.sandbox.jira import JiraState
from ticket_dispatcher.sandbox.jira_webhooks import AdminWebhooks
from ticket_dispatcher.sandbox.lark import LarkState
from ticket_dispatcher.sandbox.oncall import OncallState
from ticket_dispatcher.sandbox.people import People
from ticket_dispatcher.sandbox.traffic import Traffic


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Sandbox:
    """One clock for every service; ``now`` and ``sleep`` are injectable so tests drive time
    and injected latency does not really sleep."""

    def __init__(
        self,
        *,
        l2_field_id: str = DEFAULT_L2_FIELD_ID,
        severity_field_id: str = DEFAULT_SEVERITY_FIELD_ID,
        now: Callable[[], datetime] = _utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.people = People()
        self.jira = JiraState(self.people, now=now, l2_field_id=l2_field_id,
                              severity_field_id=severity_field_id)
        self.jira_webhooks = AdminWebhooks(now=now)
        self.lark = LarkState(self.people, now=now)
        self.oncall = OncallState(self.people, now=now)
        self.core = CoreState(self.people)
        self.traffic = Traffic(now=now, sleep=sleep)
