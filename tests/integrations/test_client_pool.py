"""Client actor pools: used like the client, round-robin, counted, stopped cleanly (SPEC §3)."""

from __future__ import annotations

import itertools
import threading

import pytest
import responses

from ticket_dispatcher.actors.clients import ClientPool, build_client_pools
from ticket_dispatcher.clock import ManualClock
from ticket_dispatcher.config import Config, CoreConfig, JiraConfig, LarkConfig, OncallConfig
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.http import IntegrationTimeout
from ticket_dispatcher.integrations.jira import JiraClient


class EchoClient:
    """A stand-in client: knows which instance it is and which thread runs it."""

    def __init__(self, number: int):
        self.number = number
        self.closed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def whoami(self) -> int:
        return self.number

    def thread_name(self) -> str:
        return threading.current_thread().name

    def add(self, a: int, b: int = 0) -> int:
        return a + b

    def fail(self, message: str) -> None:
        raise IntegrationError(message, status=502, service="echo")

    def crash(self) -> None:
        raise RuntimeError("bug")

    def block(self) -> str:
        self.entered.set()
        self.release.wait(5)
        return "released"

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def started():
    """Start pools through this fixture: each is stopped at teardown, whatever the test did."""
    pools: list[ClientPool] = []

    def start(pool: ClientPool) -> ClientPool:
        pools.append(pool)
        return pool.start()

    yield start
    for pool in pools:
        pool.stop()


def echo_pool(size: int = 3, **options) -> tuple[ClientPool, list[EchoClient]]:
    made: list[EchoClient] = []
    numbers = itertools.count()

    def factory() -> EchoClient:
        made.append(EchoClient(next(numbers)))
        return made[-1]

    return ClientPool("echo", factory, size, **options), made


def test_pool_is_used_like_the_client(started):
    pool, _ = echo_pool()
    started(pool)

    assert pool.add(2, b=3) == 5


def test_calls_run_in_actor_threads(started):
    pool, _ = echo_pool(size=1)
    started(pool)

    assert pool.thread_name() != threading.current_thread().name


def test_calls_go_round_robin_across_the_actors(started):
    pool, made = echo_pool(size=3)
    started(pool)

    assert [pool.whoami() for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    assert len(made) == 3


def test_client_exception_reaches_the_caller_and_the_actor_lives_on(started):
    pool, _ = echo_pool(size=1)
    started(pool)

    with pytest.raises(IntegrationError) as caught:
        pool.fail("jira said no")

    assert (caught.value.message, caught.value.status) == ("jira said no", 502)
    assert pool.add(1) == 1


def test_calls_and_errors_are_counted_by_exception(started):
    pool, _ = echo_pool(size=2)
    started(pool)

    pool.add(1)
    for call in (lambda: pool.fail("x"), lambda: pool.fail("y"), pool.crash):
        with pytest.raises((IntegrationError, RuntimeError)):
            call()

    stats = pool.stats()
    assert stats["actors"] == 2
    assert stats["calls"] == 4
    assert stats["errors"] == {"IntegrationError": 2, "RuntimeError": 1}
    assert stats["in_flight"] == 0
    assert stats["last_latency_ms"] >= 0


def test_in_flight_counts_calls_still_waiting(started):
    pool, made = echo_pool(size=1)
    started(pool)
    answers = []
    caller = threading.Thread(target=lambda: answers.append(pool.block()))
    caller.start()
    assert made[0].entered.wait(5)

    assert pool.stats()["in_flight"] == 1

    made[0].release.set()
    caller.join(5)
    assert answers == ["released"]
    assert pool.stats()["in_flight"] == 0


def test_an_actor_that_does_not_answer_in_time_is_a_timeout(started):
    pool, made = echo_pool(size=1, ask_timeout=0.05)
    started(pool)
    try:
        with pytest.raises(IntegrationTimeout) as caught:
            pool.block()
    finally:
        made[0].release.set()

    assert caught.value.service == "echo"
    assert pool.stats()["errors"] == {"IntegrationTimeout": 1}


def test_unknown_and_private_names_are_attribute_errors(started):
    pool, _ = echo_pool(size=1)
    started(pool)

    assert hasattr(pool, "whoami")
    assert not hasattr(pool, "no_such_method")
    assert not hasattr(pool, "_secret")


def test_stop_stops_every_actor_and_closes_its_client(started):
    pool, made = echo_pool(size=2)
    started(pool)
    refs = list(pool._actors)

    pool.stop()

    assert not any(ref.is_alive() for ref in refs)
    assert all(client.closed for client in made)
    assert pool.stats()["actors"] == 0
    with pytest.raises(IntegrationError, match="not started"):
        pool.add(1)


def test_a_stopped_actor_is_an_integration_error(started):
    pool, _ = echo_pool(size=1)
    started(pool)
    pool._actors[0].stop()

    with pytest.raises(IntegrationError, match="stopped"):
        pool.add(1)

    assert pool.stats()["errors"] == {"ActorDeadError": 1}


def test_pool_needs_at_least_one_actor():
    with pytest.raises(ValueError):
        ClientPool("echo", lambda: EchoClient(0), 0)


# --- build_client_pools ---------------------------------------------------------------------


def config(**sections) -> Config:
    values = dict(jira=JiraConfig(), lark=LarkConfig(base_url=""), oncall=OncallConfig(),
                  core=CoreConfig(), client_pool_size=2)
    values.update(sections)
    return Config(**values)


def test_services_without_base_url_get_no_pool():
    pools = build_client_pools(config(jira=JiraConfig(base_url="https://j.example"),
                                      core=CoreConfig(base_url="https://c.example")),
                               ManualClock(), start=False)

    assert sorted(pools) == ["core", "jira"]
    assert all(pool.size == 2 for pool in pools.values())


def test_lark_without_an_app_id_gets_no_pool_despite_its_default_url():
    pools = build_client_pools(config(lark=LarkConfig()), ManualClock(), start=False)

    assert LarkConfig().base_url and "lark" not in pools


def test_every_configured_service_gets_a_started_pool():
    pools = build_client_pools(config(
        jira=JiraConfig(base_url="https://j.example"), lark=LarkConfig(app_id="cli_app"),
        oncall=OncallConfig(base_url="https://o.example"),
        core=CoreConfig(base_url="https://c.example")), ManualClock())
    try:
        assert sorted(pools) == ["core", "jira", "lark", "oncall"]
        assert all(pool.stats()["actors"] == 2 for pool in pools.values())
    finally:
        for pool in pools.values():
            pool.stop()


def test_built_jira_pool_loads_an_issue_through_its_actor():
    jira_config = JiraConfig(base_url="https://j.example", email="bot@example.com",
                             api_token="tok")
    pools = build_client_pools(config(jira=jira_config), ManualClock())
    try:
        with responses.RequestsMock() as mocked:
            mocked.get("https://j.example/rest/api/2/issue/TCID-1", json={
                "key": "TCID-1", "fields": {"project": {"key": "TCID"}, "summary": "s"}})

            issue = pools["jira"].load_issue("TCID-1")

        assert (issue.key, issue.project_key) == ("TCID-1", "TCID")
        assert pools["jira"].stats()["calls"] == 1
    finally:
        for pool in pools.values():
            pool.stop()


def test_pool_methods_mirror_the_client(started):
    pool = started(ClientPool("jira", lambda: JiraClient(JiraConfig(base_url="https://j")), 1))

    for name in ("load_issue", "assign", "set_l2_assignee", "edit_labels", "edit_fields",
                 "find_user_by_email", "add_internal_comment"):
        assert callable(getattr(pool, name))
