"""The console's policies pages."""

from __future__ import annotations


def routes(console, ID: str) -> list:
    return []
