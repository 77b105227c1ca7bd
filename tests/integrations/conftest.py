from __future__ import annotations

import pytest
import responses


@pytest.fixture
def mocked():
    """Every HTTP call of the test goes to ``responses``; an unmatched or unused one fails."""
    with responses.RequestsMock() as mock:
        yield mock
