"""The chaos soak, short, in the default suite, with a fixed seed whose schedule is known: a
failure in CI is a regression to replay, never the luck of a draw. New interleavings are drawn
on purpose, by the documented command with a fresh seed (``python bench/chaos.py --seed N``,
bench/README.md, "Method notes"). Each run is the whole soak of
bench/chaos.py (tests/chaos/soak.py): real replicas (three in shared mode on PostgreSQL when
``TICKET_DISPATCHER_TEST_DATABASE_URL`` is set, else one on SQLite), the fakes in their own
process, the load and the nemesis, then the checker over the history. A failure names its
seed and the command that replays it, with the checker's report."""

from __future__ import annotations

import os

import pytest

from tests.chaos.checker import check
from tests.chaos.load import LoadConfig
from tests.chaos.soak import SQLITE_RATE, run_soak

DURATION_S = 45.0
FIXED_SEED = 12


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", [FIXED_SEED], ids=[f"fixed-seed-{FIXED_SEED}"])
@pytest.mark.slow
def test_a_short_soak_keeps_every_promise(seed, tmp_path):
    postgres_url = os.environ.get("TICKET_DISPATCHER_TEST_DATABASE_URL")
    engine = "postgres" if postgres_url else "sqlite"
    print(f"chaos soak: seed {seed}, {engine}, {DURATION_S:g} s")
    options = ({"postgres_url": postgres_url} if postgres_url
               else {"load": LoadConfig(rate=SQLITE_RATE)})

    run_dir = run_soak(seed, DURATION_S, engine, replicas=3 if postgres_url else 1,
                       out=tmp_path / "run", **options)
    report = check(run_dir)

    assert report.violations == [], (
        f"seed {seed} broke a promise; replay it with `python bench/chaos.py --seed {seed} "
        f"--duration {DURATION_S:g}s --engine {engine}`\n{report.text()}")
