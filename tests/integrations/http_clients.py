"""A client of a made-up service, for the tests of the API clients' HTTP layers."""

from __future__ import annotations

from ticket_dispatcher.integrations.http import BearerAuth, HttpClient

BASE = "https://svc.example.com"
TOKEN = "s3cr3t-token-value"


class Waits(list):
    """A fake ``sleep`` that records each wait instead of sleeping; given a manual clock, it
    also moves the clock on by each wait, as sleeping would."""

    def __init__(self, clock=None) -> None:
        super().__init__()
        self._clock = clock

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        if self._clock is not None:
            self._clock.advance(seconds)


def client(**overrides) -> HttpClient:
    options = dict(auth=BearerAuth(TOKEN), connect_timeout=1, read_timeout=2,
                   sleep=Waits(), secrets=(TOKEN,))
    options.update(overrides)
    return HttpClient("svc", BASE, **options)
