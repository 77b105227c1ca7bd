"""The overview: the database, the replicas, and the numbers that lead to the lists behind them;
it still answers, saying the database is down, while the database cannot be reached."""

from __future__ import annotations

import re

import pytest
from falcon import testing

from tests.console.conftest import Console, build_app, failed_trigger, main_text
from tests.factories import OPERATOR_AUTHOR
from tests.fakes import RecordingAction
from tests.harness import Harness, rule
from tests.http.test_admin_outage import DATABASE
from tests.relay import Relay, relayed_url, target_of
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store import Store


def _card(html: str, title: str) -> str:
    """The text of the overview card headed ``title``."""
    card = html.split(f"<h2>{title}</h2>", 1)[1].split('<div class="card">', 1)[0]
    return " ".join(re.sub(r"<[^>]+>", " ", card.split("</section>", 1)[0]).split())


class World:
    """The console over a real runtime with one execution parked for 60 s."""

    def __init__(self, store: Store):
        self.harness = Harness(store, RecordingAction("test_wait", park_for=60)).start()
        self.harness.policy(rule("test_wait"))
        self.execution_id = self.harness.post_trigger().execution_ids[0]
        config = load_config(None, environ={})
        services = Services(store=store, config=config, clock=self.harness.clock,
                            runtime=self.harness.runtime)
        self.console = Console(testing.TestClient(build_app(services, auth_enabled=False)),
                               services)

    def close(self) -> None:
        self.harness.wait_idle()
        self.harness.stop()


@pytest.fixture
def world(store):
    world = World(store)
    yield world
    world.close()


def test_each_number_says_what_waits_and_links_to_its_list(world):
    harness = world.harness
    failed_trigger(harness.store, harness.clock, "NOPE-1")
    failed_trigger(harness.store, harness.clock, "NOPE-2")
    harness.advance(5)  # a heartbeat: the replica's row

    page = world.console.get("/console/").text

    assert _card(page, "Database") == "up"
    assert _card(page, "Parked waits").startswith("1 next wake")  # parked for 60 s
    assert '<a href="/console/parked">1</a>' in page
    assert _card(page, "Failed in the last hour") == "0 executions · 2 triggers"
    link = re.search(r'href="(/console/triggers\?status=failed&amp;since=1h)"', page)
    listed = world.console.get(link[1].replace("&amp;", "&")).text
    assert "NOPE-1" in listed and "NOPE-2" in listed and "TCID-1" not in listed
    replica = main_text(page).split("Version", 1)[1]
    assert "this one" in replica and "alive" in replica


def test_triggers_failed_before_the_hour_are_not_counted(world):
    harness = world.harness
    failed_trigger(harness.store, harness.clock, "NOPE-1")
    harness.clock.advance(3601)

    assert _card(world.console.get("/console/").text,
                 "Failed in the last hour") == "0 executions · 0 triggers"


def test_failed_executions_are_counted_beside_failed_triggers(world):
    harness = world.harness
    # it fails
    harness.runtime.cancel(world.execution_id, "cancelled by a test", by=OPERATOR_AUTHOR)
    harness.wait_idle()

    page = world.console.get("/console/").text
    harness.clock.advance(3601)
    an_hour_later = world.console.get("/console/").text

    assert _card(page, "Failed in the last hour") == "1 execution · 0 triggers"
    assert 'class="big bad"><a href="/console/executions?status=failed">1</a>' in page
    assert _card(an_hour_later, "Failed in the last hour") == "0 executions · 0 triggers"


@pytest.mark.postgres
def test_the_overview_says_the_database_is_down_while_it_is_cut_away(postgres_url):
    with Relay(*target_of(postgres_url)) as relay:
        store = Store.for_url(relayed_url(postgres_url, relay), database=DATABASE)
        store.migrate()
        world = World(store)
        try:
            relay.cut()
            during = world.console.get("/console/")
            relay.restore()
            after = world.console.get("/console/")
        finally:
            relay.restore()
            world.close()
            store.close()

    assert during.status_code == 200
    assert _card(during.text, "Database").startswith("down")
    assert _card(during.text, "Parked waits").startswith("1")  # from memory
    assert "cannot be read while the database is down" in during.text
    assert _card(after.text, "Database") == "up"
