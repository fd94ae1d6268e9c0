"""Tokens per second of the whole pretraining loop (`python -m training.pretrain`), per objective and setting.

    python benchmarks/bench_train_loop.py --baseline-rev b16049f
    python benchmarks/bench_train_loop.py --variants "electric --tokenizer runs/tok16k" "electra --compile"

Each variant is an objective followed by extra `training.pretrain` flags; it trains the `tiny` preset for
--steps optimizer steps on a slice of the Wikipedia corpus, and its speed is the median `tokens_per_s` of
the logged windows after the first (which holds start-up and, with --compile, compilation). With
--baseline-rev, every objective is also run, with that revision's defaults, from a git worktree of it (the
loop before a change), in the same run. Variants run one after another, never side by side; run it on a quiet machine.
Writes benchmarks/results/pretrain_throughput.md (--out) and the same figures beside it as .json: {"cpu",
"tokens_per_s": {variant: tokens/s}, "baseline": {...}, ...}. A benchmark, not a test.

    python benchmarks/bench_train_loop.py --baseline-rev b16049f --paired --steps 100 \
        --variants "mlm --precision fp32" "electra --precision fp32" --out benchmarks/results/pretrain_step_pairs.md

--paired: each variant and the same variant at --baseline-rev run side by side in lockstep, one optimizer step of each
in turn (benchmarks/_lockstep.py), so both see the same load: reported are each one's median ms per step and
minor page faults per step, and the median of the per-step ratio (this checkout over the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from electric.hardware import cpu_description  # noqa: E402
from electric.shared_data import shared_data_dir  # noqa: E402

DEFAULT_VARIANTS = ["mlm", "electra", "electric"]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS,
                    help="'OBJECTIVE [pretrain flags]' each (default: the three objectives, default flags)")
    ap.add_argument("--baseline-rev", help="also run each objective with the code of this git revision")
    ap.add_argument("--tokenizer", default=str(REPO / "runs" / "tok8k"), help="tokenizer directory (default runs/tok8k)")
    ap.add_argument("--data", nargs="+", default=[str(shared_data_dir() / "corpus" / "enwiki")],
                    help="training text (default: the whole Wikipedia corpus, so the data order costs what it does "
                         "in a real run)")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps per variant (default 30)")
    ap.add_argument("--log-every", type=int, default=5, help="steps per measured window (default 5)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every variant this many times, in rounds, and report each one's median (default 1)")
    ap.add_argument("--paired", action="store_true", help="run each variant in lockstep with its objective at "
                                                          "--baseline-rev (per-step ratio; needs --baseline-rev)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "pretrain_throughput.md"))
    args = ap.parse_args(argv)
    if args.paired and not args.baseline_rev:
        ap.error("--paired compares against --baseline-rev")
    args.data = [str(Path(d).resolve()) for d in args.data]  # the baseline runs from another directory
    args.tokenizer = str(Path(args.tokenizer).resolve())
    return args


def pretrain_args(code: Path, objective: str, flags: list[str], args, out: Path) -> tuple[list[str], dict]:
    """The `training.pretrain` arguments of one variant, and its environment."""
    argv = ["--objective", objective, "--preset", "tiny", "--data", *args.data, "--tokenizer", args.tokenizer,
            "--out", str(out), "--max-steps", str(args.steps), "--log-every", str(args.log_every),
            "--eval-every", "1000000", "--save-every", "1000000", "--num-proc", "2", *flags]
    if code == REPO and "--threads" not in flags:
        argv += ["--threads", str(args.threads)]
    if code == REPO and objective != "mlm" and "--warm-start" not in flags:
        argv += ["--warm-start", "0"]  # the objective's own step, not tiny ELECTRA's default MLM warm start
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": str(args.threads),
           "TOKENIZERS_PARALLELISM": "false"}
    return argv, env


def measure(code: Path, objective: str, flags: list[str], args, work: Path) -> dict:
    out = work / f"run-{time.monotonic_ns()}"
    argv, env = pretrain_args(code, objective, flags, args, out)
    cmd = [sys.executable, "-m", "training.pretrain", *argv]
    p = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(cmd)}\n{p.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    speeds = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > args.log_every]
    return {"tokens_per_s": statistics.median(speeds), "windows": len(speeds)}


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        work = Path(tmp)
        codes = [("this checkout", REPO)]
        if args.baseline_rev:
            tree = work / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.baseline_rev], cwd=REPO,
                           check=True, capture_output=True)
            codes.insert(0, (f"before ({args.baseline_rev})", tree))
        jobs = [(label, code, obj) for label, code in codes[:-1]  # the baseline: each objective, its defaults
                for obj in dict.fromkeys(shlex.split(v)[0] for v in args.variants)]
        jobs += [(codes[-1][0], REPO, v) for v in args.variants]
        try:
            if args.paired:
                return paired(args, codes[0][1], work)
            runs: dict[tuple[str, str], list[float]] = {}
            for rnd in range(args.rounds):  # every job once a round, so slow and fast spells hit all of them
                for label, code, variant in jobs:
                    objective, *flags = shlex.split(variant)
                    r = measure(code, objective, flags, args, work)
                    runs.setdefault((label, variant), []).append(r["tokens_per_s"])
                    print(f"{label:>20}  {variant:<45} {r['tokens_per_s']:>9,.0f} tokens/s  (round {rnd + 1})",
                          flush=True)
            rows = [{"code": label, "variant": variant, "tokens_per_s": statistics.median(speeds), "rounds": speeds}
                    for (label, variant), speeds in runs.items()]
        finally:
            if args.baseline_rev:
                subprocess.run(["git", "worktree", "remove", "--force", str(work / "baseline")], cwd=REPO,
                               capture_output=True)
    load_after = os.getloadavg()
    lines = ["# Pretraining loop throughput (`tiny`)", "",
             f"Command: `python benchmarks/bench_train_loop.py {shlex.join(sys.argv[1:])}`", "",
             f"Machine: {cpu_description()}; {args.threads} threads; load average (1 min) "
             f"{load_before[0]:.1f} before, {load_after[0]:.1f} after. Median tokens/s of {args.log_every}-step "
             f"windows after the first, {args.steps} steps per variant, one variant at a time; the median of "
             f"{args.rounds} round(s), each running every variant once.", "",
             "| code | variant | tokens/s | each round |", "|---|---|---:|---|"]
    lines += [f"| {r['code']} | `{r['variant']}` | {r['tokens_per_s']:,.0f} | "
              f"{', '.join(f'{x:,.0f}' for x in r['rounds'])} |" for r in rows]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    report = {"cpu": cpu_description(), "threads": args.threads, "steps": args.steps, "rounds": args.rounds,
              "command": f"python benchmarks/bench_train_loop.py {shlex.join(sys.argv[1:])}",
              "load_1min": [round(load_before[0], 2), round(load_after[0], 2)],
              "tokens_per_s": {r["variant"]: r["tokens_per_s"] for r in rows if r["code"] == codes[-1][0]},
              "baseline": {r["variant"]: r["tokens_per_s"] for r in rows if r["code"] != codes[-1][0]}}
    Path(args.out).with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.json')}")
    return 0


def paired(args, baseline: Path, work: Path) -> int:
    """Each variant in lockstep with its objective at the baseline revision; writes the report."""
    from _lockstep import run_in_lockstep

    load_before = os.getloadavg()
    rows = []
    for k, variant in enumerate(args.variants):
        objective, *flags = shlex.split(variant)
        base = (f"{variant} at {args.baseline_rev}", *pretrain_args(baseline, objective, flags, args, work / f"a{k}"),
                baseline)  # the same flags: a pair compares like with like
        new = (f"{variant}, this checkout", *pretrain_args(REPO, objective, flags, args, work / f"b{k}"), REPO)
        a, b = run_in_lockstep([(label, argv, code, env) for label, argv, env, code in (base, new)])
        rows.append((variant, a, b))
        print(f"{variant:<40} before {a['ms_per_step']:6.1f} ms ({a['faults_per_step']:,.0f} faults)  now "
              f"{b['ms_per_step']:6.1f} ms ({b['faults_per_step']:,.0f} faults)  paired {b['paired_ratio']:.3f}",
              flush=True)
    load_after = os.getloadavg()
    lines = ["# Pretraining step, this checkout against an older revision, in lockstep (`tiny`)", "",
             f"Command: `python benchmarks/bench_train_loop.py {shlex.join(sys.argv[1:])}`", "",
             f"Machine: {cpu_description()}; {args.threads} threads; load average (1 min) {load_before[0]:.1f} "
             f"before, {load_after[0]:.1f} after. The two processes take one optimizer step each in turn (order "
             f"alternating); medians over {rows[0][1]['steps']} steps after the first 10.", "",
             f"| variant | {args.baseline_rev} ms/step | now ms/step | paired ratio (now / before) | "
             "minor faults/step, before → now |", "|---|---:|---:|---:|---|"]
    lines += [f"| `{v}` | {a['ms_per_step']:.1f} | {b['ms_per_step']:.1f} | {b['paired_ratio']:.3f} | "
              f"{a['faults_per_step']:,.0f} → {b['faults_per_step']:,.0f} |" for v, a, b in rows]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
