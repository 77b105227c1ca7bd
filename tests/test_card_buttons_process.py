"""The card's buttons through real ``serve`` processes on each engine (docs/lark-card-buttons.md):
the independent fakes of Jira, Lark, Oncall and Core (tests/peer.py, tests/peer_notify.py), and
Lark's callbacks built from Lark's definitions (tests/peers/lark_callbacks.py), encrypted and
signed with an encrypt key, or carrying only the token.

The ACK wait polls every 30 s, so an execution that acts within seconds of a press was woken
by it, not by its poll. The kill test presses, then SIGKILLs the process as soon as the answer
is in: the restarted process acts on the press, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import requests

from tests.peer import FakeJira, Route
from tests.peer_notify import OncallRoute
from tests.peers.lark_callbacks import ROUTE, LarkCallbacks
from tests.process import (
    Dispatcher,
    Processes,
    assignee_notification_policy,
    notification_settings,
    wait_until,
)
from tests.test_notification_process import page_of, stored_execution

PROJECT, KEY = "BTN", "BTN-1"
SOURCE, LABEL = "jira_assignment_assignee", "notify-assignee"
EMAIL, ACCOUNT, OPEN_ID, NAME = "alice@example.com", "acc-alice", "ou_alice", "Alice Example"
LEADER, LEADER_ACCOUNT = "bob@example.com", "acc-bob"
PENDING = "Todo"
ENCRYPT_KEY, TOKEN = "console-encrypt-key-0123", "console-verification-token"
MODES = {"encrypted": {"LARK_ENCRYPT_KEY": ENCRYPT_KEY, "LARK_VERIFICATION_TOKEN": TOKEN},
         "token_only": {"LARK_VERIFICATION_TOKEN": TOKEN}}


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_user(EMAIL, ACCOUNT, NAME)
        fake.add_user(LEADER, LEADER_ACCOUNT, "Bob Leader")
        fake.add_issue(KEY, labels=[LABEL], assignee=ACCOUNT, priority="P0", status=PENDING)
        yield fake


@pytest.fixture
def person() -> tuple[str, str, str]:
    return EMAIL, NAME, OPEN_ID


@pytest.fixture(params=sorted(MODES))
def mode(request) -> str:
    return request.param


@pytest.fixture
def dispatchers(db_url, jira, lark, oncall, core, mode) -> Iterator[Callable[[], Dispatcher]]:
    core.add_user(EMAIL, NAME, open_id=OPEN_ID, leader=LEADER)
    core.add_user(LEADER, "Bob Leader")
    settings = {**notification_settings(lark, oncall, core), **MODES[mode]}
    started = Processes()
    yield lambda: started.start(db_url, jira, **settings)
    started.stop_all()


@pytest.fixture
def signer(mode) -> LarkCallbacks:
    return LarkCallbacks(encrypt_key=MODES[mode].get("LARK_ENCRYPT_KEY", ""), token=TOKEN)


def start(dispatchers, *, escalate: bool = False, poll: str = "30s") -> tuple[Dispatcher, dict]:
    """A serving process with the family active, the trigger posted, and the execution parked
    in attempt 1's wait."""
    dispatcher = dispatchers().wait_serving()
    dispatcher.activate(assignee_notification_policy(
        "Buttons", PROJECT, urgent=["P0"], attempts=2, ack_timeout="60s", poll_interval=poll,
        pending=PENDING, escalate=escalate))
    dispatcher.post_trigger(KEY, source=SOURCE)

    def parked() -> dict | None:
        execution = dispatcher.execution_of(KEY)
        if execution and page_of(execution, 1)["context"]["page"].get("page_phase") == \
                "finished" and execution["wake_at"]:
            return execution
        return None

    return dispatcher, wait_until(parked, 15, "page 1 is placed and its wait parks")


def press(dispatcher: Dispatcher, signer: LarkCallbacks, execution_id: int, action: str,
          message_id: str, operator: str = OPEN_ID, event_id: str | None = None,
          ) -> tuple[requests.Response, float]:
    body, headers = signer.press(execution_id, action, operator, message_id, event_id=event_id)
    began = time.monotonic()
    answer = requests.post(dispatcher.url + ROUTE, data=body, headers=headers, timeout=10)
    return answer, time.monotonic() - began


def execution(dispatcher: Dispatcher, execution_id: int) -> dict:
    return dispatcher.call("GET", f"/dispatch/executions/{execution_id}")


def ack_comments(jira: FakeJira) -> list[str]:
    return [c.body for c in jira.comments(KEY) if "acknowledged" in c.body]


