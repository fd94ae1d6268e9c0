"""Whether a pretraining run of M minutes should compile its step, from the rows of bench_gpu_throughput.py.

    python benchmarks/gpu_compile_choice.py --json OUT/gpu_throughput.json --objective electric --minutes 1.5

prints the `python -m training.pretrain` flags of the choice on one line (`--no-compile`, `--compile`, or `--compile
--compile-mode reduce-overhead`) and, on stderr, why. benchmarks/gpu_run.sh puts them into each pretraining command;
its --pretrain-compile off / on / cudagraphs comes here as --mode, which these flags then follow whatever the rows.

A compiled step pays its compilation (and CUDA graph capture) inside the run's time budget before it runs at its
pace, so over T = M x 60 seconds each measured mode of the objective (at the JSON's preset) would read about

    tokens_per_s x (T - compile_s),   compile_s = warmup_s - warmup_steps x step_ms / 1000   (at least 0)

tokens. The mode with the most wins, a compiled one only when it reads at least MIN_GAIN more than compile off (a
compiled run risks more, for a few per cent it is not worth it). Without rows for the objective, or without the
JSON, the choice is compile off, said so on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

MIN_GAIN = 0.05
# each --compile value of bench_gpu_throughput.py as training.pretrain's flags
COMPILE_FLAGS = {"off": ("--no-compile",), "on": ("--compile",),
                  "cudagraphs": ("--compile", "--compile-mode", "reduce-overhead")}


def expected_tokens(row: dict[str, Any], warmup_steps: int, seconds: float) -> tuple[float, float]:
    """(the tokens a run of `seconds` would read in this row's mode, the compile seconds it pays first)."""
    compile_s = max(0.0, row["warmup_s"] - warmup_steps * row["step_ms"] / 1000)
    return row["tokens_per_s"] * max(0.0, seconds - compile_s), compile_s


def choose(report: dict[str, Any], objective: str, minutes: float) -> tuple[str, str]:
    """(the mode to pretrain `objective` in for `minutes`, why, in one line)."""
    rows = [r for r in report.get("rows", []) if r["objective"] == objective and r["compile"] in COMPILE_FLAGS
            and "warmup_s" in r]
    by_mode = {r["compile"]: r for r in rows}
    if "off" not in by_mode:
        return "off", f"{objective}: no compile-off row to weigh against: compile off"
    seconds, warmup_steps = minutes * 60, int(report.get("warmup_steps", 0))
    figures = {mode: expected_tokens(r, warmup_steps, seconds) for mode, r in by_mode.items()}
    base = figures["off"][0]
    best = max(figures, key=lambda mode: figures[mode][0])
    said = "; ".join(f"{mode} {by_mode[mode]['tokens_per_s'] / 1e6:.3g}M tokens/s after {c:.0f} s: "
                     f"{t / 1e6:.4g}M tokens" for mode, (t, c) in figures.items())
    if figures[best][0] < (1 + MIN_GAIN) * base:
        best = "off"
    return best, f"{objective}, {minutes:g} min: {said} -> compile {best}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, required=True, help="bench_gpu_throughput.py's --json")
    ap.add_argument("--objective", required=True, help="mlm, electra or electric")
    ap.add_argument("--minutes", type=float, required=True, help="the pretraining run's --time-budget")
    ap.add_argument("--mode", choices=("auto", *COMPILE_FLAGS), default="auto",
                    help="auto (the default): choose from the rows; else the flags of this mode")
    args = ap.parse_args(argv)
    if args.minutes <= 0:
        ap.error(f"--minutes {args.minutes:g} must be > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.mode != "auto":
        print(f"{args.objective}: compile {args.mode} (--mode)", file=sys.stderr)
        print(" ".join(COMPILE_FLAGS[args.mode]))
        return 0
    try:
        report = json.loads(args.json.read_text())
    except (OSError, ValueError) as e:
        print(f"{args.objective}: no throughput figures ({args.json}: {type(e).__name__}): compile off",
              file=sys.stderr)
        report = {}
    mode, why = choose(report, args.objective, args.minutes)
    print(why, file=sys.stderr)
    print(" ".join(COMPILE_FLAGS[mode]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
