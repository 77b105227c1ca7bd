"""A SQLite database is served by one process: a second claim on the same file is refused with
a clear message, and the claim ends with its holder."""

from __future__ import annotations

import pytest

from ticket_dispatcher.errors import ConfigError
from ticket_dispatcher.store import Store


def test_a_second_claim_on_one_sqlite_file_is_refused_until_the_first_ends(tmp_path):
    url = f"sqlite:///{tmp_path / 'td.db'}"
    first, second = Store.for_url(url), Store.for_url(url)
    first.claim_for_serving()
    try:
        with pytest.raises(ConfigError, match="already serves this SQLite database"):
            second.claim_for_serving()
    finally:
        first.close()

    second.claim_for_serving()  # the first holder is gone
    second.close()


def test_postgresql_needs_no_claim(postgres_url):
    store = Store.for_url(postgres_url)
    other = Store.for_url(postgres_url)
    store.claim_for_serving()
    other.claim_for_serving()
    store.close()
    other.close()
