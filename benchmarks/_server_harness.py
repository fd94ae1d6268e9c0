"""Running a server under load, for the server benchmarks: a server in its own process (started, ready, its CPU
time and memory, stopped), asyncio HTTP and gRPC load generators that report requests/s and latency
percentiles, and the server's batch statistics.

Used by bench_server, profile_server, bench_huge_inputs and bench_serve_startup.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stat_cpu_seconds(stat: str, ticks_per_s: int) -> float:
    """User + system CPU seconds in the text of /proc/PID/stat: fields 14 and 15 (utime, stime: every thread of the
    process, not its children), counted after the ')' that closes the command name (which may hold spaces and ')')."""
    fields = stat.rsplit(")", 1)[1].split()  # fields[0] is field 3, the state
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far, all its threads (Linux /proc)."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def machine() -> str:
    from electric.hardware import cpu_description

    return f"{cpu_description()}, Python {platform.python_version()}"


class ServerProcess:
    """A server in its own process: started by `cmd` in `cwd`, ready when GET `ready_path` answers 200."""

    def __init__(self, cmd: list[str], http_port: int, log: Path, ready_path: str = "/ready",
                 env: dict[str, str] | None = None, cwd: Path = REPO):
        self.cmd = " ".join(cmd[1:]) if cmd[0] == sys.executable else " ".join(cmd)
        self.ready_path = ready_path
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self.url = f"http://127.0.0.1:{http_port}"

    def wait_ready(self, timeout: float = 300) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.url}{self.ready_path}", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"the server did not get ready; see {self.log.name}")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (all its threads)."""
        return cpu_seconds(self.proc.pid)

    def stop(self) -> int:
        self.proc.terminate()
        rc = self.proc.wait(60)
        self.log.close()
        return rc


class Server(ServerProcess):
    """`python -m server` serving `model` (or, with `classifier`, only that classifier, named "classifier"), with `env`
    added to the environment (e.g. ELECTRIC_ONNX_PRECISION)."""

    def __init__(self, model: Path, threads: int | None, log: Path, extra: list[str], classifier: bool = False,
                 env: dict[str, str] | None = None):
        self.http, self.grpc = free_port(), free_port()
        what = ["--classifier", f"classifier={model}"] if classifier else ["--model", str(model)]
        super().__init__([sys.executable, "-m", "server", *what, "--http-port", str(self.http),
                          "--grpc-port", str(self.grpc), *(["--threads", str(threads)] if threads else []), *extra],
                         self.http, log, env=env)


def score_body(text: str) -> dict:
    return {"texts": [text]}


async def load_http(url: str, texts: list[str], concurrency: int, seconds: float, client: str = "raw",
                    path: str = "/v1/score", body: Callable[[str], dict] = score_body) -> dict:
    """`concurrency` keep-alive connections, each sending one request after the other for `seconds`: one text
    per request, as `body(text)` POSTed to `path`."""
    if client == "httpx":
        return await load_httpx(url, texts, concurrency, seconds, path, body)
    host, port = url.split("//")[1].split(":")
    bodies = [json.dumps(body(t)).encode() for t in texts]
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: "
    lat, errors = [], {}

    async def request(reader, writer, body: bytes) -> int:
        writer.write(head.encode() + str(len(body)).encode() + b"\r\n\r\n" + body)
        status_line = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        data = await reader.readexactly(length)
        status = int(status_line.split()[1])
        if status != 200:
            errors[f"http {status} {json.loads(data).get('error_type')}"] = \
                errors.get(f"http {status} {json.loads(data).get('error_type')}", 0) + 1
        return status

    async def worker(k: int):
        reader, writer = await asyncio.open_connection(host, int(port))
        await request(reader, writer, bodies[k % len(bodies)])
        await start.wait()
        i = k
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            try:
                if await request(reader, writer, bodies[i % len(bodies)]) == 200:
                    lat.append(time.perf_counter() - t0)
            except (OSError, asyncio.IncompleteReadError) as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                reader, writer = await asyncio.open_connection(host, int(port))
            i += concurrency
        writer.close()

    start = asyncio.Event()
    t_end = float("inf")
    tasks = [asyncio.ensure_future(worker(k)) for k in range(concurrency)]
    await asyncio.sleep(0.5)  # connections open and warm
    t_start = time.perf_counter()
    t_end = t_start + seconds
    start.set()
    await asyncio.gather(*tasks)
    return summary(lat, errors, time.perf_counter() - t_start)


async def load_httpx(url: str, texts: list[str], concurrency: int, seconds: float, path: str = "/v1/score",
                     body: Callable[[str], dict] = score_body) -> dict:
    import httpx

    lat, errors = [], {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        async def worker(k: int):
            i = k
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                try:
                    r = await client.post(path, json=body(texts[i % len(texts)]))
                    ok = r.status_code == 200
                    key = None if ok else f"http {r.status_code} {r.json().get('error_type')}"
                except httpx.HTTPError as e:
                    key = type(e).__name__
                if key is None:
                    lat.append(time.perf_counter() - t0)
                else:
                    errors[key] = errors.get(key, 0) + 1
                i += concurrency

        await client.post(path, json=body(texts[0]))
        t_start = time.perf_counter()
        t_end = t_start + seconds
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    return summary(lat, errors, elapsed)


async def load_grpc(target: str, texts: list[str], concurrency: int, seconds: float, classify: bool = False) -> dict:
    """As load_http, over gRPC: Scoring/Score, or Classification/Classify when `classify`."""
    import grpc

    from electric.grpc_gen.electric.v1 import electric_pb2 as pb
    from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc

    lat, errors = [], {}
    async with grpc.aio.insecure_channel(target) as ch:
        if classify:
            call = pb_grpc.ClassificationStub(ch).Classify
            requests = [pb.ClassifyRequest(texts=[t]) for t in texts]
        else:
            call = pb_grpc.ScoringStub(ch).Score
            requests = [pb.ScoreRequest(texts=[t]) for t in texts]

        async def worker(k: int):
            i = k
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                try:
                    await call(requests[i % len(requests)], timeout=60)
                    lat.append(time.perf_counter() - t0)
                except grpc.aio.AioRpcError as e:
                    errors[e.code().name] = errors.get(e.code().name, 0) + 1
                i += concurrency

        await call(requests[0])
        t_start = time.perf_counter()
        t_end = t_start + seconds
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    return summary(lat, errors, elapsed)


def summary(lat: list[float], errors: dict, elapsed: float) -> dict:
    a = np.asarray(lat) if lat else np.asarray([np.nan])
    return {"requests": len(lat), "rps": len(lat) / elapsed, "p50_ms": 1e3 * float(np.percentile(a, 50)),
            "p99_ms": 1e3 * float(np.percentile(a, 99)), "errors": errors}


def batch_stats(url: str) -> tuple[float, float]:
    """(batches, inputs) so far, from the server's batch-size histogram."""
    import httpx

    count = total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("electric_batch_size_count"):
            count = float(line.rsplit(" ", 1)[1])
        elif line.startswith("electric_batch_size_sum"):
            total = float(line.rsplit(" ", 1)[1])
    return count, total

