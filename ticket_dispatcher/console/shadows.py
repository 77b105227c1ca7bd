"""The console's shadows pages."""

from __future__ import annotations


def routes(console, ID: str) -> list:
    return []
