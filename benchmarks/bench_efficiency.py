"""What `electric serve` spends per request: the server's CPU next to the bare ONNX Runtime's on the batches it formed.

    python benchmarks/bench_efficiency.py --model runs/bench-server/model-electric-discriminator-onnx
    python benchmarks/bench_efficiency.py --model DIR --seconds 2 --warmup 1 --concurrency 1 8 --raw-seconds 1 \\
        --work /tmp/bench-eff-smoke --out /tmp/serving_efficiency.json          # a smoke run: figures mean nothing

Load generators (not Python, so the client's CPU stays small; the script stops with one line naming what is
missing): `wrk` for HTTP (benchmarks/wrk_post_bodies.lua POSTs the JSON bodies) and `h2load` for gRPC (a
pre-encoded ScoreRequest: 5-byte gRPC prefix + protobuf, `content-type: application/grpc`, `te: trailers`).
Install them with

    apt-get install -y wrk nghttp2-client      # Debian / Ubuntu: wrk 4.1, h2load (nghttp2) 1.52

For each precision of the export (`--precisions`, default fp32 and int8; the server is told with
ELECTRIC_ONNX_PRECISION), the server runs in its own process (`python -m server --threads T`) and, for each route
and concurrency (closed loop: C connections, each sending its next request when answered):
- routes: `score` = POST /v1/score with one enwiki sentence of 10-40 words a request (_bench_models.wiki_sentences);
  `rerank` = POST /v1/rerank with one 100-best list a request (ATIS hypotheses, as bench_server's n-best rows);
  `grpc-score` = Scoring/Score with one sentence (h2load sends one message: the pool's median-length sentence);
- the generator runs for warm-up + window + 1 s; at the end of the warm-up and of the window the script reads the
  server's /metrics (requests and failures of the route, electric_batch_shapes_total: forward passes by batch size
  and padded length) and the user + system CPU of the server process (all its threads) and of the generator from
  /proc/PID/stat. Over that steady window: req/s, server and client CPU ms per request, the batch shapes formed
  (its requests: the inputs the forward passes carried over the inputs of one request, a steady count even when
  answers come in bursts); p99 latency and the generator's own req/s are over its whole run;
- raw: with the server stopped, an OnnxBackend of the same export, precision and threads in this process runs each
  window's batch shapes (random token ids; the cost does not depend on them), as many runs of each shape as its share
  of the window's passes (about `--raw-seconds` a row), timed by this process's CPU clock: raw CPU ms per request =
  sum over shapes (passes x CPU per pass) / inputs in those passes x inputs per request. Efficiency = raw / server.

Writes `--out` (JSON: {"model", "cpu", "rows": [{"route", "concurrency", "precision", "req_s", "p99_ms",
"server_cpu_ms_per_req", "raw_cpu_ms_per_req", "client_cpu_ms_per_req", ...}], "peer": []}) and the same name with
.md beside it. Default durations (5 s warm-up, 20 s window, 3 routes x 3 concurrencies x 2 precisions) take about
10-12 minutes. It asserts nothing; run it on a quiet machine (the report gives the load average).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _bench_models import nbest_lists, wiki_sentences  # noqa: E402
from _load_generators import h2load_p99_ms, parse_h2load, parse_wrk  # noqa: E402
from _server_harness import Server, cpu_seconds  # noqa: E402

from electric.checkpoint import ExportManifest  # noqa: E402

WRK_SCRIPT = Path(__file__).resolve().parent / "wrk_post_bodies.lua"
PACKAGES = {"wrk": "wrk", "h2load": "nghttp2-client"}  # each generator's Debian / Ubuntu package
TAIL_S = 1.0  # the generator runs this long past the window, so the window ends under load


@dataclass(frozen=True)
class Route:
    name: str  # the report's "route"
    transport: str  # http | grpc
    label: str  # the server's route label in /metrics
    generator: str  # wrk | h2load


ROUTES = {"score": Route("/v1/score", "http", "/v1/score", "wrk"),
          "rerank": Route("/v1/rerank", "http", "/v1/rerank", "wrk"),
          "grpc-score": Route("Scoring/Score", "grpc", "/electric.v1.Scoring/Score", "h2load")}


def missing_generators(routes: list[str], which=shutil.which) -> str | None:
    """One line naming the load generators `routes` need that are not on PATH and how to install them, or None."""
    needed = {ROUTES[r].generator for r in routes}
    missing = [g for g in PACKAGES if g in needed and not which(g)]
    if not missing:
        return None
    return (f"bench_efficiency: {' and '.join(missing)} not found on PATH; install with "
            f"`apt-get install -y {' '.join(PACKAGES[g] for g in missing)}`")


# ---- what the server and the generators report ------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def prometheus_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called `name` in Prometheus text format."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            out.append((dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


@dataclass
class Sample:
    """One reading at a window's edge: wall time, CPU seconds of the server and the generator, and the server's
    counters for the route (answered requests, failures, forward passes by (batch size, padded length))."""

    t: float
    server_cpu: float
    client_cpu: float
    requests: float
    failures: float
    shapes: Counter


def read_counters(text: str, route: Route, model: str = "scorer") -> tuple[float, float, Counter]:
    """(answered requests, failed requests, forward passes by (size, padded length)) from a /metrics text."""
    def of_route(name):
        return sum(v for lab, v in prometheus_samples(text, name)
                   if lab.get("route") == route.label and lab.get("transport") == route.transport)

    shapes = Counter({(int(lab["size"]), int(lab["length"])): v
                      for lab, v in prometheus_samples(text, "electric_batch_shapes_total") if lab.get("model") == model})
    return of_route("electric_requests_total"), of_route("electric_request_failures_total"), shapes


def window(start: Sample, end: Sample, inputs_per_request: int) -> dict:
    """The steady window between two samples: requests, req/s, CPU ms per request of server and client, the
    cores they used, failures, and the forward passes it formed (shape -> count). Its requests are the inputs its
    passes carried over the inputs of one request - the work done, at a steady rate even when answers come in
    bursts (at c=64 the 64 lists of /v1/rerank are batched round robin, so their answers come together); the
    requests answered in it are `answered`."""
    dt = end.t - start.t
    shapes = Counter({k: c for k, c in (end.shapes - start.shapes).items() if c > 0})
    passes = sum(shapes.values())
    n = sum(size * c for (size, _), c in shapes.items()) / inputs_per_request
    if n <= 0 or dt <= 0:
        raise ValueError(f"no forward pass in the window ({passes:g} passes in {dt:.2f} s)")
    return {"requests": n, "answered": end.requests - start.requests, "seconds": dt, "req_s": n / dt,
            "server_cpu_ms_per_req": 1e3 * (end.server_cpu - start.server_cpu) / n,
            "client_cpu_ms_per_req": 1e3 * (end.client_cpu - start.client_cpu) / n,
            "server_cores": (end.server_cpu - start.server_cpu) / dt,
            "client_cores": (end.client_cpu - start.client_cpu) / dt,
            "errors": end.failures - start.failures,
            "mean_batch": sum(s * c for (s, _), c in shapes.items()) / passes if passes else float("nan"),
            "shapes": shapes}


def raw_ms_per_request(shapes: Counter, cpu_per_pass: dict[tuple[int, int], float], inputs_per_request: int) -> float:
    """Bare runtime CPU ms per request: the window's passes at their measured CPU seconds per pass, over the
    inputs they carried, times the inputs of one request (per input, so a pass cut by the window's edge does not
    skew it)."""
    inputs = sum(size * c for (size, _), c in shapes.items())
    if not inputs:
        return float("nan")
    return 1e3 * sum(c * cpu_per_pass[k] for k, c in shapes.items()) / inputs * inputs_per_request


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message: 0 (not compressed), 4-byte big-endian length, the protobuf bytes."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


# ---- the report ---------------------------------------------------------------------------------------------------

ROW_KEYS = ("route", "concurrency", "precision", "req_s", "p99_ms", "server_cpu_ms_per_req", "raw_cpu_ms_per_req",
            "client_cpu_ms_per_req")


def make_row(route: str, concurrency: int, precision: str, w: dict, raw_ms: float, inputs_per_request: int) -> dict:
    """One row of the report from a measured window `w` (window() and the generator's p99_ms, req_s and errors):
    ROW_KEYS first, then efficiency (raw / server CPU per request) and the context."""
    return {"route": route, "concurrency": concurrency, "precision": precision, "req_s": round(w["req_s"], 2),
            "p99_ms": _finite(w["p99_ms"], 3), "server_cpu_ms_per_req": round(w["server_cpu_ms_per_req"], 4),
            "raw_cpu_ms_per_req": round(raw_ms, 4), "client_cpu_ms_per_req": round(w["client_cpu_ms_per_req"], 4),
            "efficiency": round(raw_ms / w["server_cpu_ms_per_req"], 4) if w["server_cpu_ms_per_req"] > 0 else None,
            "inputs_per_request": inputs_per_request, "server_cores": round(w["server_cores"], 3),
            "client_cores": round(w["client_cores"], 4), "mean_batch": round(w["mean_batch"], 2),
            "batch_shapes": len(w["shapes"]), "window_s": round(w["seconds"], 2), "requests": round(w["requests"], 1),
            "answered": int(w["answered"]), "generator_req_s": _finite(w["generator_req_s"], 2),
            "errors": int(w["errors"]), "client_errors": {k: v for k, v in w["client_errors"].items() if v}}


def _finite(x: float, digits: int) -> float | None:
    """`x` rounded, or None (JSON null) when there is no such figure (e.g. no answer came back in the run)."""
    return round(x, digits) if math.isfinite(x) else None


def report(model: str, cpu: str, rows: list[dict], **context) -> dict:
    """The JSON report: {"model", "cpu", "rows", "peer"} (peer: filled by the peer comparison) and `context`."""
    return {"model": model, "cpu": cpu, "rows": rows, "peer": [], **context}


def _ms(x: float | None) -> str:
    """A figure of the table with two decimals, or - when there is none."""
    return "-" if x is None else f"{x:.2f}"


def render_md(rep: dict) -> str:
    c = rep.get("context", {})
    out = ["# Serving efficiency: server CPU per request against the bare runtime", "",
           f"Command: `{c.get('command', '')}`  ",
           f"Model: `{rep['model']}` ({c.get('model_source', '')})  ",
           f"CPU: {rep['cpu']}; int8 GEMM kernel {c.get('int8_kernel', '?')}  ",
           f"Server: `{c.get('server_cmd', '')}` (per precision, ELECTRIC_ONNX_PRECISION)  ",
           f"Generators: {c.get('generators', '')}  ",
           f"Load average: {c.get('load_start', float('nan')):.2f} at the start, {c.get('load_end', float('nan')):.2f} "
           f"at the end{'' if c.get('load_start', 9) < 0.5 else ' (something else shared the cores)'}.", "",
           f"Closed loop; per row {c.get('warmup_s')} s warm-up, then a {c.get('window_s')} s window over which req/s and "
           "CPU are read (server: /proc/PID/stat, all threads; client: the generator's process; requests: the inputs "
           "the server's forward passes carried in the window over the inputs of one request); p99 and the "
           "generator's req/s are over its whole run. Raw = the same ONNX session in one process on the batch shapes the "
           "server formed in the window (electric_batch_shapes_total); efficiency = raw CPU / server CPU per request.",
           "", "| route | precision | concurrency | req/s | generator's req/s | p99 (ms) | server CPU ms/req | "
           "raw CPU ms/req | efficiency | client CPU ms/req | client cores | mean batch | errors |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rep["rows"]:
        eff = f"{r['efficiency']:.0%}" if r.get("efficiency") is not None else "-"
        errs = r["errors"] + sum(r.get("client_errors", {}).values())
        out.append(f"| {r['route']}{' (' + str(r['inputs_per_request']) + '-best)' if r['route'] == '/v1/rerank' else ''}"
                   f" | {r['precision']} | {r['concurrency']} | {r['req_s']:.1f} | {_ms(r['generator_req_s'])} | "
                   f"{_ms(r['p99_ms'])} | "
                   f"{r['server_cpu_ms_per_req']:.3f} | {r['raw_cpu_ms_per_req']:.3f} | {eff} | "
                   f"{r['client_cpu_ms_per_req']:.3f} | {r['client_cores']:.3f} | {r['mean_batch']:.1f} | {errs} |")
    out += ["", "## Targets (issue 33)", "", "| target | row | value | met |", "|---|---|---|---|"]
    for r in rep["rows"]:
        if r["concurrency"] == 64 and r["route"] in ("/v1/score", "/v1/rerank") and r.get("efficiency") is not None:
            out.append(f"| efficiency ≥ 80% at c=64 | {r['route']} {r['precision']} | {r['efficiency']:.0%} | "
                       f"{'yes' if r['efficiency'] >= 0.8 else 'no'} |")
        if r["concurrency"] == 1 and r["route"] == "/v1/score" and r["p99_ms"] is not None:
            bound = 2 * r["raw_cpu_ms_per_req"] + 2
            out.append(f"| p99 at c=1 ≤ 2 × raw + 2 ms | {r['route']} {r['precision']} | {r['p99_ms']:.2f} ms "
                       f"(bound {bound:.2f}) | {'yes' if r['p99_ms'] <= bound else 'no'} |")
        if r["concurrency"] == 64:
            out.append(f"| load client < 0.1 core at c=64 | {r['route']} {r['precision']} | {r['client_cores']:.3f} "
                       f"cores | {'yes' if r['client_cores'] < 0.1 else 'no'} |")
    out += peer_md(rep)
    out += ["", "Notes:", "- Raw at c=1 is one text a pass, so with one runtime thread its CPU is its latency (the p99 "
            "bound's raw).", "- /proc counts CPU in clock ticks (10 ms): a 20 s window resolves 0.0005 cores.",
            *[f"- {n}" for n in c.get("notes", [])], ""]
    return "\n".join(out)


def peer_md(rep: dict) -> list[str]:
    """The peer's table and the throughput target: our best precision's /v1/score req/s against its best engine's."""
    peer = [r for r in rep.get("peer", []) if "req_s" in r]
    if not rep.get("peer"):
        return []
    out = ["", "## The peer: infinity-emb 0.0.78 serving the same checkpoint (POST /embeddings, one text a request)", "",
           "| engine | concurrency | req/s | p99 (ms) | server CPU ms/req | errors |", "|---|---|---|---|---|---|"]
    out += [f"| {r['engine']} | {r['concurrency']} | {r['req_s']:.1f} | {_ms(r['p99_ms'])} | "
            f"{_ms(r['server_cpu_ms_per_req'])} | {sum(r['errors'].values())} |" for r in peer]
    out += [f"| {r['engine']} | - | did not start: {r['error']} | | | |" for r in rep["peer"] if "error" in r]
    for c in sorted({r["concurrency"] for r in peer} & {8, 64}):
        ours = max((r for r in rep["rows"] if r["route"] == "/v1/score" and r["concurrency"] == c),
                   key=lambda r: r["req_s"], default=None)
        theirs = max((r for r in peer if r["concurrency"] == c), key=lambda r: r["req_s"])
        if ours is not None:
            ratio = ours["req_s"] / theirs["req_s"] if theirs["req_s"] else float("inf")
            out.append(f"\nAt c={c}: ours ({ours['precision']}) {ours['req_s']:.1f} req/s against {theirs['engine']} "
                       f"{theirs['req_s']:.1f}: {ratio:.2f}x (target ≥ 2x: {'met' if ratio >= 2 else 'missed'}).")
    return out


# ---- running it ---------------------------------------------------------------------------------------------------

def scrape(url: str) -> str:
    import httpx

    return httpx.get(f"{url}/metrics", timeout=30).text


def sample(url: str, route: Route, server_pid: int, client_pid: int, start: bool) -> Sample:
    """Read the counters and both CPU clocks; the /metrics scrape (server CPU) stays outside the window: at its
    start the scrape comes first, at its end last."""
    if start:
        text = scrape(url)
    t, s_cpu, c_cpu = time.perf_counter(), cpu_seconds(server_pid), cpu_seconds(client_pid)
    if not start:
        text = scrape(url)
    requests, failures, shapes = read_counters(text, route)
    return Sample(t, s_cpu, c_cpu, requests, failures, shapes)


def wait_idle(url: str, timeout: float = 60) -> None:
    """Until the server has no request in flight (the previous row's stragglers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(v == 0 for _, v in prometheus_samples(scrape(url), "electric_requests_in_flight")):
            return
        time.sleep(0.2)


def generator_cmd(route: Route, server: Server, c: int, seconds: float, bodies: Path, log: Path) -> list[str]:
    if route.generator == "wrk":
        return ["wrk", "-t1", f"-c{c}", f"-d{seconds:g}s", "--timeout", "120s", "-s", str(WRK_SCRIPT), server.url,
                "--", str(bodies), route.label]
    return ["h2load", "-t1", f"-c{c}", "-m1", "-D", f"{seconds:g}", "-d", str(bodies), "--log-file", str(log),
            "-H", "content-type: application/grpc", "-H", "te: trailers",
            f"http://127.0.0.1:{server.grpc}{route.label}"]


def measure(route: Route, server: Server, c: int, bodies: Path, inputs_per_request: int, work: Path, warmup: float,
            seconds: float) -> dict:
    """One row's load: the generator for warm-up + window + tail; the steady window's figures and the p99."""
    wait_idle(server.url)
    log = work / f"h2load-{c}.log"
    out_path = work / "generator.out"
    with open(out_path, "w") as out:
        gen = subprocess.Popen(generator_cmd(route, server, c, warmup + seconds + TAIL_S, bodies, log),
                               stdout=out, stderr=subprocess.STDOUT)
        try:
            time.sleep(warmup)
            s0 = sample(server.url, route, server.proc.pid, gen.pid, start=True)
            time.sleep(seconds)
            s1 = sample(server.url, route, server.proc.pid, gen.pid, start=False)
            rc = gen.wait(warmup + seconds + 300)
        finally:
            if gen.poll() is None:
                gen.kill()
    text = out_path.read_text()
    if rc != 0:
        raise RuntimeError(f"{route.generator} exited with {rc}: {text[-800:]}")
    w = window(s0, s1, inputs_per_request)
    if route.generator == "wrk":
        res = parse_wrk(text)
        w.update(p99_ms=res["p99_us"] / 1e3 if res["requests"] else float("nan"), generator_req_s=res["requests"] / (res["duration_us"] / 1e6),
                 client_errors=res["errors"])
    else:
        res = parse_h2load(text)
        w.update(p99_ms=h2load_p99_ms(log.read_text()), generator_req_s=res["req_s"], client_errors=res["errors"])
    return w


def replay(model: Path, precision: str, threads: int | None, shapes: Counter, seconds: float, backend=None) -> dict:
    """CPU seconds per forward pass of each shape (size, padded length) on the bare runtime, `backend` (or an
    OnnxBackend of `model` at `precision` and `threads`): one warm pass each, then runs in proportion to the
    shape's count, about `seconds` of CPU in all, timed by this process's CPU clock (every thread)."""
    if backend is None:
        from electric.inference.runtime import OnnxBackend

        backend = OnnxBackend(model, threads=threads, precision=precision)
    rng = np.random.default_rng(0)
    vocab = int(backend.config.get("vocab_size") or 1000)
    inputs = {}
    est = {}
    for size, length in shapes:
        ids = rng.integers(min(1000, vocab - 1), vocab, size=(size, length), dtype=np.int64)  # (B, T)
        inputs[size, length] = (ids, np.ones_like(ids))
        t0 = time.process_time()
        backend.run(*inputs[size, length])  # warm: allocations for this shape
        est[size, length] = max(time.process_time() - t0, 1e-5)
    total = sum(shapes[k] * est[k] for k in shapes)
    scale = seconds / total if total > 0 else 1.0
    per_pass = {}
    for k, count in shapes.items():
        reps = max(2, math.ceil(count * scale))
        t0 = time.process_time()
        for _ in range(reps):
            backend.run(*inputs[k])
        per_pass[k] = (time.process_time() - t0) / reps
    return per_pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, metavar="DIR", help="an `electric export` directory (fp32 and int8)")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "int8"], choices=("fp32", "int8", "fp16"))
    ap.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64])
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of load before the window (default 5)")
    ap.add_argument("--seconds", type=float, default=20.0, help="the steady window, per row (default 20)")
    ap.add_argument("--raw-seconds", type=float, default=5.0, help="CPU seconds of raw replay per row (default 5)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads, server and raw (default 1)")
    ap.add_argument("--sentences", type=int, default=1000, help="enwiki sentences for /v1/score (default 1000)")
    ap.add_argument("--nbest", type=int, default=100, help="hypotheses per /v1/rerank list (default 100)")
    ap.add_argument("--server-args", default="", help="extra `python -m server` flags")
    ap.add_argument("--work", default=str(REPO / "runs" / "bench-eff"), help="bodies and server logs")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "serving_efficiency.json"),
                    help="the JSON report; the .md goes beside it")
    ap.add_argument("--peer-checkpoint", metavar="DIR",
                    help="also serve this checkpoint (the one --model was exported from, e.g. runs/checkpoints/"
                         "all-MiniLM-L6-v2) with infinity-emb 0.0.78 (its own venv under --work), same texts and wrk, "
                         "after our rows: the report's \"peer\" rows")
    ap.add_argument("--peer-engines", nargs="+", default=["optimum", "torch"], choices=("optimum", "torch"))
    args = ap.parse_args(argv)
    problem = missing_generators(args.routes)
    if problem:
        raise SystemExit(problem)
    model = Path(args.model)
    if not (model / "electric.json").is_file():
        raise SystemExit(f"bench_efficiency: --model {model}: no electric.json (not an `electric export` directory)")
    manifest = ExportManifest.read(model)
    missing = [p for p in args.precisions if p not in manifest.files]
    if missing:
        raise SystemExit(f"bench_efficiency: --model {model} has no {' or '.join(missing)} graph "
                         f"(it has {sorted(manifest.files)})")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    n_rows = len(args.precisions) * len(args.routes) * len(args.concurrency)
    print(f"{n_rows} rows of {args.warmup + args.seconds + TAIL_S:g} s load + about {args.raw_seconds:g} s raw each: "
          f"about {n_rows * (args.warmup + args.seconds + TAIL_S + args.raw_seconds + 2) / 60:.0f} min", flush=True)

    from electric.grpc_gen.electric.v1 import electric_pb2 as pb

    texts = wiki_sentences(args.sentences)
    lists = nbest_lists(args.nbest, 40)
    median = sorted(texts, key=len)[len(texts) // 2]
    bodies = {"score": work / "score.jsonl", "rerank": work / "rerank.jsonl", "grpc-score": work / "score.grpc"}
    bodies["score"].write_text("".join(json.dumps({"texts": [t]}) + "\n" for t in texts))
    bodies["rerank"].write_text("".join(json.dumps({"hypotheses": h}) + "\n" for h in lists))
    bodies["grpc-score"].write_bytes(grpc_frame(pb.ScoreRequest(texts=[median]).SerializeToString()))
    inputs_per_request = {"score": 1, "rerank": args.nbest, "grpc-score": 1}

    from electric.hardware import cpu_description, int8_gemm_kernel

    load_start = os.getloadavg()[0]
    rows, server_cmd = [], ""
    for precision in args.precisions:
        measured = []
        server = Server(model, args.threads, work / f"server-{precision}.log", args.server_args.split(),
                        env={"ELECTRIC_ONNX_PRECISION": precision})
        server_cmd = server.cmd.replace(str(REPO) + "/", "")
        try:
            server.wait_ready()
            for name in args.routes:
                for c in args.concurrency:
                    w = measure(ROUTES[name], server, c, bodies[name], inputs_per_request[name], work, args.warmup,
                                args.seconds)
                    measured.append((name, c, w))
                    print(f"[{precision}] {ROUTES[name].name} c={c}: {w['req_s']:.1f} req/s, p99 {w['p99_ms']:.2f} ms, "
                          f"server {w['server_cpu_ms_per_req']:.3f} / client {w['client_cpu_ms_per_req']:.3f} CPU "
                          f"ms/req, mean batch {w['mean_batch']:.1f}", flush=True)
        finally:
            server.stop()
        from electric.inference.runtime import OnnxBackend

        backend = OnnxBackend(model, threads=args.threads, precision=precision)
        for name, c, w in measured:
            per_pass = replay(model, precision, args.threads, w["shapes"], args.raw_seconds, backend)
            raw = raw_ms_per_request(w["shapes"], per_pass, inputs_per_request[name])
            row = make_row(ROUTES[name].name, c, precision, w, raw, inputs_per_request[name])
            rows.append(row)
            print(f"[{precision}] {row['route']} c={c}: raw {raw:.3f} CPU ms/req, efficiency {row['efficiency']}",
                  flush=True)
    peer = []
    if args.peer_checkpoint:
        from _efficiency_peer import peer_rows

        peer = peer_rows(Path(args.peer_checkpoint), args.peer_engines, args.concurrency, texts, work, args.warmup,
                         args.seconds, WRK_SCRIPT)
    versions = {g: subprocess.run([g, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True).stdout.splitlines()[:1] for g in sorted({ROUTES[r].generator for r in args.routes})}
    rep = report(str(model), cpu_description(), rows, context={
        "command": "python benchmarks/bench_efficiency.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model_source": manifest.source["path"], "int8_kernel": int8_gemm_kernel(),
        "server_cmd": server_cmd, "threads": args.threads, "warmup_s": args.warmup, "window_s": args.seconds,
        "generators": "; ".join(f"{g} ({(v or ['?'])[0].strip()})" for g, v in versions.items()),
        "load_start": load_start, "load_end": os.getloadavg()[0],
        "notes": [f"/v1/score: {len(texts)} enwiki sentences of 10-40 words (mean "
                  f"{np.mean([len(t.split()) for t in texts]):.1f}), one a request; /v1/rerank: {len(lists)} lists "
                  f"of {args.nbest} ATIS Whisper hypotheses, one a request; Scoring/Score: one sentence "
                  f"({len(median.split())} words), h2load sends one message",
                  "raw replays random token ids at each shape with an all-ones mask (the cost depends on the "
                  "shape only)"]})
    rep["peer"] = peer
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep, indent=1) + "\n")
    md = render_md(rep)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
