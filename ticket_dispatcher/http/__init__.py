"""The Falcon WSGI API (SPEC §10)."""

API_BASE = "/api/v1/ticketmanager"
