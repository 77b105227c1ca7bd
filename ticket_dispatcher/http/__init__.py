"""The Falcon WSGI API, documented by its OpenAPI document (``openapi.py``)."""

API_BASE = "/api/v1/ticketmanager"
