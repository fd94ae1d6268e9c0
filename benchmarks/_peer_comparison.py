"""`bench_server.py --peer NAME`: electric's /v1/classify (HTTP and gRPC) beside a peer server (benchmarks/peer_NAME.py)
on the same fine-tuned classifier and sentences, interleaved, next to both raw engines; renders
benchmarks/results/server_peer.md.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from _bench_models import SHARED, random_checkpoint
from _raw_engines import raw_runtime, raw_torch
from _server_harness import REPO, Server, ServerProcess, free_port, load_grpc, load_http, machine, rss_mb

from electric.checkpoint import ExportManifest


def build_classifier(work: Path) -> tuple[Path, Path]:
    """WORK/small-sst2, a `small` ElectraForSequenceClassification fine-tuned for one epoch on 2,000 SST-2
    examples from random init (speed does not depend on what the weights learned), and its `electric export
    --quantize int8` directory."""
    ckpt, onnx = work / "small-sst2", work / "small-sst2-onnx"
    if not (ckpt / "config.json").is_file():
        cmd = [sys.executable, "-m", "training.finetune", "--task", "sst2", "--model", str(random_checkpoint("small", work)),
               "--random-init", "--data", str(SHARED / "glue" / "sst2"), "--max-train-examples", "2000", "--epochs", "1",
               "--out", str(ckpt), "--overwrite"]
        print("+ " + " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, cwd=REPO, check=True)
    if not (onnx / "electric.json").is_file():
        from electric.export.exporter import ExportOptions, export_model

        # force: a classifier at chance gives near-equal logits, whose int8-vs-fp32 Spearman is noise (the
        # manifest keeps the max logit difference, the report prints it)
        export_model(ckpt, onnx, ExportOptions(quantize="int8", force=True, overwrite=True), log=lambda *_: None)
    return ckpt, onnx


def run_peer(args, work: Path, texts: list[str]) -> str:
    """Electric's /v1/classify (HTTP and gRPC) and the peer's /classify on the same classifier and sentences, each
    concurrency level in turn for every server (interleaved), beside both raw runtimes measured in this run."""
    import peer_infinity as peer

    exe = peer.install(work / f"peer-{peer.NAME}")
    ckpt, onnx = build_classifier(work)
    threads = args.threads or None
    print("raw runtimes ...", flush=True)
    raws = {"electric's runtime (ONNX Runtime int8), server threads": raw_runtime(onnx, texts, args.raw_seconds, threads),
            "electric's runtime (ONNX Runtime int8), default threads": raw_runtime(onnx, texts, args.raw_seconds, None),
            f"{peer.NAME}'s engine (torch eager fp32), default threads": raw_torch(ckpt, texts, args.raw_seconds)}
    for name, r in raws.items():
        print(f"  {name}: batch-1 p50 {r['b1_p50_ms']:.2f} ms, best {r['best_throughput']:.0f} sent/s", flush=True)
    ours = Server(onnx, threads, work / "server-classifier.log", args.server_args.split(), classifier=True)
    port = free_port()
    theirs = ServerProcess(peer.command(exe, ckpt, port, args.peer_batch_size), port, work / f"peer-{peer.NAME}.log",
                           ready_path="/health", env=peer.ENV)
    rows, load_start = [], os.getloadavg()
    try:
        ours.wait_ready()
        theirs.wait_ready()
        asyncio.run(load_http(theirs.url, texts[:8], 1, 2.0, path=peer.ROUTE, body=peer.body))  # its first calls
        points = (("electric", "http", ours, lambda c: load_http(ours.url, texts, c, args.seconds, path="/v1/classify",
                                                                 body=lambda t: {"texts": [t]})),
                  ("electric", "grpc", ours, lambda c: load_grpc(f"127.0.0.1:{ours.grpc}", texts, c, args.seconds,
                                                                 classify=True)),
                  (peer.NAME, "http", theirs, lambda c: load_http(theirs.url, texts, c, args.seconds, path=peer.ROUTE,
                                                                  body=peer.body)))
        for c in args.concurrency:
            for name, transport, server, load in points:
                idle = theirs if server is ours else ours
                cpu0, idle0 = server.cpu_seconds(), idle.cpu_seconds()
                r = asyncio.run(load(c))
                r.update(server=name, transport=transport, concurrency=c, rss_mb=rss_mb(server.proc.pid),
                         cpu_s=server.cpu_seconds() - cpu0, idle_cpu_s=idle.cpu_seconds() - idle0)
                rows.append(r)
                print(f"{name:9s} {transport:4s} c={c:<3d} {r['rps']:7.0f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                      f"p99 {r['p99_ms']:7.2f} ms  errors {r['errors'] or 0}  (the other server's CPU meanwhile: "
                      f"{r['idle_cpu_s']:.2f} s)", flush=True)
    finally:
        rcs = {"electric": ours.stop(), peer.NAME: theirs.stop()}
    manifest = ExportManifest.read(onnx)
    return render_peer(args, rows, raws, rcs, load_start, os.getloadavg(), ours.cmd, theirs.cmd, manifest, peer)


def render_peer(args, rows, raws, rcs, load_start, load_end, ours_cmd, theirs_cmd, manifest, peer) -> str:
    ort = raws["electric's runtime (ONNX Runtime int8), server threads"]
    ort_best = max(r["best_throughput"] for k, r in raws.items() if k.startswith("electric's"))
    torch_raw = raws[f"{peer.NAME}'s engine (torch eager fp32), default threads"]
    out = [f"# `electric serve` beside {peer.NAME} on the same classifier", "",
           f"Command: `python benchmarks/bench_server.py --peer {peer.NAME} --concurrency "
           f"{' '.join(map(str, args.concurrency))} --seconds {args.seconds:g} --threads {args.threads}`  ",
           f"Electric: `python {ours_cmd.replace(str(REPO) + '/', '')}`  ",
           f"Peer: `{theirs_cmd.replace(str(REPO) + '/', '')}` ({peer.SPEC}, torch {peer.TORCH_SPEC.split('==')[1]}, "
           "in its own virtual environment)  ",
           f"Machine: {machine()}; load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end "
           "(the load generator runs on the same 2 cores; nothing else was meant to run).", "",
           "The classifier: a `small` ElectraForSequenceClassification (12 layers, 256 wide) fine-tuned on SST-2 for "
           "one epoch from random init — the speed, not the accuracy, is measured. Electric serves its `electric "
           f"export --quantize int8` graph (int8 vs fp32 max logit difference "
           f"{manifest.parity.get('int8', {}).get('max_abs_diff', float('nan')):.4f}); the peer serves the "
           "transformers directory with its torch engine (fp32). Sentences: the first hypothesis of each of "
           f"{args.sentences} ATIS test utterances, one per request, the same for both servers. Each concurrency "
           "level ran for every server in turn (interleaved); both servers stayed up, and the idle one's CPU time "
           "during each point is in the last column.", "",
           "## Raw runtimes (no server, one process)", "",
           "| runtime | threads | batch-1 p50 / p99 (ms) | sentences/s at batch 8 / 32 / 64 | best |",
           "|---|---|---|---|---|"]
    for name, r in raws.items():
        t = r["throughput"]
        out.append(f"| {name} | {r['threads']} | {r['b1_p50_ms']:.2f} / {r['b1_p99_ms']:.2f} | {t[8]:.0f} / {t[32]:.0f} / "
                   f"{t[64]:.0f} | {r['best_throughput']:.0f} (batch {r['best_batch']}) |")
    out += ["", "## Servers", "",
            "| server | transport | concurrency | requests/s | p50 (ms) | p99 (ms) | requests/s ÷ ORT raw best | "
            "requests/s ÷ torch raw best | p99 ÷ ORT batch-1 p50 | errors | server CPU (s) | idle server CPU (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['server']} | {r['transport']} | {r['concurrency']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | "
                   f"{r['p99_ms']:.2f} | {r['rps'] / ort_best:.0%} | {r['rps'] / torch_raw['best_throughput']:.0%} | "
                   f"{r['p99_ms'] / ort['b1_p50_ms']:.1f}× | {sum(r['errors'].values()) if r['errors'] else 0} | "
                   f"{r['cpu_s']:.1f} | {r['idle_cpu_s']:.2f} |")

    def point(name, transport, c):
        return next((r for r in rows if r["server"] == name and r["transport"] == transport and r["concurrency"] == c),
                    None)

    out += ["", "## Targets (issue 14)", ""]
    hi, lo = max(args.concurrency), min(args.concurrency)
    theirs_hi, theirs_lo = point(peer.NAME, "http", hi), point(peer.NAME, "http", lo)
    for transport in ("http", "grpc"):
        mine_hi, mine_lo = point("electric", transport, hi), point("electric", transport, lo)
        if None in (mine_hi, mine_lo, theirs_hi, theirs_lo):
            continue
        out.append(f"- electric {transport} vs {peer.NAME} http: requests/s at c={hi} {mine_hi['rps']:.0f} vs "
                   f"{theirs_hi['rps']:.0f} ({mine_hi['rps'] / theirs_hi['rps']:.1f}×: "
                   f"{'ahead' if mine_hi['rps'] > theirs_hi['rps'] else 'behind'}); p99 at c={lo} {mine_lo['p99_ms']:.2f} "
                   f"vs {theirs_lo['p99_ms']:.2f} ms ({'ahead' if mine_lo['p99_ms'] < theirs_lo['p99_ms'] else 'behind'})")
    out += ["", "Exit status after SIGTERM: " + ", ".join(f"{k} {v}" for k, v in rcs.items()) + ".", "",
            f"What {peer.NAME} needed here:", *[f"- {w}" for w in peer.WORKAROUNDS], ""]
    return "\n".join(out)

