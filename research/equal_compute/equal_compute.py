"""The equal-compute study: named pretraining recipes at `tiny` size, trained side by side for the same time.

    python research/equal_compute/equal_compute.py all --minutes 90                       # MLM vs ELECTRA vs Electric
    python research/equal_compute/equal_compute.py all --study v3 --work runs/ec4         # issue 22: warm starts, cloze
    python research/equal_compute/equal_compute.py all --study v4 --tokenizer runs/tok    # issue 34: the switch, temperature
    python research/equal_compute/equal_compute.py all --study v3 --runs mlm electric-joint --smoke --minutes 0.3 --work /tmp/s

A study is a list of named recipes (NAME -> objective + extra `training.pretrain` flags, `STUDIES`); `--runs`
keeps some of them. Stages (sub-commands, several in one call; `all` runs them in this order):

  train   a WordPiece tokenizer (if WORK/tok is missing), then every recipe's `python -m training.pretrain` at
          the same time (one thread each: the same CPU share) with `--time-budget MINUTES`. A finished run is
          kept; an unfinished one (still training?) stops the stage unless --fresh.
  blimp   BLiMP-12 (first --blimp-pairs pairs of each set) with every method the run supports (mlm: n-pass
          PLL; electra: sum log(1 - sigma(s)); electric: its energy and its cloze model), timed (scoring only,
          model loaded and warmed), per-pair correctness kept for the paired bootstrap. Run it alone, first.
  health  each run's health at the end (its last evaluation in metrics.jsonl; re-evaluated with this checkout
          when that lacks a figure, or with --reevaluate) and the tokens it trained on.
  atis    the adaptation recipe (research/adaptation/adapt_recipe.py: split, continued pretraining on ATIS references,
          weights tuned on the held-out train lists) per run, test WER per method.
  glue    fine-tune each run's encoder (an MLM run's masked LM, the others' discriminators; random init when the
          study says so) on SST-2, CoLA, MRPC, STS-B and RTE, one fixed recipe, several seeds.
  report  --out (.md and .json) with the health curves (research/equal_compute/equal_compute_report.py).

atis and glue jobs share one pool of --lanes subprocesses (one thread each). GLUE runs seed by seed, so a
--deadline that stops new jobs leaves whole seeds. Writes everything under WORK; finished jobs are reused.
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from electric.shared_data import shared_data_dir  # noqa: E402
from research.equal_compute.equal_compute_report import HEALTH_KEYS, RANDOM, read_metrics, write_report  # noqa: E402
from research.first_tiny_runs.glue_compare import TASK_DIRS, finetune_argv  # noqa: E402

ADAPT_RECIPE = REPO / "research" / "adaptation" / "adapt_recipe.py"
_spec = importlib.util.spec_from_file_location("adapt_recipe", ADAPT_RECIPE)
adapt_recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adapt_recipe)


@dataclass(frozen=True)
class Recipe:
    objective: str  # mlm | electra | electric
    flags: tuple[str, ...] = ()  # extra `training.pretrain` flags (the preset, data, budget and threads are common)


# the scoring methods a run of each objective supports (BLiMP, ATIS): MLM PLL is n passes, the others one
METHODS = {"mlm": ("mlm-pll",), "electra": ("electra",), "electric": ("electric", "cloze")}
WARM = ("--warm-start", "0.4")
STUDIES: dict[str, dict[str, Recipe]] = {
    # the first three studies: each objective at the preset's recipe (--lr to set one for all)
    "defaults": {"mlm": Recipe("mlm"), "electra": Recipe("electra"), "electric": Recipe("electric")},
    # issue 22: MLM at its recipe; ELECTRA and Electric warm-started by MLM for 40% of the same budget
    "v3": {"mlm": Recipe("mlm"),
           "electra-joint": Recipe("electra", (*WARM, "--gen-lr", "1e-3")),
           "electra-frozen": Recipe("electra", (*WARM, "--generator-mode", "frozen", "--temperature-start", "2")),
           "electric-joint": Recipe("electric", (*WARM, "--gen-lr", "1e-3"))},
    # issue 34: the warm start's switch as built (token-cosine hand-over, fresh head at 30x lr) at the `tiny`
    # ELECTRA defaults, the same with replacements sampled at temperature 2, and Electric at its defaults
    "v4": {"electra": Recipe("electra"),
           "electra-t2": Recipe("electra", ("--temperature", "2")),
           "electric": Recipe("electric")},
}
RANDOM_INIT_GLUE = {"defaults": True, "v3": False, "v4": False}  # v3, v4 reuse the defaults study's random init
STAGES = ("train", "blimp", "health", "atis", "glue", "report")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stages", nargs="+", choices=(*STAGES, "all"), help="what to run (atis and glue share a pool)")
    ap.add_argument("--study", default="defaults", choices=list(STUDIES), help="the set of recipes (default: defaults)")
    ap.add_argument("--runs", nargs="+", metavar="NAME", help="only these recipes of the study")
    ap.add_argument("--work", help="everything goes here (default: runs/equal-compute, runs/equal-compute-STUDY)")
    ap.add_argument("--shared", default=str(shared_data_dir()), help="the project's data folder")
    ap.add_argument("--minutes", type=float, default=90.0, help="pretraining budget of each run (default 90)")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: WORK/tok, trained with --vocab-size)")
    ap.add_argument("--vocab-size", type=int, default=8000,
                    help="WordPiece vocabulary of the trained tokenizer (8000: Electric's cloze head runs at "
                         "every position and trains 1.75x slower with 16k; BENCHMARKS.md)")
    ap.add_argument("--lr", type=float, help="pretraining peak lr for every run (default: each recipe's)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="fine-tuning seeds")
    ap.add_argument("--tasks", nargs="+", default=list(TASK_DIRS), choices=list(TASK_DIRS))
    ap.add_argument("--glue-examples", type=int, default=4000,
                    help="fixed seeded training sample per task (the one fine-tuning recipe; default 4000)")
    ap.add_argument("--glue-epochs", type=int, default=3, help="fine-tuning epochs for every task (default 3)")
    ap.add_argument("--glue-eval-examples", type=int, help="first N dev examples per task (default: all)")
    ap.add_argument("--glue-models", nargs="+", metavar="NAME",
                    help=f"encoders to fine-tune (default: every run, and {RANDOM} when the study trains it)")
    ap.add_argument("--lanes", type=int, default=2, help="atis/glue subprocesses at a time (default 2)")
    ap.add_argument("--deadline", help="UTC HH:MM after which no GLUE job starts that would not end before it")
    ap.add_argument("--blimp-pairs", type=int, default=200,
                    help="first N pairs of each of the 12 BLiMP sets (default 200: MLM PLL needs one pass per token)")
    ap.add_argument("--atis-epochs", type=float, default=16, help="ATIS adaptation epochs (default 16)")
    ap.add_argument("--atis-lists", type=int, help="first N lists of the ATIS tuning and test files (default all)")
    ap.add_argument("--reevaluate", action="store_true", help="health: re-evaluate every final checkpoint")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny everything (debug-sized data slices, 1 seed, 2 tasks, 20 BLiMP pairs a set, 30 ATIS "
                         "lists): checks the pipeline, not the method")
    ap.add_argument("--fresh", action="store_true", help="redo pretraining runs that already finished")
    ap.add_argument("--out", help="report (default research/equal_compute/results/equal_compute[_STUDY].md)")
    args = ap.parse_args(argv)
    study = STUDIES[args.study]
    unknown = sorted(set(args.runs or ()) - set(study))
    if unknown:
        ap.error(f"--runs {' '.join(unknown)}: not in study {args.study} ({', '.join(study)})")
    args.recipes = {n: r for n, r in study.items() if not args.runs or n in args.runs}
    suffix = "" if args.study == "defaults" else f"_{args.study}"
    args.work = str(Path(args.work or REPO / "runs" / f"equal-compute{suffix.replace('_', '-')}").resolve())
    args.out = args.out or str(REPO / "research" / "equal_compute" / "results" / f"equal_compute{suffix}.md")
    if args.glue_models is None:
        args.glue_models = [*args.recipes, *([RANDOM] if RANDOM_INIT_GLUE[args.study] else [])]
    if args.smoke:
        args.seeds, args.tasks = args.seeds[:1], ["sst2", "rte"]
        args.glue_examples, args.glue_epochs, args.atis_epochs, args.blimp_pairs = 200, 1, 0.2, 20
        args.glue_eval_examples, args.atis_lists = 100, 30
    args.stages = list(STAGES) if "all" in args.stages else [s for s in STAGES if s in args.stages]
    return args


def rel(path: str | Path) -> str:
    """`path` relative to the repository when it is under its parent (commands run from the repository), as
    given or with its links resolved: `../shared/data` stays `../shared/data` when `../shared` is a link."""
    for p in (Path(os.path.abspath(path)), Path(path).resolve()):
        if p.is_relative_to(REPO.parent):
            return os.path.relpath(p, REPO)
    return os.path.abspath(path)


def run(cmd: list[str], log: Path | None = None) -> float:
    """Run a command (output to `log` when given); its wall time in seconds. A failure raises SystemExit."""
    print("+ " + shlex.join(cmd), flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if log is None:
        rc = subprocess.run(cmd, cwd=REPO, env=env).returncode
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as f:
            rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"failed (exit {rc}): {shlex.join(cmd)}" + (f"; see {log}" if log else ""))
    return time.perf_counter() - t0


def corpus(args) -> list[str]:
    enwiki = rel(Path(args.shared) / "corpus" / "enwiki")
    return [f"{enwiki}/wiki_0[0-4]"] if args.smoke else [enwiki]


def tokenizer_dir(args) -> Path:
    return Path(args.tokenizer) if args.tokenizer else Path(args.work) / "tok"


# ---- train -------------------------------------------------------------------------------------------------

def pretrain_command(args, name: str, recipe: Recipe) -> list[str]:
    """The run's `python -m training.pretrain` argv (argv[0] = "python"; paths relative to the repository)."""
    lr = ["--lr", f"{args.lr:g}"] if args.lr else []
    return ["python", "-m", "training.pretrain", "--preset", "tiny", "--data", *corpus(args), "--tokenizer",
            rel(tokenizer_dir(args)), "--time-budget", f"{args.minutes:g}", "--threads", "1", "--num-proc", "1",
            "--overwrite", "--objective", recipe.objective, *recipe.flags, *lr, "--out", rel(Path(args.work) / name)]


