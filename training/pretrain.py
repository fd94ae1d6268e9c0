"""Pretrain an ELECTRA, Electric or MLM encoder from raw text.

    python -m training.pretrain --objective electric --preset tiny \\
        --data ../shared/data/corpus/enwiki --tokenizer runs/tok --time-budget 20 --out runs/electric-tiny
    torchrun --nproc_per_node=8 -m training.pretrain --objective electra --preset small --data ... --out ...

Writes OUT/discriminator/ (ElectraForPreTraining), OUT/generator/ (ElectraForMaskedLM, or the
two-tower ElectricForClozeLM; for --objective mlm the full-size masked LM), OUT/config.json (the run's
`RunConfig`: the model and recipe at the top level, the run's settings under "run"), OUT/metrics.jsonl and
OUT/state/ for --resume. Ctrl-C saves a checkpoint and exits.

`main` resolves the command line into one frozen `RunConfig` (`resolve_run`); `train` runs it top to bottom:
`setup` (data, model, optimizer), `start_or_resume` (trainer state, run directory, config.json), `take_steps`
(the loop: `optimizer_step`, logging, `evaluate_and_log`, `checkpoint`), `finish`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from electric.batching import pad_rows
from electric.checkpoint import (
    CheckpointError,
    atomic_dir,
    existing_dir,
    load_tokenizer,
    recover_dir,
    require_local_dir,
)
from electric.hardware import resolve_precision
from electric.pretraining import health
from electric.pretraining.config import (
    OBJECTIVES,
    PRESETS,
    RESUME_FLAGS,
    PretrainConfig,
    RunConfig,
    resolve_config,
)
from electric.pretraining.data import DataError, build_datasets
from electric.pretraining.modeling import PretrainingModel, SpecialIds
from training.progress import TrainProgress

INIT_FROM_LR_SCALE = 0.2  # continued pretraining (--init-from) defaults to 1/5 of the preset's peak lr
CALIBRATION_STEPS = 5  # a --time-budget run refits its schedule length every this many steps


# ---- setup ---------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m training.pretrain", description=__doc__,
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
    ap.add_argument("--generator-hidden-size", type=int, help="generator width (default hidden/4)")
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
    ap.add_argument("--init-from", help="start from the weights of a run directory or an ELECTRA discriminator "
                                        "directory (continued pretraining)")
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
                "disc_bias_init",
                "generator_hidden_size", "seed", "precision", "compile", "num_proc", "log_every", "eval_every",
                "save_every", "init_from")


class Dist:
    """Rank, world size and device, from torchrun's environment (one process when absent)."""

    def __init__(self, device: str | None):
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if device is None:
            device = f"cuda:{self.local_rank}" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """True on every rank if it is True on any rank."""
        if self.world == 1:
            return flag
        t = torch.tensor([float(flag)], device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def broadcast_int(self, value: int) -> int:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.long, device=self.device if self.device.type == "cuda" else "cpu")
        dist.broadcast(t, src=0)
        return int(t.item())

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


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


def check_out_dir(out: Path, resume: bool, overwrite: bool) -> None:
    if resume:
        for name in ("state", "discriminator", "generator"):  # a save killed between atomic_dir's renames
            if recover_dir(out / name):
                print(f"recovered {out / name} from its complete copy .{name}.old (a save was interrupted)",
                      file=sys.stderr)
        if not (out / "state" / "trainer.pt").is_file():
            raise CheckpointError(f"--resume: {str(out)!r} holds no checkpoint to resume (no state/trainer.pt)")
        return
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"output directory {str(out)!r} already holds a run; pass --resume to continue it "
                              "or --overwrite to replace it")


def init_source(path: str) -> tuple[Path | None, Path | None, Path]:
    """(discriminator dir, generator dir, tokenizer dir) of --init-from: a run directory or a model dir."""
    d = require_local_dir(path, "--init-from")
    disc, gen = existing_dir(d / "discriminator"), existing_dir(d / "generator")
    if disc.is_dir() or gen.is_dir():
        disc = disc if disc.is_dir() else None
        gen = gen if gen.is_dir() else None
        return disc, gen, (disc or gen)
    if (d / "config.json").is_file():
        return d, None, d
    raise CheckpointError(f"--init-from {path!r} is neither a run directory nor a model directory (no config.json)")


