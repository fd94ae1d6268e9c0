"""Serving on the GPU: `python -m server --backend torch` (CUDA when there is one), every route once, then requests/s
and p50/p99 latency at each concurrency, beside the CPU int8 server on the same model (`electric export --quantize
int8`, ONNX Runtime's CPU provider).

    python benchmarks/bench_gpu_serve.py --model RUN/discriminator --json OUT/gpu_serve.json
    python benchmarks/bench_gpu_serve.py --model RUN/discriminator --seconds 1 --concurrency 1 4 --json /tmp/s.json

For each server (torch first, then int8; --no-int8 leaves the second out): started in its own process
(benchmarks/_server_harness.Server), every route called once - HTTP GET /health, /ready, /info, /metrics and POST
/v1/score, /v1/rerank, /v1/detect (/v1/classify only where a classifier is served: none here), gRPC Scoring/Score,
Scoring/Rerank, Detection/Detect, Info/GetInfo and grpc.health.v1 Health/Check - then one ATIS hypothesis per request
(POST /v1/score over keep-alive connections, `load_http`) at each --concurrency for --seconds.

--json is rewritten whole (write, then rename) after every figure: {"gpu", "model", "servers": {"torch" |
"onnx-int8-cpu": {"command", "providers", "routes": {ROUTE: "ok" | "FAILED: reason"}, "load": {CONCURRENCY:
{"requests", "rps", "p50_ms", "p99_ms", "errors"}}}}, "failures": [one line each]}. A step that fails prints one
line (`FAILED serve ...`) and the next runs; the exit status is 1 when any failed. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _bench_models import sentences  # noqa: E402
from _figures import set_in, write_figures  # noqa: E402
from _server_harness import Server, load_http  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="an ElectraForPreTraining checkpoint (a run's discriminator/)")
    ap.add_argument("--json", required=True, help="write the figures here, rewritten after every one")
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 16, 64])
    ap.add_argument("--seconds", type=float, default=5.0, help="per load point (default 5)")
    ap.add_argument("--sentences", type=int, default=800, help="ATIS hypotheses sent, one a request")
    ap.add_argument("--threads", type=int, default=0, help="ONNX Runtime threads of the int8 server (0: its own)")
    ap.add_argument("--no-int8", action="store_true", help="leave out the CPU int8 server")
    ap.add_argument("--work", default="runs/gpu_serve", help="the int8 export and the servers' logs")
    ap.add_argument("--gpu", help="the device's name, for the JSON")
    return ap.parse_args(argv)


class Figures:
    def __init__(self, path: Path):
        self.path, self.failed = path, 0
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}

    def set(self, keys: list[str], value: Any) -> None:
        write_figures(self.path, set_in(self.data, keys, value))

    def fail(self, what: str, e: BaseException) -> str:
        line = f"FAILED serve {what}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
        print(line, flush=True)
        self.failed += 1
        self.set(["failures"], [*self.data.get("failures", []), line])
        return line


def http_routes(url: str, text: str) -> dict[str, Callable[[], Any]]:
    import httpx

    def get(path: str) -> Callable[[], Any]:
        return lambda: httpx.get(url + path, timeout=60).raise_for_status()

    def post(path: str, body: dict) -> Callable[[], Any]:
        return lambda: httpx.post(url + path, json=body, timeout=60).raise_for_status()

    return {"GET /health": get("/health"), "GET /ready": get("/ready"), "GET /info": get("/info"),
            "GET /metrics": get("/metrics"),
            "POST /v1/score": post("/v1/score", {"texts": [text], "per_token": True}),
            "POST /v1/rerank": post("/v1/rerank", {"hypotheses": [text, text + " too"]}),
            "POST /v1/detect": post("/v1/detect", {"texts": [text]})}


def grpc_routes(target: str, text: str) -> dict[str, Callable[[], Any]]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from electric.grpc_gen.electric.v1 import electric_pb2 as pb
    from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc

    def call(make: Callable[[grpc.Channel], Any]) -> Callable[[], Any]:
        def one() -> Any:
            with grpc.insecure_channel(target) as ch:
                return make(ch)
        return one

    return {"gRPC Scoring/Score": call(lambda ch: pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=[text]),
                                                                               timeout=60)),
            "gRPC Scoring/Rerank": call(lambda ch: pb_grpc.ScoringStub(ch).Rerank(
                pb.RerankRequest(lists=[pb.NBestList(hypotheses=[text, text + " too"])]), timeout=60)),
            "gRPC Detection/Detect": call(lambda ch: pb_grpc.DetectionStub(ch).Detect(
                pb.DetectRequest(texts=[text]), timeout=60)),
            "gRPC Info/GetInfo": call(lambda ch: pb_grpc.InfoStub(ch).GetInfo(pb.InfoRequest(), timeout=60)),
            "gRPC Health/Check": call(lambda ch: health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(), timeout=60))}


def serve_one(args: argparse.Namespace, figs: Figures, label: str, model: Path, extra: list[str],
              threads: int | None) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    server = Server(model, threads, work / f"{label}.log", extra)
    figs.set(["servers", label, "command"], server.cmd)
    try:
        server.wait_ready(timeout=180)
        from dataclasses import asdict

        from electric.client import Client

        with Client(server.url) as client:
            figs.set(["servers", label, "info"], {"models": asdict(client.info())["models"]})
        texts = sentences(args.sentences)
        routes = {**http_routes(server.url, texts[0]), **grpc_routes(f"127.0.0.1:{server.grpc}", texts[0])}
        for route, call in routes.items():
            try:
                call()
                figs.set(["servers", label, "routes", route], "ok")
            except Exception as e:  # noqa: BLE001 - each route once; a failure is a figure too
                figs.set(["servers", label, "routes", route], figs.fail(f"{label} {route}", e))
        for c in args.concurrency:
            try:
                r = asyncio.run(load_http(server.url, texts, c, args.seconds))
                figs.set(["servers", label, "load", str(c)], r)
                print(f"{label} c={c}: {r['rps']:.1f} req/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
                      + (f", errors {r['errors']}" if r["errors"] else ""), flush=True)
            except Exception as e:  # noqa: BLE001
                figs.fail(f"{label} c={c}", e)
    finally:
        server.stop()


def export_int8(args: argparse.Namespace) -> Path:
    out = Path(args.work) / "int8"
    log = Path(args.work) / "export.log"
    t0 = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run([sys.executable, "-m", "electric.cli", "export", "--model", args.model, "--out", str(out),
                             "--quantize", "int8", "--overwrite"], cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        last = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["no output"]
        raise RuntimeError(f"electric export exited {rc}: {last[0]} (log: {log})")
    print(f"int8 export in {time.perf_counter() - t0:.1f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    figs = Figures(Path(args.json))
    figs.set(["model"], str(args.model))
    if args.gpu is not None:
        figs.set(["gpu"], args.gpu)
    try:
        serve_one(args, figs, "torch", Path(args.model), ["--backend", "torch"], None)
    except Exception as e:  # noqa: BLE001 - the int8 server still runs
        figs.fail("torch", e)
    if not args.no_int8:
        try:
            serve_one(args, figs, "onnx-int8-cpu", export_int8(args),
                      ["--backend", "onnx", "--providers", "CPUExecutionProvider"], args.threads or None)
        except Exception as e:  # noqa: BLE001
            figs.fail("onnx-int8-cpu", e)
    return 1 if figs.failed else 0


if __name__ == "__main__":
    sys.exit(main())
