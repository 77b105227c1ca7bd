"""Connection limits through the real server: idle and half-sent
connections neither starve ``/healthz`` nor stay open forever."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import ExitStack
from datetime import timedelta

import pytest
import requests

from ticket_dispatcher.config import HttpConfig, load_config
from ticket_dispatcher.service import Service, server_limits

HALF_SENT = b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"partial\":"


@pytest.fixture
def serve(tmp_path):
    """Start a real server (no sandbox, no auth) with extra settings; stopped afterwards."""
    started: list[tuple[Service, threading.Thread]] = []

    def start(**environ: str) -> str:
        config = load_config(None, environ={
            "TICKET_DISPATCHER_DATABASE_URL": f"sqlite:///{tmp_path / 'td.db'}", **environ})
        service = Service(config, port=0, insecure_no_auth=True)
        thread = threading.Thread(target=service.run, name="waitress", daemon=True)
        thread.start()
        started.append((service, thread))
        return f"http://127.0.0.1:{service.port}"

    yield start
    for service, thread in started:
        service.stop_serving()
        thread.join(timeout=10)
        service.close()


def half_sent(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(HALF_SENT)
    return sock


def test_150_idle_half_sent_connections_do_not_delay_healthz(serve):
    url = serve()
    with ExitStack() as held:
        for _ in range(150):
            held.enter_context(half_sent(url))

        started = time.monotonic()
        answer = requests.get(f"{url}/healthz", timeout=2)
        elapsed = time.monotonic() - started

        assert answer.status_code == 200
        assert elapsed < 1.0, f"/healthz took {elapsed:.2f} s behind 150 idle connections"


def test_the_channel_timeout_closes_an_idle_connection(serve):
    url = serve(TICKET_DISPATCHER_HTTP_CHANNEL_TIMEOUT="1s")
    with half_sent(url) as sock:
        sock.settimeout(3)  # the one wait on real time: the timeout is the property
        started = time.monotonic()
        try:
            closed = sock.recv(1024) == b""
        except ConnectionResetError:
            closed = True
        elapsed = time.monotonic() - started

    assert closed, "the server answered instead of closing the idle connection"
    assert elapsed < 3
    assert requests.get(f"{url}/healthz", timeout=2).status_code == 200


def test_waitress_gets_the_configured_limits():
    limits = server_limits(HttpConfig(connection_limit=500,
                                      channel_timeout=timedelta(milliseconds=1500)))

    assert limits["connection_limit"] == 500
    assert limits["channel_timeout"] == 2  # waitress counts whole seconds; rounded up
    assert limits["cleanup_interval"] <= limits["channel_timeout"]
    assert limits["asyncore_use_poll"] is True  # select() stops at descriptor 1024
    assert limits["backlog"] >= 500
