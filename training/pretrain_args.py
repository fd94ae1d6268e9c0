"""The pretraining command line, resolved once into a frozen `RunConfig` (`resolve_run`).

One flag per `PretrainConfig` field, generated from the dataclass (its type, its help, the presets' values), as
server/cli.py generates its flags from `Settings`; the flags that are not a field (the preset, the data, the run
directory, the run's settings) are written here. Every value a flag implies is derived by
`electric.pretraining.config.resolve_config`, nowhere else."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch

from electric.checkpoint import CheckpointError
from electric.hardware import resolve_precision
from electric.pretraining.config import (
    OBJECTIVE_PRESETS,
    OBJECTIVES,
    PRESETS,
    RESUME_FLAGS,
    PretrainConfig,
    RunConfig,
    resolve_config,
)
from electric.pretraining.data import DataError
from electric.pretraining.init_from import InitSource, resolve_init
from training.run_dir import prepare_out_dir

# Flags that are not generated from a PretrainConfig field: they pick the preset, resolve per device, or set two fields.
NOT_GENERATED = ("objective", "preset", "precision", "hidden_dropout_prob", "attention_probs_dropout_prob")
CONFIG_FLAGS = tuple(f.name for f in dataclasses.fields(PretrainConfig) if f.name not in NOT_GENERATED)
FLAG_NAMES = {"time_budget_minutes": "--time-budget"}  # flags whose name is not the field's
METAVARS = {"time_budget_minutes": "MINUTES", "disc_head_lr_scale": "X", "init_from": "DIR",
            "init_generator_from": "DIR", "warm_start": "FRACTION"}


def field_help(name: str) -> str:
    """A PretrainConfig field's help: the one text that explains it (electric.pretraining.config)."""
    return next(f.metadata["help"] for f in dataclasses.fields(PretrainConfig) if f.name == name)


def _shown(value: Any) -> str:
    return "none" if value == "" else f"{value:g}" if isinstance(value, float) else str(value)


def preset_defaults(name: str, default: Any) -> str:
    """A field's default as --help states it: the dataclass's, then where a preset (or a preset's objective) sets
    another, e.g. "default 0.0005; debug 0.001, tiny 0.0001, base 0.0002, large 0.0002, tiny mlm 0.001"."""
    by_preset = [f"{p} {_shown(v[name])}" for p, v in PRESETS.items() if name in v and v[name] != default]
    by_preset += [f"{p} {o} {_shown(v[name])}" for (p, o), v in OBJECTIVE_PRESETS.items() if name in v]
    return f"default {_shown(default)}" + (f"; {', '.join(by_preset)}" if by_preset else "")


def add_config_arguments(ap: argparse._ActionsContainer, cls: type, names: tuple[str, ...],
                         flag_names: dict[str, str], metavars: dict[str, str],
                         defaults: Callable[[str, Any], str]) -> None:
    """One flag per field of the dataclass `cls` in `names`, as server/cli.py generates its flags from `Settings`:
    --field-name (or `flag_names`'), the field's type (a Literal's values as choices; a bool as --x / --no-x), the
    field's help (metadata "help") with `defaults(name, default)` in brackets, and default None: a flag left out
    leaves the value to the preset."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in names:
            continue
        flag = flag_names.get(f.name, "--" + f.name.replace("_", "-"))
        help_ = f"{f.metadata['help']} [{defaults(f.name, f.default)}]".replace("%", "%%")
        kind = hints[f.name]
        if kind is bool:
            ap.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_)
            continue
        choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else None
        ap.add_argument(flag, dest=f.name, type=str if choices else kind, choices=choices, default=None,
                        metavar=None if choices else metavars.get(f.name), help=help_)


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The command line: what to train, the data and the run directory, then one flag per PretrainConfig field
    (generated), then how and where the run goes. `description` heads --help."""
    ap = argparse.ArgumentParser(prog="python -m training.pretrain", description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objective", choices=OBJECTIVES, default="electric",
                    help=f"{field_help('objective')}. Default electric.")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                    help=f"{field_help('preset')}; its values are the defaults the flags below override. Default tiny.")
    ap.add_argument("--data", nargs="+", help="training text: files, directories or globs (plain text or "
                                               "WikiExtractor <doc> files)")
    ap.add_argument("--tokenizer", help="tokenizer directory (python -m training.tokenizer, or any local "
                                        "BERT/ELECTRA vocab); default: the one saved with --init-from or --resume")
    ap.add_argument("--out", required=True, help="run directory to write")
    recipe = ap.add_argument_group("the model and the recipe (PretrainConfig's fields; saved in OUT/config.json)")
    add_config_arguments(recipe, PretrainConfig, CONFIG_FLAGS, FLAG_NAMES, METAVARS, preset_defaults)
    recipe.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                        help="bf16 = autocast (master weights fp32). auto (default): bf16 on CUDA with bf16 support and "
                             "on CPUs with native bf16 (AVX512-BF16 / AMX), fp32 elsewhere (bf16 is emulated and ~25x "
                             "slower on AVX2-only CPUs)")
    recipe.add_argument("--dropout", type=float, help="hidden and attention dropout (hidden_dropout_prob and "
                        f"attention_probs_dropout_prob) [{preset_defaults('hidden_dropout_prob', 0.1)}]")
    run = ap.add_argument_group("the run (RunConfig: how and where it runs)")
    run.add_argument("--data-from-nbest", nargs="+", default=[], metavar="NBEST",
                     help="also train on the references (output/ref fields) of these n-best files (any format "
                          "`electric rerank` reads); keep them apart from the lists you tune or test on")
    run.add_argument("--cache-dir", help="datasets cache directory (default: datasets' own)")
    run.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    run.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's, one per core)")
    run.add_argument("--stop-at", type=int, metavar="STEP",
                     help="checkpoint and stop at this step without changing the schedule (continue with --resume)")
    run.add_argument("--stop-on-collapse", action="store_true",
                     help="end the run (checkpoint saved, exit status 3) when the discriminator is found collapsed")
    run.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    run.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    return ap


def parse_args(argv: list[str] | None = None, description: str | None = None) -> argparse.Namespace:
    """The command line parsed (`build_parser`); `description` heads --help (training.pretrain passes its own
    docstring)."""
    return build_parser(description).parse_args(argv)


def resolve_run(args: argparse.Namespace) -> RunConfig:
    """The command line as one RunConfig: checked and frozen here; every value one implies is derived by
    `resolve_config`, from the flags and --init-from's source (resolved once); nothing changes it after."""
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
        if args.init_from:
            source = resolve_init(args.init_from, args.init_generator_from or "")
        cfg = resolve_config(args.preset, args.objective, overrides, source)
        if source is not None and cfg.generator_mode == "frozen" and source.encoder.carries != "mlm":
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
        refs += [nb.ref for nb in lists if nb.ref]  # every one, after the check
    fd, name = tempfile.mkstemp(prefix="electric-nbest-refs-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(f"{r}\n\n" for r in refs))
    print(f"training on {len(refs):,} n-best references from {len(paths)} file(s)", file=sys.stderr)
    return name
