"""A short learning-rate sweep of the `tiny` preset: ELECTRA and Electric side by side, health at each evaluation.

    python research/lr_sweep/lr_sweep.py --lrs 1e-4 2.5e-4 5e-4 --minutes 20
    python research/lr_sweep/lr_sweep.py --report-only          # tabulate the runs already in WORK

Every (objective, lr) run is `python -m training.pretrain --preset tiny --time-budget MINUTES --threads 1`,
all started together so each gets the same CPU share; the table gives the validation health (AUC, token
cosine, logit spread, generator NLL) at every evaluation, by tokens seen. Writes
research/lr_sweep/results/lr_sweep.md. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from electric.hardware import cpu_description  # noqa: E402
from electric.pretraining.health import collapse_reasons_in  # noqa: E402
from electric.shared_data import shared_data_dir  # noqa: E402
from research.equal_compute.equal_compute import read_metrics  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lrs", nargs="+", default=["1e-4", "2.5e-4", "5e-4"], help="peak learning rates")
    ap.add_argument("--objectives", nargs="+", default=["electra", "electric"], choices=["electra", "electric"])
    ap.add_argument("--minutes", type=float, default=20.0, help="time budget of every run (default 20)")
    ap.add_argument("--data", nargs="+", default=[str(shared_data_dir() / "corpus" / "enwiki")])
    ap.add_argument("--tokenizer", default=str(REPO / "runs" / "tok8k"), help="tokenizer directory (runs/tok8k)")
    ap.add_argument("--work", default=str(REPO / "runs" / "sweep"), help="runs go to WORK/OBJECTIVE-LR")
    ap.add_argument("--report-only", action="store_true", help="only tabulate the runs already in --work")
    ap.add_argument("--out", default=str(REPO / "research" / "lr_sweep" / "results" / "lr_sweep.md"))
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(args.work)
    runs = {(o, lr): work / f"{o}-{lr}" for o in args.objectives for lr in args.lrs}
    if not args.report_only:
        work.mkdir(parents=True, exist_ok=True)
        procs = []
        for (o, lr), out in runs.items():
            cmd = [sys.executable, "-m", "training.pretrain", "--objective", o, "--preset", "tiny", "--data",
                   *args.data, "--tokenizer", args.tokenizer, "--time-budget", f"{args.minutes:g}", "--threads", "1",
                   "--num-proc", "1", "--lr", lr, "--out", str(out), "--overwrite"]
            print("+ " + shlex.join(cmd), flush=True)
            procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=(work / f"{o}-{lr}.log").open("w"),
                                          stderr=subprocess.STDOUT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}))
        if any(p.wait() for p in procs):
            raise SystemExit(f"a run failed; see the logs in {work}")
    lines = ["# Learning-rate sweep at `tiny` (batch 32)", "",
             f"Command: `python research/lr_sweep/lr_sweep.py --lrs {' '.join(args.lrs)} --minutes {args.minutes:g}`; "
             f"machine: {cpu_description()}. All runs side by side, one thread each; validation health on the "
             "fixed slice at every evaluation (Electric: AUC of the corrected logit; energy AUC: s alone).", "",
             "| objective | lr | step | tokens | AUC | energy AUC | token cosine | logit spread | gen NLL | collapsed |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (o, lr), out in runs.items():
        if not (out / "metrics.jsonl").is_file():
            continue
        _, _, val = read_metrics(out)
        for r in val:
            auc, cos, spread = r.get("val_disc_auc"), r.get("val_token_cosine"), r.get("val_logit_spread")
            flag = "yes" if collapse_reasons_in(r) else ""
            energy = f"{r['val_energy_auc']:.3f}" if "val_energy_auc" in r else "–"
            lines.append(f"| {o} | {lr} | {r['step']} | {r['tokens']:,} | {auc:.3f} | {energy} | {cos:.3f} "
                         f"| {spread:.3f} | {r['val_gen_nll']:.3f} | {flag} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
