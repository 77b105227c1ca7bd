"""Under a Jira budget, a notification's calls go before a backlog's, in a real
``ticket-dispatcher serve`` process (docs/design.md, "Lanes").

With ``[jira] max_calls_per_second = 2``, a backlog of ordinary triggers needs two calls each,
so it holds the budget for many seconds. A P0 assignee notification posted behind it reaches
its first page within a few seconds: its trigger's, its steps' and its guard's calls go first,
each behind at most the ordinary calls already given a slot. Were the budget's slots handed out
in the order the calls came, each of its calls would wait behind every ordinary call already
waiting, one per Jira worker (measured: 33 backlog calls and 20 s between the post and the
page that way, 3 calls and 5 s with the lanes kept).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests import process
from tests.process import assignee_notification_policy, notification_settings, wait_until
from tests.test_jira_rate_limit_process import ENGINEERS, PROJECT, Dispatcher
from tests.test_jira_scoped_limits_process import LimitingJira
from tests.test_notification_process import (
    ACCOUNT,
    EMAIL,
    KEY,
    LABEL,
    NAME,
    OPEN_ID,
    PENDING,
    SOURCE,
)
from tests.test_notification_process import PROJECT as NOTIFIED

BUDGET = 2  # calls a second
BACKLOG = [f"{PROJECT}-{number}" for number in range(1, 41)]
# Ordinary calls that may reach Jira between the notification's post and its page: those
# already holding a slot when it came, and the slots left over while none of its calls waits.
OVERTAKEN_AT_MOST = 10


@pytest.fixture
def jira() -> Iterator[LimitingJira]:
    with LimitingJira() as fake:
        for email, account_id in ENGINEERS.items():
            fake.add_user(email, account_id)
        for key in BACKLOG:
            fake.add_issue(key)
        fake.add_user(EMAIL, ACCOUNT, NAME)
        fake.add_issue(KEY, labels=[LABEL], assignee=ACCOUNT, priority="P0", status=PENDING)
        yield fake


@pytest.fixture
def person() -> tuple[str, str, str]:
    return EMAIL, NAME, OPEN_ID


@pytest.fixture
def dispatcher(db_url, jira, lark, oncall, core) -> Iterator[Dispatcher]:
    started = process.Processes(Dispatcher)
    try:
        dispatcher = started.start(
            db_url, jira, **notification_settings(lark, oncall, core),
            JIRA_MAX_CALLS_PER_SECOND=str(BUDGET), TRIGGER_POLL_INTERVAL="1s").wait_serving()
        dispatcher.configure_dispatch()
        dispatcher.activate(assignee_notification_policy(
            "Notify PAGE assignees", NOTIFIED, urgent=["P0"], attempts=1, ack_timeout="10m",
            poll_interval="1m", pending=PENDING))
        yield dispatcher
    finally:
        started.stop_all()




@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_notifications_calls_go_before_a_backlog_under_a_budget(dispatcher, jira, oncall):
    for key in BACKLOG:
        dispatcher.post_trigger(key)
    wait_until(lambda: len(jira.arrivals()) >= 4 * BUDGET, 30, "the backlog holds the budget")

    posted = time.monotonic()
    dispatcher.post_trigger(KEY, source=SOURCE)
    wait_until(lambda: oncall.pages(), 60, "the notification's first page is sent")
    sent = time.monotonic()

    arrivals = [a for a in jira.arrivals() if posted <= a.arrived <= sent]
    mine = [a for a in arrivals if a.call.key == KEY]
    overtaking = [a for a in arrivals if a.call.key != KEY]
    assert mine, "the notification made its calls to Jira"
    assert len(overtaking) <= OVERTAKEN_AT_MOST, (
        f"{len(overtaking)} backlog calls went between the notification's post and its page "
        f"({len(mine)} calls of its own, {sent - posted:.1f} s)")
    assigned = sum(1 for key in BACKLOG if jira.assignee(key) is not None)
    assert assigned < len(BACKLOG) / 2  # the backlog was still there to go before it
