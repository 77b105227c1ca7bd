from __future__ import annotations

import pytest

from tests.integrations.mocking import mock_http


@pytest.fixture
def mocked():
    """Every HTTP call of the test goes to ``responses``; an unmatched or unused one fails."""
    with mock_http() as mock:
        yield mock
