"""``responses`` in front of the integrations' transport.

The clients send through their own adapter (``integrations/transport.py``'s ``_Adapter``), whose
``send`` hands the request to urllib3's pool rather than through ``HTTPAdapter.send``; the mock
takes the place of that ``send``, the last step before a request leaves, so a test sees every
request exactly as a client prepared it."""

from __future__ import annotations

from typing import Any

import responses

TARGET = "ticket_dispatcher.integrations.transport._Adapter.send"


def mock_http(**options: Any) -> responses.RequestsMock:
    return responses.RequestsMock(target=TARGET, **options)
