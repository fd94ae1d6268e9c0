"""Startup of `electric serve` on a tiny export: seconds until /ready, resident memory, and whether serving
imported torch / transformers.

    python benchmarks/bench_serve_startup.py                                   # this checkout
    python benchmarks/bench_serve_startup.py --before e60bb30                  # and an older commit, interleaved
    python benchmarks/bench_serve_startup.py --python /opt/serve-venv/bin/python   # also a base (serving) install

Variants: this checkout on this interpreter; `--before REV`: that commit (`git archive` into a temporary
directory, put first on PYTHONPATH) on this interpreter; `--python PY`: this checkout on another interpreter,
e.g. a virtual environment with only the base install (`pip install .`: no torch, no transformers).
For each variant, `--starts` times (variants interleaved, so they share the machine's load):
1. `python -m electric.cli serve --model EXPORT` in its own process: seconds from spawn to the first 200 from
   /ready (models loaded and warmed up) and its VmRSS then;
2. a fresh interpreter that imports server.app, starts the engine on the export (load + warm-up) and reports
   which of torch / transformers / grpc are in sys.modules - figures that do not depend on the load.
The model is the `tiny` shape of benchmarks/bench_server.py (random weights, int8). Prints a table and writes
benchmarks/results/serve_startup.md. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _bench_models import random_discriminator_export  # noqa: E402
from _server_harness import free_port, rss_mb  # noqa: E402

HEAVY = ("torch", "transformers", "grpc")
ENGINE_PROBE = """
import asyncio, json, sys, time
t0 = time.perf_counter()
import server.app
from server.engine import Engine
from server.settings import Settings
t_import = time.perf_counter() - t0

async def start():
    engine = Engine(Settings(model=sys.argv[1], grpc_port=-1, access_log=False))
    await engine.start()
    await engine.close(5)

t0 = time.perf_counter()
asyncio.run(start())
print(json.dumps({"import_s": t_import, "engine_start_s": time.perf_counter() - t0,
                  "peak_rss_mb": int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024,
                  "imported": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


def checkout(rev: str, into: Path) -> Path:
    """The tree of commit `rev`, unpacked into `into`."""
    data = subprocess.run(["git", "archive", "--format=tar", rev], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def time_to_ready(python: str, code: Path, model: Path, env: dict, grpc: bool = True) -> tuple[float, float]:
    """(seconds from spawn to the first 200 from /ready, VmRSS in MB then) of one `electric serve` (`grpc` False:
    --grpc-port -1, which skips importing grpc)."""
    http, grpc_port = free_port(), free_port() if grpc else -1
    cmd = [python, "-m", "electric.cli", "serve", "--model", str(model), "--host", "127.0.0.1",
           "--http-port", str(http), "--grpc-port", str(grpc_port), "--log-level", "warning"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/ready", timeout=1) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0, rss_mb(proc.pid)
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)} exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(30)


def probe(python: str, code: Path, model: Path, env: dict) -> dict:
    out = subprocess.run([python, "-c", ENGINE_PROBE, str(model)], cwd=code, env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", metavar="REV", help="also measure this commit (e.g. the one before a change)")
    ap.add_argument("--python", action="append", default=[], metavar="PY",
                    help="also measure this checkout on this interpreter (repeatable), e.g. a base-install venv")
    ap.add_argument("--grpc-off", action="store_true", help="also measure this checkout with --grpc-port -1")
    ap.add_argument("--starts", type=int, default=5, help="starts per variant (default 5)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "serve_startup.md")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench-server", help="where the model is built")
    args = ap.parse_args(argv)

    args.work.mkdir(parents=True, exist_ok=True)
    model = random_discriminator_export("tiny", args.work)
    base_env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    tmp = tempfile.TemporaryDirectory(prefix="serve-startup-")
    variants = [("this checkout", sys.executable, REPO, True)]
    if args.before:
        variants.insert(0, (f"before ({args.before})", sys.executable, checkout(args.before, Path(tmp.name)), True))
    if args.grpc_off:
        variants.append(("this checkout, gRPC off", sys.executable, REPO, False))
    variants += [(f"this checkout, {py}", py, REPO, True) for py in args.python]
    results = {name: {"ready": [], "rss": [], "probe": []} for name, *_ in variants}
    load_start = os.getloadavg()
    for _ in range(args.starts):
        for name, python, code, grpc in variants:
            env = {**base_env, "PYTHONPATH": str(code)}
            ready, rss = time_to_ready(python, code, model, env, grpc)
            results[name]["ready"].append(ready)
            results[name]["rss"].append(rss)
            results[name]["probe"].append(probe(python, code, model, env))
    load_end = os.getloadavg()
    tmp.cleanup()

    rows = []
    for name, *_ in variants:
        r = results[name]
        p = r["probe"]
        rows.append(f"| {name} | {', '.join(p[0]['imported']) or 'none'} "
                    f"| {statistics.median(x['import_s'] for x in p):.2f} "
                    f"| {statistics.median(x['engine_start_s'] for x in p):.2f} "
                    f"| {statistics.median(x['peak_rss_mb'] for x in p):.0f} "
                    f"| {statistics.median(r['ready']):.2f} ({min(r['ready']):.2f}-{max(r['ready']):.2f}) "
                    f"| {statistics.median(r['rss']):.0f} |")
    command = "python benchmarks/bench_serve_startup.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report = "\n".join([
        "# `electric serve` startup",
        "",
        f"Command: `{command.strip()}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load average "
        f"{load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end (times scale with the load; the imported "
        "modules and the memory do not).",
        "",
        f"Model: random-weight ELECTRA discriminator of the `tiny` shape, `electric export --quantize int8` "
        f"(`{model}`). {args.starts} starts per variant, interleaved. `python -m electric.cli serve` is `electric "
        "serve`.",
        "",
        "| variant | serving imported | import server.app (s) | engine start: load + warm-up (s) "
        "| engine peak RSS (MB) | `electric serve` to /ready (s), median (range) | `electric serve` RSS at ready (MB) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    print(report)
    args.out.write_text(report, encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
