"""`electric score --server` against the same server's raw throughput: does the client keep the server as busy as the
best load generator does?

    python benchmarks/bench_client.py                                   # a random `tiny` int8 export, built here
    python benchmarks/bench_client.py --model DIR --lines 20000 --concurrency 64 --seconds 20 --threads 2

1. one server, `python -m server --model DIR` (`--threads`), on loopback ports;
2. the raw load generators of benchmarks/_server_harness.py at `--concurrency` for `--seconds` each: HTTP and gRPC
   with one text a request, and HTTP with `--texts-per-request` texts a request (what the client sends is nearer
   that); texts/s of each, and the server's CPU seconds per wall second while it ran (how busy it was);
3. `electric score --server URL --concurrency N FILE --out OUT --quiet` on `--lines` enwiki lines, over HTTP and over
   gRPC, `--repeats` times each (interleaved with nothing else): wall seconds, lines/s and the server's CPU per
   wall second over the command's run (its start-up, reading and writing included);
4. the client's ratio to the best generator: lines/s over texts/s, and server CPU per second over the generator's
   (the target: 0.9 or more).
Prints a table and writes benchmarks/results/client.md and client.json. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _bench_models import random_discriminator_export, wiki_sentences  # noqa: E402
from _server_harness import Server, load_grpc, load_http, machine  # noqa: E402

TARGET = 0.9  # the client's share of the best generator's throughput (issue 52, item 5)


def busy(server: Server, run) -> tuple[object, float, float]:
    """(what `run()` returned, its wall seconds, the server's CPU seconds per wall second meanwhile)."""
    cpu0, t0 = server.cpu_seconds(), time.perf_counter()
    result = run()
    wall = time.perf_counter() - t0
    return result, wall, (server.cpu_seconds() - cpu0) / wall


def generators(server: Server, texts: list[str], args: argparse.Namespace) -> dict[str, dict]:
    """The raw load generators at --concurrency: texts/s and server CPU per second of each."""
    k = args.texts_per_request
    runs = {
        "raw HTTP, 1 text a request": (1, lambda: asyncio.run(load_http(server.url, texts, args.concurrency,
                                                                         args.seconds))),
        "raw gRPC, 1 text a call": (1, lambda: asyncio.run(load_grpc(f"127.0.0.1:{server.grpc}", texts,
                                                                     args.concurrency, args.seconds))),
        f"raw HTTP, {k} texts a request": (k, lambda: asyncio.run(load_http(
            server.url, texts, args.concurrency, args.seconds,
            body=lambda t: {"texts": [t] * k}))),
    }
    out = {}
    for name, (per, run) in runs.items():
        r, _, cpu = busy(server, run)
        out[name] = {"texts_per_s": r["rps"] * per, "server_cpu_per_s": cpu, "p50_ms": r["p50_ms"],
                     "p99_ms": r["p99_ms"], "errors": r["errors"]}
        print(f"{name}: {out[name]['texts_per_s']:,.0f} texts/s, server CPU {cpu:.2f} s/s, errors {r['errors']}",
              file=sys.stderr)
    return out


def client_runs(server: Server, src: Path, work: Path, lines: int, args: argparse.Namespace) -> dict[str, dict]:
    """`electric score --server` over HTTP and gRPC, --repeats times each: the median run's figures."""
    out = {}
    for name, url in (("electric score --server http://", server.url),
                      ("electric score --server grpc://", f"grpc://127.0.0.1:{server.grpc}")):
        cmd = [sys.executable, "-m", "electric.cli", "score", "--server", url, "--concurrency",
               str(args.concurrency), "--truncate", "--quiet", "--out", str(work / "scores.jsonl"), str(src)]
        figures = []
        for _ in range(args.repeats):
            r, wall, cpu = busy(server, lambda cmd=cmd: subprocess.run(cmd, capture_output=True, text=True))
            if r.returncode != 0:
                raise SystemExit(f"{shlex.join(cmd)} failed:\n{r.stderr[-3000:]}")
            figures.append({"wall_s": wall, "lines_per_s": lines / wall, "server_cpu_per_s": cpu})
            print(f"{name}: {wall:.2f} s, {lines / wall:,.0f} lines/s, server CPU {cpu:.2f} s/s", file=sys.stderr)
        out[name] = sorted(figures, key=lambda f: f["wall_s"])[len(figures) // 2]
        out[name]["command"] = shlex.join(["electric", *cmd[3:]])
    return out


def report(args: argparse.Namespace, argv: list[str], model: str, lines: int, raw: dict, client: dict) -> str:
    best_name = max(raw, key=lambda n: raw[n]["texts_per_s"])
    best = raw[best_name]
    cmd = shlex.join(["python", "benchmarks/bench_client.py", *argv])
    rows = ["# `electric score --server` against the server's raw throughput", "",
            f"`{cmd}`: {model}, {lines:,} enwiki lines, concurrency {args.concurrency}, server threads "
            f"{args.threads or 'default'}, {machine()}, load average {os.getloadavg()[0]:.1f} at the end, "
            f"{time.strftime('%Y-%m-%d')}.", "",
            "| load | texts/s | server CPU s per s | of the best generator: texts/s | server CPU |",
            "|---|---|---|---|---|"]
    for name, f in [*raw.items(), *((n, {**f, "texts_per_s": f["lines_per_s"]}) for n, f in client.items())]:
        rows.append(f"| {name} | {f['texts_per_s']:,.0f} | {f['server_cpu_per_s']:.2f} | "
                    f"{f['texts_per_s'] / best['texts_per_s']:.0%} | "
                    f"{f['server_cpu_per_s'] / best['server_cpu_per_s']:.0%} |")
    met = all(f["lines_per_s"] >= TARGET * best["texts_per_s"] for f in client.values())
    rows += ["", f"The best generator: {best_name}. Target: the client at {TARGET:.0%} of its texts/s or more: "
                 f"**{'met' if met else 'missed'}**. The client's figures are whole commands (the process's start, "
                 "reading the file, writing the records); the generators' are steady windows of "
                 f"{args.seconds:g} s."]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="an `electric export` directory (default: a random `tiny` int8 one, built here)")
    ap.add_argument("--lines", type=int, default=20000, help="enwiki lines `electric score` scores (default 20000)")
    ap.add_argument("--concurrency", type=int, default=64, help="of the generators and the client (default 64)")
    ap.add_argument("--seconds", type=float, default=20.0, help="each generator's window (default 20)")
    ap.add_argument("--texts-per-request", type=int, default=16, help="the batched generator's (default 16)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each client command (default 3; the median)")
    ap.add_argument("--threads", type=int, help="the server's ONNX Runtime threads (default: its own)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "client.md"), help="the report")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        work = Path(tmp)
        model = Path(args.model) if args.model else random_discriminator_export("tiny", work)
        texts = wiki_sentences(args.lines)
        src = work / "lines.txt"
        src.write_text("\n".join(texts) + "\n", encoding="utf-8")
        server = Server(model, args.threads, work / "server.log", [])
        try:
            server.wait_ready()
            raw = generators(server, texts, args)
            client = client_runs(server, src, work, len(texts), args)
        finally:
            server.stop()
    text = report(args, argv, str(args.model or "a random tiny int8 export"), len(texts), raw, client)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"generators": raw, "client": client}, indent=1) + "\n")
    print(f"report -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
