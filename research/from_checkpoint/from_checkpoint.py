"""Electric / ELECTRA / MLM continued from a real checkpoint (all-MiniLM-L6-v2): the evaluation half.

    python research/from_checkpoint/from_checkpoint.py health blimp fce nbest      # every stage but glue, resumable
    python research/from_checkpoint/from_checkpoint.py nbest --pll-limit 300       # MLM PLL on the first 300 lists only
    python research/from_checkpoint/from_checkpoint.py glue --glue-tasks sst2 --glue-seeds 0 --glue-max-train 2000
    python research/from_checkpoint/from_checkpoint.py report                      # research/from_checkpoint/results/from_checkpoint.{md,json}
    python research/from_checkpoint/from_checkpoint.py all --run electric=runs/smoke_ckpt --only electric checkpoint \\
        --blimp-pairs 5 --nbest-limit 20 --fce-max-sentences 50 --probe-minutes 0.3 --work /tmp/fc-work \\
        --out /tmp/fc-work/report.md                                 # a smoke test

The runs: RUNS_DIR/electric (Electric: energy model + two-tower cloze model), RUNS_DIR/electra (discriminator + small
generator), RUNS_DIR/mlm (generator/ = the full-size masked LM), all continued from --checkpoint by
`python -m training.pretrain --init-from`, and "checkpoint", the checkpoint unchanged. `--run NAME=DIR` points a run
elsewhere. Stages (sub-commands, several in one call, in this order; `all` = every one):

  health  a trained run's last validation row of metrics.jsonl (tokens, unigram-noise AUC, token cosine, AUC vs its
          own generator); the checkpoint's: research/fixed_noise_probe/fixed_noise_probe.py on its frozen encoder (a fresh head,
          --probe-minutes) and the token cosine of its unchanged encoder on the runs' validation slice.
  blimp   BLiMP-12, first --blimp-pairs pairs a set (equal_compute.stage_blimp: 2 threads, scoring time alone,
          per-pair correctness): electric -> electric, cloze; electra -> electra, electric; mlm -> mlm-pll.
  nbest   `electric eval nbest` (guarded reranker, dev half tuned, test half reported) on LibriSpeech test-clean,
          WSJ eval and ATIS test (unadapted) for every method (mlm-pll on the first --pll-limit lists).
  fce     `electric eval detect` (zero-shot FCE error detection) with the electric and electra discriminators.
  glue    `python -m training.finetune` (lr 1e-4) of the checkpoint and of the electra run's discriminator (a model
          training.finetune refuses, e.g. a BertModel directory, is recorded as such, not worked around).
  report  --out (.md), its .json twin and the health curves (research/from_checkpoint/from_checkpoint_report.py).

Everything is written under --work (default runs/fc/work); work already written (with the same command) is skipped.
Subprocesses and in-process evaluation use --threads torch threads (default 1); BLiMP uses 2 (as stage_blimp does).
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from electric.shared_data import shared_data_dir  # noqa: E402
from research.equal_compute import equal_compute as ec  # noqa: E402
from research.equal_compute.equal_compute_report import read_json, read_metrics  # noqa: E402
from research.first_tiny_runs.glue_compare import TASK_DIRS, finetune_argv  # noqa: E402
from research.from_checkpoint.from_checkpoint_report import NBEST_SETS, write_report  # noqa: E402

# NAME -> (objective, one-pass and n-pass scoring methods); "checkpoint" is the checkpoint unchanged
RUNS = {"electric": ("electric", ("electric", "cloze")), "electra": ("electra", ("electra", "electric")),
        "mlm": ("mlm", ("mlm-pll",)), "checkpoint": ("checkpoint", ())}
DETECTORS = ("electric", "electra")  # runs whose discriminator does zero-shot FCE detection
GLUE_MODELS = ("checkpoint", "electra")
GLUE_LR = 1e-4
STAGES = ("health", "blimp", "nbest", "fce", "glue", "report")
AUC_LINE = re.compile(r"step (\d+) tokens ([\d,]+) loss \S+ held-out AUC ([\d.]+)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stages", nargs="+", choices=(*STAGES, "all"))
    ap.add_argument("--runs-dir", default=str(REPO / "runs" / "fc"),
                    help="the trained runs are RUNS_DIR/NAME (default runs/fc)")
    ap.add_argument("--checkpoint", default=str(REPO / "runs" / "ckpt" / "minilm"),
                    help="the checkpoint they continued (default runs/ckpt/minilm)")
    ap.add_argument("--run", action="append", default=[], metavar="NAME=DIR", help="run NAME is DIR (e.g. a smoke run)")
    ap.add_argument("--only", nargs="+", choices=list(RUNS), help="only these runs")
    ap.add_argument("--work", default=str(REPO / "runs" / "fc" / "work"),
                    help="results of every stage (default runs/fc/work)")
    ap.add_argument("--shared", default=str(shared_data_dir()), help="the project's data folder")
    ap.add_argument("--data", nargs="+", help="health: corpus of the validation slice (default: the runs' own)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every job but BLiMP (default 1)")
    ap.add_argument("--probe-minutes", type=float, default=5.0,
                    help="health: fixed_noise_probe training time on the frozen checkpoint (it prints an AUC every "
                         "100 steps; default 5)")
    ap.add_argument("--blimp-pairs", type=int, default=100, help="first N pairs of each BLiMP set (default 100)")
    ap.add_argument("--nbest-sets", nargs="+", default=list(NBEST_SETS), choices=list(NBEST_SETS))
    ap.add_argument("--pll-limit", type=int, help="mlm-pll reranks only the first N lists of each set (default all)")
    ap.add_argument("--nbest-limit", type=int, help="every method reranks only the first N lists (smoke tests)")
    ap.add_argument("--fce-max-sentences", type=int, help="first N FCE test (and N dev) sentences (default all)")
    ap.add_argument("--glue-tasks", nargs="+", default=["sst2"], choices=list(TASK_DIRS))
    ap.add_argument("--glue-seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--glue-max-train", type=int, default=2000, help="training sample per task (default 2000)")
    ap.add_argument("--glue-max-eval", type=int, help="first N dev examples per task (default all)")
    ap.add_argument("--allow-unfinished", action="store_true",
                    help="evaluate runs still training (their latest saved checkpoint); default: refuse")
    ap.add_argument("--out", default=str(REPO / "research" / "from_checkpoint" / "results" / "from_checkpoint.md"),
                    help="the report (default research/from_checkpoint/results/from_checkpoint.md; .json and _curves.png beside it)")
    args = ap.parse_args(argv)
    args.stages = list(STAGES) if "all" in args.stages else [s for s in STAGES if s in args.stages]
    dirs = {n: Path(args.runs_dir) / n for n in RUNS if n != "checkpoint"} | {"checkpoint": Path(args.checkpoint)}
    for spec in args.run:
        name, _, d = spec.partition("=")
        if name not in RUNS or not d:
            ap.error(f"--run {spec}: expected NAME=DIR with NAME one of {', '.join(RUNS)}")
        dirs[name] = Path(d)
    args.dirs = {n: d.resolve() for n, d in dirs.items() if not args.only or n in args.only}
    args.work, args.out = Path(args.work).resolve(), Path(args.out).resolve()
    args.data = [ec.rel(d) for d in args.data] if args.data else None  # relative to the repository, as run from there
    return args


def trained(args) -> list[str]:
    return [n for n in args.dirs if n != "checkpoint"]


def unfinished(args) -> list[str]:
    """The trained runs that have not used their budget yet (or have no checkpoint): still training?"""
    out = []
    for name in trained(args):
        cfg = read_json(args.dirs[name] / "config.json") or {}
        if not ec.finished(args.dirs[name], cfg.get("time_budget_minutes") or 0):
            out.append(name)
    return out


def link_runs(args) -> None:
    """WORK/NAME -> the run's directory (equal_compute.stage_blimp loads the model of run NAME from WORK/NAME)."""
    for name, d in args.dirs.items():
        link = args.work / name
        if link.is_symlink() and link.resolve() != d:
            link.unlink()
        if not link.exists():
            link.symlink_to(d)


