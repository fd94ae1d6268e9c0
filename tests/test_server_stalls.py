"""Issue 30: no request within the limits can stall the server for everyone else.

- Item 2: a request head over max_header_bytes, or with more than max_headers headers, is a 431 (or a closed
  connection) before the API key is checked or the body read, while other clients are answered.

Every test starts a server (BackgroundServer on conftest's random tiny discriminator): integration.
"""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest
from conftest import AUTH, KEY

from server.app import BackgroundServer
from server.settings import Settings

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.integration]

MAX_HEADER_BYTES = 65_536  # the default max_header_bytes
SMALL = {"texts": ["show me flights from boston to denver"]}


@pytest.fixture(scope="module")
def server(disc_dir):
    s = Settings(model=disc_dir, http_port=0, grpc_port=0, api_key=KEY, threads=1, warmup=False, access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


def failures(server, **labels) -> float:
    from test_server_api import metric

    return metric(httpx.get(f"{server.url}/metrics").text, "electric_request_failures_total", **labels)



# ---- item 2: headers -------------------------------------------------------------------------------------------

def send_head(port: int, head: bytes, body: bytes = b"", sent: threading.Event | None = None) -> bytes | None:
    """Send a request head in 64 KiB writes (setting `sent` after the first), then its body; the server's answer,
    or None when it closed the connection before the whole head was sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        try:
            for i in range(0, len(head), 65536):
                s.sendall(head[i:i + 65536])
                if sent is not None:
                    sent.set()
            s.sendall(body)
        except (BrokenPipeError, ConnectionResetError):
            return None
        finally:
            if sent is not None:
                sent.set()
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def head(port: int, *headers: bytes, body: bytes = b"") -> bytes:
    lines = [b"POST /v1/score HTTP/1.1", b"host: 127.0.0.1:%d" % port, b"content-type: application/json",
             b"content-length: %d" % len(body), b"connection: close", *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def test_an_oversized_header_is_431_before_the_key_while_others_are_answered(server):
    body = json.dumps(SMALL).encode()
    before = failures(server, route="unmatched", status="431", error_type="headers_too_large")
    huge = head(server.port, b"x-big: " + b"a" * 8_000_000, body=body)  # no API key: 431 comes first
    sent = threading.Event()
    answers = []
    sender = threading.Thread(target=lambda: answers.append(send_head(server.port, huge, body, sent)))
    sender.start()
    assert sent.wait(60)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:  # while the big head is being sent
        assert c.post("/v1/score", json=SMALL).status_code == 200
    sender.join(120)
    [answer] = answers
    assert answer is None or answer.startswith(b"HTTP/1.1 431 "), answer[:300]
    if answer is not None:
        error = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert error == {"error": f"the request line and headers are over the limit of {MAX_HEADER_BYTES} bytes "
                                  "(max_header_bytes)", "error_type": "headers_too_large"}
    assert failures(server, route="unmatched", status="431", error_type="headers_too_large") == before + 1


@pytest.mark.parametrize("headers, answer", [
    ([b"x-h%d: v" % i for i in range(200)], b"HTTP/1.1 431 "),  # too many
    ([b"x-big: " + b"a" * (MAX_HEADER_BYTES - 2000)], b"HTTP/1.1 401 "),  # within the limit: the key is checked
    ([b"x-big: " + b"a" * 200_000], b"HTTP/1.1 431 "),  # over the limit, in fewer reads than it takes to notice
], ids=["200-headers", "62KiB", "200KB"])
def test_header_limits(server, headers, answer):
    body = json.dumps(SMALL).encode()
    got = send_head(server.port, head(server.port, *headers, body=body), body)
    assert got is None and answer.startswith(b"HTTP/1.1 431") or got.startswith(answer), (got or b"")[:300]
    if got is not None and answer.startswith(b"HTTP/1.1 431"):
        assert json.loads(got.partition(b"\r\n\r\n")[2])["error_type"] == "headers_too_large"
