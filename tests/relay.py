"""A TCP relay that can cut a connection to a real server, for database fault tests.

``Relay(host, port)`` listens on 127.0.0.1 (a free port) and forwards every connection to
``host:port``, byte for byte, in both directions. A test points its client at the relay
(``relayed_url``) and then breaks the network between them on purpose:

- ``cut()``: every relayed connection is closed at once (the client reads end-of-file, as when
  the server or a proxy in between drops it), and a new connection is accepted and closed at
  once (the server is unreachable) until ``restore()``.
- ``stall()``: every relayed connection is closed, and a new one is accepted but never
  answered: a server that has vanished without closing anything. Only a client's own timeout
  (libpq's ``connect_timeout``) ends the wait. A connection already relayed cannot be stalled
  this way: the relay's kernel would still acknowledge every byte, so TCP keepalives and
  ``tcp_user_timeout`` could not tell.
- ``restore()``: connections are relayed again; the ones held by ``stall()`` are closed.

Used as a context manager (``with Relay(host, port) as relay:``) it stops on exit, closing
everything. Threads are daemons, one accepting and two per relayed connection; the relay
keeps no state outside the instance, so several may run at once (e.g. one per server a
real-process test starts).
"""

from __future__ import annotations

import socket
import threading
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Mode = Literal["forward", "cut", "stall"]
_CHUNK = 65536


class Relay:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host, self.port = self._listener.getsockname()[:2]
        self._lock = threading.Lock()
        self._mode: Mode = "forward"
        self._sockets: set[socket.socket] = set()  # relayed (both ends) and stalled ones
        self._stopped = False
        self._acceptor = threading.Thread(target=self._accept, name=f"relay-{self.port}",
                                          daemon=True)
        self._acceptor.start()

    # -- faults -------------------------------------------------------------------------------

    def cut(self) -> None:
        """Close every connection now and every new one at once, until ``restore()``."""
        self._switch("cut")

    def stall(self) -> None:
        """Close every connection now; accept new ones and never answer, until ``restore()``."""
        self._switch("stall")

    def restore(self) -> None:
        """Relay new connections again (held stalled ones are closed)."""
        self._switch("forward")

    @property
    def connections(self) -> int:
        """Sockets the relay holds open: two per relayed connection, one per stalled one."""
        with self._lock:
            return len(self._sockets)

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._stopped = True
        self._close_all()
        _close(self._listener)  # shutdown wakes the thread blocked in accept()
        self._acceptor.join(timeout=5)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------------

    def _switch(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _close(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # the listener was closed: the relay stops
                return
            with self._lock:
                mode = "cut" if self._stopped else self._mode
                if mode == "stall":
                    self._sockets.add(client)
            if mode == "cut":
                _close(client)
            elif mode == "forward":
                self._relay(client)

    def _relay(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            _close(client)  # the target itself is down: the client sees it so
            return
        server.settimeout(None)
        with self._lock:
            relayed = self._mode == "forward" and not self._stopped
            if relayed:
                self._sockets.update((client, server))
        if not relayed:  # cut or stalled while the target was being reached
            _close(client)
            _close(server)
            return
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True,
                             name=f"relay-{self.port}-pump").start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass  # closed by cut()/stall()/close(), or by either peer
        with self._lock:
            self._sockets.discard(source)
            self._sockets.discard(sink)
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    """Close now, waking a thread blocked in ``recv`` on it (``close`` alone would not)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def relayed_url(url: str, relay: Relay) -> str:
    """``url`` (``scheme://user[:password]@host:port/…``) with its host and port replaced by
    the relay's, everything else (user, database, query) kept."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@{relay.host}:{relay.port}" if credentials else \
        f"{relay.host}:{relay.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def target_of(url: str) -> tuple[str, int]:
    """The (host, port) a PostgreSQL URL names, for ``Relay(*target_of(url))``."""
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432
