"""One HTTP request as a client sent it, taken from what ``responses`` recorded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import requests

# The request carried no body at all (distinct from a JSON ``null`` body).
NO_BODY: Any = type("NoBody", (), {"__repr__": lambda self: "NO_BODY"})()


@dataclass(frozen=True)
class SentRequest:
    """``path`` is the raw, percent-encoded path; ``query`` keeps every occurrence in order."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Any = NO_BODY
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_prepared(cls, request: requests.PreparedRequest) -> SentRequest:
        url = urlsplit(request.url or "")
        raw = request.body
        if raw in (None, b"", ""):
            body = NO_BODY
        else:
            body = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        return cls(method=(request.method or "").upper(), path=url.path,
                   query=tuple(parse_qsl(url.query, keep_blank_values=True)), body=body,
                   headers=dict(request.headers))

    @property
    def content_type(self) -> str:
        for name, value in self.headers.items():
            if name.lower() == "content-type":
                return value.split(";")[0].strip().lower()
        return ""

    @property
    def authorization(self) -> str:
        for name, value in self.headers.items():
            if name.lower() == "authorization":
                return value
        return ""

    def __str__(self) -> str:
        return f"{self.method} {self.path}"