def stage_train(args) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tok = tokenizer_dir(args)
    if not (tok / "vocab.txt").is_file():
        run([sys.executable, "-m", "training.tokenizer", "--data", *corpus(args), "--vocab-size",
             str(args.vocab_size), "--out", str(tok), "--overwrite"])
    procs = {}
    for name, recipe in args.recipes.items():
        out = work / name
        if out.exists() and not args.fresh:
            if finished(out, args.minutes):
                print(f"{name}: keeping the finished run in {out} (--fresh to redo it)")
                continue
            raise SystemExit(f"{out} holds a run that has not used its {args.minutes:g} minutes: still training? "
                             f"(continue it with python -m training.pretrain --resume --out {out}; --fresh restarts it)")
        cmd = pretrain_command(args, name, recipe)
        print("+ " + shlex.join(cmd), flush=True)
        log = (work / f"{name}.log").open("w")
        procs[name] = subprocess.Popen([sys.executable, *cmd[1:]], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                       env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    for name, p in procs.items():
        if p.wait() != 0:
            raise SystemExit(f"pretraining {name} failed (exit {p.returncode}); see {work / name}.log")


def finished(run_dir: Path, minutes: float) -> bool:
    """True when run_dir holds a run that used up a budget of `minutes` (its last checkpoint says so)."""
    state = run_dir / "state" / "trainer.pt"
    if not state.is_file():
        return False
    import torch

    trainer = torch.load(state, map_location="cpu", weights_only=False)
    schedule_done = trainer.get("stage", "main") == "main" and trainer["step"] >= trainer["total_steps"]
    return trainer["elapsed"] >= 0.99 * minutes * 60 or schedule_done


# ---- blimp and health --------------------------------------------------------------------------------------

def stage_blimp(args) -> None:
    """BLiMP per run and method, with the scoring time alone (loading and a warm-up excluded): WORK/blimp/
    NAME.METHOD.json, per-pair correctness included."""
    import torch

    from electric.evaluation.blimp import blimp_accuracy, read_blimp
    from electric.inference.scoring import load_scorer

    torch.set_num_threads(2)
    work = Path(args.work)
    (work / "blimp").mkdir(parents=True, exist_ok=True)
    sets = read_blimp(Path(args.shared) / "blimp", args.blimp_pairs)
    for name, recipe in args.recipes.items():
        for method in METHODS[recipe.objective]:
            scorer = load_scorer(work / name, method, backend="torch")
            scorer.score(["a warm-up sentence ."], method=method)
            load, busy = os.getloadavg()[0], cpu_busy()
            t0 = time.perf_counter()
            res = blimp_accuracy(sets, lambda texts, sc=scorer, m=method: [r.score for r in sc.score(texts, method=m)],
                                 per_pair=True)
            secs = time.perf_counter() - t0
            report = {"run": name, "model": str(work / name), "method": method, "pairs_per_set": args.blimp_pairs,
                      "seconds": secs, "threads": 2, "load_before": load, "cpu_busy_before": busy, **res}
            (work / "blimp" / f"{name}.{method}.json").write_text(json.dumps(report) + "\n")
            print(f"{name} ({method}): {res['overall']['accuracy']:.2f}% of {res['overall']['pairs']} pairs, "
                  f"scored in {secs:.1f}s (CPU busy the second before: {busy:.0%})", flush=True)
            del scorer


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Fraction of all CPUs' time spent outside idle over the next `seconds` (this process sleeps): is the machine
    quiet before a timing? None where /proc/stat is missing."""
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        (t1, i1), _, (t2, i2) = sample(), time.sleep(seconds), sample()
    except OSError:
        return None
    return 1 - (i2 - i1) / max(t2 - t1, 1)


def stage_health(args) -> None:
    """Each run's health at the end into WORK/health/NAME.json: its last evaluation, or a re-evaluation of its
    final checkpoint with this checkout (the same fixed validation slice and masking seeds as the run's own)."""
    work = Path(args.work)
    (work / "health").mkdir(parents=True, exist_ok=True)
    for name, recipe in args.recipes.items():
        run_dir = work / name
        _, train, val = read_metrics(run_dir)
        last = val[-1] if val else {}
        needed = ["val_token_cosine"] + (["val_disc_auc", "val_unigram_noise_auc"] if recipe.objective != "mlm" else [])
        health = {k: last[k] for k in HEALTH_KEYS if k in last}
        source = f"metrics.jsonl, step {last.get('step')}"
        if args.reevaluate or any(k not in health for k in needed):
            health, source = reevaluate(args, run_dir), "re-evaluated with this checkout"
        import torch

        trainer = torch.load(run_dir / "state" / "trainer.pt", map_location="cpu", weights_only=False)
        summary = {"source": source, "steps": trainer["step"], "tokens": trainer["tokens"],  # the last checkpoint's
                   "minutes": trainer["elapsed"] / 60, "warm_start": trainer.get("warm_start"), **health}
        (work / "health" / f"{name}.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"{name} ({source}; {summary['tokens']:,} tokens): "
              + ", ".join(f"{k[4:]} {v:.3f}" for k, v in health.items() if k in HEALTH_KEYS), flush=True)


def reevaluate(args, run_dir: Path) -> dict:
    """training.evaluation.evaluate on the run's final checkpoint, rebuilt the way a resume rebuilds it."""
    import contextlib
    import dataclasses

    import torch

    from electric.pretraining.config import RunConfig
    from electric.pretraining.data import build_datasets
    from electric.pretraining.modeling import SpecialIds
    from electric.pretraining.validation import evaluate, unigram_baseline
    from electric.tokenization import load_tokenizer
    from training.pretrain import stage_model

    torch.set_num_threads(2)
    run_cfg = dataclasses.replace(RunConfig.load(run_dir / "config.json"), out=str(run_dir), resume=True,
                                  overwrite=False)
    cfg = run_cfg.pretrain
    tok = load_tokenizer(run_dir / ("discriminator" if (run_dir / "discriminator").is_dir() else "generator"))
    special = SpecialIds.from_tokenizer(tok)
    train_ds, val_ds = build_datasets(corpus(args), tok, cfg.max_seq_length, cfg.val_sequences, num_proc=1)
    model = stage_model(run_cfg, special)
    model.load_state_dict(torch.load(run_dir / "state" / "model.pt", map_location="cpu"))
    model.share_embeddings()
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.precision == "bf16" \
        else contextlib.nullcontext
    return evaluate(model, val_ds, cfg, special.pad, torch.device("cpu"), autocast,
                    unigram_baseline(train_ds, special.vocab_size, special.all_special))


# ---- atis and glue: jobs in one pool -----------------------------------------------------------------------

def stamped(out: Path, argv: list[str], done: Path) -> bool:
    """True when `done` exists and out/argv.json says it came from `argv` (then the job is reused)."""
    stamp = out / "argv.json"
    return done.exists() and stamp.is_file() and json.loads(stamp.read_text()) == argv


def atis_jobs(args) -> list[tuple[str, object]]:
    """(name, job) per run: continued pretraining on the ATIS adaptation text, then `adapt_recipe.py evaluate`
    with each of the run's methods (weights tuned on the held-out ATIS train lists, WER on ATIS test)."""
    work = Path(args.work)
    d = work / "atis"
    split = [sys.executable, str(ADAPT_RECIPE), "split", "--nbest", str(adapt_recipe.ATIS_TRAIN), "--adapt-fraction",
             "0.6667", "--seed", "0", "--exclude", str(adapt_recipe.ATIS_TEST), "--out", str(d)]
    if not stamped(d, split, d / "split.json"):
        run(split)
        (d / "argv.json").write_text(json.dumps(split) + "\n")
    dev, test = d / "tune.json", Path(adapt_recipe.ATIS_TEST)
    if args.atis_lists:  # the first N lists of each (--smoke)
        from electric.evaluation.nbest import read_nbest, write_nbest

        for src, name in ((dev, "tune"), (test, "test")):
            lists, fmt = read_nbest(src)
            write_nbest(lists[: args.atis_lists], d / f"{name}.first{args.atis_lists}.json", fmt)
        dev, test = d / f"tune.first{args.atis_lists}.json", d / f"test.first{args.atis_lists}.json"
    jobs = []
    for name, recipe in args.recipes.items():
        model = work / "atis-models" / name

        def job(name=name, recipe=recipe, model=model) -> None:
            cmd = adapt_recipe.pretrain_cmd(str(work / name), recipe.objective, str(d / "adapt.txt"), str(model),
                                            args.atis_epochs, 0, adapt_recipe.ADAPT_LR, 1) + ["--threads", "1"]
            if not stamped(model, cmd, model / "state" / "trainer.pt"):
                run(cmd, log=d / f"{name}.adapt.log")
                (model / "argv.json").write_text(json.dumps(cmd) + "\n")
            ev = [sys.executable, str(ADAPT_RECIPE), "evaluate", "--dev", str(dev), "--test", str(test), "--threads",
                  "1", "--out", str(d / f"results.{name}.json")]
            for method in METHODS[recipe.objective]:
                ev += ["--model", f"{name} adapted {method}={model}:{method}"]
            run(ev, log=d / f"{name}.evaluate.log")

        jobs.append((f"atis {name}", job))
    return jobs


def glue_jobs(args) -> list[tuple[str, object]]:
    """(name, job) per fine-tuning run, seed by seed (a deadline then leaves whole seeds)."""
    work = Path(args.work)
    ft = argparse.Namespace(data=str(Path(args.shared).resolve()), max_train_examples=args.glue_examples,
                            max_eval_examples=args.glue_eval_examples, epochs=args.glue_epochs, lr=None,
                            batch_size=None, precision=None, threads=1)
    first_run = next(iter(args.recipes))
    jobs = []
    for seed in args.seeds:
        for task in args.tasks:
            for name in args.glue_models:
                model = work / (first_run if name == RANDOM else name)
                out = work / "glue" / name / task / f"seed{seed}"
                argv = finetune_argv(str(model), task, seed, out, ft, name == RANDOM)

                def job(out=out, argv=argv) -> None:
                    if stamped(out, argv, out / "eval.json"):
                        return
                    out.parent.mkdir(parents=True, exist_ok=True)
                    run([sys.executable, "-m", "training.finetune", *argv], log=out.parent / f"{out.name}.log")
                    (out / "argv.json").write_text(json.dumps(argv) + "\n")
                    (out / "model.safetensors").unlink(missing_ok=True)  # only eval.json and configs are kept

                jobs.append((f"glue {name} {task} seed{seed}", job))
    return jobs


def run_jobs(args, jobs: list[tuple[str, object]]) -> None:
    """Run the jobs --lanes at a time; a failed job is recorded and the others go on. GLUE jobs that would end
    after --deadline (by the mean duration of the finished ones of the same task) are skipped. Outcomes:
    WORK/jobs.json."""
    deadline = None
    if args.deadline:
        hh, mm = map(int, args.deadline.split(":"))
        deadline = dt.datetime.now(dt.timezone.utc).replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()
    path = Path(args.work) / "jobs.json"
    outcomes = json.loads(path.read_text()) if path.is_file() else {}
    durations: dict[str, list[float]] = {}  # GLUE task -> durations of its finished jobs
    lock = threading.Lock()

    def one(item) -> None:
        name, job = item
        task = name.split()[2] if name.startswith("glue") else ""
        same = durations.get(task) or [d for ds in durations.values() for d in ds]
        expected = statistics.mean(same) if same else 0.0
        if deadline and task and time.time() + expected > deadline:
            outcome = f"skipped: would end after the deadline {args.deadline} UTC"
        else:
            t0 = time.time()
            try:
                job()
                outcome = f"done in {(time.time() - t0) / 60:.1f} min"
                if task and time.time() - t0 > 1:  # not a reused result
                    durations.setdefault(task, []).append(time.time() - t0)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - one failed job must not stop the others
                outcome = f"failed: {e}"
        print(f"[{name}] {outcome}", flush=True)
        with lock:
            outcomes[name] = outcome
            path.write_text(json.dumps(outcomes, indent=1) + "\n")

    with ThreadPoolExecutor(args.lanes) as pool:
        list(pool.map(one, jobs))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    with (work / "stages.jsonl").open("a") as f:  # the exact harness commands, for the report
        f.write(json.dumps({"argv": ["python", "research/equal_compute/equal_compute.py", *(sys.argv[1:] if argv is None else argv)],
                            "stages": args.stages, "utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
                + "\n")
    fns = {"train": stage_train, "blimp": stage_blimp, "health": stage_health,
           "report": lambda a: write_report(a, [shlex.join(pretrain_command(a, n, r)) for n, r in a.recipes.items()])}
    pooled = [s for s in ("atis", "glue") if s in args.stages]
    for name in args.stages:
        if name in pooled and name != pooled[0]:
            continue
        t0 = time.time()
        if name in pooled:
            jobs = (atis_jobs(args) if "atis" in pooled else []) + (glue_jobs(args) if "glue" in pooled else [])
            run_jobs(args, jobs)
            name = "+".join(pooled)
        else:
            fns[name](args)
        print(f"stage {name} done in {(time.time() - t0) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