def build_model(cfg: PretrainConfig, special: SpecialIds, init_from: str) -> PretrainingModel:
    """A fresh model, or one whose weights come from --init-from (`cfg` has its architecture: `adopt_architecture`)."""
    if not init_from:
        return PretrainingModel(cfg, special)
    from transformers import AutoModelForMaskedLM, ElectraForMaskedLM, ElectraForPreTraining

    disc_dir, gen_dir, _ = init_source(init_from)
    try:
        if cfg.objective == "mlm":
            if gen_dir is None and disc_dir is not None:
                gen = ElectraForMaskedLM.from_pretrained(disc_dir)
            else:
                gen = AutoModelForMaskedLM.from_pretrained(gen_dir)
            return PretrainingModel(cfg, special, generator=gen)
        disc = ElectraForPreTraining.from_pretrained(disc_dir) if disc_dir else None
        gen = AutoModelForMaskedLM.from_pretrained(gen_dir) if gen_dir else None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"--init-from {init_from!r}: {e}") from e
    expected = "ElectricForClozeLM" if cfg.objective == "electric" else "ElectraForMaskedLM"
    if gen is not None and type(gen).__name__ != expected:
        print(f"note: --init-from generator is {type(gen).__name__}, objective {cfg.objective} needs "
              f"{expected}; starting a fresh generator", file=sys.stderr)
        gen = None
    sizes = (cfg.hidden_size, cfg.embedding_size)
    if disc is not None and (disc.config.hidden_size, disc.config.embedding_size) != sizes:
        raise ValueError(f"--init-from discriminator has hidden/embedding size {disc.config.hidden_size}/"
                         f"{disc.config.embedding_size}, the config {sizes[0]}/{sizes[1]} (use adopt_architecture)")
    return PretrainingModel(cfg, special, discriminator=disc, generator=gen)


