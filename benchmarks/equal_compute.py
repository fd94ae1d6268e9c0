"""The equal-compute study: MLM vs ELECTRA vs Electric at `tiny` size, trained side by side for the same time.

    python benchmarks/equal_compute.py all --minutes 90            # the reported figures (about 3 hours)
    python benchmarks/equal_compute.py all --minutes 2 --smoke     # every stage end to end, in minutes

Stages (each is a sub-command; `all` runs them in order):

  train   a WordPiece tokenizer (if WORK/tok is missing), then `python -m training.pretrain` for mlm,
          electra and electric at the same time (one thread each, so each gets the same CPU share) with
          `--time-budget MINUTES`; an existing finished run is kept unless --fresh.
  health  re-evaluate each final checkpoint with this checkout's health metrics (incl. the AUC against fixed
          unigram noise, which only context can detect).
  blimp   BLiMP-12 with each model's own scoring method (electric: one pass; electra: sum log(1 - sigma(s));
          mlm: classic n-pass PLL) on the first --blimp-pairs pairs of each set, timed (scoring only). Run
          alone: its times are the scoring-speed figures.
  glue    fine-tune each encoder and a randomly initialised one on SST-2, CoLA, MRPC, STS-B and RTE with
          one fixed recipe and several seeds (`--lanes` runs at a time, one thread each).
  atis    the adaptation recipe (scripts/adapt_recipe.py) on ATIS for the mlm and electric runs.
  report  benchmarks/results/equal_compute.md (+ .json) and the health curves of the three runs.

Writes everything under WORK (default runs/equal-compute); finished fine-tuning runs are reused. A
benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.glue_compare import AVERAGE, TASK_DIRS, finetune_argv  # noqa: E402
from electric.hardware import cpu_description  # noqa: E402
from electric.pretraining.health import collapse_reasons_in  # noqa: E402

OBJECTIVES = ("mlm", "electra", "electric")
BLIMP_METHOD = {"mlm": "mlm-pll", "electra": "electra", "electric": "electric"}
RANDOM = "random-init"
HEALTH_KEYS = ("val_disc_auc", "val_energy_auc", "val_unigram_noise_auc", "val_disc_acc_gain", "val_logit_spread", "val_token_cosine",
               "val_gen_nll", "val_unigram_nll")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("train", "health", "blimp", "glue", "atis", "report", "all"))
    ap.add_argument("--work", default=str(REPO / "runs" / "equal-compute"), help="everything goes here")
    ap.add_argument("--shared", default=str(REPO.parent / "shared" / "data"), help="the project's data folder")
    ap.add_argument("--minutes", type=float, default=90.0, help="pretraining budget of each run (default 90)")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: WORK/tok, trained with --vocab-size)")
    ap.add_argument("--vocab-size", type=int, default=8000,
                    help="WordPiece vocabulary of the trained tokenizer (8000: Electric's cloze head runs at "
                         "every position and trains 1.75x slower with 16k; BENCHMARKS.md)")
    ap.add_argument("--lr", type=float, help="pretraining peak learning rate for all three runs (default: the "
                                             "tiny preset's)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="fine-tuning seeds")
    ap.add_argument("--tasks", nargs="+", default=list(TASK_DIRS), choices=list(TASK_DIRS))
    ap.add_argument("--glue-examples", type=int, default=4000,
                    help="fixed seeded training sample per task (the one fine-tuning recipe; default 4000)")
    ap.add_argument("--glue-epochs", type=int, default=3, help="fine-tuning epochs for every task (default 3)")
    ap.add_argument("--glue-models", nargs="+", default=[*OBJECTIVES, RANDOM], choices=[*OBJECTIVES, RANDOM],
                    help="encoders to fine-tune (default: all three and random-init)")
    ap.add_argument("--lanes", type=int, default=2, help="fine-tuning runs at a time (default 2)")
    ap.add_argument("--blimp-pairs", type=int, default=200,
                    help="first N pairs of each of the 12 BLiMP sets (default 200: MLM PLL needs one pass per token)")
    ap.add_argument("--atis-epochs", type=float, default=16, help="ATIS adaptation epochs (default 16)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny everything (debug-sized data slices, 1 seed, 2 tasks, 50 BLiMP pairs a set): "
                         "checks the pipeline, not the method")
    ap.add_argument("--fresh", action="store_true", help="redo pretraining runs that already finished")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "equal_compute.md"))
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.tasks = args.seeds[:1], ["sst2", "rte"]
        args.glue_examples, args.glue_epochs, args.atis_epochs, args.blimp_pairs = 200, 1, 0.2, 20
    return args


def run(cmd: list[str], log: Path | None = None) -> float:
    """Run a command (output to `log` when given); its wall time in seconds. A failure ends the study."""
    print("+ " + shlex.join(cmd), flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if log is None:
        rc = subprocess.run(cmd, cwd=REPO, env=env).returncode
    else:
        with log.open("w") as f:
            rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"failed (exit {rc}): {shlex.join(cmd)}" + (f"; see {log}" if log else ""))
    return time.perf_counter() - t0


def corpus(args) -> list[str]:
    enwiki = Path(args.shared) / "corpus" / "enwiki"
    return [str(enwiki / "wiki_0[0-4]")] if args.smoke else [str(enwiki)]


def tokenizer_dir(args) -> Path:
    return Path(args.tokenizer) if args.tokenizer else Path(args.work) / "tok"


# ---- stages ------------------------------------------------------------------------------------------------

def stage_train(args) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tok = tokenizer_dir(args)
    if not (tok / "vocab.txt").is_file():
        run([sys.executable, "-m", "training.tokenizer", "--data", *corpus(args), "--vocab-size",
             str(args.vocab_size), "--out", str(tok), "--overwrite"])
    procs = {}
    for obj in OBJECTIVES:
        out = work / obj
        if finished(out, args.minutes) and not args.fresh:
            print(f"{obj}: keeping the finished run in {out} (--fresh to redo it)")
            continue
        cmd = [sys.executable, "-m", "training.pretrain", "--objective", obj, "--preset", "tiny",
               "--data", *corpus(args), "--tokenizer", str(tok), "--time-budget", f"{args.minutes:g}",
               "--threads", "1", "--num-proc", "1", "--out", str(out), "--overwrite",
               *(["--lr", f"{args.lr:g}"] if args.lr else [])]
        print("+ " + shlex.join(cmd), flush=True)
        log = (work / f"{obj}.log").open("w")
        procs[obj] = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                      env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    for obj, p in procs.items():
        if p.wait() != 0:
            raise SystemExit(f"pretraining {obj} failed (exit {p.returncode}); see {work / obj}.log")


def finished(run_dir: Path, minutes: float) -> bool:
    """True when run_dir holds a run that used up a budget of `minutes` (its last checkpoint says so)."""
    state = run_dir / "state" / "trainer.pt"
    if not state.is_file():
        return False
    import torch

    trainer = torch.load(state, map_location="cpu", weights_only=False)
    return trainer["elapsed"] >= 0.99 * minutes * 60 or trainer["step"] >= trainer["total_steps"]


def stage_blimp(args) -> None:
    """BLiMP accuracy per model with its own method, and the scoring time alone (model loading excluded)."""
    import torch

    from electric.evaluation.blimp import blimp_accuracy, read_blimp
    from electric.inference.scoring import load_scorer

    torch.set_num_threads(2)
    work = Path(args.work)
    (work / "blimp").mkdir(parents=True, exist_ok=True)
    sets = read_blimp(Path(args.shared) / "blimp", args.blimp_pairs)
    times = {}
    for obj in OBJECTIVES:
        method = BLIMP_METHOD[obj]
        scorer = load_scorer(work / obj, method, backend="torch")
        scorer.score(["a warm-up sentence ."], method=method)
        t0 = time.perf_counter()
        res = blimp_accuracy(sets, lambda texts, sc=scorer, m=method: [r.score for r in sc.score(texts, method=m)])
        times[obj] = time.perf_counter() - t0
        report = {"model": str(work / obj), "method": method, "pairs_per_set": args.blimp_pairs,
                  "seconds": times[obj], **res}
        (work / "blimp" / f"{obj}.json").write_text(json.dumps(report, indent=1) + "\n")
        print(f"{obj} ({method}): {res['overall']['accuracy']:.2f}% of {res['overall']['pairs']} pairs, "
              f"scored in {times[obj]:.1f}s", flush=True)
    (work / "blimp" / "seconds.json").write_text(json.dumps(times, indent=1) + "\n")


def stage_glue(args) -> None:
    work = Path(args.work)
    ft = argparse.Namespace(data=str(Path(args.shared).resolve()), max_train_examples=args.glue_examples, max_eval_examples=None,
                            epochs=args.glue_epochs, lr=None, batch_size=None, precision=None, threads=1)
    jobs = []
    for seed in args.seeds:
        for task in args.tasks:
            for name in args.glue_models:
                model = work / ("mlm" if name == RANDOM else name)
                out = work / "glue" / name / task / f"seed{seed}"
                jobs.append((out, finetune_argv(str(model), task, seed, out, ft, name == RANDOM)))

    def one(job) -> None:
        out, argv = job
        stamp = out / "argv.json"
        if (out / "eval.json").is_file() and stamp.is_file() and json.loads(stamp.read_text()) == argv:
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "training.finetune", *argv], log=out.parent / f"{out.name}.log")
        stamp.write_text(json.dumps(argv) + "\n")
        (out / "model.safetensors").unlink(missing_ok=True)  # only eval.json and configs are kept

    with ThreadPoolExecutor(args.lanes) as pool:
        list(pool.map(one, jobs))


def stage_health(args) -> None:
    """Re-evaluate each run's final checkpoint with this checkout's health metrics (the same fixed validation
    slice and masking seeds as the run's own evaluations), into WORK/health/OBJECTIVE.json."""
    import contextlib

    import torch

    from electric.checkpoint import load_tokenizer
    from electric.pretraining.config import PretrainConfig
    from electric.pretraining.data import build_datasets
    from electric.pretraining.modeling import PretrainingModel, SpecialIds
    from training.evaluation import evaluate, unigram_baseline

    torch.set_num_threads(2)
    work = Path(args.work)
    (work / "health").mkdir(parents=True, exist_ok=True)
    for obj in OBJECTIVES:
        run_dir = work / obj
        cfg = PretrainConfig.load(run_dir / "config.json")
        tok = load_tokenizer(run_dir / ("generator" if obj == "mlm" else "discriminator"))
        special = SpecialIds.from_tokenizer(tok)
        train_ds, val_ds = build_datasets(corpus(args), tok, cfg.max_seq_length, cfg.val_sequences, num_proc=1)
        model = PretrainingModel(cfg, special)
        model.load_state_dict(torch.load(run_dir / "state" / "model.pt", map_location="cpu"))
        model.share_embeddings()
        autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.precision == "bf16" \
            else contextlib.nullcontext
        val = evaluate(model, val_ds, cfg, special.pad, torch.device("cpu"), autocast,
                       unigram_baseline(train_ds, special.vocab_size, special.all_special))
        (work / "health" / f"{obj}.json").write_text(json.dumps(val, indent=1) + "\n")
        print(f"{obj}: " + ", ".join(f"{k[4:]} {v:.3f}" for k, v in val.items() if k in HEALTH_KEYS), flush=True)


def stage_atis(args) -> None:
    work = Path(args.work)
    run([sys.executable, "scripts/adapt_recipe.py", "all", "--domains", "atis", "--objectives", "electric", "mlm",
         "--electric", str(work / "electric"), "--mlm", str(work / "mlm"), "--epochs", f"{args.atis_epochs:g}",
         "--work", str(work / "atis"), "--models", str(work / "atis-models")])


# ---- report ------------------------------------------------------------------------------------------------

def read_metrics(run_dir: Path) -> tuple[dict, list[dict], list[dict]]:
    """(config, training rows, validation rows) of a pretraining run."""
    cfg = json.loads((run_dir / "config.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return cfg, [r for r in rows if "loss" in r], [r for r in rows if "val_loss" in r and "tokens" in r]


def glue_results(work: Path, tasks: list[str], seeds: list[int]) -> dict:
    """{model: {task: {seed: dev metrics}}} from the fine-tuning runs that finished."""
    res: dict = {}
    for name in (*OBJECTIVES, RANDOM):
        for task in tasks:
            for seed in seeds:
                f = work / "glue" / name / task / f"seed{seed}" / "eval.json"
                if f.is_file():
                    res.setdefault(name, {}).setdefault(task, {})[seed] = json.loads(f.read_text())["dev"]
    return res


def fmt(v, scale: float = 1.0, digits: int = 1) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * scale:.{digits}f}"


def plot_curves(runs: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (("val_disc_auc", "discriminator AUC (replaced vs original)"),
            ("val_token_cosine", "last-layer cross-sequence token cosine"),
            ("val_gen_nll", "generator / cloze / MLM NLL (dashed: unigram)"))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    for i, (name, val) in enumerate(runs.items()):
        for ax, (key, title) in zip(axes, keys, strict=True):
            pts = [(r["tokens"], r[key]) for r in val if key in r]
            if pts:
                line, = ax.plot(*zip(*pts, strict=True), label=name, color=f"C{i}")  # one colour per run
                if key == "val_gen_nll":
                    uni = [(r["tokens"], r["val_unigram_nll"]) for r in val if "val_unigram_nll" in r]
                    ax.plot(*zip(*uni, strict=True), ls="--", color=line.get_color(), alpha=0.5)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("tokens seen")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def stage_report(args) -> None:
    work, out = Path(args.work), Path(args.out)
    runs = {o: read_metrics(work / o) for o in OBJECTIVES if (work / o / "metrics.jsonl").is_file()}
    lines = ["# Equal compute: MLM vs ELECTRA vs Electric at `tiny` size", "",
             f"Machine: {cpu_description()}.", "",
             f"Command: `python benchmarks/equal_compute.py all --minutes {args.minutes:g}"
             f"{f' --lr {args.lr:g}' if args.lr else ''}` (stages: train, blimp, glue, atis, report). The three "
             "pretraining runs ran at the same time, one thread each, so each got the same share of the 2 cores.", "",
             "## Pretraining and health at the end", "",
             "| run | steps | tokens | minutes | tokens/s | val AUC | energy AUC | unigram-noise AUC | acc − "
             "always-original | logit spread | token cosine | gen NLL | unigram NLL | collapsed at |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    summary: dict = {"pretraining": {}, "machine": cpu_description()}
    for obj, (cfg, train, val) in runs.items():
        last, v = train[-1], (val[-1] if val else {})
        if (work / "health" / f"{obj}.json").is_file():  # what the run's own evaluations did not log yet
            v = {**json.loads((work / "health" / f"{obj}.json").read_text()), **v}
        # the rule of this checkout, whatever the run's code logged
        collapsed = next((r["step"] for r in val if r.get("collapsed") or collapse_reasons_in(r)), None)
        summary["pretraining"][obj] = {"steps": last["step"], "tokens": last["tokens"],
                                       "minutes": last["elapsed_s"] / 60, "health": {k: v.get(k) for k in HEALTH_KEYS},
                                       "first_collapse_step": collapsed, "lr": cfg["lr"]}
        lines.append(f"| {obj} | {last['step']:,} | {last['tokens']:,} | {last['elapsed_s'] / 60:.1f} "
                     f"| {last['tokens'] / max(last['elapsed_s'], 1e-9):,.0f} | {fmt(v.get('val_disc_auc'), 1, 3)} "
                     f"| {fmt(v.get('val_energy_auc'), 1, 3)} | {fmt(v.get('val_unigram_noise_auc'), 1, 3)} "
                     f"| {fmt(v.get('val_disc_acc_gain'), 1, 3)} "
                     f"| {fmt(v.get('val_logit_spread'), 1, 3)} | {fmt(v.get('val_token_cosine'), 1, 3)} "
                     f"| {fmt(v.get('val_gen_nll'), 1, 3)} | {fmt(v.get('val_unigram_nll'), 1, 3)} "
                     f"| {'step ' + str(collapsed) if collapsed else 'never'} |")
    curves = out.with_name(f"{out.stem}_curves.png")
    if runs:
        plot_curves({o: r[2] for o, r in runs.items()}, curves)
        lines += ["", f"Validation health against tokens seen: `{curves.relative_to(REPO) if curves.is_relative_to(REPO) else curves}`. "
                  "AUC is the discriminator's ranking of replaced vs original tokens on the fixed validation slice "
                  "(Electric: its corrected logit s + log q + log(p/(1-p)); energy AUC: s alone). Unigram-noise AUC: the "
                  "same discriminator when the chosen tokens are replaced by unigram samples instead of its own "
                  "generator's (only context can detect them; it does not move as the generator improves). The MLM "
                  "run has no discriminator. Generator NLL: the ELECTRA generator's at masked positions, the cloze model's "
                  "at every candidate position, the MLM's at masked positions, each beside the unigram NLL of the "
                  "same tokens."]

    res = glue_results(work, args.tasks, args.seeds)
    if res:
        lines += ["", "## GLUE dev (fine-tuned, one fixed recipe)", "",
                  f"Recipe for every model: {args.glue_examples:,} training examples per task (fixed seeded sample), "
                  f"{args.glue_epochs} epochs, finetune's defaults otherwise (lr 3e-4 for hidden ≤ 256, layer-wise "
                  "decay 0.8, warmup 10%, batch 32, the epoch kept by dev score). Mean ± sd over seeds "
                  f"{args.seeds}; x100.", "",
                  "| model | " + " | ".join(f"{t} {AVERAGE[t]}" for t in args.tasks) + " | average |",
                  "|---|" + "---:|" * (len(args.tasks) + 1)]
        summary["glue"] = {}
        for name, by_task in res.items():
            cells, means = [], []
            for t in args.tasks:
                vals = [d[AVERAGE[t]] for d in by_task.get(t, {}).values()]
                if vals:
                    m = statistics.mean(vals)
                    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                    cells.append(f"{100 * m:.1f} ± {100 * sd:.1f}" + ("" if len(vals) == len(args.seeds)
                                                                      else f" ({len(vals)} seeds)"))
                    means.append(m)
                else:
                    cells.append("–")
            avg = statistics.mean(means) if len(means) == len(args.tasks) else None
            summary["glue"][name] = {"per_task": {t: [d[AVERAGE[t]] for d in by_task.get(t, {}).values()]
                                                  for t in args.tasks}, "average": avg}
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {fmt(avg, 100)} |")
        common = [sd for sd in args.seeds if all(sd in res.get(n, {}).get(t, {}) for n in res for t in args.tasks)]
        if common != args.seeds:  # a comparison on the seeds every model finished, when some are missing
            lines += ["", f"Seeds every model finished: {common or 'none'}."]
            if common:
                lines += ["", "| model | average over those seeds |", "|---|---:|"]
                for name, by_task in res.items():
                    avg = statistics.mean(statistics.mean(by_task[t][sd][AVERAGE[t]] for sd in common)
                                          for t in args.tasks)
                    summary["glue"][name]["average_common_seeds"] = avg
                    lines.append(f"| {name} | {100 * avg:.1f} |")

    blimp_dir = work / "blimp"
    if (blimp_dir / "seconds.json").is_file():
        secs = json.loads((blimp_dir / "seconds.json").read_text())
        lines += ["", "## BLiMP-12, each model with its own scoring method", "",
                  "| model | method | forward passes per sentence | accuracy (pairs) | mean over sets | scoring time (s) "
                  "| MLM PLL's time / this |",
                  "|---|---|---|---:|---:|---:|---:|"]
        summary["blimp"] = {}
        for obj in OBJECTIVES:
            f = blimp_dir / f"{obj}.json"
            if not f.is_file():
                continue
            rep = json.loads(f.read_text())
            o = rep["overall"]
            passes = "one per token" if BLIMP_METHOD[obj] == "mlm-pll" else "one"
            summary["blimp"][obj] = {"accuracy": o["accuracy"], "macro": o["macro_accuracy"], "seconds": secs[obj],
                                     "method": BLIMP_METHOD[obj]}
            ratio = secs["mlm"] / secs[obj] if "mlm" in secs and secs[obj] > 0 else math.nan
            lines.append(f"| {obj} | {BLIMP_METHOD[obj]} | {passes} | {o['accuracy']:.2f}% | "
                         f"{o['macro_accuracy']:.2f}% | {secs[obj]:.1f} | {fmt(ratio)}× |")
        lines.append(f"\nThe first {args.blimp_pairs} pairs of each of the 12 sets; time: scoring alone (model loaded "
                     "and warmed up), 2 threads, nothing else running.")

    atis = work / "atis" / "atis" / "results.json"
    if atis.is_file():
        r = json.loads(atis.read_text())
        lines += ["", f"## ATIS reranking (adaptation recipe, {args.atis_epochs:g} epochs)", "",
                  f"ATIS test WER: first hypothesis {r['first']:.2f}%, best first-pass score {r['first_pass']:.2f}%, "
                  f"first-pass + word bonus {r['first_pass_plus_words']:.2f}%, oracle {r['oracle']:.2f}%.", "",
                  "| model | LM score | test WER | dev WER | test scoring time (s) |", "|---|---|---:|---:|---:|"]
        summary["atis"] = {"first": r["first"], "first_pass": r["first_pass"], "oracle": r["oracle"], "rows": []}
        for row in r["rows"]:
            c = row[row["chosen"]]
            summary["atis"]["rows"].append({"label": row["label"], "test": c["test"], "dev": c["dev"],
                                            "seconds": row["test_seconds"], "lm_score": row["chosen"]})
            lines.append(f"| {row['label']} ({row['method']}) | {row['chosen']} | {c['test']:.2f}% | {c['dev']:.2f}% "
                         f"| {row['test_seconds']:.1f} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stages = {"train": stage_train, "health": stage_health, "blimp": stage_blimp, "glue": stage_glue, "atis": stage_atis,
              "report": stage_report}
    for name, fn in stages.items():
        if args.stage in (name, "all"):
            t0 = time.time()
            fn(args)
            print(f"stage {name} done in {(time.time() - t0) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
