"""The console's engineers pages."""

from __future__ import annotations


def routes(console, ID: str) -> list:
    return []
