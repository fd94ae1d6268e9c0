"""Where one request's time goes inside `electric serve`: a py-spy profile of the server under load.

    python benchmarks/profile_server.py                          # tiny int8, HTTP and gRPC, c=64, 15 s each
    python benchmarks/profile_server.py --sizes small --concurrency 1 --transports http --seconds 20

Starts the server in its own process (`python -m server`, the int8 export of a random-weight `tiny` or
`small` discriminator, built as benchmarks/bench_server.py builds it: _bench_models), drives it with the
benchmarks' load clients (_server_harness) (one ATIS sentence per request), and samples every thread of the server with py-spy (an
outside sampler: no GIL, no instrumentation; it pauses the process for each sample so stacks are
consistent; only on-CPU samples are kept). Each sample is charged to the innermost stage it is in:

    HTTP protocol (uvicorn, httptools) · socket I/O (send/recv system calls) · ASGI, routing and
    middleware (starlette, fastapi) · JSON body decode · validation (fastapi's body and dependency
    handling, pydantic, the engine's checks) · tokenisation · engine (admission, queue, batching) ·
    forward pass (padding, ONNX Runtime) · post-processing (scores from logits) · response building
    (to_dict, JSON encoding, protobuf) · metrics and access log · gRPC transport (Python side) ·
    event-loop callbacks in C (asyncio's C tasks; grpc.aio's Cython core, which py-spy cannot see into) ·
    asyncio event loop (Python) · other

`--keep DIR` keeps py-spy's raw stacks (one collapsed stack a line) to look further, e.g. with flamegraph.pl.

and printed per thread (the event loop, the inference worker, the tokeniser thread) as a share of that
thread's on-CPU samples and as CPU microseconds per request. Needs py-spy (`pip install -e ".[profile]"`) and
permission to ptrace the server (root, or kernel.yama.ptrace_scope = 0). Figures, not tests: with the
load generator on the same cores, and anything else running, only the relative shares mean much; the
output says what the load average was.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _bench_models import SIZES, random_discriminator_export, sentences  # noqa: E402
from _server_harness import Server, load_grpc, load_http  # noqa: E402

# (stage, pattern on "function (file:line)"; py-spy writes methods as Class.method) - a sample goes to the
# innermost frame that matches any pattern, patterns tried in this order.
_FN = r"(?:^|\.)(?:{}) \("  # a function or method name
STAGES: list[tuple[str, str]] = [
    ("idle", r"^EpollSelector\.select \(|^_worker \(.*concurrent/futures/thread\.py|\.wait \(.*threading\.py"),
    ("metrics and access log", r"prometheus_client/|server/prometheus\.py|" + _FN.format("_?record|log_request")
     + r"|logging/__init__\.py"),
    ("tokenisation", _FN.format(r"encode\w*|_tokenize\w*")
     + r".*(electric/inference/scoring|electric/inference/encoding|server/engine)\.py|"
       r"tokenizers/|transformers/tokenization"),
    ("forward pass", r"onnxruntime/|electric/inference/runtime\.py|electric/batching\.py|torch/|" + _FN.format("pad_rows|_forward")),
    ("post-processing", _FN.format(r"electric_score|electra_detect|electra_score|token_scores_to_text_score|"
                                   r"_check_row|replaced_\w+|classify_row|tag_row|softmax|rerank_lists|_post\w*")
     + r"|electric/(inference/calibration|inference/classify|words|evaluation/nbest/\w+)\.py"),
    ("response building (to_dict, JSON, protobuf)",
     _FN.format("to_dict|_json|_send_json|asdict|_asdict_inner|_text_score|_detection|_token_labels|_classification")
     + r"|json/encoder\.py|orjson|google/protobuf|_pb2\.py"),
    ("JSON body decode", r"json/decoder\.py|" + _FN.format("json") + r".*starlette/requests\.py|"
     + _FN.format("loads") + r".*json/__init__\.py"),
    ("validation", r"fastapi/dependencies/|fastapi/_compat|pydantic|server/schemas\.py|"
     + _FN.format("_texts|_check_text|_check_count|_slot|require_key|_non_finite")),
    ("engine (admission, queue, batching)", r"server/(engine|lifecycle|admission)\.py"),
    ("socket I/O (send/recv system calls)", _FN.format(r"write|_read_ready\w*|writelines") + r".*selector_events\.py"),
    ("HTTP protocol (uvicorn, httptools)", r"uvicorn/protocols/|httptools|h11/"),
    ("gRPC transport (Python side)", r"grpc/|_cygrpc|server/grpc_service\.py"),
    ("ASGI, routing and middleware (starlette, fastapi)", r"starlette/|fastapi/|uvicorn/|anyio/|server/http(_middleware)?\.py"),
    ("event-loop callbacks in C (asyncio tasks; grpc.aio's Cython core)", r"^Handle\._run \("),
    ("asyncio event loop (Python)", r"asyncio/|selectors\.py"),
]
_COMPILED = [(name, re.compile(p)) for name, p in STAGES]
ROLES = (("MainThread", "event loop"), ("electric-infer", "inference worker"),
         ("electric-tokenize", "tokeniser thread"))


def stage_of(frames: list[str]) -> str:
    """The stage of one sample; `frames` outermost first, as py-spy writes them."""
    for frame in reversed(frames):
        for name, pattern in _COMPILED:
            if pattern.search(frame):
                return name
    return "other"


def thread_role(frames: list[str]) -> str:
    """py-spy --threads puts "thread (TID): NAME" first."""
    name = frames[0].partition(": ")[2] if frames else ""
    return next((role for prefix, role in ROLES if name.startswith(prefix)), "other threads")


def parse_raw(path: Path) -> dict[str, Counter]:
    """py-spy's raw (collapsed) output -> {thread role: Counter(stage -> samples)}."""
    out: dict[str, Counter] = defaultdict(Counter)
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        out[thread_role(frames)][stage_of(frames)] += int(count)
    return out


