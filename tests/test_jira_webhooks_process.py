"""Jira's admin webhooks into a real ``ticket-dispatcher serve`` process (docs/jira-webhooks.md).

A real process (tests/process.py), with API keys configured (the webhook route still takes
none) and a webhook secret, runs against the independent fake Jira of tests/peer.py and, for
the assignee's notification, the fakes of Lark, Oncall and Core (tests/peer_notify.py). The
deliveries come from tests/peers/jira_webhook_sender.py, written from Atlassian's
documentation alone: the raw body signed with HMAC-SHA256, the delivery's identifier, a retry
of every 408/409/425/429/5xx that honours ``Retry-After``; it repeats deliveries, sends copies
at the same moment and shuffles their order.

What must hold is read over the API (the triggers of a source, paged with the cursor) and from
the fakes' own records: however often and however concurrently a delivery comes, it makes one
trigger and one assignment; a refused signature stores nothing; the role's label is on the
issue before its workflow says anything; a late delivery for someone no longer assigned does
nothing; two replicas take one delivery once; a database that does not answer is a 503 with
``Retry-After``, and Jira's retry after it is taken.

Tests wait for states by polling (``wait_until``) or at the fakes' gates; the one timed wait is
the sender's, for the ``Retry-After`` of a 503.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from tests.factories import example_policy, jira_delivery
from tests.http.conftest import API_KEYS, KEYS
from tests.peer import Answering, FakeJira, Route, serving
from tests.peer_notify import LarkRoute
from tests.peers.jira_webhook_sender import (
    Attempt,
    Delivery,
    JiraWebhookSender,
    Sent,
    hub_signature,
    repeated,
)
from tests.process import (
    BASE,
    Dispatcher,
    Processes,
    notification_settings,
    round_robin_policy,
    wait_until,
)
from tests.test_database_outage_process import (
    ACCOUNT,
    EMAIL,
    NAME,
    OPEN_ID,
    Outage,
    outage,  # noqa: F401 - a fixture
    person,  # noqa: F401 - a fixture
)
from tests.test_database_outage_process import SETTINGS as OUTAGE_SETTINGS
from tests.test_jira_rate_limit_process import metric
from tests.test_replicas_process import SETTINGS as SHARED_SETTINGS
from tests.test_replicas_process import all_executions

SECRET = "jira-webhook-secret-4f1c9a7e2b6d8035"
SETTINGS = {
    "JIRA_WEBHOOK_SECRETS": SECRET,
    "AUTH_API_KEYS": API_KEYS,
    # A trigger put off is picked up a second after its time, not five.
    "TRIGGER_POLL_INTERVAL": "1s",
}
WEBHOOKS_METRIC = "ticket_manager_dispatch_jira_webhooks_total"
CREATED = "jira_issue_created"
TERMINAL_TRIGGER = ("completed", "failed")
TERMINAL_EXECUTION = ("succeeded", "failed")

# Created issues, assigned round robin.
PROJECT = "HOOK"
ENGINEERS = {"eng1@example.com": "acc-eng1", "eng2@example.com": "acc-eng2",
             "eng3@example.com": "acc-eng3"}
ISSUES = [f"{PROJECT}-{n}" for n in range(1, 201)]
TOGETHER = 60  # of the flood's deliveries, sent as two copies at the same moment

# The assignee's notification (ops/examples/policies/priority-assignee.json takes TCOC).
NOTIFY_KEY, NOTIFY_SOURCE, NOTIFY_LABEL = "TCOC-7", "jira_assignment_assignee", "notify-assignee"
FORMER_EMAIL, FORMER_ACCOUNT = "dave@example.com", "acc-dave"  # assigned before Carol


class KeyedDispatcher(Dispatcher):
    """The serve process with API keys configured (authentication on, even with
    ``--insecure-no-auth``); every API call presents the operator's key, while the webhook
    route is posted to with none."""

    @property
    def webhook_url(self) -> str:
        return f"{self.url}{BASE}/jira/webhooks"

    def call(self, method: str, path: str, expected: tuple[int, ...] = (200,),
             **kwargs: Any) -> Any:
        headers = {"X-API-KEY": KEYS["operator"], **kwargs.pop("headers", {})}
        return super().call(method, path, expected, headers=headers, **kwargs)


# --- the world ----------------------------------------------------------------------------------


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        for email, account_id in ENGINEERS.items():
            fake.add_user(email, account_id)
        for key in ISSUES:
            fake.add_issue(key)
        fake.add_user(EMAIL, ACCOUNT, NAME)
        fake.add_user(FORMER_EMAIL, FORMER_ACCOUNT)
        fake.add_issue(NOTIFY_KEY, assignee=ACCOUNT, priority="P3", status="Todo")
        yield fake


@pytest.fixture
def started() -> Iterator[Processes]:
    processes = Processes(KeyedDispatcher)
    yield processes
    processes.stop_all()


@pytest.fixture
def dispatcher(db_url, jira, started) -> KeyedDispatcher:
    """One process on the test's database (once per engine), assigning HOOK issues."""
    dispatcher = started.start(db_url, jira, **SETTINGS).wait_serving()
    configure_assignment(dispatcher)
    return dispatcher


