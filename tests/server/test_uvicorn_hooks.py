"""server/http_protocol.py subclasses uvicorn's private httptools protocol (uvicorn has no public hook for a bounded
request head or for a shutdown that answers what has arrived), and server/app.py drives uvicorn.Server's shutdown.
So pyproject.toml pins uvicorn to one version, and these tests check the hooks that code relies on: a new uvicorn is
taken on purpose, with these failing first if its internals moved."""

from __future__ import annotations

import asyncio
import re

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from server.http_protocol import RECEIVED_BEFORE_SHUTDOWN, http_protocol
from server.settings import Settings
from tests.conftest import REPO


def test_uvicorn_is_pinned_to_the_version_installed():
    pins = re.findall(r'^\s*"(uvicorn[^"]*)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert pins == [f"uvicorn=={uvicorn.__version__}"]


def test_the_private_hooks_are_there():
    for name in ("connection_made", "connection_lost", "data_received", "on_message_begin", "on_url", "on_header",
                 "on_headers_complete", "on_body", "on_message_complete", "on_response_complete", "shutdown"):
        assert callable(getattr(HttpToolsProtocol, name, None)), name
    for name in ("startup", "handle_exit", "shutdown", "capture_signals"):
        assert callable(getattr(uvicorn.Server, name, None)), name
    config = uvicorn.Config(app=unavailable, http=http_protocol(Settings(model="unused"), print), log_config=None)
    config.load()  # what _Uvicorn.shutdown builds a protocol from: config.http_protocol_class, server_state
    assert issubclass(config.http_protocol_class, HttpToolsProtocol)
    assert isinstance(uvicorn.Server(config).server_state, ServerState)


class FakeTransport:
    """What the protocol writes and whether it closed; no socket (so nothing is ever unread)."""

    def __init__(self):
        self.written, self.closed, self.eof = b"", False, False

    def write(self, data: bytes) -> None:
        assert not self.eof, "written after write_eof"
        self.written += data

    def close(self) -> None:
        self.closed = True

    abort = close

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return self.closed

    sock = None  # a socket whose unread bytes the protocol may count (FIONREAD), when a test gives one

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000), "socket": self.sock}.get(
            name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def unavailable(scope, receive, send):  # the engine's answer after the signal, in short
    await send({"type": "http.response.start", "status": 503, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def connection(app=unavailable, **settings) -> tuple[HttpToolsProtocol, FakeTransport, list]:
    refused: list = []
    cls = http_protocol(Settings(model="unused", **settings), lambda *a: refused.append(a))
    protocol = cls(config=uvicorn.Config(app=app, log_config=None), server_state=ServerState(), app_state={})
    transport = FakeTransport()
    protocol.connection_made(transport)
    return protocol, transport, refused


def test_a_head_over_the_limit_is_a_431_and_the_connection_closes():
    async def main():
        protocol, transport, refused = connection(max_header_bytes=1024)
        protocol.data_received(b"GET /health HTTP/1.1\r\nx-big: " + b"a" * 2000 + b"\r\n\r\n")
        return transport, refused

    transport, refused = asyncio.run(main())
    assert transport.written.startswith(b"HTTP/1.1 431 ") and b'"error_type": "headers_too_large"' in transport.written
    assert transport.closed and len(refused) == 1


def test_at_shutdown_an_idle_connection_waits_for_a_next_request_and_answers_it_before_closing():
    async def main():
        protocol, transport, _ = connection(shutdown_grace_s=0.2)
        protocol.lifecycle.begin_drain()
        protocol.shutdown()
        await asyncio.sleep(0.05)
        open_while_lingering = not transport.closed
        protocol.data_received(b"POST /v1/score HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        for _ in range(100):
            if transport.closed:
                break
            await asyncio.sleep(0.01)
        return open_while_lingering, transport

    open_while_lingering, transport = asyncio.run(main())
    assert open_while_lingering
    assert transport.written.startswith(b"HTTP/1.1 503 ") and b"connection: close" in transport.written.lower()
    assert transport.closed


def test_at_shutdown_an_idle_connection_with_nothing_coming_closes_after_the_linger():
    async def main():
        protocol, transport, _ = connection(shutdown_grace_s=0.05)
        protocol.lifecycle.begin_drain()
        protocol.shutdown()
        closed_at_once = transport.closed
        await asyncio.sleep(0.2)
        return closed_at_once, transport

    closed_at_once, transport = asyncio.run(main())
    assert not closed_at_once and transport.closed and transport.written == b""


def test_at_shutdown_a_request_is_told_whether_it_came_whole_before():
    """Issue 51, item 2: when the shutdown begins, a connection counts what it had received, read or still in its
    socket; a request within it came before (the engine admits it), one after it did not, even when both arrive in
    one read (parsed in two parts at the line)."""
    import socket

    seen: list = []

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        seen.append(scope["state"][RECEIVED_BEFORE_SHUTDOWN])
        await unavailable(scope, receive, send)

    def post(body: bytes) -> bytes:
        return b"POST /v1/score HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)

    async def main():
        protocol, transport, _ = connection(app=app)
        ours, theirs = socket.socketpair()
        transport.sock = ours
        with ours, theirs:
            protocol.data_received(post(b"{}"))  # read before the shutdown, and answered
            while not seen:
                await asyncio.sleep(0.01)
            second, third = post(b'{"texts": ["in the socket"]}'), post(b'{"texts": ["after"]}')
            theirs.sendall(second)  # in the socket, unread, when the shutdown begins
            protocol.shutdown()
            protocol.data_received(second + third)  # one read: the second request, then the third
            for _ in range(100):
                if len(seen) == 3:
                    break
                await asyncio.sleep(0.01)

    asyncio.run(main())
    assert seen == [True, True, False]


def test_an_answer_before_the_body_says_close_and_half_closes_until_the_body_has_come():
    """Issue 59: the cycle's state the early answer relies on (more_body, keep_alive, send), and what it does: the
    answer says `connection: close`, the connection is half-closed (write_eof), not closed with the client's bytes
    unread, and closes once the rest of the body has come and been dropped."""

    async def app(scope, receive, send):  # answers without reading the body, as the 413 from Content-Length does
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def main():
        protocol, transport, _ = connection(app=app)
        protocol.data_received(b"POST /v1/score HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n" + b"x" * 10)
        cycle = protocol.cycle
        assert cycle.more_body and cycle.keep_alive and callable(cycle.send)
        for _ in range(100):
            if transport.eof:
                break
            await asyncio.sleep(0.01)
        lingering = transport.eof and not transport.closed
        protocol.data_received(b"x" * 60)
        still_open = not transport.closed
        protocol.data_received(b"x" * 30 + b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")  # the body's end, and more
        await asyncio.sleep(0.05)
        return transport, lingering, still_open

    transport, lingering, still_open = asyncio.run(main())
    assert transport.written.startswith(b"HTTP/1.1 413 ") and b"connection: close\r\n" in transport.written
    assert lingering and still_open and transport.closed
    assert transport.written.count(b"HTTP/1.1 ") == 1  # the request after the body is never served
