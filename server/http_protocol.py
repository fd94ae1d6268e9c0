"""The HTTP connection: uvicorn's httptools protocol with what a server owes its clients that uvicorn leaves out.
`http_protocol(settings, refused, lifecycle)` makes the class `uvicorn.Config(http=...)` takes.

- **A bounded request head.** A request line and headers over `max_header_bytes`, or more than `max_headers`
  headers, are answered 431 `headers_too_large` (with uvicorn's default headers, as every response) and the
  connection is closed, before the app (the API key check, the body) sees anything of the request. httptools has
  no limit of its own, and joins a header that arrives in many reads by copying it again at every read: a 100 MB
  header used to be read (30 s of quadratic copying, the event loop stalled for everyone). The bytes read while a
  head is incomplete are counted at every read, so at most one read (256 KiB) past the limit is ever parsed.
- **No client holds a connection by saying nothing.** A request line and headers must come whole within
  `header_timeout_s` of the connection's opening (of their first byte, on a kept-alive connection: between requests
  uvicorn's `timeout_keep_alive`, the `keepalive_timeout_s` setting, closes an idle one): a connection that sent
  nothing is then closed, one that sent part of a head is answered 408 `header_timeout` and closed. A body that sends
  no byte for `body_timeout_s` is answered 408 `body_timeout` (when nothing of an answer was sent) and closed. Time
  the server made the client wait is not counted: while reading is paused (a body the app has not read yet, a
  pipelined request), while a `100-continue` is not yet sent, or while bytes wait unread in the socket of a busy
  event loop. One timer per connection, re-armed only when it fires: a read costs no timer.
- **Room for new clients.** Every connection that answers no request (waiting for a head, or lingering, below) is
  kept in `IdleConnections`, oldest idle first. When the process nears its file-descriptor limit (RLIMIT_NOFILE,
  counted in /proc/self/fd only as the count of connections nears it) the oldest idle ones are closed, leaving a
  margin (`fd_margin`: more than a few of the listener's backlogs, which `listen_backlog` scales to the limit) so
  that accept() never fails and a new client is answered.
- **An answer sent before its request's body came whole closes the connection** (`connection: close`), at once and
  without a reset: the connection is half-closed (FIN after the answer), and what the client still sends of its body
  is read and dropped until it has all come, the client closes, no byte has come for `body_timeout_s`, or LINGER_S_MAX
  is over. (A 413 for a `Content-Length` over `max_body_bytes`, a 401 before the body, a 429 for a big body while the
  model is behind: the client reads its answer once it has sent its body, or at once if it reads while sending, and
  the body's bytes are never taken for a next request.) Before, the connection stayed open for the keep-alive timeout
  after the body's last byte.
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

uvicorn has no public hook for any of these, so this subclasses its private `httptools_impl.HttpToolsProtocol`:
pyproject.toml pins the exact uvicorn version, and tests/server/test_uvicorn_hooks.py checks the hooks.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import functools
import json
import logging
import math
import os
import resource
import select
import socket
import termios
import time
from collections.abc import Callable

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from server.lifecycle import Lifecycle
from server.settings import Settings

log = logging.getLogger("electric.server")

HEADERS_TOO_LARGE = "headers_too_large"  # the error_type of a 431
HEADER_TIMEOUT = "header_timeout"  # the error_type of a 408 for a head that did not come whole in time
BODY_TIMEOUT = "body_timeout"  # the error_type of a 408 for a body that stalled (also the key in the scope's state)
LINGER_S_MAX = 10.0  # the longest an answer sent before its body came whole waits for the rest of the body
FD_MARGIN_SHARE = 10  # of RLIMIT_NOFILE: the descriptors kept free (accepts, gRPC, files)...
FD_MARGIN_MIN = 256  # ...and at least this many, and more than a few listen backlogs (fd_margin)
BACKLOG_MAX = 2048  # uvicorn's listen backlog; less for a lower limit (listen_backlog)
RECEIVED_BEFORE_SHUTDOWN = "received_before_shutdown"  # key in the scope's state: the request came whole before it
LINGER_S = 0.5  # at shutdown, an idle connection waits this long for a next request already on its way
RECHECK_S = 0.02  # how often a connection with bytes not parsed yet looks again (at shutdown, at a timeout)


class IdleConnections:
    """One server's HTTP connections that answer no request - waiting for a request head (a new connection, a kept-alive
    one, or one sending a head slowly) or lingering after an early answer - in the order they became idle, and the
    rule that keeps room for new clients: when the process's open file descriptors near its soft RLIMIT_NOFILE (less
    a margin: FD_MARGIN_SHARE of it, at least FD_MARGIN_MIN, at most a quarter), the longest idle connections are
    closed until twice the margin is free. The descriptors are counted (/proc/self/fd) only when the number of
    connections has grown to where the last count said the margin would be reached, so an ordinary connection costs
    nothing but its place in a dict."""

    def __init__(self, backlog: int = BACKLOG_MAX) -> None:
        self.backlog = backlog  # the listener's: the event loop may accept that many before it makes one of them
        self.order: dict[HttpProtocol, None] = {}  # insertion order: the longest idle first
        self.closed = 0  # connections closed to make room, in all
        self._next_look: float = 0  # the number of open connections at which the descriptors are counted again

    def waiting(self, connection: HttpProtocol) -> None:
        """`connection` answers no request from now on (it goes to the end of the order)."""
        self.order.pop(connection, None)
        self.order[connection] = None

    def busy(self, connection: HttpProtocol) -> None:
        """`connection` has a request to answer (its head came whole), or is gone."""
        self.order.pop(connection, None)

    def opened(self, connection: HttpProtocol, open_connections: int) -> None:
        """A new connection, one of `open_connections`: idle until its head comes; room is made if the process is
        near its limit."""
        self.waiting(connection)
        if open_connections >= self._next_look:
            self._make_room(open_connections)

    def _make_room(self, open_connections: int) -> None:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        used = open_descriptors()
        if limit == resource.RLIM_INFINITY or used is None:
            self._next_look = math.inf  # nothing to count against
            return
        margin = fd_margin(limit, self.backlog)
        high = limit - margin
        closed = 0
        if used >= high:
            excess = used - (limit - 2 * margin)
            while closed < excess and self.order:
                connection = next(iter(self.order))
                self.busy(connection)
                connection.transport.abort()  # idle: nothing of an answer is lost; its descriptor is freed at once
                closed += 1
            self.closed += closed
            log.warning("%d of the process's %d file descriptors (RLIMIT_NOFILE) in use: closed the %d HTTP "
                        "connections idle longest%s", used, limit, closed, "" if closed >= excess else
                        f"; {excess - closed} more were wanted, but every other connection is answering a request")
        # look again when the margin would be reached, or after an eighth of it: between two looks at most that many
        # connections open, so even a count that sat just below the mark cannot pass the limit, nor be taken
        # again at every connection (a look at 20,000 descriptors takes tens of milliseconds)
        self._next_look = open_connections - closed + max(margin // 8, high - (used - closed))


def listen_backlog(limit: int) -> int:
    """The listener's backlog for a process that may open `limit` descriptors: a 32nd of them (625 under 20,000), at
    least 16, at most uvicorn's BACKLOG_MAX. The event loop accepts up to a backlog of connections at a turn (asyncio;
    uvloop all that wait) before it makes any of them a connection this code sees, so the margin must hold a few
    backlogs (fd_margin); a queue longer than the process can hold would only fill it."""
    return BACKLOG_MAX if limit == resource.RLIM_INFINITY else min(BACKLOG_MAX, max(16, limit // 32))


def fd_margin(limit: int, backlog: int) -> int:
    """The descriptors kept free under a `limit`: FD_MARGIN_SHARE of it, at least FD_MARGIN_MIN, and more than three
    `backlog`s (what the event loop may accept over a few of its turns before this code sees them) and the
    connections opened between two looks (a quarter of FD_MARGIN_MIN at least); at most a quarter of the limit."""
    return min(max(FD_MARGIN_MIN, limit // FD_MARGIN_SHARE, 3 * backlog + FD_MARGIN_MIN // 4), limit // 4)


def open_descriptors() -> int | None:
    """The process's open file descriptors, or None where they cannot be listed."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing)) - 1  # less the one the listing itself opened
        except OSError:
            continue
    return None


class HttpProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection (see the module's docstring). The class attributes are set by `http_protocol`."""

    max_header_bytes = 65536
    max_headers = 100
    header_timeout_s = 5.0
    body_timeout_s = 10.0
    # told of every answer the connection writes itself (431, 408 for a head): (client, status, error_type, seconds)
    refused: Callable[[str, int, str, float], None] = staticmethod(lambda client, status, error_type, seconds: None)
    lifecycle = Lifecycle(0.0)  # the server's (http_protocol): once it drains, every answer closes its connection
    linger_s = LINGER_S
    idle = IdleConnections()  # the server's (http_protocol)

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
        self._head_due: float | None = None  # loop time by which the head being waited for must be whole
        self._in_body = False  # the head came whole, its body has not
        self._body_seen = 0.0  # loop time of the body's last read (while _in_body or lingering)
        self._timer: asyncio.TimerHandle | None = None  # the one timer: _on_timer
        self._early: RequestResponseCycle | None = None  # the cycle answered before its body came whole
        self._lingering = False  # half-closed after an early answer, reading what is left of the body (_linger)
        self._linger_end = 0.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_due = self.loop.time() + self.header_timeout_s
        self._arm(self._head_due)
        self.idle.opened(self, len(self.server_state.connections))
        if self.lifecycle.draining:  # made after the shutdown began: nothing of it came before; the same rule
            self._cutoff = 0
            self.loop.call_later(self.linger_s, self._close_if_quiet)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.idle.busy(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ---- reads ---------------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._drop(data)
            return
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
        elif self._in_body:  # a read left the body incomplete: it must not stall
            self._body_seen = self.loop.time()
            self._arm(self._body_seen + self.body_timeout_s)
        elif self._in_head and self._head_read:  # a read left a head incomplete: it must come whole in time
            if self._head_due is None:  # the first read of a kept-alive connection's next head
                self._head_due = self.loop.time() + self.header_timeout_s
            self._arm(self._head_due)

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
        if self._lingering:
            return  # a request after the one answered early, on a connection closing: never served
        self._in_head, self._head_read, self._head_begun = False, 0, False
        self._head_due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._refusal is not None:
            return  # no request for the app: data_received answers 431 when the parser returns
        super().on_headers_complete()
        self._in_body = True
        self.idle.busy(self)
        cycle = self.cycle
        cycle.send = functools.partial(self._send, cycle, cycle.send)  # type: ignore[method-assign]
        if self.lifecycle.draining:
            cycle.keep_alive = False

    def on_body(self, body: bytes) -> None:
        if self._refusal is None and not self._lingering:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._lingering:  # the rest of an early answer's body has come: nothing is left unread
            self.transport.close()
        elif self._refusal is None:
            before = self._cutoff is None or self._parsed <= self._cutoff
            self.cycle.scope.setdefault("state", {})[RECEIVED_BEFORE_SHUTDOWN] = before
            super().on_message_complete()
            self._in_head, self._in_body = True, False

    def _refuse(self, error: str) -> None:
        """Answer 431 (a JSON error body) and close the connection."""
        self._refusal = error
        if self.transport.is_closing():
            return
        self._answer_and_close(431, HEADERS_TOO_LARGE, error)

    def _answer_and_close(self, status: int, error_type: str, error: str) -> None:
        """An answer for a request the app never saw (`_write_and_close`); `refused` is told, to count and log it."""
        self._write_and_close(status, error_type, error)
        client = self.client[0] if self.client else ""
        self.refused(client, status, error_type, time.perf_counter() - self._head_t0 if self._head_read else 0.0)

    def _write_and_close(self, status: int, error_type: str, error: str) -> None:
        """Write `status` with the JSON error body (and uvicorn's default headers, as every response) and close the
        connection."""
        body = json.dumps({"error": error, "error_type": error_type}).encode()
        defaults = [b"%s: %s\r\n" % (name, value) for name, value in self.server_state.default_headers]
        self.transport.write(b"".join([STATUS_LINE[status], *defaults, b"content-type: application/json\r\n",
                                       b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n", body]))
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # a client that reads nothing must not hold the connection to receive it
        else:
            self.transport.close()

    # ---- answers sent before their body came whole -----------------------------------------------------------

    async def _send(self, cycle: RequestResponseCycle, send, message) -> None:
        """uvicorn's `cycle.send`, for an answer that starts before its request's body has all come (`cycle.more_body`):
        it says `connection: close` (keep_alive off as its head is written), and its last part leaves the closing
        to on_response_complete (keep_alive back on just before it: uvicorn would close at once, and a close with
        the client's bytes unread is a reset, which can lose the answer)."""
        if message["type"] == "http.response.start" and cycle.more_body and not cycle.response_started:
            self._early = cycle
            cycle.keep_alive = False
        elif (self._early is cycle and cycle.more_body and message["type"] == "http.response.body"
              and not message.get("more_body", False)):
            cycle.keep_alive = True
        await send(message)

    def on_response_complete(self) -> None:
        if self._early is not None and self._early is self.cycle and self.cycle.more_body:
            self.server_state.total_requests += 1
            self._linger()
            return
        super().on_response_complete()
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.idle.waiting(self)

    def _linger(self) -> None:
        """After an early answer: half-close (FIN once the answer is written) and read what is left of the body,
        dropping it, until it has all come (on_message_complete), the client closes (eof_received), no byte has come
        for body_timeout_s, or LINGER_S_MAX is over (_on_timer)."""
        self._lingering, self._in_body, self._head_due = True, False, None
        self.idle.waiting(self)
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.flow.resume_reading()
        self.transport.write_eof()
        self._body_seen = now = self.loop.time()
        self._linger_end = now + LINGER_S_MAX
        self._arm(min(now + self.body_timeout_s, self._linger_end))

    def _drop(self, data: bytes) -> None:
        """What a lingering connection reads: parsed (so the body's end is seen) and dropped."""
        self._body_seen = self.loop.time()
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self.transport.close()

    # ---- the timer -----------------------------------------------------------------------------------------

    def _arm(self, when: float) -> None:
        """Have _on_timer run at `when` (loop time), or earlier if it is already due earlier."""
        if self._timer is not None:
            if self._timer.when() <= when:
                return
            self._timer.cancel()
        self._timer = self.loop.call_at(when, self._on_timer)

    def _due(self) -> float | None:
        """When what the connection waits for from its client is late (loop time), or None: it waits for nothing."""
        if self._lingering:
            return min(self._body_seen + self.body_timeout_s, self._linger_end)
        if self._in_body:
            return self._body_seen + self.body_timeout_s
        return self._head_due

    def _on_timer(self) -> None:
        self._timer = None
        due = self._due()
        if due is None or self.transport.is_closing():
            return
        now = self.loop.time()
        if now < due:
            self._arm(due)
            return
        if self._lingering:
            self.transport.close()
            return
        cycle = self.cycle if self._in_body else None
        if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
            # the server is not reading (a body the app has not taken yet, a pipelined request), or has not asked
            # for the body yet: the client is not late; wait a whole timeout from now
            if self._in_body:
                self._body_seen = now
            else:
                self._head_due = now + self.header_timeout_s
            self._arm(now + (self.body_timeout_s if self._in_body else self.header_timeout_s))
            return
        if _unread(self.transport):  # bytes came, and a busy event loop has not read them yet
            self._arm(now + RECHECK_S)
            return
        if cycle is not None:
            self._body_timed_out(cycle)
        elif self._head_read or self._head_begun:
            self._answer_and_close(408, HEADER_TIMEOUT, f"the request line and headers did not come whole within "
                                                        f"{self.header_timeout_s:g} s (header_timeout_s)")
        else:  # nothing of a request came: no answer is owed
            self.transport.close()

    def _body_timed_out(self, cycle: RequestResponseCycle) -> None:
        """A body with no byte for body_timeout_s: 408 if nothing of an answer was sent, and the connection closes;
        the app's next read of the body finds the client gone, and the request is counted and logged as this 408
        (BODY_TIMEOUT in its scope's state: server/http_middleware.py)."""
        cycle.scope.setdefault("state", {})[BODY_TIMEOUT] = True
        cycle.disconnected = True  # the app writes nothing more here, and its next read finds the client gone
        cycle.message_event.set()
        if cycle.response_started:
            self.transport.abort()
        else:
            self._write_and_close(408, BODY_TIMEOUT, f"no byte of the request body came for {self.body_timeout_s:g} s "
                                                     "(body_timeout_s)")

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


def http_protocol(settings: Settings, refused: Callable[[str, int, str, float], None],
                  lifecycle: Lifecycle | None = None, backlog: int = BACKLOG_MAX) -> type[HttpProtocol]:
    """An HttpProtocol class for one server: its header limits and timeouts from `settings`, its own IdleConnections;
    `refused(client, status, error_type, seconds)` is told of every answer the connection writes for a request the
    app never saw (431, 408 for a head; to count and log it); `lifecycle`, the server's, says when the drain has
    begun; `backlog`, the listener's (listen_backlog)."""
    return type("HttpProtocol", (HttpProtocol,), {"max_header_bytes": settings.max_header_bytes,
                                                  "max_headers": settings.max_headers,
                                                  "header_timeout_s": settings.header_timeout_s,
                                                  "body_timeout_s": settings.body_timeout_s,
                                                  "linger_s": min(LINGER_S, settings.shutdown_grace_s),
                                                  "refused": staticmethod(refused),
                                                  "lifecycle": lifecycle or Lifecycle(settings.shutdown_grace_s),
                                                  "idle": IdleConnections(backlog)})