@pytest.fixture
def sender(dispatcher) -> JiraWebhookSender:
    return JiraWebhookSender(dispatcher.webhook_url, SECRET)


def configure_assignment(dispatcher: KeyedDispatcher) -> None:
    for email, account_id in ENGINEERS.items():
        dispatcher.call("PUT", f"/engineers/{email}", (200, 201),
                        json={"dispatch_enabled": True, "jira_account_id": account_id})
    dispatcher.activate(round_robin_policy(
        "Assign HOOK tickets", "round robin over the HOOK squad", PROJECT, ENGINEERS))


# --- deliveries ---------------------------------------------------------------------------------


def created(key: str) -> Delivery:
    return Delivery.of(jira_delivery("jira:issue_created", key=key, project=PROJECT,
                                     priority="P3"))


def assigned(key: str, project: str, account_id: str, *, before: str | None,
             timestamp: int) -> Delivery:
    """An update whose changelog moves the Assignee from ``before`` to ``account_id``."""
    return Delivery.of(jira_delivery(
        "jira:issue_updated", key=key, project=project, priority="P3", assignee=account_id,
        changes=[("assignee", before, account_id, before, account_id)], timestamp=timestamp))


def answers_of(sent: list[Sent]) -> dict[str, list[tuple[int | None, str]]]:
    """Each delivery's final answers (status, and the status its body names), sorted."""
    found: dict[str, list[tuple[int | None, str]]] = defaultdict(list)
    for one in sent:
        body = one.answer if isinstance(one.answer, dict) else {}
        found[one.delivery.identifier].append((one.status, body.get("status", "")))
    return {identifier: sorted(answers) for identifier, answers in found.items()}


ONCE = [(200, "duplicate"), (202, "accepted")]  # a delivery sent twice, taken once


# --- reading the service ------------------------------------------------------------------------


def triggers_of(dispatcher: KeyedDispatcher, source: str | None = None) -> list[dict]:
    """Every trigger (of ``source``), through the cursor of GET /dispatch/triggers."""
    found: list[dict] = []
    cursor = None
    while True:
        params = {"limit": 200, **({"source": source} if source else {}),
                  **({"cursor": cursor} if cursor else {})}
        page = dispatcher.call("GET", "/dispatch/triggers", params=params)
        found += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return found


def settled(dispatcher: KeyedDispatcher, source: str, expected: int) -> Callable[[], bool]:
    """True once ``expected`` triggers of ``source`` are closed and every execution ended."""
    def check() -> bool:
        triggers = triggers_of(dispatcher, source)
        if len(triggers) < expected or any(t["status"] not in TERMINAL_TRIGGER
                                           for t in triggers):
            return False
        return all(e["status"] in TERMINAL_EXECUTION for e in all_executions(dispatcher))

    return check


def trigger_ended(dispatcher: KeyedDispatcher, trigger_id: int) -> Callable[[], dict | None]:
    def check() -> dict | None:
        trigger = dispatcher.call("GET", f"/dispatch/triggers/{trigger_id}")
        return trigger if trigger["status"] in TERMINAL_TRIGGER else None

    return check


def webhook_count(dispatcher: KeyedDispatcher, outcome: str) -> float:
    exposition = requests.get(f"{dispatcher.url}/metrics", timeout=15)
    assert exposition.status_code == 200, exposition.text
    return metric(exposition.text, WEBHOOKS_METRIC, outcome=outcome)


