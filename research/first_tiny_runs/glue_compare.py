"""Does ELECTRA / Electric pretraining beat MLM at equal compute? Fine-tune each pretrained encoder (and a
randomly initialised one of the same shape) on SST-2, CoLA, MRPC, STS-B and RTE with several seeds and
write the median dev scores as a Markdown table.

    python research/first_tiny_runs/glue_compare.py --runs runs/mlm-tiny runs/electra-tiny runs/electric-tiny \\
        --max-train-examples 2000 --epochs 2 --threads 1

Each fine-tuning run is `python -m training.finetune` (called in-process); its output goes to
WORK/MODEL/TASK/seedN/ and is reused when the script is run again with the same settings (delete WORK or
pass --fresh to redo it). Writes --out (Markdown: table, per-seed figures, pretraining budgets, the
commands) and the same figures as JSON beside it. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from electric.shared_data import shared_data_dir  # noqa: E402
from training import finetune  # noqa: E402

TASK_DIRS = {"sst2": "glue/sst2", "cola": "glue/cola", "mrpc": "glue/mrpc", "stsb": "glue/stsb", "rte": "glue/rte"}
# (task, metric, column title); the GLUE-style average uses the ELECTRA paper's choice per task:
# Matthews corr. for CoLA, Spearman for STS-B, accuracy for the others
COLUMNS = [("cola", "mcc", "CoLA MCC"), ("sst2", "accuracy", "SST-2 acc"), ("mrpc", "f1", "MRPC F1"),
           ("mrpc", "accuracy", "MRPC acc"), ("stsb", "pearson", "STS-B Pearson"),
           ("stsb", "spearman", "STS-B Spearman"), ("rte", "accuracy", "RTE acc")]
AVERAGE = {"cola": "mcc", "sst2": "accuracy", "mrpc": "accuracy", "stsb": "spearman", "rte": "accuracy"}
RANDOM = "random-init"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", required=True, metavar="DIR",
                    help="pretraining run directories (or ELECTRA model dirs); named by their folder name")
    ap.add_argument("--no-random-init", dest="random_init", action="store_false",
                    help="skip the randomly initialised encoder (built like the first --runs entry)")
    ap.add_argument("--tasks", nargs="+", default=list(TASK_DIRS), choices=list(TASK_DIRS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--data", default=str(shared_data_dir()), help="folder holding glue/")
    ap.add_argument("--max-train-examples", type=int, help="fixed seeded training sample per task")
    ap.add_argument("--max-eval-examples", type=int, help="first N dev examples per task")
    ap.add_argument("--epochs", type=int, help="epochs for every task (default: finetune's, 3 / 10 for RTE, STS-B)")
    ap.add_argument("--lr", type=float, help="peak lr (default: finetune's, by model size)")
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--precision", choices=("fp32", "bf16"))
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--work", default=str(REPO / "runs" / "glue-compare"), help="fine-tuned models go here")
    ap.add_argument("--keep-models", action="store_true",
                    help="keep the fine-tuned weights (default: only eval.json and configs are kept)")
    ap.add_argument("--fresh", action="store_true", help="redo runs whose results are already in --work")
    ap.add_argument("--out", default=str(REPO / "research" / "first_tiny_runs" / "results" / "glue.md"))
    return ap.parse_args(argv)


def finetune_argv(model: str, task: str, seed: int, out: Path, args: argparse.Namespace, random_init: bool
                  ) -> list[str]:
    argv = ["--task", task, "--model", model, "--data", str(Path(args.data) / TASK_DIRS[task]), "--out", str(out),
            "--seed", str(seed), "--overwrite"]
    for flag in ("max_train_examples", "max_eval_examples", "epochs", "lr", "batch_size", "precision", "threads"):
        value = getattr(args, flag)
        if value is not None:
            argv += [f"--{flag.replace('_', '-')}", str(value)]
    if random_init:
        argv.append("--random-init")
    return argv


def run_one(argv: list[str], out: Path, fresh: bool, keep_model: bool) -> dict:
    """eval.json of one fine-tuning run (reused if a run with the same arguments finished before)."""
    done = out / "eval.json"
    stamp = out / "argv.json"
    if not fresh and done.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == argv:
        return json.loads(done.read_text())
    rc = finetune.main(argv)
    if rc != 0:
        raise SystemExit(f"fine-tuning failed (exit {rc}): python -m training.finetune {shlex.join(argv)}")
    stamp.write_text(json.dumps(argv) + "\n")
    if not keep_model:
        (out / "model.safetensors").unlink(missing_ok=True)
    return json.loads(done.read_text())


def pretraining_budget(run: str) -> str:
    """One line on how a run was pretrained: objective, preset, steps, tokens, minutes (from its files)."""
    d = Path(run)
    cfg_file, metrics_file = d / "config.json", d / "metrics.jsonl"
    if not (cfg_file.is_file() and metrics_file.is_file()):
        return "not a pretraining run directory (no config.json / metrics.jsonl)"
    cfg = json.loads(cfg_file.read_text())
    last = {}
    for line in metrics_file.read_text().splitlines():
        rec = json.loads(line) if line.strip() else {}
        if "tokens" in rec and "elapsed_s" in rec:  # a training line, not a validation one
            last = rec
    size = f"{cfg.get('num_hidden_layers')}x{cfg.get('hidden_size')}"
    if not last:
        return f"objective {cfg.get('objective')}, preset {cfg.get('preset')} ({size})"
    return (f"objective {cfg.get('objective')}, preset {cfg.get('preset')} ({size}), precision "
            f"{cfg.get('precision')}: {last['step']:,} steps, {last['tokens']:,} tokens, "
            f"{last.get('elapsed_s', 0) / 60:.1f} min")


def fmt(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def write_report(args: argparse.Namespace, models: dict[str, tuple[str, bool]], results: dict, elapsed: float,
                 argv: list[str], seeds: list[int]) -> None:
    """The Markdown table (medians over `seeds`, the rounds finished so far) and its JSON twin."""
    medians: dict[str, dict[str, float]] = {}
    for name in models:
        medians[name] = {}
        for task, metric, _ in COLUMNS:
            vals = [results[name][task][s]["dev"][metric] for s in seeds if s in results[name].get(task, {})]
            if vals:
                medians[name][f"{task}/{metric}"] = statistics.median(vals)
        avg = [medians[name].get(f"{t}/{m}") for t, m in AVERAGE.items() if t in args.tasks]
        if avg and None not in avg:
            medians[name]["average"] = sum(avg) / len(avg)
    cols = [c for c in COLUMNS if c[0] in args.tasks]
    lines = [
        "# GLUE dev: ELECTRA vs Electric vs MLM vs no pretraining",
        "",
        f"Median over fine-tuning seeds {seeds} of the dev score (x100) of the epoch kept by early stopping on dev"
        + ("." if seeds == args.seeds else f" (partial: {len(seeds)} of the {len(args.seeds)} seeds asked for)."),
        f"Average = mean of {', '.join(f'{t} {m}' for t, m in AVERAGE.items() if t in args.tasks)} "
        "(the ELECTRA paper's metric per task; 5 of the 8 GLUE tasks).",
        "",
        "| model | " + " | ".join(c[2] for c in cols) + " | average |",
        "|---|" + "---:|" * (len(cols) + 1),
    ]
    for name in models:
        row = [fmt(medians[name].get(f"{t}/{m}")) for t, m, _ in cols]
        lines.append(f"| {name} | " + " | ".join(row) + f" | {fmt(medians[name].get('average'))} |")
    budget = (f"{args.max_train_examples:,} training examples per task (fixed seeded sample)"
              if args.max_train_examples else "full training sets")
    lines += [
        "",
        "## Budget",
        "",
        f"- fine-tuning: {budget}; epochs {args.epochs or 'default (3; 10 for RTE and STS-B)'}; "
        f"lr {args.lr or 'default (3e-4 for hidden <= 256)'}, layer-wise decay 0.8, warmup 10%, batch "
        f"{args.batch_size or 32}, precision {args.precision or 'fp32'}"
        + (f"; first {args.max_eval_examples} dev examples only" if args.max_eval_examples else "; full dev sets"),
        f"- {sum(len(r) for t in results.values() for r in t.values())} fine-tuning runs in {elapsed / 60:.1f} min "
        f"on {platform.machine()} ({platform.processor() or 'cpu'}), threads {args.threads or 'default'}",
        "",
        "Pretraining of each encoder:",
        "",
    ]
    for name, (path, is_random) in models.items():
        desc = f"random weights, shaped like {path}" if is_random else pretraining_budget(path)
        lines.append(f"- `{name}` ({path}): {desc}")
    lines += ["", "## Per seed", "", "| model | task | " + " | ".join(str(s) for s in seeds) + " |",
              "|---|---|" + "---:|" * len(seeds)]
    for name in models:
        for task in args.tasks:
            metric = AVERAGE[task]
            vals = [fmt(results[name][task][s]["dev"][metric]) if s in results[name].get(task, {}) else "–"
                    for s in seeds]
            lines.append(f"| {name} | {task} {metric} | " + " | ".join(vals) + " |")
    first = next(iter(models.values()))[0]
    example = finetune_argv(first, args.tasks[0], seeds[0], Path(args.work) / "MODEL" / args.tasks[0] / "seed0",
                            args, False)
    lines += [
        "",
        "## Commands",
        "",
        "```",
        f"python research/first_tiny_runs/glue_compare.py {shlex.join(argv)}",
        "# each run is, e.g.:",
        f"python -m training.finetune {shlex.join(example)}",
        "```",
        "",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps({"seeds": seeds, "medians": medians, "runs": {
        n: {t: {str(s): r["dev"] for s, r in by_seed.items()} for t, by_seed in tasks.items()}
        for n, tasks in results.items()}}, indent=2) + "\n")
    print("\n".join(lines[:7 + len(models)]))
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    models: dict[str, tuple[str, bool]] = {}
    for run in args.runs:
        try:
            finetune.encoder_dir(run)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        name = Path(run).resolve().name
        if name in models:
            raise SystemExit(f"two --runs entries are named {name!r}; give them distinct folder names")
        models[name] = (run, False)
    if args.random_init:
        models[RANDOM] = (args.runs[0], True)
    work = Path(args.work)
    if args.fresh and work.exists():
        shutil.rmtree(work)
    start = time.time()
    results: dict[str, dict[str, dict[int, dict]]] = {name: {} for name in models}
    for i, seed in enumerate(args.seeds):  # seed-major: after each round the report covers every model and task
        for task in args.tasks:
            for name, (path, is_random) in models.items():
                out = work / name / task / f"seed{seed}"
                ev = run_one(finetune_argv(path, task, seed, out, args, is_random), out, args.fresh, args.keep_models)
                results[name].setdefault(task, {})[seed] = ev
                print(f"[{time.time() - start:7.0f}s] {name} {task} seed {seed}: "
                      + ", ".join(f"{k} {v:.4f}" for k, v in ev["dev"].items()), flush=True)
        write_report(args, models, results, time.time() - start, argv, args.seeds[: i + 1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
