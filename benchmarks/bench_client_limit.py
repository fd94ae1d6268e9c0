"""A `Client.score` call against a server at `--max-concurrent-requests 1`, beside the same call against one without
that limit: does the client wait what the server says (Retry-After, issue 59), not a doubling backoff?

    python benchmarks/bench_client_limit.py                       # a random `tiny` int8 export, built here
    python benchmarks/bench_client_limit.py --model DIR --texts 3000 --repeats 3 --threads 2

Two servers, `python -m server --model DIR` and the same with `--max-concurrent-requests 1`, on loopback ports; the
call `Client(url).score(texts)` (the client's defaults: 8 requests in flight) on `--texts` enwiki sentences, over HTTP
and gRPC, `--repeats` times on each server, the servers alternating. Reports the median wall seconds of each, the
ratio limited / unlimited (the target: 2 or less) and the refusals the limited server answered (429 /
RESOURCE_EXHAUSTED, from its /metrics). Writes benchmarks/results/client_limit.md and .json. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _bench_models import random_discriminator_export, wiki_sentences  # noqa: E402
from _server_harness import Server, machine  # noqa: E402

TARGET = 2.0  # the limited call within this many times the unlimited one (issue 59, item 0b)


def refusals(server: Server) -> float:
    """Requests the server refused as overloaded so far (both transports)."""
    import httpx

    total = 0.0
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("electric_request_failures_total{") and 'error_type="overloaded"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def timed_call(url: str, texts: list[str]) -> float:
    from electric.client import Client

    with Client(url) as c:
        c.info()  # the limits, read once, outside the timing
        t0 = time.perf_counter()
        scores = c.score(texts, truncate=True)
        wall = time.perf_counter() - t0
    assert len(scores) == len(texts)
    return wall


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="an `electric export` directory (default: a random `tiny` int8 one, built here)")
    ap.add_argument("--texts", type=int, default=3000, help="enwiki sentences in the call (default 3000)")
    ap.add_argument("--repeats", type=int, default=3, help="calls on each server and transport (default 3; median)")
    ap.add_argument("--threads", type=int, help="each server's ONNX Runtime threads (default: its own)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "client_limit.md"), help="the report")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-client-limit-") as tmp:
        work = Path(tmp)
        model = Path(args.model) if args.model else random_discriminator_export("tiny", work)
        texts = wiki_sentences(args.texts)
        servers = {"unlimited": Server(model, args.threads, work / "unlimited.log", []),
                   "max_concurrent_requests 1": Server(model, args.threads, work / "limited.log",
                                                       ["--max-concurrent-requests", "1"])}
        walls: dict[str, dict[str, list[float]]] = {name: {"http": [], "grpc": []} for name in servers}
        refused: dict[str, float] = {}
        try:
            for s in servers.values():
                s.wait_ready()
            for _ in range(args.repeats):
                for transport in ("http", "grpc"):
                    for name, s in servers.items():  # alternating: a load from elsewhere falls on both
                        url = s.url if transport == "http" else f"grpc://127.0.0.1:{s.grpc}"
                        wall = timed_call(url, texts)
                        walls[name][transport].append(wall)
                        print(f"{name}, {transport}: {wall:.2f} s", file=sys.stderr)
            refused = {name: refusals(s) for name, s in servers.items()}
        finally:
            for s in servers.values():
                s.stop()
    median = {name: {t: statistics.median(w) for t, w in by.items()} for name, by in walls.items()}
    unlimited, limited = median["unlimited"], median["max_concurrent_requests 1"]
    ratio = {t: limited[t] / unlimited[t] for t in unlimited}
    cmd = shlex.join(["python", "benchmarks/bench_client_limit.py", *argv])
    rows = ["# `Client.score` against a server at `--max-concurrent-requests 1`", "",
            f"`{cmd}`: {args.model or 'a random tiny int8 export'}, one call of {len(texts):,} enwiki sentences "
            f"(the client's defaults: 8 requests in flight), {args.repeats} calls each (median), servers alternating, "
            f"server threads {args.threads or 'default'}, {machine()}, load average {os.getloadavg()[0]:.1f} at the "
            f"end, {time.strftime('%Y-%m-%d')}.", "",
            "| transport | unlimited, s | `--max-concurrent-requests 1`, s | ratio | all calls, limited (s) |",
            "|---|---|---|---|---|"]
    for t in ("http", "grpc"):
        rows.append(f"| {t} | {unlimited[t]:.2f} | {limited[t]:.2f} | {ratio[t]:.2f}x | "
                    f"{', '.join(f'{w:.2f}' for w in walls['max_concurrent_requests 1'][t])} |")
    met = all(r <= TARGET for r in ratio.values())
    rows += ["", f"Refused as overloaded over all the limited server's calls: {refused.get('max_concurrent_requests 1', 0):.0f} "
                 f"(the unlimited server: {refused.get('unlimited', 0):.0f}). Target: the limited call within "
                 f"{TARGET:g}x the unlimited one: **{'met' if met else 'missed'}**."]
    text = "\n".join(rows) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"walls": walls, "median": median, "ratio": ratio,
                                                    "refused": refused}, indent=1) + "\n")
    print(f"report -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
