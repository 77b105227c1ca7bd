"""A calendar feed server for tests: a ``ThreadingHTTPServer`` on 127.0.0.1 that serves, at each
path, what the test last set there — a good feed, an error status, an HTML page, a body too
large, a body dripped a byte at a time — and counts the requests.

Used by tests/calendars/test_refresher.py and tests/test_calendar_feeds_process.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DRIP_EVERY = 0.05  # seconds between two bytes of a dripped body
DRIP_LIMIT = 30.0  # a dripped body ends after this, whoever still reads it


@dataclass(frozen=True)
class Answer:
    """What a path answers. ``declared``: send Content-Length (else the body ends with the
    connection). ``drip``: send the body's bytes one at a time, ``DRIP_EVERY`` apart, for
    ever (up to ``DRIP_LIMIT``)."""

    body: bytes = b""
    status: int = 200
    content_type: str = "text/calendar; charset=utf-8"
    declared: bool = True
    drip: bool = False


class FeedServer:
    def __init__(self) -> None:
        self._answers: dict[str, Answer] = {}
        self._requests: dict[str, int] = {}
        self._in_flight: dict[str, int] = {}
        self._condition = threading.Condition()
        self.closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def serve(self, path: str, answer: Answer) -> None:
        with self._condition:
            self._answers[path] = answer

    def requests(self, path: str) -> int:
        with self._condition:
            return self._requests.get(path, 0)

    def in_flight(self, path: str) -> int:
        with self._condition:
            return self._in_flight.get(path, 0)

    def answer_for(self, path: str) -> Answer:
        with self._condition:
            self._requests[path] = self._requests.get(path, 0) + 1
            self._in_flight[path] = self._in_flight.get(path, 0) + 1
            return self._answers.get(path, Answer(b"not found", 404, "text/plain"))

    def answered(self, path: str) -> None:
        with self._condition:
            self._in_flight[path] -= 1

    def start(self) -> FeedServer:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="feed-server",
                         daemon=True).start()
        return self

    def close(self) -> None:
        self.closing.set()  # ends every drip
        self._server.shutdown()
        self._server.server_close()


def _handler(feeds: FeedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            answer = feeds.answer_for(self.path)
            try:
                self._send(answer)
            except OSError:
                pass  # the client went away (a refused or cut-off download)
            finally:
                feeds.answered(self.path)

        def _send(self, answer: Answer) -> None:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            if answer.declared and not answer.drip:
                self.send_header("Content-Length", str(len(answer.body)))
            else:
                self.close_connection = True
            self.end_headers()
            if not answer.drip:
                self.wfile.write(answer.body)
                return
            started = time.monotonic()
            while time.monotonic() - started < DRIP_LIMIT:
                for byte in answer.body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if feeds.closing.wait(DRIP_EVERY):
                        return

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # quiet: the test's output is the test's

    return Handler


@contextmanager
def feed_server() -> Iterator[FeedServer]:
    server = FeedServer().start()
    try:
        yield server
    finally:
        server.close()


def ics(*events: str, header: str = "") -> bytes:
    """A calendar of ``events`` (VEVENT bodies), with CRLF line ends as servers send it."""
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Tests//Feeds//EN", *header.split()]
    for event in events:
        lines += ["BEGIN:VEVENT", *event.strip().splitlines(), "END:VEVENT"]
    lines.append("END:VCALENDAR")
    return ("\r\n".join(line.strip() for line in lines if line.strip()) + "\r\n").encode()


def all_day(uid: str, first: date, end: date, summary: str, *people: str) -> str:
    """An all-day event from ``first`` to ``end`` (exclusive) whose attendees are ``people``."""
    attendees = "\n".join(f"ATTENDEE;CN={email}:mailto:{email}" for email in people)
    return (f"UID:{uid}\nDTSTART;VALUE=DATE:{first:%Y%m%d}\nDTEND;VALUE=DATE:{end:%Y%m%d}\n"
            f"SUMMARY:{summary}\n{attendees}")


def many_events(count: int) -> bytes:
    """A feed of ``count`` one-hour events, as small as an event can be."""
    body = b"".join(
        b"BEGIN:VEVENT\r\nUID:%d\r\nDTSTART:20261201T090000Z\r\nDTEND:20261201T100000Z\r\n"
        b"SUMMARY:x@example.com\r\nEND:VEVENT\r\n" % number for number in range(count))
    return (b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Tests//Feeds//EN\r\n" + body
            + b"END:VCALENDAR\r\n")
