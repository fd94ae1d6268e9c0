"""The figures of the GPU run (benchmarks/gpu_run.sh): each pretraining run evaluated by the project's own commands
into one JSON, rewritten whole (write, then rename) after every figure, so a stage cut short by its time limit keeps
the figures before it.

    python benchmarks/gpu_pretrain_report.py health --report OUT/gpu_pretrain.json --run electric-small=RUN ...
    python benchmarks/gpu_pretrain_report.py blimp  --report ... --run ... --data DATA/blimp
    python benchmarks/gpu_pretrain_report.py rerank --report ... --run ... --data DATA/nbest
    python benchmarks/gpu_pretrain_report.py glue   --report ... --run ... --data DATA/glue
    python benchmarks/gpu_pretrain_report.py bring-back --report ... --run ... --out OUT/model

The JSON: {"gpu", "minutes", "runs": {NAME: {"objective", "command", "tokens", "unigram_noise_auc",
"blimp12": {METHOD: {"accuracy", "seconds", "pairs", "vs_mlm_pll"}},
"rerank_wer": {SET: {"method", "lists", "first", "no_lm", "reranked", "lm_applied"}}, "glue": {TASK: score}}},
"bring_back": {...}, "failures": [one line each]}.

- health: the run's tokens and its last `val_unigram_noise_auc` (RUN/metrics.jsonl; null for an MLM run, which has
  no discriminator), and its exact command (RUN.cmd, written by gpu_run.sh).
- blimp: BLiMP's 12 sets, every pair (or --limit a set), with every one-pass method the run has (electric: its energy
  and its cloze model; electra: the discriminator), then MLM PLL (n passes) last; seconds are the scoring alone (model
  loaded and warmed). "vs_mlm_pll": the one-pass method's accuracy minus the MLM run's PLL, pair by pair, with its
  95% paired-bootstrap interval (`electric.evaluation.blimp.paired_bootstrap_mean_diff`), in accuracy points.
- rerank: `electric eval nbest` (in this process, as the glue stage's fine-tuning) with its guard (the LM is applied only when its dev gain over the no-LM combination
  is significant) on ATIS test, WSJ and LibriSpeech (no first-pass scores: `--prior rank`), half of each list set
  to tune on (seeded) and test WER on the other half; the run's own one-pass method (MLM: PLL).
- glue: `python -m training.finetune` on SST-2 and CoLA (a seeded --glue-examples sample, --glue-epochs), the dev
  score of the kept epoch (SST-2 accuracy, CoLA Matthews correlation).
- bring-back: the best discriminator (highest one-pass BLiMP accuracy, else unigram-noise AUC) saved in bf16 with
  its tokenizer, one tar split into pieces of at most --piece-mib MiB (OUT/best.tar.00, .01, ...), their sha256 and
  the run's command under "bring_back"; RUN's path goes to --best-file for the stages after.

A figure that fails prints one line (`FAILED <stage> <run> ...: reason`), is listed under "failures", and the next
one runs; the exit status is 1 when any failed. A benchmark, not a test: it asserts nothing about the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shlex
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _figures import set_in, write_figures  # noqa: E402

# one-pass methods a run of each objective scores with (BLiMP), MLM PLL apart: it is n passes and runs last
ONE_PASS = {"mlm": (), "electra": ("electra",), "electric": ("electric", "cloze")}
RERANK_METHOD = {"mlm": "mlm-pll", "electra": "electra", "electric": "electric"}
# n-best sets: file under DATA (the bundle's nbest/), and the flags its lists need
NBEST_SETS = {"atis": ("atis_test.whisper5best.json", []),
              "wsj": ("wsj_eval.whisper5best.json", []),
              "librispeech": ("librispeech_test_clean.whisper5best.json", ["--prior", "rank"])}
GLUE_TASKS = ("sst2", "cola")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("health", "blimp", "rerank", "glue", "bring-back"))
    ap.add_argument("--report", required=True, help="the JSON to update (created when missing)")
    ap.add_argument("--run", nargs="+", default=[], metavar="NAME=DIR", help="pretraining run directories")
    ap.add_argument("--data", help="blimp: the BLiMP folder; rerank: the n-best folder; glue: the GLUE folder")
    ap.add_argument("--device", help="torch device (default: cuda if available)")
    ap.add_argument("--work", default="runs/gpu_report", help="per-pair results, cut lists, fine-tuned models")
    ap.add_argument("--gpu", help="the device's name, for the JSON")
    ap.add_argument("--minutes", type=float, help="each run's pretraining budget, for the JSON")
    ap.add_argument("--limit", type=int, help="blimp: first N pairs of each set (default: all 1,000)")
    ap.add_argument("--lists", type=int, help="rerank: first N lists of each set (default: all)")
    ap.add_argument("--glue-examples", type=int, default=4000, help="glue: training sample per task (default 4000)")
    ap.add_argument("--glue-epochs", type=int, default=2, help="glue: epochs (default 2)")
    ap.add_argument("--glue-eval-examples", type=int, help="glue: first N dev examples (default: all)")
    ap.add_argument("--out", help="bring-back: folder for the pieces")
    ap.add_argument("--piece-mib", type=float, default=15.0, help="bring-back: largest piece (default 15 MiB)")
    ap.add_argument("--best-file", help="bring-back: write the best run's directory here")
    args = ap.parse_args(argv)
    args.runs = {}
    for spec in args.run:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"--run {spec!r}: expected NAME=DIR")
        args.runs[name] = Path(path)
    return args


# ---- the JSON ------------------------------------------------------------------------------------------------

def read_report(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {"runs": {}}


def record(path: Path, keys: list[str], value: Any) -> None:
    """Set report[keys[0]][keys[1]]... = value and rewrite the file whole."""
    write_figures(path, set_in(read_report(path), keys, value))


class Figures:
    """Runs each figure's function; a failure is one printed line and an entry under "failures", then the next."""

    def __init__(self, path: Path, stage: str):
        self.path, self.stage, self.failed = path, stage, 0

    def run(self, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except (Exception, SystemExit) as e:  # noqa: BLE001 - one failed figure must not stop the others
            reason = " ".join(str(e).split()) or type(e).__name__
            line = f"FAILED {self.stage} {what}: {type(e).__name__}: {reason[:300]}"
            print(line, flush=True)
            self.failed += 1
            failures = read_report(self.path).get("failures", [])
            record(self.path, ["failures"], [*failures, line])


def objective(run_dir: Path) -> str:
    return json.loads((run_dir / "config.json").read_text())["objective"]


def call(main: Callable[[list[str]], int], argv: list[str], log: Path) -> None:
    """A project command's `main(argv)`, in this process (no second start of torch), its output into `log`; a
    non-zero exit raises with the log's last line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 1
    if rc != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        raise RuntimeError(f"exit {rc}: {lines[-1] if lines else 'no output'} (log: {log})")


# ---- health --------------------------------------------------------------------------------------------------

def stage_health(args: argparse.Namespace, figs: Figures) -> None:
    path = Path(args.report)
    if args.gpu is not None:
        record(path, ["gpu"], args.gpu)
    if args.minutes is not None:
        record(path, ["minutes"], args.minutes)
    for name, run_dir in args.runs.items():
        def one(name: str = name, run_dir: Path = run_dir) -> None:
            rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
            tokens = max((r["tokens"] for r in rows if "tokens" in r), default=None)
            aucs = [r["val_unigram_noise_auc"] for r in rows if "val_unigram_noise_auc" in r]
            cmd = run_dir.with_name(run_dir.name + ".cmd")
            entry = read_report(path)["runs"].get(name, {})
            entry.update({"objective": objective(run_dir), "tokens": tokens,
                          "unigram_noise_auc": aucs[-1] if aucs else None,
                          "command": cmd.read_text().strip() if cmd.is_file() else None})
            record(path, ["runs", name], entry)
            print(f"{name}: {tokens} tokens, unigram-noise AUC {entry['unigram_noise_auc']}", flush=True)

        figs.run(name, one)


# ---- blimp ---------------------------------------------------------------------------------------------------

def stage_blimp(args: argparse.Namespace, figs: Figures) -> None:
    from electric.evaluation.blimp import read_blimp

    sets = read_blimp(args.data, args.limit)
    work = Path(args.work) / "blimp"
    work.mkdir(parents=True, exist_ok=True)
    jobs = [(name, m) for name, d in args.runs.items() for m in ONE_PASS[objective(d)]]
    jobs += [(name, "mlm-pll") for name, d in args.runs.items() if objective(d) == "mlm"]
    for name, method in jobs:
        figs.run(f"{name} {method}", lambda n=name, m=method: blimp_one(args, sets, work, n, m))
    figs.run("vs_mlm_pll", lambda: paired_intervals(args, work))


def blimp_one(args: argparse.Namespace, sets: dict, work: Path, name: str, method: str) -> None:
    from electric.evaluation.blimp import blimp_accuracy
    from electric.inference.scoring import load_scorer

    scorer = load_scorer(args.runs[name], method, backend="torch", device=args.device)
    scorer.score(["a warm-up sentence ."], method=method)
    t0 = time.perf_counter()
    res = blimp_accuracy(sets, lambda texts: [r.score for r in scorer.score(texts, method=method)], per_pair=True)
    seconds = time.perf_counter() - t0
    (work / f"{name}.{method}.json").write_text(json.dumps(res["correct"]) + "\n")
    o = res["overall"]
    record(Path(args.report), ["runs", name, "blimp12", method],
           {"accuracy": o["accuracy"], "seconds": seconds, "pairs": o["pairs"]})
    print(f"{name} {method}: BLiMP {o['accuracy']:.2f}% of {o['pairs']} pairs in {seconds:.1f} s", flush=True)


def paired_intervals(args: argparse.Namespace, work: Path) -> None:
    """Each one-pass method's accuracy minus the MLM run's PLL accuracy on the same pairs, with its interval."""
    from electric.evaluation.blimp import paired_bootstrap_mean_diff

    mlm = [n for n, d in args.runs.items() if objective(d) == "mlm" and (work / f"{n}.mlm-pll.json").is_file()]
    if not mlm:
        return
    base_correct = json.loads((work / f"{mlm[0]}.mlm-pll.json").read_text())
    report = read_report(Path(args.report))
    for name, d in args.runs.items():
        for method in ONE_PASS[objective(d)]:
            f = work / f"{name}.{method}.json"
            if not f.is_file() or method not in report["runs"].get(name, {}).get("blimp12", {}):
                continue
            correct = json.loads(f.read_text())
            order = [k for k in base_correct if k in correct]
            a = [100.0 * c for k in order for c in correct[k]]
            b = [100.0 * c for k in order for c in base_correct[k]]
            r = paired_bootstrap_mean_diff(a, b, resamples=2000, seed=0)
            record(Path(args.report), ["runs", name, "blimp12", method, "vs_mlm_pll"],
                   {"run": mlm[0], "diff": r["diff"], "ci95": r["ci"], "pairs": r["items"],
                    "significant": bool(r["ci"][0] > 0 or r["ci"][1] < 0)})  # either way: 0 outside the interval


# ---- rerank --------------------------------------------------------------------------------------------------

def stage_rerank(args: argparse.Namespace, figs: Figures) -> None:
    work = Path(args.work) / "rerank"
    work.mkdir(parents=True, exist_ok=True)
    for set_name, (file, flags) in NBEST_SETS.items():
        for name, d in args.runs.items():
            figs.run(f"{name} {set_name}", lambda s=set_name, f=file, fl=flags, n=name, d=d:
                     rerank_one(args, work, s, Path(args.data) / f, fl, n, d))


def rerank_one(args: argparse.Namespace, work: Path, set_name: str, nbest: Path, flags: list[str], name: str,
               run_dir: Path) -> None:
    if args.lists:
        from electric.evaluation.nbest import read_nbest, write_nbest

        cut = work / f"{set_name}.first{args.lists}.json"
        if not cut.is_file():
            lists, fmt = read_nbest(nbest)
            write_nbest(lists[: args.lists], cut, fmt)
        nbest = cut
    method = RERANK_METHOD[objective(run_dir)]
    out = work / f"{name}.{set_name}.json"
    from electric.cli import main as electric

    # --sliding-window: a hypothesis longer than the model's positions (LibriSpeech has some past 64 tokens, debug's
    # length) is scored in overlapping windows, every token once, rather than refused
    argv = ["eval", "nbest", "--model", str(run_dir), "--method", method, "--sliding-window",
           "--nbest", str(nbest), "--dev-fraction", "0.5", "--seed", "0", "--quiet", "--report", str(out), *flags,
           *(["--device", args.device] if args.device else [])]
    call(electric, argv, work / f"{name}.{set_name}.log")
    rep = json.loads(out.read_text())
    test = rep["test"]
    figure = {"method": method, "lists": rep["num_utterances"], "first": test["first"], "no_lm": test["no_lm"],
              "reranked": test["reranked"], "lm_applied": rep["applied"] == "lm"}
    record(Path(args.report), ["runs", name, "rerank_wer", set_name], figure)
    print(f"{name} {set_name} ({method}): test WER first {figure['first']:.2f}%, no LM {figure['no_lm']:.2f}%, "
          f"reranked {figure['reranked']:.2f}% (LM applied: {figure['lm_applied']})", flush=True)


# ---- glue ----------------------------------------------------------------------------------------------------

def stage_glue(args: argparse.Namespace, figs: Figures) -> None:
    work = Path(args.work) / "glue"
    for task in GLUE_TASKS:
        for name in args.runs:
            figs.run(f"{name} {task}", lambda t=task, n=name: glue_one(args, work, t, n))


def glue_one(args: argparse.Namespace, work: Path, task: str, name: str) -> None:
    out = work / name / task
    from training.finetune import main as finetune

    argv = ["--task", task, "--model", str(args.runs[name]),
           "--data", str(Path(args.data) / task), "--out", str(out), "--overwrite",
           "--max-train-examples", str(args.glue_examples), "--epochs", str(args.glue_epochs),
           *(["--max-eval-examples", str(args.glue_eval_examples)] if args.glue_eval_examples else []),
           *(["--device", args.device] if args.device else [])]
    call(finetune, argv, work / f"{name}.{task}.log")
    ev = json.loads((out / "eval.json").read_text())
    score = ev["dev"][ev["metric"]]
    record(Path(args.report), ["runs", name, "glue", task], score)
    (out / "model.safetensors").unlink(missing_ok=True)  # the score is what is kept
    print(f"{name} {task}: dev {ev['metric']} {score:.4f}", flush=True)


# ---- bring-back ----------------------------------------------------------------------------------------------

def best_run(report: dict, runs: dict[str, Path]) -> tuple[str, str]:
    """(name, why) of the best run with a discriminator: highest one-pass BLiMP accuracy, else unigram-noise AUC."""
    with_disc = {n: d for n, d in runs.items() if (d / "discriminator").is_dir()}
    if not with_disc:
        raise ValueError("no run has a discriminator")
    entries = {n: report["runs"].get(n, {}) for n in with_disc}
    blimp = {n: max((m["accuracy"] for k, m in e.get("blimp12", {}).items() if k != "mlm-pll"), default=None)
             for n, e in entries.items()}
    if any(v is not None for v in blimp.values()):
        name = max((n for n in blimp if blimp[n] is not None), key=lambda n: blimp[n])
        return name, f"highest one-pass BLiMP-12 accuracy ({blimp[name]:.2f}%)"
    auc = {n: e.get("unigram_noise_auc") for n, e in entries.items()}
    if any(v is not None for v in auc.values()):
        name = max((n for n in auc if auc[n] is not None), key=lambda n: auc[n])
        return name, f"highest unigram-noise AUC ({auc[name]:.3f})"
    name = next(iter(with_disc))
    return name, "no figures: the first run with a discriminator"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def stage_bring_back(args: argparse.Namespace, figs: Figures) -> None:
    figs.run("best discriminator", lambda: bring_back(args))


def bring_back(args: argparse.Namespace) -> None:
    import torch
    from transformers import ElectraForPreTraining

    from electric.modeling.loading import load_model
    from electric.tokenization import load_tokenizer

    if not args.out:
        raise ValueError("bring-back needs --out")
    path, out = Path(args.report), Path(args.out)
    name, why = best_run(read_report(path), args.runs)
    run_dir = args.runs[name]
    if args.best_file:
        Path(args.best_file).write_text(str(run_dir) + "\n")
    folder = Path(args.work) / "bring_back" / f"{name}-discriminator-bf16"
    folder.mkdir(parents=True, exist_ok=True)
    model = load_model(run_dir / "discriminator", ElectraForPreTraining, torch.bfloat16)
    model.save_pretrained(folder)
    load_tokenizer(run_dir / "discriminator").save_pretrained(str(folder))
    health = run_dir / "discriminator" / "training_health.json"
    if health.is_file():
        (folder / health.name).write_bytes(health.read_bytes())
    tar = folder.with_suffix(".tar")
    with tarfile.open(tar, "w") as t:
        t.add(folder, arcname=folder.name)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("best.tar.*"):
        old.unlink()
    piece = int(args.piece_mib * 2**20)
    pieces = {}
    with tar.open("rb") as f:
        for i, block in enumerate(iter(lambda: f.read(piece), b"")):
            p = out / f"best.tar.{i:02d}"
            p.write_bytes(block)
            pieces[p.name] = hashlib.sha256(block).hexdigest()
    cmd = run_dir.with_name(run_dir.name + ".cmd")
    record(path, ["bring_back"], {
        "run": name, "why": why, "folder": folder.name, "dtype": "bfloat16", "tar_bytes": tar.stat().st_size,
        "tar_sha256": sha256(tar), "pieces": pieces,
        "command": cmd.read_text().strip() if cmd.is_file() else None,
        "restore": f"cat best.tar.* > best.tar && echo '{sha256(tar)}  best.tar' | sha256sum -c && tar xf best.tar"})
    print(f"bring-back: {name} ({why}) -> {len(pieces)} piece(s) in {out}, tar sha256 {sha256(tar)[:16]}...",
          flush=True)


STAGES = {"health": stage_health, "blimp": stage_blimp, "rerank": stage_rerank, "glue": stage_glue,
          "bring-back": stage_bring_back}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.stage in ("blimp", "rerank", "glue") and not args.data:
        print(f"FAILED {args.stage}: --data is required", flush=True)
        return 1
    figs = Figures(Path(args.report), args.stage)
    print("+ " + shlex.join([Path(sys.executable).name, *sys.argv]), flush=True)
    STAGES[args.stage](args, figs)
    return 1 if figs.failed else 0


if __name__ == "__main__":
    sys.exit(main())