def assert_one_put(jira: FakeJira, key: str) -> None:
    """One PUT assignee for the issue, applied, to one of the engineers."""
    puts = jira.calls(Route.ASSIGN, key)
    assert [(c.status, c.applied) for c in puts] == [(204, True)], (key, puts)
    assert jira.assignee(key) in ENGINEERS.values()


def assert_assigned_once(jira: FakeJira, keys: list[str]) -> None:
    """One PUT assignee per issue, and the issues spread round robin over the engineers."""
    for key in keys:
        assert_one_put(jira, key)
    spread = Counter(jira.assignee(key) for key in keys)
    assert set(spread) == set(ENGINEERS.values())
    assert max(spread.values()) - min(spread.values()) <= 1, spread


def assert_one_trigger_each(triggers: list[dict], keys: list[str],
                            accepted: set[int]) -> None:
    """One completed trigger per issue, the one its accepted delivery named, each with one
    execution."""
    assert sorted(t["input"]["issue_key"] for t in triggers) == sorted(keys)
    assert {t["id"] for t in triggers} == accepted
    assert [t for t in triggers if t["status"] != "completed"
            or len(t["output"]["execution_ids"]) != 1] == []


# --- the tests ----------------------------------------------------------------------------------


def test_the_sender_signs_as_atlassian_publishes():
    assert hub_signature("It's a Secret to Everybody", b"Hello World!") == (
        "sha256=a4771c39fbe90f317c7824e83ddef3caae9cb3d976c214ace1f2937e133263c9")


@pytest.mark.parametrize("status, headers, attempts", [
    ("409 Conflict", [], 3),
    ("429 Too Many Requests", [("Retry-After", "0")], 3),
    ("429 Too Many Requests", [("Retry-After", "60")], 1),  # longer than it waits: it ends
    ("503 Service Unavailable", [], 3),
    ("400 Bad Request", [], 1),
    ("401 Unauthorized", [], 1),
    ("200 OK", [], 1),
])
def test_the_sender_retries_only_what_jira_retries(status, headers, attempts):
    peer = Answering(status, headers)
    with serving(peer, "webhook-receiver") as url:
        sent = JiraWebhookSender(url, SECRET, max_attempts=3).send(created(ISSUES[0]))

    assert [a.status for a in sent.attempts] == [int(status.split()[0])] * attempts
    assert [a.retry for a in sent.attempts] == list(range(attempts))
    assert len(peer.paths) == attempts


@pytest.mark.timeout(120)
def test_a_flood_of_created_issues_each_delivered_twice_assigns_each_issue_once(
        dispatcher, jira, sender):
    deliveries = [created(key) for key in ISSUES]
    rng = random.Random(20261201)
    together, apart = deliveries[:TOGETHER], deliveries[TOGETHER:]
    # Both copies of a delivery in ``together`` reach the server at the same moment; the two
    # copies of the others land anywhere in a shuffled run, 16 deliveries in flight at once.
    jobs = [(d, True) for d in together] + [(d, False) for d in repeated(apart, 2, rng)]
    rng.shuffle(jobs)

    def deliver(job: tuple[Delivery, bool]) -> list[Sent]:
        delivery, at_once = job
        if at_once:
            return sender.send_together(delivery, [dispatcher.webhook_url] * 2)
        return [sender.send(delivery)]

    with ThreadPoolExecutor(max_workers=16) as pool:
        sent = [one for copies in pool.map(deliver, jobs) for one in copies]
    wait_until(settled(dispatcher, CREATED, len(ISSUES)), 60,
               "every created issue's trigger is closed and every execution ended")

    assert answers_of(sent) == {d.identifier: ONCE for d in deliveries}
    assert [one.attempts for one in sent if len(one.attempts) != 1] == []  # none retried
    accepted = {trigger_id for one in sent if one.status == 202
                for trigger_id in one.answer["trigger_ids"]}
    assert_one_trigger_each(triggers_of(dispatcher, CREATED), ISSUES, accepted)
    executions = all_executions(dispatcher)
    assert len(executions) == len(ISSUES)
    assert [e for e in executions if e["status"] != "succeeded"] == []
    assert_assigned_once(jira, ISSUES)
    assert (webhook_count(dispatcher, "accepted"), webhook_count(dispatcher, "duplicate")) \
        == (len(ISSUES), len(ISSUES))
    assert dispatcher.log_problems() == []


