"""What the server tests share: the API key, a server's metrics, a backend a test can hold or break, a server
process on a free port, a raw HTTP/1.1 client, and the checks of answers. The fixtures that reach a module's `server`
(a running BackgroundServer), `http` and `channel`, are tests/conftest.py's: tests outside this folder use them too."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.conftest import REPO

KEY = "s3cret-key"
AUTH = {"authorization": f"Bearer {KEY}"}
GRPC_AUTH = (("authorization", f"Bearer {KEY}"),)


# ---- a server's state ------------------------------------------------------------------------------------------

def metric(text: str, name: str, **labels) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        sample, _, lab = head.partition("{")
        if sample != name:
            continue
        if all(f'{k}="{v}"' in lab for k, v in labels.items()):
            return float(value)
    return 0.0


def failures(server, **labels) -> float:
    """electric_request_failures_total of a running server, for the sample with `labels`."""
    return metric(httpx.get(f"{server.url}/metrics").text, "electric_request_failures_total", **labels)


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    """Poll `condition()` until it holds; the timeout only bounds a hang, no outcome depends on it."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what} after {timeout:g} s"
        time.sleep(0.005)


def assert_routes_logged(client, caplog, paths: dict[str, str]) -> None:
    """GET each of `paths` ({path: the route the access log should name}) and check the access log names it, with
    404 for the paths holding "nope" and 200 for the rest (caplog at INFO for "electric.access")."""
    for path in paths:
        client.get(path)
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "electric.access"]
    assert [(x["route"], x["status"]) for x in logged] == [
        (route, 404 if "nope" in path else 200) for path, route in paths.items()]


def assert_close(a, b, tol=1e-4, path="$"):
    """`a` equals `b` (nested dicts and lists), floats within a relative `tol`; the message names the first place
    they differ."""
    if isinstance(a, dict):
        assert set(a) == set(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_close(a[k], b[k], tol, f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, tol, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert abs(a - b) <= tol * max(1.0, abs(b)), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


# ---- a backend that can be slowed down or broken -----------------------------------------------------------------

class ControlledBackend:
    """Wraps a real backend. After `hold()` every batch waits in the worker thread until `release()`, and
    `running` is set once one waits: a test keeps the worker busy for exactly as long as it needs, whatever
    the machine's load. `fail` raises; controlled_loader's `gate` (an Event) blocks loading."""

    def __init__(self, inner):
        self.inner, self.fail, self.batches = inner, False, []
        self.running, self._open = threading.Event(), threading.Event()
        self._open.set()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def hold(self) -> None:
        self.running.clear()
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def run(self, input_ids, attention_mask, token_type_ids=None):
        self.batches.append(input_ids.shape)
        if self.fail:
            raise RuntimeError("simulated CUDA failure at /secret/path")
        self.running.set()
        if not self._open.wait(120):
            raise RuntimeError("a held test backend was never released")
        return self.inner.run(input_ids, attention_mask, token_type_ids)


def controlled_loader(gate: threading.Event | None = None):
    """A BackgroundServer `loader` whose backends are ControlledBackends (loading waits for `gate` when given)."""
    from electric.inference.backend import load_backend

    def load(path, backend):
        if gate is not None:
            assert gate.wait(60)
        return ControlledBackend(load_backend(path, backend))

    return load


# ---- a server process ------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, url: str, timeout_s: float = 120.0) -> None:
    """Wait for a server process (subprocess.Popen with stderr piped) to answer GET {url}/ready with 200; fail
    with its stderr's tail when it exits first, or when it is not ready after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not get ready"
        time.sleep(0.1)


@contextmanager
def server_process(*, nofile: int | None = None, **env: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """`python -m server` on a free HTTP port with `env` (ELECTRIC_* settings), once ready: (process, port); with
    `nofile`, its soft RLIMIT_NOFILE lowered to that. Killed on exit if it still runs."""
    port = free_port()
    env = {**os.environ, "ELECTRIC_HTTP_PORT": str(port), "ELECTRIC_GRPC_PORT": "-1", "ELECTRIC_THREADS": "1",
           "ELECTRIC_ACCESS_LOG": "false", "PYTHONUNBUFFERED": "1", **env}

    def limit() -> None:  # in the child, before it runs the server
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc = subprocess.Popen([sys.executable, "-m", "server"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=None if nofile is None else limit)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}")
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.communicate()


# ---- a raw HTTP/1.1 client ---------------------------------------------------------------------------------------

def raw_post(port: int, route: str, body: bytes) -> bytes:
    """The bytes of one `POST route` with a JSON `body`, as a keep-alive client sends it."""
    return (f"POST {route} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


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
