"""`electric score --server` against the same server's raw throughput: does the client keep the server as busy as the
best load generator does?

    python benchmarks/bench_client.py                                   # a random `tiny` int8 export, built here
    python benchmarks/bench_client.py --model DIR --lines 20000 --concurrency 64 --seconds 10 --threads 2

1. one server, `python -m server --model DIR` (`--threads`), on loopback ports;
2. `--repeats` rounds, each of
   - the raw load generators of benchmarks/_server_harness.py at `--concurrency` for `--seconds` each: HTTP and
     gRPC with one text a request, and HTTP with each `--texts-per-request` texts a request (what the client sends
     is nearer that); texts/s of each, and the server's CPU seconds per wall second while it ran (how busy it was);
   - `electric score --server URL --concurrency N FILE --out OUT --quiet` on `--lines` enwiki lines, over HTTP and
     over gRPC, once each: wall seconds, lines/s, the server's CPU per wall second over the command's run (its
     start-up, reading and writing included) and the command's own CPU;
   each load's texts/s and server CPU as shares of the round's best generator (a VM's host takes CPU back unevenly
   from one minute to the next: a round compares loads measured minutes apart at most);
4. the medians over the rounds; the target: the client keeping the server 90% as busy as the best generator;
5. with `--profile` (needs py-spy: `pip install py-spy`), one more run of each command under `py-spy record --gil`
   (the thread holding the interpreter, 200 samples/s): where the client's Python time goes, its top entries by
   own time and by time within.
Prints a table and writes benchmarks/results/client.md and client.json. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _bench_models import random_discriminator_export, wiki_sentences  # noqa: E402
from _server_harness import Server, load_grpc, load_http, machine  # noqa: E402

TARGET = 0.9  # the client's share of the server CPU the best generator keeps busy


def busy(server: Server, run) -> tuple[object, float, float]:
    """(what `run()` returned, its wall seconds, the server's CPU seconds per wall second meanwhile)."""
    cpu0, t0 = server.cpu_seconds(), time.perf_counter()
    result = run()
    wall = time.perf_counter() - t0
    return result, wall, (server.cpu_seconds() - cpu0) / wall


def cpu_times() -> tuple[float, float]:
    """(steal, all) jiffies of the machine so far (/proc/stat): the share of CPU time the VM's host took back."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (fields[7] if len(fields) > 7 else 0.0), sum(fields[:8])


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's finished children: the client commands'."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def generators(server: Server, texts: list[str], args: argparse.Namespace) -> dict[str, dict]:
    """The raw load generators at --concurrency: texts/s and server CPU per second of each."""
    runs = {
        "raw HTTP, 1 text a request": (1, lambda: asyncio.run(load_http(server.url, texts, args.concurrency,
                                                                         args.seconds))),
        "raw gRPC, 1 text a call": (1, lambda: asyncio.run(load_grpc(f"127.0.0.1:{server.grpc}", texts,
                                                                     args.concurrency, args.seconds))),
    }
    for k in args.texts_per_request:
        runs[f"raw HTTP, {k} texts a request"] = (k, lambda k=k: asyncio.run(load_http(
            server.url, texts, args.concurrency, args.seconds, body=lambda t: {"texts": [t] * k})))
    out = {}
    for name, (per, run) in runs.items():
        own0 = time.process_time()
        r, _, cpu = busy(server, run)
        own_ms = 1e6 * (time.process_time() - own0) / max(1.0, r["rps"] * per * args.seconds)
        out[name] = {"texts_per_s": r["rps"] * per, "server_cpu_per_s": cpu, "client_cpu_ms_per_1000": own_ms,
                     "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "errors": r["errors"]}
        print(f"{name}: {out[name]['texts_per_s']:,.0f} texts/s, server CPU {cpu:.2f} s/s, its own CPU {own_ms:.0f} ms "
              f"per 1,000 texts, errors {r['errors']}", file=sys.stderr)
    return out


def client_runs(server: Server, src: Path, work: Path, lines: int, args: argparse.Namespace) -> dict[str, dict]:
    """`electric score --server` over HTTP and over gRPC, once each: its figures."""
    out = {}
    for name, url in (("electric score --server http://", server.url),
                      ("electric score --server grpc://", f"grpc://127.0.0.1:{server.grpc}")):
        cmd = [sys.executable, "-m", "electric.cli", "score", "--server", url, "--concurrency",
               str(args.concurrency), "--truncate", "--quiet", "--out", str(work / "scores.jsonl"), str(src)]
        own0 = children_cpu()
        r, wall, cpu = busy(server, lambda cmd=cmd: subprocess.run(cmd, capture_output=True, text=True))
        own = children_cpu() - own0
        if r.returncode != 0:
            raise SystemExit(f"{shlex.join(cmd)} failed:\n{r.stderr[-3000:]}")
        out[name] = {"texts_per_s": lines / wall, "wall_s": wall, "server_cpu_per_s": cpu, "client_cpu_s": own,
                     "client_cpu_ms_per_1000": 1e6 * own / lines, "command": shlex.join(["electric", *cmd[3:]])}
        print(f"{name}: {wall:.2f} s, {lines / wall:,.0f} lines/s, server CPU {cpu:.2f} s/s, client CPU "
              f"{own:.2f} s ({1e6 * own / lines:.0f} ms per 1,000 lines)", file=sys.stderr)
    return out


def rounds(server: Server, texts: list[str], src: Path, work: Path, args: argparse.Namespace) -> list[dict]:
    """--repeats rounds, each the generators and then each client command once; every load's figures as shares of
    its own round's best generator (a VM's host takes CPU back unevenly from one minute to the next)."""
    out = []
    for i in range(args.repeats):
        steal0, all0 = cpu_times()
        loads = {**generators(server, texts, args), **client_runs(server, src, work, len(texts), args)}
        steal1, all1 = cpu_times()
        best = max((n for n in loads if n.startswith("raw")), key=lambda n: loads[n]["texts_per_s"])
        for f in loads.values():
            f["of_best_texts"] = f["texts_per_s"] / loads[best]["texts_per_s"]
            f["of_best_server_cpu"] = f["server_cpu_per_s"] / loads[best]["server_cpu_per_s"]
        out.append({"best": best, "steal": (steal1 - steal0) / max(1.0, all1 - all0), "loads": loads})
        print(f"round {i + 1}: the best generator {best}, CPU steal {out[-1]['steal']:.0%}", file=sys.stderr)
    return out


def profiles(work: Path, loads: dict[str, dict]) -> dict[str, dict]:
    """Each client command once more under py-spy: its top entries by own and by inclusive share of the samples."""
    if shutil.which("py-spy") is None:
        raise SystemExit("--profile needs py-spy on PATH: pip install py-spy")
    out = {}
    for name, figures in ((n, f) for n, f in loads.items() if "command" in f):
        raw = work / "profile.txt"
        cmd = ["py-spy", "record", "--gil", "--rate", "200", "--format", "raw", "--output", str(raw), "--",
               sys.executable, "-m", "electric.cli", *shlex.split(figures["command"])[1:]]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{shlex.join(cmd)} failed:\n{r.stderr[-3000:]}")
        out[name] = top_entries(raw.read_text())
    return out


# frames every stack passes through (the interpreter's start, a thread's start, the command's dispatch): left out of
# the inclusive column, which then shows where the time divides
PLUMBING = ("<frozen runpy>", "threading.py", "concurrent/futures/thread.py", "electric/cli/__main__.py",
            "main (electric/cli/__init__.py)", "run_command (electric/cli/common.py)", "<lambda> (electric/cli/score.py)",
            "<frozen importlib._bootstrap")


def top_entries(raw: str, n: int = 12) -> dict:
    """py-spy's raw stacks ("frame;frame;... count" a line) as the top `n` functions by own and by inclusive share
    (the PLUMBING frames aside; every import of the start counted as one entry, "imports")."""
    own, within, total = Counter(), Counter(), 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += int(count)
        own[frames[-1]] += int(count)
        importing = any("_find_and_load" in f for f in frames)
        for f in {"imports (the start)"} if importing else {f for f in frames if not any(p in f for p in PLUMBING)}:
            within[f] += int(count)
    share = lambda c: [(f, c[f] / total) for f, _ in c.most_common(n)]  # noqa: E731
    return {"samples": total, "own": share(own), "within": share(within)}


def report(args: argparse.Namespace, argv: list[str], model: str, lines: int, measured: list[dict],
           profiled: dict) -> str:
    cmd = shlex.join(["python", "benchmarks/bench_client.py", *argv])
    names = list(measured[0]["loads"])
    median = lambda name, key: statistics.median(r["loads"][name][key] for r in measured)  # noqa: E731
    steals = ", ".join(f"{r['steal']:.0%}" for r in measured)
    rows = ["# `electric score --server` against the server's raw throughput", "",
            f"`{cmd}`: {model}, {lines:,} enwiki lines, concurrency {args.concurrency}, server threads "
            f"{args.threads or 'default'}, {machine()}, {len(measured)} rounds (CPU steal, the time the VM's host "
            f"took back: {steals}), load average "
            f"{os.getloadavg()[0]:.1f} at the end, {time.strftime('%Y-%m-%d')}.", "",
            "Medians over the rounds; the shares are each round's against its own best generator.", "",
            "| load | texts/s | server CPU s per s | of the best generator: texts/s | server CPU | "
            "the load's own CPU, ms per 1,000 texts |",
            "|---|---|---|---|---|---|"]
    for name in names:
        rows.append(f"| {name} | {median(name, 'texts_per_s'):,.0f} | {median(name, 'server_cpu_per_s'):.2f} | "
                    f"{median(name, 'of_best_texts'):.0%} | {median(name, 'of_best_server_cpu'):.0%} | "
                    f"{median(name, 'client_cpu_ms_per_1000'):,.0f} |")
    clients = [n for n in names if not n.startswith("raw")]
    met = all(median(n, "of_best_server_cpu") >= TARGET for n in clients)
    each = "; ".join(f"{n.split()[-1]} " + " / ".join(f"{r['loads'][n]['of_best_server_cpu']:.0%}" for r in measured)
                     for n in clients)
    rows += ["", f"The best generator of each round: {', '.join(r['best'] for r in measured)}. Target: the client "
                 f"keeping the server {TARGET:.0%} as busy as the best generator or more: **{'met' if met else 'missed'}**"
                 f" (round by round: {each}). The client's figures are whole commands (the process's start, "
                 "reading the file, writing the records, its CPU from the kernel's count for the finished process); "
                 f"the generators' are steady windows of {args.seconds:g} s, their CPU this process's over the "
                 "window (a raw generator sends pre-encoded bodies, the same text `k` times, and parses no answer)."]
    for name, p in profiled.items():
        rows += ["", f"`{name}` under py-spy ({p['samples']:,} samples of the thread holding the interpreter, 200 a "
                     "second): the top entries", "", "| own | function | within | function |", "|---|---|---|---|"]
        rows += [f"| {a:.1%} | `{fa}` | {b:.1%} | `{fb}` |" for (fa, a), (fb, b) in zip(p["own"], p["within"],
                                                                                         strict=True)]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="an `electric export` directory (default: a random `tiny` int8 one, built here)")
    ap.add_argument("--lines", type=int, default=20000, help="enwiki lines `electric score` scores (default 20000)")
    ap.add_argument("--concurrency", type=int, default=64, help="of the generators and the client (default 64)")
    ap.add_argument("--seconds", type=float, default=10.0, help="each generator's window (default 10)")
    ap.add_argument("--texts-per-request", type=int, nargs="+", default=[16, 64],
                    help="the batched generators' (default 16 and 64: the client sends 64 a request or more)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds of the generators and the client commands (default 3; the medians)")
    ap.add_argument("--threads", type=int, help="the server's ONNX Runtime threads (default: its own)")
    ap.add_argument("--profile", action="store_true",
                    help="also run each client command once under py-spy and report its top entries")
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
            measured = rounds(server, texts, src, work, args)
            profiled = profiles(work, measured[0]["loads"]) if args.profile else {}
        finally:
            server.stop()
    text = report(args, argv, str(args.model or "a random tiny int8 export"), len(texts), measured, profiled)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"rounds": measured, "profiles": profiled},
                                                   indent=1) + "\n")
    print(f"report -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