def sib(stem: Path, ext: str) -> Path:
    """stem + ext (stems hold dots: with_suffix would cut them)."""
    return stem.with_name(stem.name + ext)


def electric_cli() -> str:
    exe = Path(sys.executable).with_name("electric")
    return str(exe) if exe.is_file() else shutil.which("electric") or "electric"


def job(out: Path, cmd: list[str], parse, log: Path) -> dict | None:
    """Run `cmd` unless `out` holds its result already; `parse(seconds)` -> the result dict, written to `out` with the
    command. A failure is written there too ({"failed": ...}) and does not stop the stage; redone next time."""
    done = read_json(out)
    if done and done.get("argv") == cmd and "failed" not in done:
        return done
    out.parent.mkdir(parents=True, exist_ok=True)
    shown = shlex.join(["electric", *cmd[1:]] if cmd[0] == electric_cli() else cmd)
    try:
        res = {"command": shown, "argv": cmd, **parse(ec.run(cmd, log))}
    except (Exception, SystemExit) as e:  # noqa: BLE001 - one failed job must not stop the others
        res = {"command": shown, "argv": cmd, "failed": str(e)}
        print(f"FAILED: {e}", flush=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    return res


# ---- health --------------------------------------------------------------------------------------------

def stage_health(args) -> None:
    (args.work / "health").mkdir(parents=True, exist_ok=True)
    for name in trained(args):
        _, train, val = read_metrics(args.dirs[name])
        last = val[-1] if val else {}
        health = {"source": f"{ec.rel(args.dirs[name] / 'metrics.jsonl')}, last validation row (step "
                            f"{last.get('step')})", "step": last.get("step"), "tokens": last.get("tokens"),
                  "minutes": train[-1]["elapsed_s"] / 60 if train else None,
                  **{k: last.get(k) for k in ("val_unigram_noise_auc", "val_token_cosine", "val_disc_auc")}}
        (args.work / "health" / f"{name}.json").write_text(json.dumps(health, indent=1) + "\n")
        print(f"{name}: {health}", flush=True)
    if "checkpoint" in args.dirs:
        checkpoint_health(args)


def run_config(args):
    """The RunConfig of the first trained run that has one (electra first), or None."""
    from electric.pretraining.config import RunConfig

    for name in ("electra", "electric", "mlm"):
        path = Path(args.runs_dir) / name / "config.json" if name not in args.dirs else args.dirs[name] / "config.json"
        if path.is_file():
            return RunConfig.load(path)
    return None


def health_data(args) -> list[str]:
    if args.data:
        return args.data
    rc = run_config(args)
    if rc is not None:
        return [ec.rel(REPO / d) for d in rc.data]
    enwiki = Path(ec.rel(Path(args.shared) / "corpus" / "enwiki"))
    return [str(enwiki / f"wiki_0{i}") for i in range(10)]


def checkpoint_health(args) -> None:
    """WORK/health/checkpoint.json: the frozen-encoder probe's last AUC and the unchanged encoder's token cosine."""
    out = args.work / "health" / "checkpoint.json"
    h = read_json(out) or {"source": "the checkpoint unchanged", "tokens": 0}
    ckpt, data = ec.rel(args.dirs["checkpoint"]), health_data(args)
    cmd = [sys.executable, "research/fixed_noise_probe/fixed_noise_probe.py", "--init-from", ckpt, "--freeze-encoder", "--tokenizer",
           ckpt, "--data", *data, "--minutes", f"{args.probe_minutes:g}", "--threads", str(args.threads)]
    if (h.get("probe") or {}).get("argv") != cmd:
        log = args.work / "health" / "checkpoint.probe.log"
        secs = ec.run(cmd, log)
        found = AUC_LINE.findall(log.read_text())
        step, tokens, auc = found[-1] if found else (None, None, None)
        h["probe"] = {"argv": cmd, "command": shlex.join(["python", *cmd[1:]]), "seconds": secs,
                      "minutes": args.probe_minutes,
                      "step": int(step) if step else None, "tokens": int(tokens.replace(",", "")) if tokens else None,
                      "auc": float(auc) if auc else None,
                      **({} if found else {"note": "no AUC printed: fewer than 100 probe steps in --probe-minutes"})}
        h["val_unigram_noise_auc"] = h["probe"]["auc"]
        out.write_text(json.dumps(h, indent=1) + "\n")
    if h.get("cosine_data") != data:
        h.update(val_token_cosine=checkpoint_cosine(args, data), cosine_data=data, val_disc_auc=None)
        out.write_text(json.dumps(h, indent=1) + "\n")
    print(f"checkpoint: probe AUC {h['probe']['auc']} after {h['probe']['step']} steps; token cosine "
          f"{h['val_token_cosine']:.4f}", flush=True)


def checkpoint_cosine(args, data: list[str]) -> float:
    """training.evaluation.evaluate's token cosine for the unchanged encoder, on the runs' validation slice (their
    config, so the same slice and masking seeds; inputs corrupted by a fresh generator, as a run's first evaluation)."""
    import contextlib

    import torch

    from electric.pretraining.config import resolve_config
    from electric.pretraining.data import build_datasets
    from electric.pretraining.init_from import adopt_architecture, pretraining_model, resolve_init
    from electric.pretraining.modeling import SpecialIds
    from electric.pretraining.validation import evaluate
    from electric.tokenization import load_tokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    source = resolve_init(str(args.dirs["checkpoint"]))
    rc = run_config(args)
    cfg = adopt_architecture(rc.pretrain if rc else resolve_config("tiny", "electra", {"lr": GLUE_LR}), source)
    tok = load_tokenizer(source.tokenizer)
    special = SpecialIds.from_tokenizer(tok)
    _, val = build_datasets([str(REPO / d) for d in data], tok, cfg.max_seq_length, cfg.val_sequences, num_proc=1)
    model = pretraining_model(cfg, special, source)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.precision == "bf16" \
        else contextlib.nullcontext
    return evaluate(model, val, cfg, special.pad, torch.device("cpu"), autocast)["val_token_cosine"]


# ---- blimp ---------------------------------------------------------------------------------------------

def stage_blimp(args) -> None:
    """equal_compute.stage_blimp, one (run, method) at a time (METHODS patched to that one method): WORK/blimp/
    NAME.METHOD.json; a result with the same --blimp-pairs is kept."""
    for name in trained(args):
        for method in RUNS[name][1]:
            out = args.work / "blimp" / f"{name}.{method}.json"
            done = read_json(out) or {}
            if done.get("pairs_per_set") == args.blimp_pairs and done.get("run_dir") == str(args.dirs[name]):
                continue
            key = f"{name}:{method}"
            ns = argparse.Namespace(work=str(args.work), shared=args.shared, blimp_pairs=args.blimp_pairs,
                                    recipes={name: ec.Recipe(key)})
            with mock.patch.dict(ec.METHODS, {key: (method,)}):
                ec.stage_blimp(ns)
            rep = json.loads(out.read_text())
            rep.update(run_dir=str(args.dirs[name]),
                       command=f"python research/from_checkpoint/from_checkpoint.py blimp --blimp-pairs {args.blimp_pairs}")
            out.write_text(json.dumps(rep) + "\n")


# ---- n-best --------------------------------------------------------------------------------------------

def nbest_file(args, set_name: str, limit: int | None) -> tuple[Path, int, bool, str]:
    """(file to rerank, lists in it, limited?, prior): the set, or its first `limit` lists (written under WORK/nbest/
    lists); prior none when every list carries first-pass scores, else rank (the list order is the recogniser's)."""
    from electric.evaluation.nbest import read_nbest, write_nbest

    src = Path(args.shared) / "nbest" / NBEST_SETS[set_name]["file"]
    lists, fmt = read_nbest(src)
    prior = "none" if all(nb.first_pass_scores is not None for nb in lists) else "rank"
    if not limit or limit >= len(lists):
        return src, len(lists), False, prior
    path = args.work / "nbest" / "lists" / f"{set_name}.first{limit}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_nbest(lists[:limit], path, fmt)
    return path, limit, True, prior


def stage_nbest(args) -> None:
    for set_name in args.nbest_sets:
        for name in trained(args):
            for method in RUNS[name][1]:
                res = nbest_job(args, set_name, name, method)
                if res and "failed" not in res:
                    t = res["test"]
                    print(f"{set_name} {name}/{method} ({res['lists']} lists): test WER first {t['first']:.2f}, no_lm "
                          f"{t['no_lm']:.2f}, reranked {t['reranked']:.2f} (applied {res['applied']}), "
                          f"{res['seconds']:.0f}s", flush=True)


def nbest_job(args, set_name: str, name: str, method: str) -> dict | None:
    """`electric eval nbest` (guarded, dev = a seeded half) -> WORK/nbest/SET.NAME.METHOD.json (and .report.json)."""
    limits = [x for x in (args.nbest_limit, args.pll_limit if method == "mlm-pll" else None) if x]
    path, n, limited, prior = nbest_file(args, set_name, min(limits) if limits else None)
    stem = args.work / "nbest" / f"{set_name}.{name}.{method}"
    cmd = [electric_cli(), "eval", "nbest", "--model", ec.rel(args.dirs[name]), "--method", method, "--backend",
           "torch", "--nbest", ec.rel(path), "--dev-fraction", "0.5", "--seed", "0", "--prior", prior, "--quiet",
           "--report", ec.rel(sib(stem, ".report.json"))]

    def parse(secs: float) -> dict:
        rep = json.loads(sib(stem, ".report.json").read_text())
        return {"set": set_name, "run": name, "method": method, "seconds": secs, "threads": args.threads, "lists": n,
                "limited": limited,
                "prior": prior, "applied": rep["applied"], "lm_used": rep["applied"] == "lm", "guard": rep["guard"],
                "lm_score": rep.get("lm_score"), "test": {k: v for k, v in rep["test"].items() if k != "ids"}}

    return job(sib(stem, ".json"), cmd, parse, sib(stem, ".log"))


# ---- fce -----------------------------------------------------------------------------------------------

def stage_fce(args) -> None:
    data = ec.rel(Path(args.shared) / "tagging" / "fce")
    for name in [n for n in trained(args) if n in DETECTORS]:
        stem = args.work / "fce" / name
        cmd = [electric_cli(), "eval", "detect", "--model", ec.rel(args.dirs[name]), "--data", data, "--backend",
               "torch", "--quiet", "--json", ec.rel(sib(stem, ".report.json"))]
        cmd += ["--max-sentences", str(args.fce_max_sentences)] if args.fce_max_sentences else []

        def parse(secs, stem=stem):
            rep = json.loads(sib(stem, ".report.json").read_text())
            return {"seconds": secs, **{k: rep[k] for k in ("roc_auc", "f0.5", "threshold", "sentences", "words",
                                                             "incorrect_rate", "f0.5_all_incorrect", "probabilities")},
                    "dev_sentences": rep["dev"]["sentences"]}

        res = job(sib(stem, ".json"), cmd, parse, sib(stem, ".log"))
        if res and "failed" not in res:
            print(f"fce {name}: ROC-AUC {res['roc_auc']:.4f} ({res['sentences']} sentences, {res['seconds']:.0f}s)")


# ---- glue ----------------------------------------------------------------------------------------------

def stage_glue(args) -> None:
    """training.finetune of each GLUE model (WORK/glue/NAME/TASK/seedS, equal_compute's layout), lr GLUE_LR. A model
    training.finetune does not take is recorded in WORK/glue/NAME.unsupported.json, not worked around."""
    from electric.checkpoint import CheckpointError
    from training.finetune import encoder_dir

    ft = argparse.Namespace(data=ec.rel(args.shared), max_train_examples=args.glue_max_train,
                            max_eval_examples=args.glue_max_eval, epochs=None, lr=GLUE_LR, batch_size=None,
                            precision=None, threads=args.threads)
    for name in [n for n in GLUE_MODELS if n in args.dirs]:
        model = args.dirs[name]
        try:
            encoder_dir(str(model))
        except CheckpointError as e:
            (args.work / "glue").mkdir(parents=True, exist_ok=True)
            (args.work / "glue" / f"{name}.unsupported.json").write_text(json.dumps({"reason": str(e)}) + "\n")
            print(f"glue {name}: not fine-tuned: {e}", flush=True)
            continue
        (args.work / "glue" / f"{name}.unsupported.json").unlink(missing_ok=True)
        for seed in args.glue_seeds:
            for task in args.glue_tasks:
                out = args.work / "glue" / name / task / f"seed{seed}"
                argv = finetune_argv(ec.rel(model), task, seed, out, ft, False)
                if ec.stamped(out, argv, out / "eval.json"):
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                try:
                    ec.run([sys.executable, "-m", "training.finetune", *argv], log=out.parent / f"{out.name}.log")
                except SystemExit as e:
                    print(f"FAILED: {e}", flush=True)
                    continue
                (out / "argv.json").write_text(json.dumps(argv) + "\n")
                (out / "model.safetensors").unlink(missing_ok=True)  # only eval.json and the configs are kept


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                      TOKENIZERS_PARALLELISM="false")
    args.work.mkdir(parents=True, exist_ok=True)
    link_runs(args)
    waiting = unfinished(args)
    if waiting and not args.allow_unfinished and set(args.stages) - {"health", "report"}:
        raise SystemExit(f"still training (budget not used up): {', '.join(ec.rel(args.dirs[n]) for n in waiting)}; "
                         "wait for them, or pass --allow-unfinished to score their latest saved checkpoint")
    with (args.work / "stages.jsonl").open("a") as f:  # the harness commands, for the report
        f.write(json.dumps({"argv": ["python", "research/from_checkpoint/from_checkpoint.py", *(sys.argv[1:] if argv is None else argv)],
                            "stages": args.stages, "utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
                + "\n")
    fns = {"health": stage_health, "blimp": stage_blimp, "nbest": stage_nbest, "fce": stage_fce, "glue": stage_glue,
           "report": write_report}
    for stage in args.stages:
        t0 = time.time()
        fns[stage](args)
        print(f"stage {stage} done in {(time.time() - t0) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