def test_a_delivery_signed_wrongly_or_not_at_all_is_refused_and_stores_nothing(dispatcher,
                                                                              sender):
    delivery = created(ISSUES[0])

    unsigned = sender.send(delivery, signed=False)
    wrong = sender.send(delivery, secret="a-secret-this-service-was-never-given")
    stored = triggers_of(dispatcher)
    # Nothing of the refusals was kept, not even the identifier: signed, the same delivery is
    # new to the service.
    signed = sender.send(delivery)

    for refused in (unsigned, wrong):
        assert [a.status for a in refused.attempts] == [401], refused.attempts  # not retried
        assert "X-Hub-Signature" in refused.final.headers.get("WWW-Authenticate", "")
        assert "signature" in refused.answer["description"].lower(), refused.answer
    assert stored == []
    assert signed.status == 202 and signed.answer["status"] == "accepted", signed.answer
    assert webhook_count(dispatcher, "unauthorized") == 2


@pytest.mark.parametrize("payload", [
    pytest.param(b"this is not JSON", id="not-json"),
    pytest.param(b'{"hello": "world"}', id="no-webhookEvent"),
    pytest.param(b'{"webhookEvent": "jira:issue_created"}', id="no-issue"),
])
def test_a_signed_body_that_is_no_delivery_is_a_400_and_not_retried(dispatcher, sender,
                                                                     payload):
    refused = sender.send(Delivery("not-a-delivery-1", payload))

    assert [a.status for a in refused.attempts] == [400], refused.attempts
    assert refused.answer["code"] and refused.answer["description"], refused.answer
    assert triggers_of(dispatcher) == []


@pytest.mark.timeout(60)
def test_an_assignee_change_labels_the_issue_before_the_workflow_and_a_late_one_does_nothing(
        db_url, jira, started, lark, oncall, core):
    dispatcher = started.start(db_url, jira, **SETTINGS,
                               **notification_settings(lark, oncall, core)).wait_serving()
    dispatcher.activate(example_policy("priority-assignee"))
    sender = JiraWebhookSender(dispatcher.webhook_url, SECRET)
    cards = lark.hold(LarkRoute.SEND)
    # Dave was assigned first, then Carol; Jira delivers Carol's change first.
    to_dave = assigned(NOTIFY_KEY, "TCOC", FORMER_ACCOUNT, before=None, timestamp=1796000000000)
    to_carol = assigned(NOTIFY_KEY, "TCOC", ACCOUNT, before=FORMER_ACCOUNT,
                        timestamp=1796000060000)

    current = sender.send(to_carol)
    assert current.status == 202, current.answer
    assert cards.wait_until_held(1, timeout=15), dispatcher.log()
    # The card is on its way to Lark: the label was already written.
    writes_before_card = [c for c in jira.calls(key=NOTIFY_KEY) if c.method != "GET"]
    cards.release()
    done = dispatcher.wait_status(NOTIFY_KEY, "succeeded")
    writes = [c for c in jira.calls(key=NOTIFY_KEY) if c.method != "GET"]

    late = sender.send(to_dave)
    # Taken: the service cannot know a delivery is late when it comes.
    assert late.status == 202, late.answer
    [late_id] = late.answer["trigger_ids"]
    stale = wait_until(trigger_ended(dispatcher, late_id), 15, "the late delivery's trigger ends")

    [current_id] = current.answer["trigger_ids"]
    trigger = dispatcher.call("GET", f"/dispatch/triggers/{current_id}")
    assert (trigger["source"], trigger["status"]) == (NOTIFY_SOURCE, "completed"), trigger
    assert trigger["output"]["execution_ids"] == [done["id"]]
    label_add = {"update": {"labels": [{"add": NOTIFY_LABEL}]}}
    assert [(c.route, c.body, c.applied) for c in writes_before_card] == [
        (Route.EDIT_ISSUE, label_add, True)], writes_before_card
    assert writes[0].body == label_add
    assert [c.body for c in writes].count(label_add) == 1
    [card] = lark.messages()
    assert card.receive_id == OPEN_ID

    # The late delivery's trigger finds someone else assigned: no label, no workflow,
    # nothing at any peer.
    assert stale["status"] == "completed" and stale["output"]["execution_ids"] == [], stale
    assert "assignee changed since the delivery" in stale["failure_reason"], stale
    assert [c for c in jira.calls(key=NOTIFY_KEY) if c.method != "GET"] == writes
    assert len(lark.calls(LarkRoute.SEND)) == 1 and len(lark.messages()) == 1
    assert dispatcher.executions(issue_key=NOTIFY_KEY)[1] == 1
    assert oncall.pages() == []  # P3: no page
    assert dispatcher.log_problems() == []


