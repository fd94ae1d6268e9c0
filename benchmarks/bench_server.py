"""Load test of `electric serve` on loopback, next to the raw ONNX runtime on the same sentences.

    python benchmarks/bench_server.py                       # tiny and small int8, 30 s per point
    python benchmarks/bench_server.py --sizes tiny --seconds 10 --concurrency 1 8
    python benchmarks/bench_server.py --model runs/fc/electric/discriminator --seconds 10   # a real model only

For each model - the `--sizes` (random weights, `tiny` and `small` presets) and the `--model` checkpoints (e.g. a
pretraining run's discriminator, labelled electric/discriminator), exported with int8 quantisation by the
project's exporter into WORK (cached) - and at the precision the server picks on CPU (int8):
1. raw runtime (OnnxBackend in this process, same thread count as the server): batch-1 latency, and the
   best throughput over batch sizes on the same sentences, sorted by length (runtime only: ids already
   tokenised), plus the library end to end (encode + run + electric_score);
2. the server in its own process (`python -m server`), driven by an asyncio httpx client (POST
   /v1/score) and a grpc.aio client (Scoring/Score), one sentence per request, at each concurrency for
   `--seconds` seconds: requests/s (= sentences/s), p50/p99 latency, errors, server RSS before/after.
Prints a table and writes benchmarks/results/server.md. It asserts nothing; the client shares the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _bench_models import (  # noqa: E402
    SIZES,
    export_checkpoint,
    model_label,
    nbest_lists,
    random_discriminator_export,
    sentences,
)
from _peer_comparison import run_peer  # noqa: E402
from _raw_engines import raw_runtime  # noqa: E402
from _server_harness import Server, batch_stats, load_grpc, load_http, machine, rss_mb  # noqa: E402

from electric.checkpoint import CheckpointError, ExportManifest  # noqa: E402
from electric.export.errors import ExportError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="*", choices=sorted(SIZES),
                    help="random-weight models of these preset shapes (default: tiny small, none with --model)")
    ap.add_argument("--model", nargs="+", metavar="DIR",
                    help="also (or, without --sizes, only) these checkpoints, e.g. runs/fc/electric/discriminator: "
                         "exported like `electric export --quantize int8` into WORK (redone when the checkpoint "
                         "changes), labelled by the directory's name (a run's discriminator: RUN/discriminator)")
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64])
    ap.add_argument("--seconds", type=float, default=30.0, help="per load point (default 30)")
    ap.add_argument("--raw-seconds", type=float, default=12.0, help="for the raw runtime, per model")
    ap.add_argument("--sentences", type=int, default=800)
    ap.add_argument("--threads", type=int, default=1,
                    help="ONNX Runtime intra-op threads, server and raw (default 1: on 2 cores the server's event "
                         "loop needs the other one; 0 = the runtime's default, physical cores). The raw runtime "
                         "is also measured with the runtime's default for reference")
    ap.add_argument("--work", default=str(REPO / "runs" / "bench-server"), help="models and logs (cached)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "server.md"))
    ap.add_argument("--http-client", choices=("raw", "httpx"), default="raw",
                    help="raw: a minimal asyncio HTTP/1.1 keep-alive client (default; httpx's client spends more "
                         "CPU per request than the server on this 2-core machine); httpx: httpx.AsyncClient")
    ap.add_argument("--server-args", default="", help="extra `python -m server` flags, e.g. '--max-wait-ms 1'")
    ap.add_argument("--nbest", nargs="*", type=int, default=[5, 100],
                    help="also rerank n-best lists of these sizes, one list per request (default 5 100; none: skip)")
    ap.add_argument("--nbest-concurrency", type=int, default=4, help="concurrent rerank requests (default 4)")
    ap.add_argument("--peer", choices=("infinity",),
                    help="instead: serve a fine-tuned `small` classifier with electric (/v1/classify, HTTP and gRPC) "
                         "and with this peer server (installed into WORK/peer-NAME, its own virtual environment), "
                         "interleaved; writes benchmarks/results/server_peer.md unless --out is given")
    ap.add_argument("--peer-batch-size", type=int, default=32, help="the peer's --batch-size (default 32, its own)")
    args = ap.parse_args(argv)
    if args.sizes is None and not args.model:
        args.sizes = ["tiny", "small"]
    if not args.sizes and not args.model and not args.peer:
        ap.error("nothing to benchmark: give --sizes or --model")
    if len({model_label(d) for d in args.model or ()}) < len(args.model or ()):
        ap.error("--model: two directories with the same label")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    texts = sentences(args.sentences)
    if args.peer:
        report = run_peer(args, work, texts)
        out = Path(args.out) if "--out" in (argv if argv is not None else sys.argv) else \
            REPO / "benchmarks" / "results" / "server_peer.md"
        out.write_text(report)
        print(report)
        return 0
    threads = args.threads or None
    load_start = os.getloadavg()
    rows, raws, notes, nbest_rows = [], {}, [], []
    models = [(size, random_discriminator_export(size, work)) for size in args.sizes or ()]
    for d in args.model or ():
        label = model_label(d)
        try:
            out = export_checkpoint(d, work, log=lambda msg, lb=label: print(f"[{lb}] {msg}", flush=True))
        except (CheckpointError, ExportError, OSError) as e:
            raise SystemExit(f"--model {d}: {e}") from e
        models.append((label, out))
        notes.append(describe_export(label, d, out))
    for size, model in models:  # size: the preset's name or the --model's label
        print(f"[{size}] raw runtime ...", flush=True)
        raw = raws[size] = raw_runtime(model, texts, args.raw_seconds, threads)
        if threads is not None:
            raws[f"{size} (runtime default threads)"] = raw_runtime(model, texts, args.raw_seconds, None)
        print(f"[{size}] raw: batch-1 p50 {raw['b1_p50_ms']:.2f} ms, best {raw['best_throughput']:.0f} sent/s "
              f"at batch {raw['best_batch']}", flush=True)
        server = Server(model, threads, work / f"server-{size.replace('/', '-')}.log", args.server_args.split())
        try:
            server.wait_ready()
            rss0 = rss_mb(server.proc.pid)
            for transport in ("http", "grpc"):
                for c in args.concurrency:
                    b0 = batch_stats(server.url)
                    if transport == "http":
                        r = asyncio.run(load_http(server.url, texts, c, args.seconds, args.http_client))
                    else:
                        r = asyncio.run(load_grpc(f"127.0.0.1:{server.grpc}", texts, c, args.seconds))
                    b1 = batch_stats(server.url)
                    r.update(size=size, transport=transport, concurrency=c,
                             mean_batch=(b1[1] - b0[1]) / max(b1[0] - b0[0], 1), rss_mb=rss_mb(server.proc.pid))
                    rows.append(r)
                    print(f"[{size}] {transport:4s} c={c:<3d} {r['rps']:7.0f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                          f"p99 {r['p99_ms']:7.2f} ms  mean batch {r['mean_batch']:5.1f}  errors {r['errors'] or 0}  "
                          f"RSS {r['rss_mb']:.0f} MB", flush=True)
            for n in args.nbest:  # one n-best list per request, /v1/rerank: throughput in hypotheses/s
                lists = nbest_lists(n, max(8, 4000 // n))
                r = asyncio.run(load_http(server.url, lists, args.nbest_concurrency, args.seconds, args.http_client,
                                          path="/v1/rerank", body=lambda hyps: {"hypotheses": hyps}))
                r.update(size=size, n=n, concurrency=args.nbest_concurrency, hyps_per_s=r["rps"] * n)
                nbest_rows.append(r)
                print(f"[{size}] rerank {n}-best c={args.nbest_concurrency}: {r['hyps_per_s']:7.0f} hypotheses/s  "
                      f"p50 {r['p50_ms']:7.2f} ms  errors {r['errors'] or 0}", flush=True)
            rss1 = rss_mb(server.proc.pid)
            notes.append(f"{size}: server RSS {rss0:.0f} MB after warm-up, {rss1:.0f} MB after the load")
        finally:
            rc = server.stop()
            notes.append(f"{size}: server exit status after SIGTERM: {rc}")
    load_end = os.getloadavg()
    report = render(args, rows, raws, notes, load_start, load_end, server.cmd, nbest_rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)
    print(report)
    return 0


def render(args, rows, raws, notes, load_start, load_end, server_cmd, nbest_rows=()) -> str:
    cmd = "python benchmarks/bench_server.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items() if k not in ("work", "out") and v not in ("", None))
    out = ["# `electric serve` under load", "",
           f"Command: `{cmd}`  ", f"Server: `python {server_cmd.replace(str(REPO) + '/', '')}` (per model)  ",
           f"Machine: {machine()}; "
           f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end ("
           + ("other jobs shared the cores; " if load_start[0] > 1.0 else "nothing else running; ")
           + "the load generator runs on the same cores: figures are noisy, ±30% or worse).", "",
           f"{models_text(args)}, exported by `electric export --quantize int8` (CPU runs the int8 graph). "
           f"Sentences: the first hypothesis of each of {args.sentences} ATIS test utterances. One sentence per "
           "request.", "",
           "## Raw runtime (OnnxBackend in one process, no server)", "",
           "| model | threads | mean tokens | batch-1 p50 / p99 (ms) | encode+run+score batch-1 p50 (ms) | "
           "sentences/s at batch 8 / 32 / 64 / 128 | best |", "|---|---|---|---|---|---|---|"]
    for size, r in raws.items():
        t = r["throughput"]
        out.append(f"| {size} {r['precision']} | {r['threads']} | {r['mean_tokens']:.1f} | {r['b1_p50_ms']:.2f} / "
                   f"{r['b1_p99_ms']:.2f} | {r['e2e_b1_p50_ms']:.2f} | {t[8]:.0f} / {t[32]:.0f} / {t[64]:.0f} / "
                   f"{t[128]:.0f} | {r['best_throughput']:.0f} (batch {r['best_batch']}) |")
    out += ["", "## Server (loopback, asyncio clients)", "",
            "| model | transport | concurrency | requests/s | p50 (ms) | p99 (ms) | mean batch | errors | RSS (MB) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['size']} | {r['transport']} | {r['concurrency']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | "
                   f"{r['p99_ms']:.2f} | {r['mean_batch']:.1f} | {sum(r['errors'].values()) if r['errors'] else 0}"
                   f"{' ' + json.dumps(r['errors']) if r['errors'] else ''} | {r['rss_mb']:.0f} |")
    out += ["", "## Targets", "",
            "| model | transport | c=64 throughput / raw best | target ≥ 80% | c=1 p99 | 2 × raw batch-1 + 2 ms | met |",
            "|---|---|---|---|---|---|---|"]
    for size, raw in raws.items():
        for transport in ("http", "grpc"):
            hi = next((r for r in rows if r["size"] == size and r["transport"] == transport and r["concurrency"] == 64),
                      None)
            lo = next((r for r in rows if r["size"] == size and r["transport"] == transport and r["concurrency"] == 1),
                      None)
            if hi is None or lo is None:
                continue
            ratio = hi["rps"] / raw["best_throughput"]
            bound = 2 * raw["b1_p50_ms"] + 2
            out.append(f"| {size} | {transport} | {ratio:.0%} | {'yes' if ratio >= 0.8 else 'no'} | "
                       f"{lo['p99_ms']:.2f} ms | {bound:.2f} ms | {'yes' if lo['p99_ms'] <= bound else 'no'} |")
    if nbest_rows:
        out += ["", f"## n-best lists (POST /v1/rerank, one list per request, concurrency {args.nbest_concurrency})", "",
                "| model | hypotheses per list | lists/s | hypotheses/s | p50 (ms) | p99 (ms) | ÷ raw best | target ≥ 90% |"
                " errors |", "|---|---|---|---|---|---|---|---|---|"]
        for r in nbest_rows:
            ratio = r["hyps_per_s"] / raws[r["size"]]["best_throughput"]
            out.append(f"| {r['size']} | {r['n']} | {r['rps']:.0f} | {r['hyps_per_s']:.0f} | {r['p50_ms']:.2f} | "
                       f"{r['p99_ms']:.2f} | {ratio:.0%} | {'yes' if ratio >= 0.9 else 'no'} | "
                       f"{sum(r['errors'].values()) if r['errors'] else 0} |")
        out += ["", "5 hypotheses: ATIS test's Whisper 5-best lists; 100: the hypotheses of 20 consecutive utterances as "
                "one list. The raw best is the runtime's at the server's threads (table above)."]
    out += ["", "Notes:", *[f"- {n}" for n in notes], *[f"- {n}" for n in READING], ""]
    return "\n".join(out)


def models_text(args) -> str:
    parts = [f"random-weight ELECTRA discriminators of the {' and '.join(f'`{s}`' for s in args.sizes)} preset shapes"
             ] if args.sizes else []
    parts += [f"the checkpoint {model_label(d)} (`{d}`)" for d in args.model or ()]
    text = " and ".join(parts)
    return text[0].upper() + text[1:]


def describe_export(label: str, src: str, out: Path) -> str:
    """A note on a --model's export: its shape and the exporter's parity and calibration."""
    cfg = json.loads((out / "config.json").read_text())
    m = ExportManifest.read(out)
    p = m.parity
    return (f"{label}: `{src}`, {cfg['architectures'][0]} hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} "
            f"layers, vocabulary {cfg['vocab_size']}, max length {m.max_length}; export parity on {p['sentences']} "
            f"sentences: fp32 vs torch max |diff| {p['fp32']['max_abs_diff']:.1e}, int8 vs fp32 {p['int8']['spearman_of']}"
            f" Spearman {p['int8']['spearman']:.4f}; calibration "
            + ("fitted" if m.calibration else "none (no generator beside it)"))


READING = (
    "The raw runtime and each server point are measured at different moments on a machine whose load "
    "changes by 2x within minutes, so a ratio can be off by that much.",
    "With one sentence per request, each request costs the event loop a fixed amount of Python work (HTTP "
    "or gRPC parsing, routing, validation, JSON/protobuf answers, metrics and the access log; tokenisation "
    "runs batched in a thread under load); benchmarks/profile_server.py shows where it goes. With 2 cores "
    "(one for the loop, one for ONNX Runtime) and the load generator on the same cores, the loop, not the "
    "model, can bound throughput; requests that carry several texts (n-best lists) amortise it.",
)


if __name__ == "__main__":
    sys.exit(main())
