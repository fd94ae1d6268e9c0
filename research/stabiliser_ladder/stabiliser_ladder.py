"""The stabilisers' ladder: short ELECTRA (or Electric) runs from one masked LM, the same tokens each, one flag apart.

    python research/stabiliser_ladder/stabiliser_ladder.py --init-from runs/ec4/electra-joint/warm_start --tokenizer runs/ec4/tok \\
        --steps 600 --lanes 3 --work runs/ladder

Every row continues from the same MLM (`--init-from`, a warm start) for `--steps` optimizer steps at `tiny`, one
thread each, `--lanes` at a time (rows that run together share the CPU alike; the comparison is at equal tokens,
so the wall time does not enter it). Rows: the base recipe (joint generator at --gen-lr, shared embeddings) and
one change each: separate / GDES embeddings, a 1/2-width generator, mask rate 25%, dropout 0.1, a frozen
generator with a temperature schedule. Reported per row, at the end: the discriminator's AUC against fixed unigram
noise (context only) and against its own generator, the token cosine, the generator NLL, and BLiMP-12 scored in
one pass (200 pairs a set, with a paired bootstrap against the base row). Writes research/stabiliser_ladder/results/stabiliser_ladder.md and .json. A benchmark: it asserts
nothing.

Pre-LN changes the encoder itself, so a post-LN masked LM cannot start it: its row runs in a second ladder whose
rows each warm-start from scratch within their steps (`--warm-start 0.4 --rows base pre-LN`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from electric.evaluation.blimp import blimp_accuracy, paired_bootstrap_mean_diff, read_blimp  # noqa: E402
from electric.hardware import cpu_description  # noqa: E402
from electric.inference.scoring import load_scorer  # noqa: E402
from electric.shared_data import shared_data_dir  # noqa: E402

ROWS: dict[str, list[str]] = {
    "base": [],
    "separate embeddings": ["--embedding-sharing", "separate"],
    "GDES embeddings": ["--embedding-sharing", "gdes"],
    "generator 1/2 width": ["--generator-hidden-size", "64"],
    "mask 25%": ["--mask-prob", "0.25"],
    "dropout 0.1": ["--dropout", "0.1"],
    "frozen generator, T 2 -> 1": ["--generator-mode", "frozen", "--temperature-start", "2"],
    "pre-LN": ["--layer-norm", "pre"],  # only with --warm-start: a post-LN masked LM cannot start a pre-LN encoder
}
HEALTH = ("val_unigram_noise_auc", "val_disc_auc", "val_energy_auc", "val_token_cosine", "val_gen_nll",
          "val_unigram_nll")
BLIMP_METHOD = {"electra": "electra", "electric": "electric"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    start = ap.add_mutually_exclusive_group(required=True)
    start.add_argument("--init-from", help="the masked LM every row starts from (an MLM run or its warm_start/ "
                                           "directory)")
    start.add_argument("--warm-start", type=float, help="instead, every row trains its own masked LM for this "
                                                        "fraction of --steps first (the pre-LN row needs this)")
    ap.add_argument("--tokenizer", required=True, help="its tokenizer directory")
    ap.add_argument("--objective", choices=("electra", "electric"), default="electra")
    ap.add_argument("--preset", default="tiny", help="model size (default tiny; debug checks the pipeline)")
    ap.add_argument("--steps", type=int, default=600, help="optimizer steps per row (default 600: 2.4M tokens)")
    ap.add_argument("--gen-lr", type=float, default=1e-3, help="the generator's lr in every row (default 1e-3)")
    ap.add_argument("--lanes", type=int, default=3, help="rows trained at a time (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="the runs' seed: init, masking, data order (default 0)")
    ap.add_argument("--rows", nargs="+", choices=list(ROWS), default=[r for r in ROWS if r != "pre-LN"])
    ap.add_argument("--data", default=str(shared_data_dir() / "corpus" / "enwiki"))
    ap.add_argument("--blimp", default=str(shared_data_dir() / "blimp"))
    ap.add_argument("--work", default=str(REPO / "runs" / "ladder"))
    ap.add_argument("--out", default=str(REPO / "research" / "stabiliser_ladder" / "results" / "stabiliser_ladder.md"))
    return ap.parse_args(argv)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def train_row(args, name: str) -> Path:
    out = Path(args.work) / slug(name)
    if (out / "state" / "trainer.pt").is_file() and "stopped" in (out.parent / f"{out.name}.log").read_text():
        return out
    if args.objective == "electric" and "--generator-mode" in ROWS[name]:
        raise SystemExit(f"row {name!r}: Electric has no frozen generator")
    if args.init_from and "--layer-norm" in ROWS[name]:
        raise SystemExit(f"row {name!r} needs --warm-start: --init-from {args.init_from} is a post-LN masked LM")
    start = ["--init-from", args.init_from] if args.init_from else ["--warm-start", f"{args.warm_start:g}"]
    cmd = [sys.executable, "-m", "training.pretrain", "--objective", args.objective, "--preset", args.preset,
           *start, "--tokenizer", args.tokenizer, "--data", args.data, "--max-steps",
           str(args.steps), "--gen-lr", f"{args.gen_lr:g}", "--seed", str(args.seed), "--threads", "1",
           "--num-proc", "1", "--out", str(out),
           "--overwrite", *ROWS[name]]
    if "--generator-mode" in ROWS[name]:
        cmd[cmd.index("--gen-lr"): cmd.index("--gen-lr") + 2] = []  # a frozen generator has no lr
    print("+ " + shlex.join(cmd), flush=True)
    with (out.parent / f"{out.name}.log").open("w") as log:
        rc = subprocess.call(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if rc:
        raise SystemExit(f"row {name!r} failed (exit {rc}); see {out}.log")
    return out


def blimp(args, run: Path) -> dict:
    """BLiMP-12 (200 pairs a set) in one pass with the torch scorer, per-pair correctness kept (run/blimp12.json)."""
    report = run / "blimp12.json"
    if not report.is_file() or "correct" not in json.loads(report.read_text()):
        method = BLIMP_METHOD[args.objective]
        scorer = load_scorer(run, method, backend="torch")
        res = blimp_accuracy(read_blimp(args.blimp, 200),
                             lambda texts: [r.score for r in scorer.score(texts, method=method)], per_pair=True)
        report.write_text(json.dumps({"model": str(run), "method": method, **res}) + "\n")
    return json.loads(report.read_text())


def versus_base(results: dict, reports: dict) -> None:
    """Each row's BLiMP-12 accuracy minus the base row's, paired bootstrap over the same pairs (in points)."""
    if "base" not in reports:
        return
    order = list(reports["base"]["correct"])
    base = [c for k in order for c in reports["base"]["correct"][k]]
    for name, rep in reports.items():
        r = paired_bootstrap_mean_diff([c for k in order for c in rep["correct"][k]], base, resamples=2000, seed=0)
        results[name]["blimp12_vs_base"] = {"diff": 100 * r["diff"], "ci": [100 * x for x in r["ci"]]}


def final_health(run: Path) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    val = [r for r in rows if "val_loss" in r][-1]
    return {"tokens": val["tokens"], **{k[4:]: val.get(k) for k in HEALTH}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with ThreadPoolExecutor(args.lanes) as pool:
        runs = dict(zip(args.rows, pool.map(lambda n: train_row(args, n), args.rows), strict=True))
    results, reports = {}, {}
    for name, run in runs.items():  # one at a time, after training: nothing else on the CPU
        reports[name] = blimp(args, run)
        results[name] = {"flags": ROWS[name], **final_health(run), "blimp12": reports[name]["overall"]["accuracy"]}
    versus_base(results, reports)
    cmd = "python research/stabiliser_ladder/stabiliser_ladder.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    summary = {"machine": cpu_description(), "command": cmd, "objective": args.objective, "steps": args.steps,
               "init_from": args.init_from, "warm_start": args.warm_start, "seed": args.seed, "rows": results, "wall_minutes": round((time.time() - t0) / 60, 1)}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    origin = f"`{args.init_from}`" if args.init_from else f"its own masked LM (the first {args.warm_start:.0%} of its steps)"
    lines = [f"# Stabilisers' ladder ({args.objective}, warm-started, {args.steps} steps each)", "",
             f"Machine: {cpu_description()}. Command: `{cmd}`.", "",
             f"Every row starts from {origin} and trains {args.steps} optimizer steps at `{args.preset}`, one flag apart from the base recipe; health at the last evaluation; BLiMP-12 (first 200 pairs a "
             f"set) with the {BLIMP_METHOD[args.objective]} one-pass score.", "",
             "| row | flags | tokens | unigram-noise AUC | own-generator AUC | token cosine | generator NLL | "
             "unigram NLL | BLiMP-12 | vs base, points [95% CI] |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]

    def f(v, d=3):
        return "–" if v is None else f"{v:.{d}f}"

    def vs_base(r):
        v = r.get("blimp12_vs_base")
        return "–" if v is None else f"{v['diff']:+.2f} [{v['ci'][0]:+.2f}, {v['ci'][1]:+.2f}]"

    for name, r in results.items():
        acc = r["blimp12"]
        lines.append(f"| {name} | `{' '.join(r['flags']) or '(base)'}` | {r['tokens']:,} | {f(r['unigram_noise_auc'])} "
                     f"| {f(r['disc_auc'])} | {f(r['token_cosine'])} | {f(r['gen_nll'], 2)} | "
                     f"{f(r['unigram_nll'], 2)} | {acc:.2f}% | {vs_base(r)} |")
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