@pytest.mark.postgres
@pytest.mark.timeout(90)
def test_two_replicas_given_each_delivery_at_the_same_moment_take_it_once(postgres_url, jira,
                                                                          started):
    settings = {**SHARED_SETTINGS, **SETTINGS}
    first = started.start(postgres_url, jira, **settings).wait_serving()
    second = started.start(postgres_url, jira, **settings).wait_serving()
    configure_assignment(first)
    keys = ISSUES[:50]
    deliveries = [created(key) for key in keys]
    sender = JiraWebhookSender(first.webhook_url, SECRET)

    with ThreadPoolExecutor(max_workers=4) as pool:
        sent = [one for copies in pool.map(
            lambda d: sender.send_together(d, [first.webhook_url, second.webhook_url]),
            deliveries) for one in copies]
    wait_until(settled(second, CREATED, len(keys)), 60,
               "every trigger is closed and every execution ended")

    assert answers_of(sent) == {d.identifier: ONCE for d in deliveries}
    accepted = {trigger_id for one in sent if one.status == 202
                for trigger_id in one.answer["trigger_ids"]}
    assert_one_trigger_each(triggers_of(first, CREATED), keys, accepted)
    executions = all_executions(first)
    assert sorted(e["issue_key"] for e in executions) == sorted(keys)
    assert [e for e in executions if e["status"] != "succeeded"] == []
    assert_assigned_once(jira, keys)
    assert first.log_problems() == [] and second.log_problems() == []


@pytest.mark.timeout(90)
def test_a_database_that_does_not_answer_is_a_503_with_retry_after_and_the_retry_is_taken(
        outage: Outage, jira, started):  # noqa: F811 - the fixture imported above
    dispatcher = started.start(outage.database_url, jira, **OUTAGE_SETTINGS,
                               **SETTINGS).wait_serving()
    configure_assignment(dispatcher)
    key = ISSUES[0]
    back = threading.Event()

    def end_the_outage_after_a_refusal(sent: Sent, attempt: Attempt) -> None:
        if attempt.status == 503 and not back.is_set():
            outage.end()  # the database is back before Jira's retry
            back.set()

    sender = JiraWebhookSender(dispatcher.webhook_url, SECRET,
                               on_attempt=end_the_outage_after_a_refusal)
    outage.begin()
    delivered = sender.send(created(key))
    wait_until(settled(dispatcher, CREATED, 1), 30, "the retried delivery's trigger ends")

    assert len(delivered.attempts) >= 2, delivered.attempts
    refused, retry, taken = delivered.attempts[0], delivered.attempts[1], delivered.final
    assert [a.status for a in delivered.attempts[:-1]] == [503] * (len(delivered.attempts) - 1)
    retry_after = refused.headers.get("Retry-After", "")
    assert retry_after.isdigit() and refused.answer["code"] == "unavailable", refused
    assert retry.sent_at >= refused.answered_at + int(retry_after)  # as the service asked
    # Accepted, not a duplicate: the refused attempts stored nothing, not even the identifier.
    assert taken.status == 202 and taken.answer["status"] == "accepted", delivered.attempts
    [trigger] = triggers_of(dispatcher)
    assert trigger["id"] in taken.answer["trigger_ids"] and trigger["status"] == "completed"
    assert_one_put(jira, key)
    assert webhook_count(dispatcher, "unavailable") == len(delivered.attempts) - 1
    assert webhook_count(dispatcher, "accepted") == 1
    assert dispatcher.log_problems() == []


