from __future__ import annotations

import pytest

from tests.harness import Harness


@pytest.fixture
def make_harness(store):
    """Build a started harness on the (SQLite or PostgreSQL) test store; stopped at teardown."""
    started: list[Harness] = []

    def make(*actions, **options) -> Harness:
        harness = Harness(store, *actions, **options).start()
        started.append(harness)
        return harness

    yield make
    for harness in started:
        harness.stop()