def card_buttons(card: dict) -> list[dict]:
    return [b["value"] for e in card["elements"] if e["tag"] == "action" for b in e["actions"]]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_acknowledge_from_the_card_ends_the_wait_within_seconds(dispatchers, signer, jira, lark,
                                                                oncall):
    dispatcher, parked = start(dispatchers)
    execution_id = parked["id"]
    [card] = lark.messages()
    assert card_buttons(card.card) == [{"action": "ack", "execution_id": execution_id},
                                       {"action": "escalate", "execution_id": execution_id}]
    body, headers = signer.url_check("hi")
    assert requests.post(dispatcher.url + ROUTE, data=body, headers=headers,
                         timeout=10).json() == {"challenge": "hi"}

    stranger, _ = press(dispatcher, signer, execution_id, "ack", card.message_id, "ou_mallory")
    assert stranger.status_code == 200
    assert stranger.json() == {"toast": {"type": "warning", "content":
                                         "This page is for Alice Example: only they can "
                                         "answer it."}}
    answer, took = press(dispatcher, signer, execution_id, "ack", card.message_id,
                         event_id="ev-ack")

    assert answer.status_code == 200 and took < 1, (answer.text, took)
    assert answer.json()["toast"]["type"] == "success"
    note = answer.json()["card"]["data"]["elements"][-1]["text"]["content"]
    assert note.startswith("Acknowledged by Alice Example at ")
    assert card_buttons(answer.json()["card"]["data"]) == []
    done = wait_until(lambda: (ex := execution(dispatcher, execution_id))["status"] ==
                      "succeeded" and ex, 10, "the press ends the workflow (the poll is 30 s)")
    page = page_of(done, 1)["context"]["page"]
    assert (page["outcome"], page["ack_source"]) == ("ack", "button")
    # the action itself says what told it of the ACK, and when (the press's time)
    assert (page_of(done, 1)["ack_source"], page_of(done, 1)["ack_at"]) == (
        "button", page["ack_at"])
    assert page_of(done, 2)["status"] == "skipped" and "ack_source" not in page_of(done, 2)
    repeat, _ = press(dispatcher, signer, execution_id, "ack", card.message_id,
                      event_id="ev-ack")
    assert repeat.json() == answer.json()
    late, _ = press(dispatcher, signer, execution_id, "escalate", card.message_id)
    assert late.json()["toast"]["content"].startswith("This page has already ended")
    assert len(ack_comments(jira)) == 1
    assert len(oncall.calls(OncallRoute.PAGE)) == 1
    metrics = requests.get(dispatcher.url + "/metrics", timeout=10).text
    assert 'lark_card_presses_total{action="ack",outcome="acknowledged"} 1.0' in metrics
    assert dispatcher.log_problems() == []
    assert ENCRYPT_KEY not in dispatcher.log() and TOKEN not in dispatcher.log()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_escalate_now_hands_the_issue_to_the_leader_at_once(dispatchers, signer, jira, lark,
                                                            oncall):
    dispatcher, parked = start(dispatchers, escalate=True)
    execution_id = parked["id"]
    [card] = lark.messages()

    answer, took = press(dispatcher, signer, execution_id, "escalate", card.message_id)

    assert answer.status_code == 200 and took < 1, (answer.text, took)
    assert answer.json()["card"]["data"]["elements"][-1]["text"]["content"] == \
        "Escalated to Bob Leader, your direct leader"
    wait_until(lambda: jira.assignee(KEY) == LEADER_ACCOUNT, 10,
               "the escalation makes the leader the assignee (the poll is 30 s)")
    done = wait_until(lambda: (ex := execution(dispatcher, execution_id))["status"] ==
                      "succeeded" and ex, 10, "the workflow ends")
    assert page_of(done, 2)["context"]["page"]["reason"] == "escalate pressed"
    assert len(oncall.calls(OncallRoute.PAGE)) == 1  # page 2 never went out
    assert ack_comments(jira) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_press_answered_then_sigkill_acts_once_after_the_restart(dispatchers, db_url, signer,
                                                                   jira, lark, oncall):
    first, parked = start(dispatchers, poll="2s")
    execution_id = parked["id"]
    [card] = lark.messages()

    # the woken execution starts by loading the issue: held, it never gets to the press
    gate = jira.hold(Route.GET_ISSUE, KEY)
    answer, _ = press(first, signer, execution_id, "ack", card.message_id, event_id="ev-kill")
    assert gate.wait_until_held(1, timeout=5), "the press did not wake the execution"
    first.process.kill()  # SIGKILL: the answer is given, the work not done
    assert answer.status_code == 200 and answer.json()["toast"]["type"] == "success"
    assert first.wait_exit(timeout=10) == -9
    gate.release()
    at_kill = page_of(stored_execution(db_url, execution_id), 1)["context"]["page"]
    assert "outcome" not in at_kill and len(ack_comments(jira)) == 0

    second = dispatchers().wait_serving()
    done = wait_until(lambda: (ex := execution(second, execution_id))["status"] ==
                      "succeeded" and ex, 20, "the restarted process acts on the press")
    page = page_of(done, 1)["context"]["page"]
    assert (page["outcome"], page["ack_source"]) == ("ack", "button")
    repeat, _ = press(second, signer, execution_id, "ack", card.message_id, event_id="ev-kill")
    assert repeat.json() == answer.json()
    assert len(ack_comments(jira)) == 1
    assert len(oncall.calls(OncallRoute.PAGE)) == 1
    assert second.log_problems() == []