# --- the calls of a dispatch --------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def routes_of(jira: FakeJira, key: str) -> list[tuple[Route | None, str]]:
    return [(call.route, call.path.rsplit("/", 1)[1]) for call in jira.calls(key=key)]


def test_a_fresh_delivery_is_the_snapshot_and_its_dispatch_makes_one_call_to_jira(
        dispatcher, jira, sender):
    fresh, stale = ISSUES[0], ISSUES[1]

    for key, timestamp in ((fresh, now_ms()), (stale, now_ms() - 60_000)):
        sent = sender.send(Delivery.of(jira_delivery(
            "jira:issue_created", key=key, project=PROJECT, priority="P3",
            timestamp=timestamp)))
        assert sent.status == 202, sent.answer
    wait_until(settled(dispatcher, CREATED, 2), 30, "both dispatches ended")

    assert routes_of(jira, fresh) == [(Route.ASSIGN, "assignee")]  # no read: the delivery's
    assert routes_of(jira, stale) == [(Route.GET_ISSUE, stale), (Route.ASSIGN, "assignee")]
    assert jira.assignee(fresh) in ENGINEERS.values()
    assert jira.assignee(stale) in ENGINEERS.values()


@pytest.mark.postgres
@pytest.mark.timeout(90)
def test_a_fresh_delivery_makes_one_call_to_jira_on_shared_replicas_too(postgres_url, jira,
                                                                      started):
    settings = {**SHARED_SETTINGS, **SETTINGS}
    first = started.start(postgres_url, jira, **settings).wait_serving()
    second = started.start(postgres_url, jira, **settings).wait_serving()
    configure_assignment(first)
    keys = ISSUES[:6]

    for number, key in enumerate(keys):  # one at a time, to either replica
        replica = (first, second)[number % 2]
        sent = JiraWebhookSender(replica.webhook_url, SECRET).send(Delivery.of(jira_delivery(
            "jira:issue_created", key=key, project=PROJECT, priority="P3",
            timestamp=now_ms())))
        assert sent.status == 202, sent.answer
        wait_until(settled(first, CREATED, number + 1), 30, f"the dispatch of {key} ended")

    # neither the trigger nor its execution read the issue: the delivery was its snapshot
    assert {key: routes_of(jira, key) for key in keys} == {
        key: [(Route.ASSIGN, "assignee")] for key in keys}


def test_an_automation_dispatch_reads_once_and_writes_assignee_and_label_in_one_edit(
        dispatcher, jira):
    key = f"{PROJECT}-901"
    jira.add_issue(key, labels=["auto-dispatch", "keep"])

    dispatcher.post_trigger(key)
    dispatcher.wait_status(key, "succeeded")

    assert routes_of(jira, key) == [(Route.GET_ISSUE, key), (Route.ASSIGN, key)]
    [edit] = jira.calls(Route.ASSIGN, key)
    assert edit.body["update"] == {"labels": [{"remove": "auto-dispatch"}]}
    assert jira.assignee(key) in ENGINEERS.values() and jira.labels(key) == ["keep"]


def test_an_edit_screen_without_the_assignee_falls_back_and_is_remembered(dispatcher, jira):
    first, second = f"{PROJECT}-902", f"{PROJECT}-903"
    for key in (first, second):
        jira.add_issue(key, labels=["auto-dispatch"])
    jira.leave_off_edit_screen(PROJECT, "assignee")

    for key in (first, second):
        dispatcher.post_trigger(key)
        dispatcher.wait_status(key, "succeeded")

    # the refused edit wrote nothing; the assignee's endpoint, then the label's edit
    assert [(c.status, c.applied) for c in jira.calls(Route.ASSIGN, first)] == [
        (400, False), (204, True)]
    assert routes_of(jira, first) == [(Route.GET_ISSUE, first), (Route.ASSIGN, first),
                                      (Route.ASSIGN, "assignee"), (Route.EDIT_ISSUE, first)]
    # the project's refusal remembered: the second ticket goes straight to the fallback
    assert routes_of(jira, second) == [(Route.GET_ISSUE, second), (Route.ASSIGN, "assignee"),
                                       (Route.EDIT_ISSUE, second)]
    for key in (first, second):
        assert [c.applied for c in jira.calls(key=key) if c.applied] == [True, True]
        assert jira.assignee(key) in ENGINEERS.values() and jira.labels(key) == []