def profile(server: Server, transport: str, texts: list[str], concurrency: int, seconds: float,
            rate: int, raw: Path) -> tuple[dict, dict]:
    """Load the server for `seconds` while py-spy samples it; (load summary, per-thread stage counts)."""
    spy = subprocess.Popen(["py-spy", "record", "--pid", str(server.proc.pid), "--rate", str(rate), "--duration",
                            str(int(seconds)), "--format", "raw", "--threads", "-o", str(raw)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # py-spy attached
    if transport == "http":
        load = asyncio.run(load_http(server.url, texts, concurrency, seconds))
    else:
        load = asyncio.run(load_grpc(f"127.0.0.1:{server.grpc}", texts, concurrency, seconds))
    _, err = spy.communicate(timeout=seconds + 60)
    if spy.returncode != 0 or not raw.is_file():
        raise RuntimeError(f"py-spy failed ({spy.returncode}): {err.strip()[-500:]}")
    return load, parse_raw(raw)


def render(title: str, load: dict, counts: dict[str, Counter], rate: int, seconds: float) -> str:
    # py-spy ran for `seconds` and the load for `seconds` too, so requests/s x seconds ~ requests sampled
    requests = max(1.0, load["rps"] * seconds)
    lines = [f"## {title}: {load['rps']:.0f} requests/s, p50 {load['p50_ms']:.2f} ms, p99 {load['p99_ms']:.2f} ms, "
             f"errors {sum(load['errors'].values()) if load['errors'] else 0}", ""]
    for role in [r for _, r in ROLES] + ["other threads"]:
        c = counts.get(role)
        if not c:
            continue
        busy = sum(v for k, v in c.items() if k != "idle")
        if not busy:
            continue
        lines += [f"{role}: {busy / rate / seconds:.0%} of one core on CPU, "
                  f"{busy / rate / requests * 1e6:.0f} us of CPU per request", "",
                  "| stage | share of this thread's CPU | us per request |", "|---|---|---|"]
        for stage, n in sorted(c.items(), key=lambda kv: -kv[1]):
            if stage != "idle":
                lines.append(f"| {stage} | {n / busy:.1%} | {n / rate / requests * 1e6:.0f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny"], choices=sorted(SIZES))
    ap.add_argument("--transports", nargs="+", default=["http", "grpc"], choices=("http", "grpc"))
    ap.add_argument("--concurrency", nargs="+", type=int, default=[64])
    ap.add_argument("--seconds", type=float, default=15.0, help="load (and sampling) time per point")
    ap.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    ap.add_argument("--sentences", type=int, default=800)
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (as bench_server)")
    ap.add_argument("--work", default=str(REPO / "runs" / "bench-server"), help="models (shared with bench_server)")
    ap.add_argument("--server-args", default="", help="extra `python -m server` flags")
    ap.add_argument("--keep", default=None, help="also keep py-spy's raw stacks in this directory")
    args = ap.parse_args(argv)
    if shutil.which("py-spy") is None:
        print("py-spy is not installed: pip install -e \".[profile]\"", file=sys.stderr)
        return 2
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    texts = sentences(args.sentences)
    load_start = os.getloadavg()
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        keep = Path(args.keep or tmp)
        keep.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            model = random_discriminator_export(size, work)
            server = Server(model, args.threads or None, keep / f"server-{size}.log", args.server_args.split())
            try:
                server.wait_ready()
                for transport in args.transports:
                    for c in args.concurrency:
                        asyncio.run(load_http(server.url, texts, c, 1.0))  # warm connections
                        raw = keep / f"{size}-{transport}-c{c}.txt"
                        load, counts = profile(server, transport, texts, c, args.seconds, args.rate, raw)
                        report = render(f"{size} int8, {transport}, concurrency {c}", load, counts, args.rate,
                                        args.seconds)
                        print(report, flush=True)
                        reports.append(report)
            finally:
                server.stop()
    load_end = os.getloadavg()
    print(f"Load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end on {os.cpu_count()} CPUs"
          + (": other jobs shared the cores, so read only the relative shares." if load_start[0] > 1.0 else
             "; the load generator shares the cores with the server.") + " Stages: innermost matching frame of "
          "each on-CPU sample (STAGES in this script).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
