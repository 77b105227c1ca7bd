"""A burst of trigger requests at a real ``ticket-dispatcher serve`` process, on each engine:
every request is answered 202 and every trigger is processed once the burst is over, whether
the trigger actors wait for the intake (``intake_priority``, the default) or not (``0``); the
time they waited is the metric ``trigger_intake_priority_seconds_total``
(docs/design.md, "Answer first, process next").

Whether an actor finds an insert in flight at its next trigger depends on how the requests
interleave, so the burst test asserts the wait only where it is certain: never with ``0``.
The wait itself is made certain on PostgreSQL by a slow database: a trigger on the table
makes each insert take 20 ms, so while 16 senders post, some insert is always in flight when
a trigger actor comes to its next trigger. (tests/actors/test_intake_priority.py holds an
insert open by hand, on both engines.)

The fake Jira (tests/peer.py) knows the issue and no policy matches it, so each trigger ends
``completed`` after one issue read.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.peer import FakeJira, Route
from tests.process import Dispatcher, wait_until
from ticket_dispatcher.metrics import PREFIX

BURST = 240  # trigger requests
POSTERS = 16  # sent at once, as Jira Automation rules firing together do
KEY = "BURST-1"


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_issue(KEY)
        yield fake


def samples(dispatcher: Dispatcher) -> dict[tuple[str, tuple], float]:
    text = requests.get(f"{dispatcher.url}/metrics", timeout=10).text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def completed(dispatcher: Dispatcher) -> float:
    return samples(dispatcher).get(
        (PREFIX + "trigger_results_total", (("outcome", "completed"),)), 0)


def slow_inserts(database_url: str, seconds: float) -> None:
    """Each trigger row's INSERT takes ``seconds`` more (a trigger on the table)."""
    import psycopg  # only a PostgreSQL run needs the driver

    connection = psycopg.connect(database_url)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(f"""
                CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM pg_sleep({seconds}); RETURN NEW; END $$;
                CREATE TRIGGER slow_insert BEFORE INSERT ON dispatch_triggers
                    FOR EACH ROW EXECUTE FUNCTION slow_insert();""")
    finally:
        connection.close()


def burst(dispatcher: Dispatcher) -> list[int]:
    """``BURST`` trigger requests from ``POSTERS`` senders at once; their status codes."""
    def post(_: int) -> int:
        return requests.post(f"{dispatcher.url}/api/v1/ticketmanager/dispatch/triggers",
                             json={"source": "jira_automation", "input": {"issue_key": KEY}},
                             timeout=30).status_code

    with ThreadPoolExecutor(POSTERS) as senders:
        return list(senders.map(post, range(BURST)))


def answered_and_processed(dispatcher: Dispatcher, jira: FakeJira, count: int) -> float:
    """Assert that ``count`` trigger requests were accepted and each trigger completed after
    one issue read, with no ERROR logged; the seconds the trigger actors waited."""
    wait_until(lambda: completed(dispatcher) == count, 60, "every trigger is completed")
    metrics = samples(dispatcher)
    assert metrics[(PREFIX + "trigger_intake_total",
                    (("outcome", "accepted"), ("source", "jira_automation")))] == count
    assert len(jira.calls(Route.GET_ISSUE, KEY)) == count
    assert dispatcher.log_problems() == []
    return metrics[(PREFIX + "trigger_intake_priority_seconds_total", ())]


@pytest.mark.parametrize("hold", ["1s", "0s"], ids=["default-hold", "never-waits"])
def test_a_burst_is_answered_and_then_every_trigger_is_processed(db_url, jira, processes,
                                                                   hold):
    dispatcher = processes.start(db_url, jira, INTAKE_PRIORITY=hold).wait_serving()

    assert burst(dispatcher) == [202] * BURST

    held = answered_and_processed(dispatcher, jira, BURST)
    if hold == "0s":
        assert held == 0


@pytest.mark.postgres
def test_trigger_actors_wait_while_slow_inserts_are_in_flight(postgres_url, jira, processes):
    dispatcher = processes.start(postgres_url, jira).wait_serving()  # intake_priority 1s
    slow_inserts(postgres_url, seconds=0.02)

    assert burst(dispatcher) == [202] * BURST

    held = answered_and_processed(dispatcher, jira, BURST)
    assert held > 0
