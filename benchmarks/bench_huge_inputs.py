"""Issues 24 (item 3) and 30 (item 3): a server under maximal requests - its memory, and a small request's latency.

    python benchmarks/bench_huge_inputs.py --label after                     # this tree
    python benchmarks/bench_huge_inputs.py --label before --repo /tmp/electric-before   # another checkout
    python benchmarks/bench_huge_inputs.py --label 512 --positions 512 --text-chars 4000   # a BERT-length model

Serves the benchmarks' random-weight `tiny` int8 export (128 positions, or `--positions`, all served; `python -m
server`, from `--repo`) or the export `--model DIR`, then for `--seconds` runs `--concurrency` clients that each POST maximal /v1/score requests
one after the other - as many texts of `--text-chars` characters (`"a " * (chars // 2)`) as fit in the 1 MiB body
limit (at most 256), `"truncate": true` - and one client that POSTs a 4-word request every 0.2 s. Samples the
server's RSS every 0.1 s. Prints one line and appends it to `--out` (default benchmarks/results/huge_inputs_v3.md):
RSS at rest, peak RSS during the burst, RSS 5 s after it, the small request's p50/max latency, where the slowest
small request's time went (its x-tokenization-time, x-queue-time and x-inference-time headers, and the rest: outside
the engine) and the answers' status counts. A refused big request is sent again at once, as a hostile client would, or with --honor-retry-after
after its Retry-After, as a well-behaved one would. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _bench_models import random_discriminator_export  # noqa: E402
from _server_harness import ServerProcess, free_port, machine, rss_mb  # noqa: E402

from electric.checkpoint import ExportManifest  # noqa: E402

SMALL = {"texts": ["show me flights today"]}


def big_body(text_chars: int, max_body: int, max_texts: int = 256) -> bytes:
    """As many texts of `text_chars` as fit in `max_body` bytes, at most `max_texts` (max_inputs_per_request)."""
    text = "a " * (text_chars // 2)
    n = min(max_texts, max(1, (max_body - 64) // (len(text) + 3)))
    return json.dumps({"texts": [text] * n, "truncate": True}).encode()


async def burst(url: str, body: bytes, concurrency: int, seconds: float, pid: int, honor: bool = False) -> dict:
    import httpx

    statuses: dict[str, int] = {}
    small: list[float] = []
    where: list[dict[str, float]] = []  # each small request's server-side times (its x-*-time headers), ms
    rss: list[float] = []
    t_end = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        async def big():
            while time.perf_counter() < t_end:
                try:
                    r = await client.post("/v1/score", content=body, headers={"content-type": "application/json"})
                    key = str(r.status_code)
                except httpx.HTTPError as e:
                    key, r = type(e).__name__, None
                statuses[key] = statuses.get(key, 0) + 1
                if honor and r is not None and r.status_code == 429:  # a well-behaved client waits as told
                    await asyncio.sleep(min(float(r.headers.get("retry-after", 1)), max(0.0, t_end - time.perf_counter())))

        async def little():
            await asyncio.sleep(0.5)  # the big ones are in
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                r = await client.post("/v1/score", json=SMALL)
                small.append(time.perf_counter() - t0)
                where.append({k: float(r.headers.get(f"x-{k}-time", "nan")) for k in ("tokenization", "queue",
                                                                                       "inference")})
                key = f"small {r.status_code}"
                statuses[key] = statuses.get(key, 0) + 1
                await asyncio.sleep(0.2)

        async def sample():
            while time.perf_counter() < t_end:
                rss.append(rss_mb(pid))
                await asyncio.sleep(0.1)

        await asyncio.gather(*(big() for _ in range(concurrency)), little(), sample())
    lat = np.asarray(small) * 1e3 if small else np.asarray([np.nan])
    slowest = where[int(lat.argmax())] if where else {}
    slowest["outside"] = float(lat.max()) - sum(slowest.values())  # the body read, the event loop, the client
    return {"peak_rss_mb": max(rss), "small_p50_ms": float(np.percentile(lat, 50)), "small_max_ms": float(lat.max()),
            "small_n": len(small), "statuses": statuses, "slowest_small": slowest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", required=True, help="e.g. before / after")
    ap.add_argument("--repo", default=str(REPO), help="the checkout whose server runs (default: this one)")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--text-chars", type=int, default=100_000, help="characters per text (default 100000)")
    ap.add_argument("--max-body-bytes", type=int, default=1_048_576)
    ap.add_argument("--honor-retry-after", action="store_true",
                    help="a big request refused with 429 is sent again after its Retry-After, not at once")
    ap.add_argument("--positions", type=int, default=128,
                    help="the random model's position table, all of it served (default 128; 512 as BERT-sized models)")
    ap.add_argument("--model", help="serve this `electric export` directory instead of the random `tiny` one "
                    "(e.g. an int8 export of all-MiniLM-L6-v2: 512 positions)")
    ap.add_argument("--work", default=str(REPO / "runs" / "bench-server"), help="models and logs (cached)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "huge_inputs_v3.md"))
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else random_discriminator_export("tiny", work, args.positions)
    if args.model:
        args.positions = ExportManifest.read(model).max_length
    body = big_body(args.text_chars, args.max_body_bytes)
    http = free_port()
    cmd = [sys.executable, "-m", "server", "--model", str(model), "--http-port", str(http), "--grpc-port", "-1",
           "--threads", "1", "--no-access-log", "--max-body-bytes", str(args.max_body_bytes)]
    server = ServerProcess(cmd, http, work / f"huge-inputs-{args.label}.log", cwd=Path(args.repo),
                           env={"PYTHONPATH": args.repo})  # that checkout's `server` and `electric` packages
    try:
        server.wait_ready()
        rest = rss_mb(server.proc.pid)
        r = asyncio.run(burst(server.url, body, args.concurrency, args.seconds, server.proc.pid, args.honor_retry_after))
        time.sleep(5)
        after = rss_mb(server.proc.pid)
    finally:
        server.stop()
    n_texts = len(json.loads(body)["texts"])
    label = args.label + (f", {model.name}" if args.model else "")
    line = (f"| {label}{' (clients honour Retry-After)' if args.honor_retry_after else ''} | {args.positions} | {args.concurrency} x {n_texts} texts x {args.text_chars} chars "
            f"({len(body)} B) | "
            f"{rest:.0f} | {r['peak_rss_mb']:.0f} | {after:.0f} | {r['small_p50_ms']:.0f} | {r['small_max_ms']:.0f} "
            f"| {r['small_n']} | {' / '.join(f'{v:.0f}' for v in r['slowest_small'].values())} "
            f"| {json.dumps(r['statuses'], sort_keys=True)} |")
    out = Path(args.out)
    if not out.exists():
        out.write_text("# Maximal requests: server memory and a small request's latency (issues 24 and 30)\n\n"
                       f"`python benchmarks/bench_huge_inputs.py --label LABEL [--positions N --text-chars C]` "
                       f"({args.seconds:g} s; tiny int8 export, --threads 1). Machine: {machine()}.\n\n"
                       "| label | positions | burst | RSS at rest MB | peak RSS MB | RSS 5 s after MB | small p50 ms "
                       "| small max ms | small requests | slowest small: tokenise / queue / inference / outside the "
                       "engine ms | statuses |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    with out.open("a") as f:
        f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
