"""The HTTP connection: uvicorn's httptools protocol with two things a server owes its clients that uvicorn leaves
out. `http_protocol(settings, refused, lifecycle)` makes the class `uvicorn.Config(http=...)` takes.

- **A bounded request head.** A request line and headers over `max_header_bytes`, or more than `max_headers`
  headers, are answered 431 `headers_too_large` (with uvicorn's default headers, as every response) and the
  connection is closed, before the app (the API key check, the body) sees anything of the request. httptools has
  no limit of its own, and joins a header that arrives in many reads by copying it again at every read: a 100 MB
  header used to be read (30 s of quadratic copying, the event loop stalled for everyone). The bytes read while a
  head is incomplete are counted at every read, so at most one read (256 KiB) past the limit is ever parsed.
- **A shutdown that answers what has arrived.** uvicorn closes an idle keep-alive connection at once when it
  shuts down: a request whose bytes were in the socket, not yet read by a busy event loop, or on their way from a
  client that had just read its last answer, got no answer at all. Here an idle connection stays open for
  `linger_s` more (LINGER_S, at most the shutdown grace) and closes only when nothing of a next request has come,
  read or not; a request that comes is read and answered and the connection closes after it, as one still
  answering closes after its response.
- **What came before the shutdown, told apart.** When the lifecycle's drain begins (`shutdown()`, called for every
  connection at that moment: server/lifecycle.py), each connection notes how many bytes it had received: read, or waiting unread in its
  socket (FIONREAD). A request whose last byte is within them came before the shutdown, whatever the event loop had
  got round to; the request's scope["state"] says so under RECEIVED_BEFORE_SHUTDOWN (True or False), the engine
  admits it (server/lifecycle.py `Lifecycle.admit`) and answers any other 503 `shutting_down`. A read that holds bytes from both sides is
  parsed in two parts, so the line falls exactly.

uvicorn has no public hook for either, so this subclasses its private `httptools_impl.HttpToolsProtocol`:
pyproject.toml pins the exact uvicorn version, and tests/server/test_uvicorn_hooks.py checks the hooks.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import json
import os
import select
import socket
import termios
import time
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from server.lifecycle import Lifecycle
from server.settings import Settings

HEADERS_TOO_LARGE = "headers_too_large"  # the error_type of a 431
RECEIVED_BEFORE_SHUTDOWN = "received_before_shutdown"  # key in the scope's state: the request came whole before it
LINGER_S = 0.5  # at shutdown, an idle connection waits this long for a next request already on its way
RECHECK_S = 0.02  # at shutdown, how often an idle connection with bytes not parsed yet looks again


class HttpProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection (see the module's docstring). The class attributes are set by `http_protocol`."""

    max_header_bytes = 65536
    max_headers = 100
    refused: Callable[[str, str, float], None] = staticmethod(lambda client, error, seconds: None)
    lifecycle = Lifecycle(0.0)  # the server's (http_protocol): once it drains, every answer closes its connection
    linger_s = LINGER_S

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # reading a request head (or waiting for one)
        self._head_read = 0  # bytes read since the head began (counted per read)
        self._head_size = 0  # the URL and header bytes the parser has given so far
        self._head_begun = False  # the parser has begun a message whose headers are not complete
        self._head_t0 = 0.0
        self._refusal: str | None = None  # why this connection's request is refused with a 431
        self._parsed = 0  # bytes given to the parser
        self._cutoff: int | None = None  # set when the shutdown begins: the bytes received by then, read or not

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if self.lifecycle.draining:  # made after the shutdown began: nothing of it came before; the same rule
            self._cutoff = 0
            self.loop.call_later(self.linger_s, self._close_if_quiet)

    # ---- reads ---------------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        before = len(data) if self._cutoff is None else self._cutoff - self._parsed
        if 0 < before < len(data):  # the shutdown began within `data`: what came before it is parsed first
            self._parse(data[:before])
            if self.transport.is_closing():
                return
            data = data[before:]
        self._parse(data)

    def _parse(self, data: bytes) -> None:
        self._parsed += len(data)
        if self._refusal is not None:
            return  # answered 431 and closing
        if self._in_head:
            if not self._head_read:
                self._head_t0 = time.perf_counter()
            self._head_read += len(data)
        super().data_received(data)
        if self._refusal is None and self._in_head and self._head_read > self.max_header_bytes:
            self._refuse(f"the request line and headers are over the limit of {self.max_header_bytes} bytes "
                         "(max_header_bytes)")
        elif self._refusal is not None:
            self._refuse(self._refusal)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun, self._head_size = True, 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refusal is not None:
            return
        super().on_header(name, value)
        if len(self.headers) > self.max_headers:
            self._refusal = f"more than {self.max_headers} headers (max_headers)"
        self._grow_head(len(name) + len(value) + 4)  # name: value\r\n

    def _grow_head(self, n: int) -> None:
        self._head_size += n
        if self._refusal is None and self._head_size > self.max_header_bytes:
            self._refusal = (f"the request line and headers are over the limit of {self.max_header_bytes} bytes "
                             "(max_header_bytes)")

    def on_headers_complete(self) -> None:
        self._in_head, self._head_read, self._head_begun = False, 0, False
        if self._refusal is not None:
            return  # no request for the app: data_received answers 431 when the parser returns
        super().on_headers_complete()
        if self.lifecycle.draining:
            self.cycle.keep_alive = False

    def on_body(self, body: bytes) -> None:
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refusal is None:
            before = self._cutoff is None or self._parsed <= self._cutoff
            self.cycle.scope.setdefault("state", {})[RECEIVED_BEFORE_SHUTDOWN] = before
            super().on_message_complete()
            self._in_head = True

    def _refuse(self, error: str) -> None:
        """Answer 431 (a JSON error body) and close the connection."""
        self._refusal = error
        if self.transport.is_closing():
            return
        body = json.dumps({"error": error, "error_type": HEADERS_TOO_LARGE}).encode()
        defaults = [b"%s: %s\r\n" % (name, value) for name, value in self.server_state.default_headers]
        self.transport.write(b"".join([STATUS_LINE[431], *defaults, b"content-type: application/json\r\n",
                                       b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n", body]))
        self.transport.close()
        client = self.client[0] if self.client else ""
        self.refused(client, error, time.perf_counter() - self._head_t0 if self._head_read else 0.0)

    # ---- shutdown ------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Called when the server begins to shut down (server/app.py, at once for every connection) and by uvicorn
        after it: note the bytes received by now, the first time; a connection answering a request closes after
        its answer; an idle one closes once nothing of a next request has come for `linger_s` (_close_if_quiet)."""
        if self._cutoff is None:
            self._cutoff = self._parsed + _unread_bytes(self.transport)
        if self.cycle is None or self.cycle.response_complete:
            self.loop.call_later(self.linger_s, self._close_if_quiet)
        else:
            self.cycle.keep_alive = False  # a next request's cycle learns it from the lifecycle (on_headers_complete)

    def _close_if_quiet(self) -> None:
        """Close an idle connection that holds nothing of a next request, read or not; one that does is looked at
        again shortly (its request, once read, closes the connection after its answer)."""
        if self.transport.is_closing() or not (self.cycle is None or self.cycle.response_complete):
            return
        if self._head_begun or _unread(self.transport):
            self.loop.call_later(RECHECK_S, self._close_if_quiet)
        else:
            self.transport.close()


def stop_listening(servers) -> list[socket.socket]:
    """Close the servers' listeners without resetting the connections waiting in their queues, whose requests may
    have arrived before the signal: each listening socket is duplicated, the servers closed (the event loop accepts
    no more), then every connection still queued is accepted from the duplicate until none is left and the duplicate
    closed at once, so the kernel refuses only a connection that completes in the microseconds between the two.
    Returns the accepted connections, for `serve_accepted`."""
    listeners = []
    for server in servers:
        for sock in server.sockets:
            listener = socket.socket(fileno=os.dup(sock.fileno()))
            listener.setblocking(False)
            listeners.append(listener)
        server.close()
    accepted = []
    for listener in listeners:
        with listener:
            while True:
                try:
                    accepted.append(listener.accept()[0])
                except (BlockingIOError, InterruptedError):
                    break
    return accepted


async def serve_accepted(connections: list[socket.socket], make_protocol: Callable[[], asyncio.Protocol]) -> None:
    """Serve the connections `stop_listening` accepted with protocols from `make_protocol`."""
    loop = asyncio.get_running_loop()
    for conn in connections:
        conn.setblocking(False)
        await loop.connect_accepted_socket(make_protocol, conn)


def _unread_bytes(transport) -> int:
    """How many bytes the connection's socket holds that the event loop has not read yet (0 without a socket)."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.fileno() < 0:
        return 0
    count = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, count, True)
    except OSError:  # closed meanwhile
        return 0
    return count[0]


def _unread(transport) -> bool:
    """Whether the connection's socket holds bytes (or an end of stream) the event loop has not read yet."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.fileno() < 0:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def http_protocol(settings: Settings, refused: Callable[[str, str, float], None],
                  lifecycle: Lifecycle | None = None) -> type[HttpProtocol]:
    """An HttpProtocol class for one server: its header limits from `settings`; `refused(client, error, seconds)`
    is told of every 431 (to count and log it); `lifecycle`, the server's, says when the drain has begun."""
    return type("HttpProtocol", (HttpProtocol,), {"max_header_bytes": settings.max_header_bytes,
                                                  "max_headers": settings.max_headers,
                                                  "linger_s": min(LINGER_S, settings.shutdown_grace_s),
                                                  "refused": staticmethod(refused),
                                                  "lifecycle": lifecycle or Lifecycle(settings.shutdown_grace_s)})
