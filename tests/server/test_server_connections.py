"""Issue 59, item 0: no client holds a connection by saying nothing, and silent connections never lock a new client
out (server/http_protocol.py).

- A connection that sends nothing is closed after header_timeout_s; one that sends part of a request head, even a
  byte at a time, is answered 408 `header_timeout` when header_timeout_s is over; a body that sends no byte for
  body_timeout_s is answered 408 `body_timeout`, while a slow body that keeps coming is read and answered.
- An answer sent before its request's body came whole (a 413 from the Content-Length) says `connection: close` and
  the connection closes at once, without a reset: a client that sends its body anyway reads the 413.
- Thousands of silent connections, more than the server process's file-descriptor limit allows, and a new client is
  still answered at once: the longest idle connections are closed as the process nears RLIMIT_NOFILE.
"""

from __future__ import annotations

import json
import resource
import socket
import time

import httpx
import pytest

from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import failures, read_response, server_process

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.integration]

SMALL = json.dumps({"texts": ["show me flights from boston to denver"]}).encode()
TIMEOUT_S = 0.5  # header_timeout_s, body_timeout_s and keepalive_timeout_s of the server below


@pytest.fixture(scope="module")
def server(disc_dir):
    s = Settings(model=disc_dir, http_port=0, grpc_port=-1, threads=1, warmup=False, access_log=False,
                 header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S, keepalive_timeout_s=TIMEOUT_S,
                 max_body_bytes=65_536)
    with BackgroundServer(s) as srv:
        yield srv


def head(port: int, length: int, route: str = "/v1/score") -> bytes:
    return (f"POST {route} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n\r\n").encode()


