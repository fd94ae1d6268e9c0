"""The pretraining command line, resolved once into a frozen `RunConfig` (`resolve_run`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import torch

from electric.checkpoint import CheckpointError
from electric.hardware import resolve_precision
from electric.pretraining.config import (
    CHECKPOINT_TEMPERATURE_START,
    OBJECTIVES,
    PRESETS,
    RESUME_FLAGS,
    PretrainConfig,
    RunConfig,
    resolve_config,
)
from electric.pretraining.data import DataError
from electric.pretraining.init_from import InitSource, adopt_architecture, resolve_init
from training.run_dir import prepare_out_dir

INIT_FROM_LR_SCALE = 0.2  # continued pretraining (--init-from) defaults to 1/5 of the preset's peak lr


def parse_args(argv: list[str] | None = None, description: str | None = None) -> argparse.Namespace:
    """The command line; `description` heads --help (training.pretrain passes its own docstring)."""
    ap = argparse.ArgumentParser(prog="python -m training.pretrain", description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objective", choices=OBJECTIVES, default="electric",
                    help="mlm = BERT baseline; electra = replaced-token detection; electric = energy-based "
                         "cloze model (NCE with a two-tower noise model). Default electric.")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                    help="model size and schedule: debug (seconds on CPU), tiny (hidden 128 x 4 layers), "
                         "small/base/large (ELECTRA paper). Default tiny.")
    ap.add_argument("--data", nargs="+", help="training text: files, directories or globs (plain text or "
                                               "WikiExtractor <doc> files)")
    ap.add_argument("--tokenizer", help="tokenizer directory (python -m training.tokenizer, or any local "
                                        "BERT/ELECTRA vocab); default: the one saved with --init-from or --resume")
    ap.add_argument("--out", required=True, help="run directory to write")
    ap.add_argument("--max-steps", type=int, help="optimizer steps (the schedule decays to 0 here)")
    ap.add_argument("--time-budget", type=float, dest="time_budget_minutes", metavar="MINUTES",
                    help="stop after this many minutes; the schedule's length is fitted to it")
    ap.add_argument("--epochs", type=float, help="stop after this many passes over the data")
    ap.add_argument("--batch-size", type=int, help="sequences per optimizer step (global, all processes)")
    ap.add_argument("--grad-accum", type=int, help="micro-steps per optimizer step")
    ap.add_argument("--lr", type=float, help="peak learning rate")
    ap.add_argument("--warmup-steps", type=int, help="linear warmup steps (capped at 10%% of the run, but never "
                                                     "below --min-warmup-steps)")
    ap.add_argument("--min-warmup-steps", type=int,
                    help="floor of the 10%% warmup cap, so a short or time-budgeted run still warms up (tiny 300, "
                         "debug 10, others 1000; 0 = the plain 10%% cap)")
    ap.add_argument("--max-seq-length", type=int, help="tokens per packed sequence")
    ap.add_argument("--mask-prob", type=float, help="fraction of tokens masked/replaced (0.15; 0.25 for large)")
    ap.add_argument("--disc-weight", type=float, help="discriminator loss weight (50)")
    ap.add_argument("--gen-weight", type=float, help="generator/cloze loss weight (1)")
    ap.add_argument("--temperature", type=float, help="sampling temperature (1.0)")
    ap.add_argument("--disc-bias-init", choices=("prior", "zero"),
                    help="discriminator output bias at start: prior (default; ELECTRA log(p/(1-p)), Electric log V, "
                         "so the first logits sit at the label prior) or zero (google-research's; can collapse)")
    ap.add_argument("--disc-head-lr-scale", type=float, metavar="X",
                    help="the discriminator's head (dense -> dense(1)) trains at X times --lr, so that a fresh head on a "
                         "trained encoder reaches the output scale the objective needs by itself instead of the "
                         "encoder aligning every token's state to provide it (a collapse). Default: 30 for a fresh head on "
                         "a trained encoder (--init-from, a warm start), else 1 (from scratch, or a discriminator "
                         "checkpoint that keeps its head)")
    ap.add_argument("--generator-hidden-size", type=int, help="generator width (default hidden/4)")
    ap.add_argument("--embedding-sharing", choices=("shared", "separate", "gdes"),
                    help="the generator's embeddings: shared with the discriminator (default, ELECTRA), separate, or "
                         "gdes (DeBERTa-v3: stopgrad(the discriminator's) + a delta of its own, so the generator's "
                         "loss never pulls on the discriminator's embeddings)")
    ap.add_argument("--layer-norm", choices=("post", "pre"),
                    help="where each layer's LayerNorms sit: post (default; BERT, ELECTRA) or pre (x + f(LN(x)) and a "
                         "final LayerNorm; Cramming's choice for short runs). Pre-LN checkpoints train, resume, hand "
                         "over their encoder and score with the torch backend; export and fine-tuning refuse them")
    ap.add_argument("--dropout", type=float, help="hidden and attention dropout (tiny 0, other presets 0.1)")
    ap.add_argument("--seed", type=int, help="seed for init, masking, sampling and data order")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                    help="bf16 = autocast (master weights fp32). auto (default): bf16 on CUDA with bf16 support and on "
                         "CPUs with native bf16 (AVX512-BF16 / AMX), fp32 elsewhere (bf16 is emulated and ~25x "
                         "slower on AVX2-only CPUs)")
    ap.add_argument("--compile", action="store_true", default=None, help="torch.compile the models")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's, one per core)")
    ap.add_argument("--stop-on-collapse", action="store_true",
                    help="end the run (checkpoint saved, exit status 3) when the discriminator is found collapsed")
    ap.add_argument("--num-proc", type=int, help="tokenisation processes (default: CPUs)")
    ap.add_argument("--log-every", type=int, help="steps between metrics.jsonl lines")
    ap.add_argument("--eval-every", type=int, help="steps between validation passes")
    ap.add_argument("--save-every", type=int, help="steps between resumable checkpoints")
    ap.add_argument("--init-from", metavar="DIR",
                    help="start from a checkpoint you have (continued pretraining): a run directory, or any local "
                         "BERT-family directory - BertModel, BertForMaskedLM, BertForPreTraining, ElectraModel, "
                         "ElectraForPreTraining, ElectraForMaskedLM, or a sentence-transformers folder of one. The run "
                         "adopts its sizes, positions and tokenizer; its encoder becomes the discriminator (energy "
                         "model) under a fresh head, or the masked LM for --objective mlm (docs/pretraining.md)")
    ap.add_argument("--init-generator-from", metavar="DIR",
                    help="with --init-from: the generator (ElectraForMaskedLM) or cloze model (an Electric run's "
                         "generator/) to continue; default a fresh one at --generator-hidden-size over the "
                         "checkpoint's vocabulary")
    ap.add_argument("--warm-start", type=float, metavar="FRACTION",
                    help="electra/electric: spend this fraction of the run (--time-budget or --max-steps) on MLM at "
                         "its own lr first, then hand its encoder to the discriminator and switch objective in the "
                         "same run (resumable across the switch). At CPU budgets a discriminator from scratch does "
                         "not learn context; a warm one does (docs/pretraining.md). Default 0 (none)")
    ap.add_argument("--warm-start-lr", type=float, help="peak lr of the warm start's MLM stage (default: the MLM "
                                                        "recipe's for the preset, 1e-3 at tiny)")
    ap.add_argument("--gen-lr", type=float,
                    help="peak lr of the generator / cloze model, a parameter group of its own (default: --lr)")
    ap.add_argument("--generator-mode", choices=("joint", "frozen"),
                    help="joint (default): the generator trains beside the discriminator; frozen (electra, with "
                         "--warm-start or an MLM --init-from): the MLM itself samples the replacements, fixed "
                         "(Fast-ELECTRA), smoothed by --temperature-start")
    ap.add_argument("--temperature-start", type=float,
                    help="sampling temperature at the start of the objective, falling linearly to --temperature "
                         "at the end (Fast-ELECTRA's schedule for a frozen generator). Default 0 = constant, except "
                         "Electric --init-from a checkpoint with a fresh cloze model: 4, easy noise while the cloze "
                         "model's log q climbs (docs/pretraining.md)")
    ap.add_argument("--data-from-nbest", nargs="+", default=[], metavar="NBEST",
                    help="also train on the references (output/ref fields) of these n-best files (any format "
                         "`electric rerank` reads); keep them apart from the lists you tune or test on")
    ap.add_argument("--cache-dir", help="datasets cache directory (default: datasets' own)")
    ap.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    ap.add_argument("--stop-at", type=int, metavar="STEP",
                    help="checkpoint and stop at this step without changing the schedule (continue with --resume)")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    ap.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    return ap.parse_args(argv)



CONFIG_FLAGS = ("max_steps", "time_budget_minutes", "epochs", "batch_size", "grad_accum", "lr", "warmup_steps",
                "min_warmup_steps", "max_seq_length", "mask_prob", "disc_weight", "gen_weight", "temperature",
                "disc_bias_init", "disc_head_lr_scale",
                "generator_hidden_size", "seed", "precision", "compile", "num_proc", "log_every", "eval_every",
                "save_every", "init_from", "init_generator_from", "warm_start", "warm_start_lr", "gen_lr", "generator_mode", "temperature_start",
                "embedding_sharing", "layer_norm")


def resolve_run(args: argparse.Namespace) -> RunConfig:
    """The command line as one RunConfig: checked, derived and frozen here; nothing changes it after."""
    out = Path(args.out)
    prepare_out_dir(out, args.resume, args.overwrite)
    extended = tuple(k for k in RESUME_FLAGS if args.resume and getattr(args, k) is not None)
    source = None  # --init-from, resolved once
    if args.resume:  # a resumed run may be extended, nothing else changes
        cfg = PretrainConfig.load(out / "config.json", {k: getattr(args, k) for k in extended})
    else:
        overrides = {k: getattr(args, k) for k in CONFIG_FLAGS}
        overrides["precision"] = choose_precision(args.precision, args.device)
        if args.dropout is not None:
            overrides["hidden_dropout_prob"] = overrides["attention_probs_dropout_prob"] = args.dropout
        cfg = resolve_config(args.preset, args.objective, overrides)
        if cfg.init_from:  # the source's architecture; continuing a trained head (not a fresh one) at a lower lr
            source = resolve_init(cfg.init_from, cfg.init_generator_from)
            cfg = adopt_architecture(cfg, source)
            fresh_head = source.fresh_head if cfg.objective != "mlm" else source.encoder.carries != "mlm"
            if args.lr is None and not fresh_head:
                cfg = dataclasses.replace(cfg, lr=cfg.lr * INIT_FROM_LR_SCALE)
            if args.disc_head_lr_scale is None and not fresh_head:  # a trained head: no faster than the rest
                cfg = dataclasses.replace(cfg, disc_head_lr_scale=1.0)
            if args.temperature_start is None and cfg.objective == "electric" and source.generator is None:
                # a fresh cloze model beside a trained encoder: easy noise first (CHECKPOINT_TEMPERATURE_START)
                cfg = dataclasses.replace(cfg, temperature_start=CHECKPOINT_TEMPERATURE_START)
            if cfg.generator_mode == "frozen" and source.encoder.carries != "mlm":
                raise ValueError(f"--generator-mode frozen needs a masked LM to freeze; --init-from {cfg.init_from!r} "
                                 f"is a {source.encoder.architecture}")
    if not args.resume and cfg.generator_mode == "frozen" and not (cfg.warm_start or cfg.init_from):
        raise ValueError("--generator-mode frozen needs a masked LM to freeze: train one first with --warm-start, or "
                         "pass --init-from an MLM run or a BertForMaskedLM / ElectraForMaskedLM directory")
    nbest_text = nbest_references(args.data_from_nbest)
    if not (args.data or nbest_text):
        raise DataError("no training data: pass --data FILE|DIR|GLOB ... (or --data-from-nbest FILE)")
    return RunConfig(
        cfg, out=args.out, data=tuple(args.data or ()), data_from_nbest=tuple(args.data_from_nbest),
        nbest_text=nbest_text, tokenizer=tokenizer_dir(args.tokenizer, cfg, out, args.resume, source),
        cache_dir=args.cache_dir, device=args.device, threads=args.threads, stop_at=args.stop_at,
        stop_on_collapse=args.stop_on_collapse, resume=args.resume, overwrite=args.overwrite, extended=extended,
    )


def choose_precision(requested: str, device: str | None) -> str:
    """--precision auto|fp32|bf16 -> fp32 or bf16 for this device (a warning when bf16 would be emulated)."""
    device_type = torch.device(device).type if device else ("cuda" if torch.cuda.is_available() else "cpu")
    cuda_bf16 = device_type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    precision, warning = resolve_precision(requested or "auto", device_type, cuda_bf16=cuda_bf16)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return precision


def tokenizer_dir(given: str | None, cfg: PretrainConfig, out: Path, resume: bool,
                  source: InitSource | None = None) -> str:
    """--tokenizer, else the one saved with the run being resumed, else the --init-from source's."""
    if given is not None:
        return given
    if resume:  # a run still in its warm start has saved its MLM only
        disc = out / "discriminator"
        return str(disc if cfg.objective != "mlm" and disc.is_dir() else out / "generator")
    if source is not None:
        return str(source.tokenizer)
    raise CheckpointError("--tokenizer is required (train one with `python -m training.tokenizer`)")


def nbest_references(paths: list[str]) -> str | None:
    """Write the references of n-best files to a temporary text file (one document each); return its path."""
    if not paths:
        return None
    import tempfile

    from electric.evaluation.nbest import read_nbest

    refs: list[str] = []
    for path in paths:
        lists, _ = read_nbest(path)
        missing = [nb.utt_id for nb in lists if not nb.ref]
        if missing:
            raise DataError(f"--data-from-nbest {path}: {len(missing)} utterance(s) have no reference "
                            f"(first: {missing[0]!r})")
        refs += [nb.ref for nb in lists]
    fd, name = tempfile.mkstemp(prefix="electric-nbest-refs-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(f"{r}\n\n" for r in refs))
    print(f"training on {len(refs):,} n-best references from {len(paths)} file(s)", file=sys.stderr)
    return name
