"""The console's executions pages."""

from __future__ import annotations


def routes(console, ID: str) -> list:
    return []
