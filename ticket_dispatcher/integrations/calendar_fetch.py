"""Downloading one iCalendar feed: a GET with bounded time and size.

A feed's server is outside the service's control: it may answer slowly, send a body without
end, or drip it a byte at a time. So the body is read in chunks and the download stops as soon
as it passes the byte limit or the whole fetch passes its deadline (``DEADLINE_READS`` read
timeouts), and a fetch in flight can be cut short from another thread (``abort``) when the
service stops. This is no API call, and the API clients' transport (transport.py) fits it
nowhere: it reads every answer whole, and decoded, before the call returns, keeps one
connection pool per base URL for a client's life, and runs the send guard of a pooled call. So
the fetch goes through urllib3's public API itself, reading the proxy and the CA bundle from
the environment as the transport does. It is made once, never tried again within the fetch:
the refresher fetches each feed again at its next round.

A feed's URL is a secret (a private calendar URL carries its token), so no message here ever
holds it, nor anything urllib3 says, which may quote it: the feed's name stands for it.
"""

from __future__ import annotations

import threading
import time

import requests
import urllib3

from ticket_dispatcher import __version__
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.transport import ca_bundle

# The whole fetch, from the connection to the last byte, may take this many read timeouts: a
# feed dripping its body slowly holds the refresh no longer than that.
DEADLINE_READS = 3
CHUNK_BYTES = 65_536
_HEADERS = {
    "Accept": "text/calendar, */*;q=0.5",
    # The byte limit counts what is stored and parsed: a compressed body could unpack to
    # many times the limit, so none is asked for.
    "Accept-Encoding": "identity",
    "User-Agent": f"ticket-dispatcher/{__version__}",
}


class FetchError(IntegrationError):
    """A feed could not be downloaded; ``message`` names the feed, never its URL."""

    def __init__(self, feed: str, what: str, status: int | None = None):
        super().__init__(f"feed {feed!r} {what}", status=status, service="calendar")
        self.feed = feed


class FeedFetcher:
    """Downloads feeds, one at a time, for the calendar refresher.

    ``connect_timeout`` bounds opening the connection, ``read_timeout`` each wait for the
    answer or the next bytes, ``DEADLINE_READS`` read timeouts the whole fetch; a body over
    ``max_bytes`` is refused as soon as it passes them. Proxies (``HTTPS_PROXY``, ``NO_PROXY``…)
    and the CA bundle (``REQUESTS_CA_BUNDLE``) are read from the environment as the
    integrations read them."""

    def __init__(self, *, connect_timeout: float, read_timeout: float, max_bytes: int):
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.deadline = DEADLINE_READS * read_timeout
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # guards the answer being read, which ``abort`` cuts
        self._answer: urllib3.BaseHTTPResponse | None = None
        self._aborted = threading.Event()

    def fetch(self, feed: str, url: str) -> bytes:
        """The body of a 2xx answer to ``GET url``; FetchError naming ``feed`` otherwise."""
        started = time.monotonic()
        manager = self._manager(url)
        try:
            answer = self._request(manager, feed, url)
            try:
                return self._body(feed, answer, started)
            finally:
                with self._lock:
                    self._answer = None
                answer.close()
        finally:
            manager.clear()

    def abort(self) -> None:
        """Stop the fetch in flight, if any, and every later one: a read waiting for bytes
        returns at once (from any thread; the service is stopping)."""
        with self._lock:
            self._aborted.set()
            answer = self._answer
        if answer is not None:
            try:
                answer.shutdown()
            except (OSError, ValueError, RuntimeError):
                pass  # already closed or released: no read is waiting on it

    def _request(self, manager: urllib3.PoolManager, feed: str,
                 url: str) -> urllib3.BaseHTTPResponse:
        if self._aborted.is_set():
            raise FetchError(feed, "was not fetched: the service is stopping")
        timeout = urllib3.Timeout(connect=self.connect_timeout, read=self.read_timeout)
        try:
            answer = manager.request("GET", url, headers=_HEADERS, preload_content=False,
                                     decode_content=False, retries=False, redirect=False,
                                     timeout=timeout)
        except Exception as exc:  # urllib3's, or the socket's: every one is a failed fetch
            raise FetchError(feed, self._failure(exc, "could not be fetched")) from None
        with self._lock:
            self._answer = answer
        if self._aborted.is_set():  # the abort came while the answer's head was awaited
            answer.close()
            raise FetchError(feed, "was cut short: the service is stopping")
        return answer

    def _body(self, feed: str, answer: urllib3.BaseHTTPResponse, started: float) -> bytes:
        if not 200 <= answer.status < 300:
            moved = " (redirects are not followed: configure the URL it names)" \
                if 300 <= answer.status < 400 else ""
            raise FetchError(feed, f"answered HTTP {answer.status}{moved}", answer.status)
        encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise FetchError(feed, f"came compressed ({encoding[:20]}), which was not asked for")
        length = answer.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise FetchError(feed, f"is {length} bytes, more than the {self.max_bytes} allowed")
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() - started > self.deadline:
                raise FetchError(feed, f"was still downloading after {self.deadline:g} s; "
                                       f"stopped")
            try:  # what one read of the socket gives: a drip cannot hold it to fill a chunk
                chunk = answer.read1(CHUNK_BYTES, decode_content=False)
            except Exception as exc:
                raise FetchError(feed, self._failure(exc, "broke off while downloading")) \
                    from None
            if self._aborted.is_set():  # a cut read ends like the body's end
                raise FetchError(feed, "was cut short: the service is stopping")
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchError(feed, f"is more than the {self.max_bytes} bytes allowed; "
                                       f"stopped reading")
            chunks.append(chunk)

    def _failure(self, exc: Exception, otherwise: str) -> str:
        """What went wrong, in words of our own: urllib3's text may quote the URL."""
        if self._aborted.is_set():
            return "was cut short: the service is stopping"
        # Before ConnectTimeoutError, which urllib3 makes their base class.
        if isinstance(exc, urllib3.exceptions.NameResolutionError):
            return "could not be fetched: its host name does not resolve"
        if isinstance(exc, urllib3.exceptions.NewConnectionError):
            return "could not be fetched: the connection was refused or failed"
        if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
            return f"did not connect within {self.connect_timeout:g} s"
        if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
            return f"sent nothing for {self.read_timeout:g} s"
        if isinstance(exc, urllib3.exceptions.SSLError):
            return "could not be fetched: TLS failed (certificate or handshake)"
        if isinstance(exc, urllib3.exceptions.ProxyError):
            return "could not be fetched: the proxy failed"
        if isinstance(exc, urllib3.exceptions.ProtocolError):
            return f"{otherwise}: the connection broke"
        return f"{otherwise} ({type(exc).__name__})"

    def _manager(self, url: str) -> urllib3.PoolManager:
        """A pool manager for one fetch (feeds are fetched minutes apart: nothing to keep
        alive), through the proxy the environment names for ``url``."""
        bundle = ca_bundle()
        proxies = requests.utils.get_environ_proxies(url)
        proxy = proxies.get(url.partition(":")[0].lower()) or proxies.get("all")
        if proxy:
            return urllib3.ProxyManager(proxy, num_pools=1, ca_certs=bundle)
        return urllib3.PoolManager(num_pools=1, ca_certs=bundle)
