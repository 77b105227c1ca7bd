"""The console served by real ``serve`` processes in shared mode on PostgreSQL: a sign-in on one
replica holds on the other (one ``console.session_secret``), the overview lists every replica,
and a viewer's POST is refused by whichever replica takes it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests

from tests.http.conftest import API_KEYS, KEYS
from tests.peer import FakeJira
from tests.process import Dispatcher, wait_until

pytestmark = pytest.mark.postgres

SETTINGS = {
    "CLUSTER_MODE": "shared",
    "CLUSTER_DRAIN": "1s",
    "LEASES_HEARTBEAT": "1s",
    "HTTP_THREADS": "4",
    "TRIGGER_ACTORS": "2",
    "EXECUTION_SLOTS": "4",
    "AUTH_API_KEYS": API_KEYS,
    "CONSOLE_SESSION_SECRET": "one-secret-every-replica-shares-0123456789",
    "CONSOLE_SECURE_COOKIE": "false",  # plain HTTP in this test
}
ALIVE = 'data-label="Alive"><span class="status status-alive">alive</span>'
_TOKEN = re.compile(r'name="csrf-token" content="([^"]*)"')


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        yield fake


def sign_in(replica: Dispatcher, role: str) -> requests.Session:
    browser = requests.Session()
    form = browser.get(replica.url + "/console/sign-in", timeout=10)
    token = _TOKEN.search(form.text)[1]
    answer = browser.post(replica.url + "/console/sign-in", timeout=10, allow_redirects=False,
                          data={"api_key": KEYS[role], "next": "/console/",
                                "csrf_token": token})
    assert answer.status_code == 303, answer.text
    return browser


def test_two_replicas_share_sessions_and_both_show_in_the_overview(processes, postgres_url,
                                                                    jira):
    first = processes.start(postgres_url, jira, **SETTINGS).wait_serving()
    second = processes.start(postgres_url, jira, **SETTINGS).wait_serving()

    browser = sign_in(first, "viewer")

    def both_alive() -> requests.Response | None:
        page = browser.get(second.url + "/console/", timeout=10)
        return page if page.text.count(ALIVE) == 2 else None

    overview = wait_until(both_alive, 15, "the second replica's overview lists both alive")

    assert overview.status_code == 200 and "(shared mode)" in overview.text
    assert overview.text.count('<span class="tag">this one</span>') == 1
    token = _TOKEN.search(overview.text)[1]
    forged = browser.post(second.url + "/console/triggers/1/replay", timeout=10,
                          data={"csrf_token": token, "confirmed": "yes"})
    assert forged.status_code == 403
    assert "this needs the operator role" in forged.text
    assert browser.get(first.url + "/console/triggers", timeout=10).status_code == 200
    assert first.log_problems() == [] and second.log_problems() == []


LOST = '<span class="status status-lost">lost</span>'


def replica_rows(page: requests.Response) -> int:
    return page.text.count('<td data-label="Replica">')


@pytest.mark.parametrize("mode", ["single", "shared"])
def test_a_clean_restart_leaves_no_lost_replica_but_a_killed_one_is_lost(processes,
                                                                        postgres_url, jira,
                                                                        mode):
    settings = {**SETTINGS, "CLUSTER_MODE": mode, "LEASES_DURATION": "3s"}
    first = processes.start(postgres_url, jira, **settings).wait_serving()
    browser = sign_in(first, "viewer")
    wait_until(lambda: "not written yet" not in browser.get(first.url + "/console/",
                                                            timeout=10).text,
               15, "the first replica's heartbeat is written")

    first.terminate()
    assert first.wait_exit(20) == 0
    second = processes.start(postgres_url, jira, **settings).wait_serving()
    browser = sign_in(second, "viewer")

    def overview() -> requests.Response:
        return browser.get(second.url + "/console/", timeout=10)

    after = wait_until(lambda: (page := overview()).text.count(ALIVE) == 1 and page, 15,
                       "the second replica's overview lists itself alive")
    assert LOST not in after.text and replica_rows(after) == 1, after.text
    assert first.log_problems() == []
    if mode == "single":
        return
    third = processes.start(postgres_url, jira, **settings).wait_serving()
    wait_until(lambda: overview().text.count(ALIVE) == 2, 15, "both replicas are alive")
    third.process.kill()  # no goodbye: its heartbeat just stops
    third.wait_exit(10)
    lost = wait_until(lambda: LOST in (page := overview()).text and page, 15,
                      "the killed replica shows as lost")
    assert lost.text.count(LOST) == 1 and lost.text.count(ALIVE) == 1
    assert second.log_problems() == []
