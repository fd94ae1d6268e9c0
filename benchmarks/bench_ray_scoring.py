"""Throughput of `electric score --ray` against `electric score` on the same file and machine (not a test).

    python benchmarks/bench_ray_scoring.py                          # 20,000 enwiki lines, a random `tiny` export
    python benchmarks/bench_ray_scoring.py --model runs/electric-tiny/onnx --input big.txt --repeats 5

Each configuration runs as its own command, as a user would run it, `--repeats` times in turn (so all see the same
machine noise), on one ONNX export and one input file:
- `electric score` (one process, ONNX Runtime's default threads: the physical cores);
- `electric score --ray` with 1 actor of all the cores' threads, and with 2 actors sharing the cores.
It reports the median wall time of each command (the Ray ones include starting and stopping a local Ray instance)
and the Ray job's own time from its summary line, records/s for both, and Ray's overhead as the ratio of
`electric score`'s throughput to each Ray configuration's. Prints the table and writes
benchmarks/results/ray_scoring.md with the command that made it. Never asserts a time.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
from _bench_models import random_discriminator  # noqa: E402

from electric.shared_data import shared_data_dir  # noqa: E402

SUMMARY = re.compile(r"([\d,]+) records \(.*\), ([\d,]+) tokens in ([\d.]+) s")


def enwiki_lines(n: int) -> list[str]:
    """`n` enwiki text lines of 40+ characters (real sentences of mixed length)."""
    out = []
    for f in sorted((shared_data_dir() / "corpus/enwiki").glob("wiki_*")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if not line.startswith("<") and len(line) >= 40:
                out += [s.strip() + "." for s in line.split(". ") if len(s.split()) >= 4]
                if len(out) >= n:
                    return out[:n]
    raise SystemExit(f"only {len(out)} lines in the shared enwiki corpus")


def random_export(work: Path, sample: list[str]) -> Path:
    """A random-weight `tiny` discriminator (`_bench_models`' shape, 8k pieces trained on `sample`), exported to ONNX
    fp32."""
    import training.tokenizer
    from electric.export.exporter import ExportOptions, export_model

    (work / "sample.txt").write_text("\n".join(sample), encoding="utf-8")
    if training.tokenizer.main(["--data", str(work / "sample.txt"), "--vocab-size", "8000", "--out", str(work / "tok"),
                                "--overwrite"]):
        raise SystemExit("training the tokenizer failed")
    random_discriminator("tiny", work / "tok", work / "disc", max_positions=512)
    export_model(work / "disc", work / "onnx", ExportOptions(calibrate=False), log=lambda _: None)
    return work / "onnx"


def run(cmd: list[str], env: dict) -> tuple[float, float | None, int]:
    """(wall seconds, the Ray job's own seconds or None, records) of one command."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{r.stderr[-3000:]}")
    m = SUMMARY.search(r.stderr)
    return wall, (float(m.group(3)) if m else None), (int(m.group(1).replace(",", "")) if m else 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="an `electric export` directory (default: a random `tiny` one, built here)")
    ap.add_argument("--input", help="text file, one text a line (default: --lines enwiki lines)")
    ap.add_argument("--lines", type=int, default=20000, help="enwiki lines when there is no --input (default 20000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each command (default 3; the median is kept)")
    ap.add_argument("--shard-size", type=int, default=1024, help="records per Ray shard (default 1024)")
    ap.add_argument("--per-token", action="store_true", help="score with --per-token (bigger records)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/ray_scoring.md"), help="the report")
    args = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0"}
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        work = Path(tmp)
        if args.input:
            src = Path(args.input)
        else:
            src = work / "input.txt"
            src.write_text("\n".join(enwiki_lines(args.lines)) + "\n", encoding="utf-8")
        model = Path(args.model) if args.model else random_export(work, src.read_text(encoding="utf-8").splitlines())
        base = [sys.executable, "-m", "electric.cli", "score", "--model", str(model), str(src)]
        base += ["--per-token"] if args.per_token else []
        configs = {"electric score": [*base, "--quiet", "--out", str(work / "plain.jsonl")]}
        for actors in (1, 2):
            threads = max(1, cores // actors)
            configs[f"--ray, {actors} actor{'s' if actors > 1 else ''} x {threads} thread{'s' if threads > 1 else ''}"] = [
                *base, "--ray", "--actors", str(actors), "--threads-per-actor", str(threads), "--shard-size",
                str(args.shard_size), "--out", str(work / f"ray{actors}.jsonl")]
        walls: dict[str, list[float]] = {k: [] for k in configs}
        jobs: dict[str, list[float]] = {k: [] for k in configs}
        records = src.read_bytes().count(b"\n")
        for r in range(args.repeats):
            for name, cmd in configs.items():
                wall, job, _ = run(cmd, env)
                walls[name].append(wall)
                if job is not None:
                    jobs[name].append(job)
                print(f"round {r + 1}: {name}: {wall:.2f} s" + (f" (job {job:.2f} s)" if job is not None else ""),
                      file=sys.stderr)
    plain = statistics.median(walls["electric score"])
    rows = []
    for name in configs:
        wall = statistics.median(walls[name])
        job = statistics.median(jobs[name]) if jobs[name] else None
        rows.append((name, wall, records / wall, job, records / job if job else None, wall / plain,
                     (job / plain) if job else None))
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
               platform.processor())
    cmd = shlex.join(["python", "benchmarks/bench_ray_scoring.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        "# `electric score --ray` against `electric score`", "",
        f"`{cmd}`: {records:,} lines of {src.name if args.input else 'enwiki text'}, "
        f"{'a random tiny export' if not args.model else args.model}, {cores} CPUs ({cpu}), {args.repeats} runs each "
        f"(median), {time.strftime('%Y-%m-%d')}.", "",
        "| command | wall s | lines/s (wall) | Ray job s | lines/s (job) | wall / electric score | job / electric score |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, wall, rate, job, job_rate, ratio, job_ratio in rows:
        lines.append(f"| {name} | {wall:.2f} | {rate:,.0f} | {'' if job is None else f'{job:.2f}'} | "
                     f"{'' if job_rate is None else f'{job_rate:,.0f}'} | {ratio:.2f} | "
                     f"{'' if job_ratio is None else f'{job_ratio:.2f}'} |")
    lines += ["", "wall: the whole command (Ray's: starting and stopping a local Ray instance included); job: the Ray "
              "job from its first shard to its last, as its summary line reports it. A ratio above 1 is Ray's "
              "overhead over one `electric score` process on this machine."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