def until_closed(sock: socket.socket, limit_s: float = 10.0) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and the seconds that took (`limit_s` at most)."""
    sock.settimeout(limit_s)
    t0, data = time.monotonic(), b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data, time.monotonic() - t0


def answered(server) -> None:
    assert httpx.post(f"{server.url}/v1/score", content=SMALL, headers={"content-type": "application/json"},
                      timeout=10).status_code == 200


def test_a_silent_connection_and_a_slow_head_are_closed_after_the_header_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port)) as silent, \
            socket.create_connection(("127.0.0.1", server.port)) as slow:
        answered(server)  # meanwhile, others are answered
        slow.sendall(b"POST /v1/score HTTP/1.1\r\n")
        t0 = time.monotonic()
        for byte in b"host: 127.0.0.1\r\n":  # a byte every 50 ms: the head's deadline is not moved by them
            try:
                slow.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.05)
        data, _ = until_closed(slow)
        assert time.monotonic() - t0 < TIMEOUT_S + 1.5
        assert data.startswith(b"HTTP/1.1 408 ") and b"connection: close" in data, data
        assert json.loads(data.partition(b"\r\n\r\n")[2])["error_type"] == "header_timeout"
        data, waited = until_closed(silent)
        assert data == b""  # nothing of a request came: closed without an answer
    assert failures(server, route="unmatched", status="408", error_type="header_timeout") >= 1


def test_a_kept_alive_connection_closes_when_idle_and_its_next_head_has_the_same_deadline(server):
    with socket.create_connection(("127.0.0.1", server.port)) as c:
        c.sendall(head(server.port, len(SMALL)) + SMALL)
        assert read_response(c)[0] == 200
        data, waited = until_closed(c)  # idle: uvicorn's keep-alive timeout
        assert data == b"" and waited < TIMEOUT_S + 1.5
    with socket.create_connection(("127.0.0.1", server.port)) as c:
        c.sendall(head(server.port, len(SMALL)) + SMALL)
        assert read_response(c)[0] == 200
        c.sendall(b"POST /v1/score HTTP/1.1\r\n")  # the next request's head, never finished
        data, waited = until_closed(c)
        assert data.startswith(b"HTTP/1.1 408 ") and waited < TIMEOUT_S + 1.5, data


def test_a_stalled_body_is_408_and_a_slow_one_that_keeps_coming_is_answered(server):
    before = failures(server, route="/v1/score", status="408", error_type="body_timeout")
    with socket.create_connection(("127.0.0.1", server.port)) as c:
        c.sendall(head(server.port, len(SMALL)) + SMALL[:10])
        data, waited = until_closed(c)
        assert data.startswith(b"HTTP/1.1 408 ") and b"connection: close" in data, data
        assert json.loads(data.partition(b"\r\n\r\n")[2]) == {
            "error": f"no byte of the request body came for {TIMEOUT_S:g} s (body_timeout_s)",
            "error_type": "body_timeout"}
        assert waited < TIMEOUT_S + 1.5
    assert failures(server, route="/v1/score", status="408", error_type="body_timeout") == before + 1
    with socket.create_connection(("127.0.0.1", server.port)) as c:
        c.sendall(head(server.port, len(SMALL)))
        for i in range(0, len(SMALL), 8):  # 8 bytes every 0.3 s: over a second in all, never 0.5 s silent
            c.sendall(SMALL[i:i + 8])
            time.sleep(0.3)
        assert read_response(c)[0] == 200
    answered(server)


def test_a_413_before_the_body_closes_the_connection_at_once_and_a_client_sending_it_reads_the_413(server):
    limit = server.settings.max_body_bytes
    with socket.create_connection(("127.0.0.1", server.port)) as c:
        c.sendall(head(server.port, 10 * limit))  # the body is never sent
        data, waited = until_closed(c)
        status, _, rest = data.partition(b"\r\n")
        assert status.startswith(b"HTTP/1.1 413 ") and b"\r\nconnection: close\r\n" in rest.lower(), data
        assert waited < 0.4  # not the keep-alive timeout (0.5 s), nor a body timeout
    r = httpx.post(f"{server.url}/v1/score", content=b"x" * (10 * limit), headers={"content-type": "application/json"},
                   timeout=10)  # sends its whole body, then reads: the answer, not a reset
    assert r.status_code == 413 and r.headers["connection"] == "close"
    answered(server)


def wait_for_accepts(port: int, room: int) -> None:
    """Wait until the listener on 127.0.0.1:`port` has fewer than `room` connections not yet accepted (its accept
    queue, /proc/net/tcp's rx_queue of a listening socket): the test opens connections as fast as the server takes
    them, not faster, so that none waits out a SYN retransmission (the server's listen backlog is small under a low
    descriptor limit: server/http_protocol.py listen_backlog)."""
    local = f"0100007F:{port:04X}"
    deadline = time.monotonic() + 30
    while True:
        with open("/proc/net/tcp") as f:
            queued = [int(fields[4].split(":")[1], 16) for fields in (line.split() for line in f)
                      if fields[1] == local and fields[3] == "0A"]  # 0A: LISTEN
        if not queued or queued[0] < room:
            return
        assert time.monotonic() < deadline, f"{queued[0]} connections still wait to be accepted"
        time.sleep(0.001)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_thousands_of_silent_connections_past_the_descriptor_limit_do_not_lock_out_a_new_client(disc_dir, loop):
    """The server process's soft RLIMIT_NOFILE is lowered to 1024 and three times as many silent connections are
    opened (the header timeout is a minute: only making room can free them); a new client is answered 200 within a
    second, and the connections closed for it were the longest idle. On both event loops: each accepts its own way."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    nofile = 1024
    ours = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    n = min(3 * nofile, ours - 200)  # this process's own limit, left as it is
    assert n > nofile, f"this process may open only {ours} files"
    with server_process(nofile=nofile, ELECTRIC_MODEL=str(disc_dir), ELECTRIC_WARMUP="false",
                        ELECTRIC_HEADER_TIMEOUT_S="60", ELECTRIC_EVENT_LOOP=loop) as (proc, port):
        silent = []
        try:
            for i in range(n):
                if i % 8 == 0:
                    wait_for_accepts(port, 8)
                silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            wait_for_accepts(port, 1)  # the server has accepted the last of them
            t0 = time.monotonic()
            r = httpx.post(f"http://127.0.0.1:{port}/v1/score", content=SMALL,
                           headers={"content-type": "application/json"}, timeout=30)
            took = time.monotonic() - t0
            assert r.status_code == 200 and took < 1.0, (r.status_code, took)
            closed = []
            for i, s in enumerate(silent):
                s.setblocking(False)
                try:
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except ConnectionResetError:
                    gone = True
                if gone:
                    closed.append(i)
            assert len(closed) >= n - nofile, len(closed)  # at least what the limit could not hold was closed...
            assert closed == list(range(len(closed)))  # ...the longest idle first
        finally:
            for s in silent:
                s.close()
        assert proc.poll() is None