def adopt_architecture(cfg: PretrainConfig, init_from: str) -> PretrainConfig:
    """`cfg` with the architecture of the --init-from source (its config.json decides the sizes)."""
    disc_dir, gen_dir, _ = init_source(init_from)
    src = json.loads(((disc_dir or gen_dir) / "config.json").read_text())
    sizes = {
        "hidden_size": src["hidden_size"],
        "num_hidden_layers": src["num_hidden_layers"],
        "num_attention_heads": src["num_attention_heads"],
        "intermediate_size": src["intermediate_size"],
        "embedding_size": src.get("embedding_size", src["hidden_size"]),
        "max_seq_length": min(cfg.max_seq_length, src.get("max_position_embeddings", 512)),
    }
    if gen_dir is not None and cfg.objective != "mlm":
        sizes["generator_hidden_size"] = json.loads((gen_dir / "config.json").read_text())["hidden_size"]
    return dataclasses.replace(cfg, **sizes)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only (not LayerNorm weights, biases or embeddings' norms)."""
    decay, no_decay = [], []
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (no_decay if p.dim() < 2 or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_length(cfg: PretrainConfig, total_steps: int) -> int:
    """warmup_steps, capped at 10% of the run but never below min_warmup_steps (nor above half the run)."""
    cap = max(total_steps // 10, min(cfg.min_warmup_steps, total_steps // 2))
    return max(1, min(cfg.warmup_steps, cap))


def lr_at(step: int, cfg: PretrainConfig, total_steps: int) -> float:
    """Linear warmup (warmup_length) then linear decay to 0 at total_steps."""
    warmup = warmup_length(cfg, total_steps)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    return cfg.lr * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


class Batches:
    """Seeded per-epoch shuffles of the training set, sharded by rank; resumable by (epoch, index)."""

    def __init__(self, ds, batch_size: int, pad_id: int, seed: int, rank: int, world: int):
        n = len(ds) - len(ds) % world  # equal shards, so every rank takes the same number of steps
        self.ds, self.batch_size, self.pad_id, self.seed = ds, batch_size, pad_id, seed
        self.rank, self.world, self.per_rank = rank, world, n // world
        if self.per_rank < batch_size:
            raise DataError(f"only {len(ds)} training sequences for {world} process(es); need at least "
                            f"{batch_size * world} for one micro-batch of {batch_size} each")
        self.epoch, self.index = 0, 0
        self._perm: tuple[int, torch.Tensor] | None = None  # (epoch, this rank's order), drawn once per epoch

    @property
    def epoch_fraction(self) -> float:
        return self.epoch + self.index / self.per_rank

    def _order(self) -> torch.Tensor:
        if self._perm is None or self._perm[0] != self.epoch:
            g = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
            order = torch.randperm(len(self.ds), generator=g)[self.rank: self.per_rank * self.world: self.world]
            self._perm = (self.epoch, order)
        return self._perm[1]

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.index + self.batch_size > self.per_rank:
            self.epoch, self.index = self.epoch + 1, 0
        rows = self._order()[self.index: self.index + self.batch_size].tolist()
        self.index += self.batch_size
        return collate(self.ds[rows]["input_ids"], self.pad_id)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, s: dict) -> None:
        self.epoch, self.index = s["epoch"], s["index"]


def collate(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = pad_rows(rows, pad_id)  # (B, T) int64 each
    return torch.from_numpy(ids), torch.from_numpy(mask)


def step_rng(seed: int, step: int, micro: int, rank: int, device: torch.device) -> torch.Generator:
    """Masking and sampling randomness of one micro-step: a pure function of (seed, step, micro, rank)."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + step) * 10_007 + micro * 101 + rank)
    return g


# ---- checkpoints ---------------------------------------------------------------------------------

def save_checkpoint(out: Path, model: PretrainingModel, tokenizer, optimizer, trainer: dict) -> None:
    """Models first, then the resumable state; each directory is written aside and renamed into place."""
    for name, m in (("discriminator", model.discriminator), ("generator", model.generator)):
        if m is None:
            continue
        with atomic_dir(out / name) as tmp:
            m.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    with atomic_dir(out / "state") as tmp:
        torch.save(model.state_dict(), tmp / "model.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save({**trainer, "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
                   tmp / "trainer.pt")


def load_checkpoint(out: Path, model: PretrainingModel, optimizer, device: torch.device) -> dict:
    model.load_state_dict(torch.load(out / "state" / "model.pt", map_location=device))
    model.share_embeddings()
    optimizer.load_state_dict(torch.load(out / "state" / "optimizer.pt", map_location=device))
    trainer = torch.load(out / "state" / "trainer.pt", map_location="cpu", weights_only=False)
    torch.set_rng_state(trainer["torch_rng"])
    if trainer.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(trainer["cuda_rng"])
    return trainer


def truncate_metrics(path: Path, after_step: int) -> None:
    """On resume, drop logged lines from beyond the checkpoint so the log reads as one run."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= after_step]
    path.write_text("".join(f"{line}\n" for line in keep))


# ---- evaluation ----------------------------------------------------------------------------------

UNIGRAM_SEQUENCES = 20_000  # training sequences counted for the unigram baseline of the health metrics


def unigram_baseline(train_ds, vocab_size: int, special_ids: tuple[int, ...]) -> torch.Tensor:
    """Add-one unigram log-probabilities (V,) from the first UNIGRAM_SEQUENCES training sequences."""
    rows = train_ds.select(range(min(len(train_ds), UNIGRAM_SEQUENCES)))["input_ids"]
    ids = torch.tensor([i for r in rows for i in r], dtype=torch.long)
    counts = torch.bincount(ids, minlength=vocab_size)[:vocab_size]
    counts[list(special_ids)] = 0
    return health.unigram_log_probs(counts)


@torch.no_grad()
def evaluate(model: PretrainingModel, val_ds, cfg: PretrainConfig, pad_id: int, device, autocast,
             unigram_lp: torch.Tensor | None = None) -> dict:
    """Mean metrics and training health over the fixed validation slice, with fixed masking seeds
    (comparable across steps)."""
    if len(val_ds) == 0:
        return {}
    model.eval()
    totals: dict[str, float] = {}
    details = []
    noise_probs = None  # unigram noise for the fixed-noise AUC (special tokens never drawn)
    if unigram_lp is not None and model.discriminator is not None:
        noise_probs = unigram_lp.exp().float()
        noise_probs[list(model.special.all_special)] = 0.0
        noise_probs = noise_probs.to(device)
    n = 0
    bs = cfg.micro_batch_size
    for b in range(min(cfg.eval_batches, math.ceil(len(val_ds) / bs))):
        ids, mask = collate(val_ds[b * bs: (b + 1) * bs]["input_ids"], pad_id)
        with autocast():
            out = model(ids.to(device), mask.to(device), step_rng(cfg.seed + 7, 0, b, 0, device), details=True)
        details.append({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in out.pop("details").items()})
        if noise_probs is not None:
            with autocast():
                s, labels = model.fixed_noise_scores(ids.to(device), mask.to(device), noise_probs,
                                                     step_rng(cfg.seed + 11, 0, b, 0, device))
            details[-1].update(noise_scores=s.float().cpu(), noise_labels=labels.cpu())
        for k, v in out.items():
            totals[k] = totals.get(k, 0.0) + float(v)
        n += 1
    model.train()
    return {**{f"val_{k}": v / n for k, v in totals.items()},
            **{f"val_{k}": v for k, v in health.health_metrics(details, unigram_lp).items()}}


# ---- the run's config, resolved once ---------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run = resolve_run(args)
        tokenizer = load_tokenizer(run.tokenizer)
    except (CheckpointError, DataError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return train(run, tokenizer)


def resolve_run(args: argparse.Namespace) -> RunConfig:
    """The command line as one RunConfig: checked, derived and frozen here; nothing changes it after."""
    out = Path(args.out)
    check_out_dir(out, args.resume, args.overwrite)
    extended = tuple(k for k in RESUME_FLAGS if args.resume and getattr(args, k) is not None)
    if args.resume:  # a resumed run may be extended, nothing else changes
        cfg = PretrainConfig.load(out / "config.json", {k: getattr(args, k) for k in extended})
    else:
        overrides = {k: getattr(args, k) for k in CONFIG_FLAGS}
        overrides["precision"] = choose_precision(args.precision, args.device)
        cfg = resolve_config(args.preset, args.objective, overrides)
        if cfg.init_from:  # continued pretraining: the source's architecture, a lower default lr
            cfg = adopt_architecture(cfg, cfg.init_from)
            if args.lr is None:
                cfg = dataclasses.replace(cfg, lr=cfg.lr * INIT_FROM_LR_SCALE)
    nbest_text = nbest_references(args.data_from_nbest)
    if not (args.data or nbest_text):
        raise DataError("no training data: pass --data FILE|DIR|GLOB ... (or --data-from-nbest FILE)")
    return RunConfig(
        cfg, out=args.out, data=tuple(args.data or ()), data_from_nbest=tuple(args.data_from_nbest),
        nbest_text=nbest_text, tokenizer=tokenizer_dir(args.tokenizer, cfg, out, args.resume),
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


def tokenizer_dir(given: str | None, cfg: PretrainConfig, out: Path, resume: bool) -> str:
    """--tokenizer, else the one saved with the run being resumed, else the --init-from source's."""
    if given is not None:
        return given
    if resume:
        return str(out / ("generator" if cfg.objective == "mlm" else "discriminator"))
    if cfg.init_from:
        return str(init_source(cfg.init_from)[2])
    raise CheckpointError("--tokenizer is required (train one with `python -m training.tokenizer`)")


# ---- the run, top to bottom ----------------------------------------------------------------------

def train(run: RunConfig, tokenizer) -> int:
    """Set up, take optimizer steps until the schedule ends or something stops the run, finish.
    Exit status 0; 2 when the data or the model cannot be set up; 3 when --stop-on-collapse ended the run."""
    if run.threads:
        torch.set_num_threads(run.threads)
    d = Dist(run.device)
    try:
        parts = setup(run, tokenizer, d)
    except (DataError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        d.close()
        return 2
    trainer = start_or_resume(run, parts)
    step_model = step_module(parts.model, run.pretrain, d)
    reason, last = take_steps(run, parts, step_model, trainer)
    finish(run, parts, trainer, last, reason)
    return 3 if reason == "collapse" else 0


@dataclass(frozen=True)
class Parts:
    """What the steps work on, built once by `setup`."""

    d: Dist
    tokenizer: Any  # saved with every checkpoint
    special: SpecialIds
    batches: Batches  # this rank's shard of the training set, in seeded per-epoch order
    val_ds: Any  # the fixed validation slice
    unigram_lp: torch.Tensor | None  # (V,) add-one unigram log-probabilities of the training set; rank 0 only
    model: PretrainingModel  # the plain module: saved, evaluated, its gradients clipped
    optimizer: torch.optim.Optimizer
    autocast: Callable[[], contextlib.AbstractContextManager]  # bf16 autocast, or nothing


def setup(run: RunConfig, tokenizer, d: Dist) -> Parts:
    """The data, the model (fresh, or with --init-from's weights) and the optimizer.
    Raises DataError or CheckpointError."""
    cfg = run.pretrain
    per_rank_batch, rem = divmod(cfg.micro_batch_size, d.world)
    if rem or per_rank_batch < 1:
        raise DataError(f"micro-batch {cfg.micro_batch_size} (batch_size / grad_accum) is not divisible by "
                        f"{d.world} processes")
    torch.manual_seed(cfg.seed)
    special = SpecialIds.from_tokenizer(tokenizer)
    if not d.main:  # rank 0 tokenises first and fills the cache; the others then read it
        d.barrier()
    try:
        train_ds, val_ds = build_datasets(list(run.train_files), tokenizer, cfg.max_seq_length, cfg.val_sequences,
                                          cfg.num_proc, run.cache_dir, rank0=d.main)
        batches = Batches(train_ds, per_rank_batch, special.pad, cfg.seed, d.rank, d.world)
        model = build_model(cfg, special, cfg.init_from if not run.resume else "")
    finally:
        if d.main:
            d.barrier()
    unigram_lp = unigram_baseline(train_ds, special.vocab_size, special.all_special) if d.main else None
    model.to(d.device).train()
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr,
                                  betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                                  fused=True)  # fused AdamW runs on CPU and CUDA
    autocast = (lambda: torch.autocast(d.device.type, dtype=torch.bfloat16)) if cfg.precision == "bf16" \
        else contextlib.nullcontext
    return Parts(d, tokenizer, special, batches, val_ds, unigram_lp, model, optimizer, autocast)


def start_or_resume(run: RunConfig, parts: Parts) -> dict:
    """The trainer state (step, schedule length, time, tokens, data position, collapse) from the last
    checkpoint with --resume, else fresh in an empty run directory. Rank 0 saves the run's config.json."""
    cfg, out, d = run.pretrain, Path(run.out), parts.d
    total_steps = cfg.max_steps
    if cfg.epochs:  # the schedule ends with the last epoch, not at the preset's max_steps
        steps_per_epoch = max(1, parts.batches.per_rank // (parts.batches.batch_size * cfg.grad_accum))
        total_steps = min(cfg.max_steps, math.ceil(cfg.epochs * steps_per_epoch))
    trainer = {"step": 0, "total_steps": total_steps, "elapsed": 0.0, "tokens": 0, "batches": None,
               "collapse": None}
    metrics_path = out / "metrics.jsonl"
    if run.resume:
        trainer.update(load_checkpoint(out, parts.model, parts.optimizer, d.device))
        parts.batches.load_state_dict(trainer["batches"])
        if "max_steps" in run.extended:
            trainer["total_steps"] = cfg.max_steps
        if d.main:
            truncate_metrics(metrics_path, trainer["step"])
    elif d.main:
        if run.overwrite and out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text("")
    if d.main:
        run.save(out / "config.json")
    return trainer


def step_module(model: PretrainingModel, cfg: PretrainConfig, d: Dist) -> torch.nn.Module:
    """What a micro-step calls: the model, in DDP over several processes, compiled with --compile."""
    step_model: torch.nn.Module = model
    if d.world > 1:
        step_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[d.device.index] if d.device.type == "cuda" else None, find_unused_parameters=False)
    if cfg.compile:
        step_model = torch.compile(step_model)
    return step_model


def take_steps(run: RunConfig, parts: Parts, step_model: torch.nn.Module, trainer: dict) -> tuple[str, dict]:
    """Optimizer steps until the schedule ends or something stops the run: (why it stopped, the latest logged
    values). Logs every log_every steps, evaluates every eval_every, checkpoints every save_every."""
    cfg, d, metrics_path = run.pretrain, parts.d, Path(run.out) / "metrics.jsonl"
    budget_s = cfg.time_budget_minutes * 60
    start_time, start_elapsed, start_step = time.time(), trainer["elapsed"], trainer["step"]
    bar = TrainProgress(f"{cfg.objective}-{cfg.preset}", trainer["total_steps"], trainer["step"], trainer["elapsed"],
                        budget_s, enabled=d.main)  # time / budget with --time-budget; plain lines in a log file
    window = {"t": time.time(), "tokens": 0}  # tokens since the last training line
    last: dict = {}
    with stop_signals() as stop, contextlib.closing(bar):
        while trainer["step"] < trainer["total_steps"]:
            lr = lr_at(trainer["step"], cfg, trainer["total_steps"])
            sums, grad_norm, tokens = optimizer_step(step_model, parts, cfg, trainer["step"], lr)
            trainer["step"] = step = trainer["step"] + 1
            trainer["tokens"] += tokens
            window["tokens"] += tokens
            trainer["elapsed"] = elapsed = start_elapsed + time.time() - start_time
            bar.update(step, trainer["total_steps"], elapsed)

            if budget_s and step - start_step >= CALIBRATION_STEPS and step % CALIBRATION_STEPS == 0:
                # Fit the schedule's length to the time left, from the mean step time so far (refitted
                # as the machine's speed changes; the decay ends where the budget does).
                per_step = (time.time() - start_time) / (step - start_step)
                fitted = min(cfg.max_steps, step + int(max(0.0, budget_s - elapsed) / per_step))
                trainer["total_steps"] = d.broadcast_int(max(fitted, step + 1))

            if step % cfg.log_every == 0 or step == 1:
                dt = time.time() - window["t"]
                tok_s = window["tokens"] / dt if dt > 0 else 0.0
                last.update({"step": step, "lr": lr, "grad_norm": float(grad_norm), "tokens": trainer["tokens"],
                             "tokens_per_s": round(tok_s, 1), "epoch": round(parts.batches.epoch_fraction, 4),
                             "elapsed_s": round(elapsed, 1), **{k: round(float(v), 5) for k, v in sums.items()}})
                window = {"t": time.time(), "tokens": 0}
                bar.set_postfix(progress_fields(last, tok_s))
                if d.main:
                    with metrics_path.open("a") as f:
                        f.write(json.dumps({k: v for k, v in last.items() if not k.startswith("val_")}) + "\n")
            collapsed = False
            if step % cfg.eval_every == 0 and d.main:
                collapsed = evaluate_and_log(run, parts, trainer, last, bar)
                bar.set_postfix(progress_fields(last, None))

            reason = stop_reason(run, stop["signal"], elapsed, parts.batches.epoch_fraction, step, collapsed)
            if d.any(reason is not None):
                return reason or "another rank", last
            if step % cfg.save_every == 0:
                checkpoint(run, parts, trainer)
                d.barrier()
    # the schedule ran to its end: max_steps, or the length fitted to the time budget
    return ("time budget" if budget_s and trainer["total_steps"] < cfg.max_steps else "max steps"), last


def optimizer_step(step_model: torch.nn.Module, parts: Parts, cfg: PretrainConfig, step: int,
                   lr: float) -> tuple[dict[str, torch.Tensor], torch.Tensor, int]:
    """One optimizer step at learning rate `lr`, over grad_accum micro-steps: (the metrics' means, still on the
    device; the gradient norm before clipping; the tokens seen, over all processes)."""
    d = parts.d
    for group in parts.optimizer.param_groups:
        group["lr"] = lr
    sums: dict[str, torch.Tensor] = {}  # metrics stay on the device until a log step reads them
    tokens = 0
    for micro in range(cfg.grad_accum):
        ids, mask = parts.batches.next()  # (B, T) each
        tokens += int(mask.sum()) * d.world  # counted on the host, before the copy
        ids, mask = ids.to(d.device, non_blocking=True), mask.to(d.device, non_blocking=True)
        last_micro = micro == cfg.grad_accum - 1
        # Gradients are all-reduced once per optimizer step, on the last micro-step.
        no_sync = contextlib.nullcontext if last_micro or d.world == 1 else step_model.no_sync
        with no_sync(), parts.autocast():
            res = step_model(ids, mask, step_rng(cfg.seed, step, micro, d.rank, d.device))
        (res["loss"] / cfg.grad_accum).backward()
        for k, v in res.items():
            sums[k] = sums.get(k, 0) + v.detach() / cfg.grad_accum
    grad_norm = torch.nn.utils.clip_grad_norm_(parts.model.parameters(), cfg.max_grad_norm)
    parts.optimizer.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return sums, grad_norm, tokens


@contextlib.contextmanager
def stop_signals() -> Iterator[dict]:
    """While inside, SIGINT and SIGTERM only record their name ({"signal": name}): the loop stops after the
    step, with a checkpoint."""
    stop: dict = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signal.Signals(signum).name

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)


def stop_reason(run: RunConfig, signal_name: str | None, elapsed: float, epoch_fraction: float, step: int,
                collapsed: bool) -> str | None:
    """Why the run ends after this step, if it does: a signal, the time budget, the epochs, --stop-at, or
    --stop-on-collapse when this step's evaluation found a collapse."""
    cfg = run.pretrain
    if signal_name:
        return signal_name
    if cfg.time_budget_minutes and elapsed >= cfg.time_budget_minutes * 60:
        return "time budget"
    if cfg.epochs and epoch_fraction >= cfg.epochs:
        return "epochs"
    if run.stop_at is not None and step >= run.stop_at:
        return "--stop-at"
    if run.stop_on_collapse and collapsed:
        return "collapse"
    return None


def evaluate_and_log(run: RunConfig, parts: Parts, trainer: dict, last: dict, bar: TrainProgress | None) -> bool:
    """Evaluate on the validation slice and log it (rank 0); True iff it finds the discriminator collapsed."""
    val = evaluate(parts.model, parts.val_ds, run.pretrain, parts.special.pad, parts.d.device, parts.autocast,
                   parts.unigram_lp)
    return record_eval(Path(run.out) / "metrics.jsonl", trainer["step"], trainer, val, last, bar)


def checkpoint(run: RunConfig, parts: Parts, trainer: dict) -> None:
    """Rank 0 saves the models and the resumable state of this step (the data position included)."""
    trainer["batches"] = parts.batches.state_dict()
    if parts.d.main:
        save_checkpoint(Path(run.out), parts.model, parts.tokenizer, parts.optimizer, trainer)


def finish(run: RunConfig, parts: Parts, trainer: dict, last: dict, reason: str) -> None:
    """The last step's evaluation (unless it had one), the final checkpoint, curves.png and the summary."""
    out, d = Path(run.out), parts.d
    if d.main and trainer["step"] % run.pretrain.eval_every:
        evaluate_and_log(run, parts, trainer, last, None)
    checkpoint(run, parts, trainer)
    if d.main:
        write_curves(out)
        print_summary(out, run.pretrain, trainer, last, reason)
    d.barrier()
    d.close()


def progress_fields(last: dict, tok_s: float | None) -> dict:
    """The progress bar's postfix: loss, speed and the latest validation health."""
    fields = {"loss": f"{last['loss']:.3f}"} if "loss" in last else {}
    if tok_s is not None:
        fields["tok_s"] = f"{tok_s:,.0f}"
    if "val_disc_auc" in last:
        fields["auc"] = f"{last['val_disc_auc']:.3f}"
    if "val_token_cosine" in last:
        fields["cos"] = f"{last['val_token_cosine']:.3f}"
    return fields


def record_eval(metrics_path: Path, step: int, trainer: dict, val: dict, last: dict, bar) -> bool:
    """Log one evaluation; warn (once) when it finds the discriminator collapsed. True iff it did."""
    if not val:
        return False
    reasons = health.collapse_reasons_in(val)
    row = {"step": step, "tokens": trainer["tokens"], **{k: round(v, 5) for k, v in val.items()}}
    if reasons:
        row["collapsed"] = True
    with metrics_path.open("a") as f:
        f.write(json.dumps(row) + "\n")
    last.update(val)
    if reasons and trainer.get("collapse") is None:
        trainer["collapse"] = {"step": step, "reasons": reasons}
        msg = f"WARNING at step {step}: {health.COLLAPSE_ADVICE} ({'; '.join(reasons)})"
        (bar.write if bar is not None else print)(msg, file=sys.stderr)
    return bool(reasons)


def write_curves(out: Path) -> None:
    """OUT/curves.png: losses, discriminator AUC and token cosine against tokens seen (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed (pip install -e '.[train]'); no curves.png", file=sys.stderr)
        return
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train_rows = [r for r in rows if "loss" in r]
    val_rows = [r for r in rows if "val_loss" in r and "tokens" in r]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for key, label in (("gen_loss", "generator / cloze / MLM loss"), ("disc_loss", "discriminator BCE")):
        pts = [(r["tokens"], r[key]) for r in train_rows if key in r]
        if pts:
            axes[0].plot(*zip(*pts, strict=True), label=f"train {label}")
    for key, label in (("val_gen_nll", "val generator NLL"), ("val_unigram_nll", "val unigram NLL")):
        pts = [(r["tokens"], r[key]) for r in val_rows if key in r]
        if pts:
            axes[0].plot(*zip(*pts, strict=True), "o--", label=label)
    for ax, key, title in ((axes[1], "val_disc_auc", "validation AUC (replaced vs original)"),
                           (axes[2], "val_token_cosine", "validation cross-sequence token cosine")):
        pts = [(r["tokens"], r[key]) for r in val_rows if key in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-")
        ax.set_title(title)
    axes[1].axhline(health.COLLAPSE_MAX_AUC, color="grey", ls=":", label="collapse if below (with cos/spread)")
    axes[2].axhline(health.COLLAPSE_MIN_COSINE, color="grey", ls=":", label="collapse if above (with low AUC)")
    axes[0].set_title("losses")
    for ax in axes:
        ax.set_xlabel("tokens")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=80)
    plt.close(fig)


def print_summary(out: Path, cfg: PretrainConfig, trainer: dict, last: dict, reason: str) -> None:
    el = trainer["elapsed"]
    lines = [
        f"stopped after {trainer['step']} steps ({reason}); {trainer['tokens']:,} tokens in {el / 60:.1f} min "
        f"({trainer['tokens'] / max(el, 1e-9):,.0f} tokens/s)",
    ]
    keys = [k for k in ("loss", "gen_loss", "disc_loss", "disc_acc", "val_loss", "val_gen_loss",
                        "val_disc_loss", "val_disc_acc") if k in last]
    if keys:
        lines.append("final: " + ", ".join(f"{k} {last[k]:.4f}" for k in keys))
    health_keys = [k for k in ("val_disc_auc", "val_energy_auc", "val_unigram_noise_auc", "val_disc_acc_gain",
                               "val_logit_spread", "val_token_cosine", "val_gen_nll", "val_unigram_nll") if k in last]
    if health_keys:
        lines.append("health: " + ", ".join(f"{k[4:]} {last[k]:.4f}" for k in health_keys))
    if trainer.get("collapse"):
        c = trainer["collapse"]
        lines.append(f"WARNING: collapsed at step {c['step']} ({'; '.join(c['reasons'])}): {health.COLLAPSE_ADVICE}")
    if (out / "curves.png").is_file():
        lines.append(f"curves: {out / 'curves.png'}")
    for name in ("discriminator", "generator"):
        if (out / name).is_dir():
            lines.append(f"{name}: {out / name}")
    if reason in ("SIGINT", "SIGTERM", "--stop-at", "collapse"):
        lines.append(f"checkpoint saved; continue with: python -m training.pretrain --resume --out {out} --data ...")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
