"""Issue 30, item 6: a SIGTERM answers every HTTP request whose bytes arrived before it - its result, or 503
`shutting_down` - on keep-alive connections and on fresh ones still waiting in the listener's queue.

A real server process: it is stopped (SIGSTOP) while the requests are written and the SIGTERM is sent, so every
request is in its socket buffers, unread, when it resumes and begins to shut down - the moment a busy event loop
reaches its shutdown in production.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import wait_ready

REPO = Path(__file__).resolve().parents[1]
BODY = json.dumps({"texts": ["show me flights from boston to denver"]}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port: int) -> bytes:
    return (f"POST /v1/score HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(BODY)}\r\n\r\n").encode() + BODY


def read_response(sock: socket.socket) -> tuple[int, dict, bytes] | None:
    """(status, headers, body) of one HTTP response, or None when the connection closes before a whole one."""
    data = _read_until(sock, b"", lambda d: b"\r\n\r\n" in d)
    if data is None:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
    body = _read_until(sock, body, lambda b: len(b) >= int(headers.get("content-length", 0)))
    return None if body is None else (int(lines[0].split()[1]), headers, body)


def _read_until(sock: socket.socket, data: bytes, done) -> bytes | None:
    """`data` and what the socket sends after it until `done(data)`; None when the connection closes first."""
    while not done(data):
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return None
        if not chunk:
            return None
        data += chunk
    return data


@pytest.fixture(params=["uvloop", "asyncio"])
def serving(disc_dir, request):
    """A server process on `disc_dir`, on each event loop: (process, HTTP port)."""
    port = free_port()
    env = {**os.environ, "ELECTRIC_MODEL": str(disc_dir), "ELECTRIC_HTTP_PORT": str(port), "ELECTRIC_GRPC_PORT": "-1",
           "ELECTRIC_THREADS": "1", "ELECTRIC_WARMUP": "false", "ELECTRIC_ACCESS_LOG": "false",
           "ELECTRIC_EVENT_LOOP": request.param, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "server"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}")
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.communicate()


@pytest.mark.integration
def test_every_request_that_arrived_before_sigterm_is_answered(serving):
    proc, port = serving
    keep_alive = []
    for _ in range(8):  # connections that have been answered once and wait, idle, for their next request
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(request(port))
        status, headers, _ = read_response(s)
        assert status == 200 and headers.get("connection") != "close"
        keep_alive.append(s)
    fresh = []
    proc.send_signal(signal.SIGSTOP)  # the server reads nothing until SIGCONT
    try:
        time.sleep(0.3)  # past uvicorn's 0.1 s tick: its shutdown is due as soon as the process resumes
        for s in keep_alive:
            s.sendall(request(port))
        for _ in range(8):  # accepted by the kernel, waiting in the listener's queue
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.sendall(request(port))
            fresh.append(s)
        proc.send_signal(signal.SIGTERM)
    finally:
        proc.send_signal(signal.SIGCONT)
    answers = {"keep-alive": [read_response(s) for s in keep_alive], "fresh": [read_response(s) for s in fresh]}
    for s in keep_alive + fresh:
        s.close()
    for kind, replies in answers.items():
        for reply in replies:
            assert reply is not None, f"a request on a {kind} connection got no answer: {answers}"
            status, _, body = reply
            assert status == 200 or (status == 503 and json.loads(body)["error_type"] == "shutting_down"), body
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]


CLIENTS = 32


@pytest.mark.integration
def test_sigterm_under_load_answers_every_request_sent(serving):
    """32 keep-alive clients, each sending its next request as soon as it has read an answer, and reconnecting when
    told `connection: close`; SIGTERM arrives in the middle. No request sent is left without an answer: each gets its
    200, or 503 `shutting_down` when the server read it after the signal; a connection attempt after the listener
    closed is refused (nothing was sent on it)."""
    proc, port = serving
    signalled = threading.Event()
    lock = threading.Lock()
    outcomes: collections.Counter = collections.Counter()  # ("before" | "after" the signal, outcome)

    def count(outcome: str, sent_after: bool) -> None:
        with lock:
            outcomes["after" if sent_after else "before", outcome] += 1

    def client() -> None:
        sock, fresh_after = None, False
        while True:
            if sock is None:
                try:
                    fresh_after = signalled.is_set()
                    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                except OSError:  # the listener has closed: the client knows its request was never sent
                    count("refused", signalled.is_set())
                    return
            sent_after = signalled.is_set()
            try:
                sock.sendall(request(port))
                reply = read_response(sock)
            except OSError:
                reply = None
            if reply is None:
                count("lost on a connection made " + ("after" if fresh_after else "before"), sent_after)
                sock.close()
                return
            status, headers, body = reply
            assert status == 200 or (status == 503 and json.loads(body)["error_type"] == "shutting_down"), body
            count(str(status), sent_after)
            if headers.get("connection") == "close":
                sock.close()
                sock = None

    threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(n for (_, what), n in outcomes.items() if what == "200") < 4 * CLIENTS:  # under load
        assert time.monotonic() < deadline, outcomes
        time.sleep(0.01)
    signalled.set()
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), outcomes
    _, err = proc.communicate(timeout=60)
    got = {f"{when} {what}": n for (when, what), n in sorted(outcomes.items())}
    print(f"SIGTERM under load, {CLIENTS} keep-alive clients: {got}")
    assert not [k for k in got if "lost" in k], got  # every request sent got an answer
    assert sum(n for k, n in got.items() if k.endswith("refused")) == CLIENTS, got  # each ended on a closed listener
    assert proc.returncode == 0, err[-3000:]
