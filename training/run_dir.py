"""The run directory on disk: checking it, and saving / loading resumable checkpoints atomically."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from electric.checkpoint import CheckpointError, atomic_dir, atomic_write_text, check_out_dir, recover_dir
from electric.pretraining.modeling import PretrainingModel


def prepare_out_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """The run directory, checked: with `resume`, a checkpoint to continue (saves killed mid-rename recovered
    first); otherwise absent, empty or `overwrite` (electric.checkpoint.check_out_dir)."""
    if resume:
        for name in ("state", "discriminator", "generator", "warm_start"):  # a save killed between atomic_dir's renames
            if recover_dir(out / name):
                print(f"recovered {out / name} from its complete copy .{name}.old (a save was interrupted)",
                      file=sys.stderr)
        if not (out / "state" / "trainer.pt").is_file():
            raise CheckpointError(f"--resume: {str(out)!r} holds no checkpoint to resume (no state/trainer.pt)")
        return
    check_out_dir(out, overwrite, hint="pass --resume to continue the run in it or --overwrite to replace it")


def save_checkpoint(out: Path, model: PretrainingModel, tokenizer, optimizer, trainer: dict) -> None:
    """Models first, then the resumable state; each directory is written aside and renamed into place."""
    model.materialize_generator_embeddings()  # GDES: the generator directory gets its effective embeddings
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
    trainer = saved_trainer(out)
    torch.set_rng_state(trainer["torch_rng"])
    if trainer.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(trainer["cuda_rng"])
    return trainer


def saved_trainer(out: Path) -> dict:
    """The trainer state of the run's last checkpoint (step, stage, ...), without loading the models."""
    return torch.load(out / "state" / "trainer.pt", map_location="cpu", weights_only=False)


def truncate_metrics(path: Path, after_step: int) -> None:
    """On resume, drop logged lines from beyond the checkpoint so the log reads as one run, and a last line a kill
    cut short (no newline) with a warning; a complete line that is not JSON is a CheckpointError naming it. The
    file is replaced atomically, and only when something is dropped."""
    if not path.exists():
        return
    data = path.read_bytes()
    complete, _, tail = data.rpartition(b"\n")  # each line is written with its newline: `tail` was cut short
    if tail:
        print(f"warning: {path}: dropped its last line ({len(tail)} bytes, no newline), cut short by an interrupted "
              "write", file=sys.stderr)
    keep = []
    for number, line in enumerate(complete.split(b"\n") if complete else [], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            row = None
        if not isinstance(row, dict):
            raise CheckpointError(f"--resume: line {number} of {str(path)!r} is not a JSON object; remove it and "
                                  "resume again")
        if row.get("step", 0) <= after_step:
            keep.append(line.decode("utf-8") + "\n")
    if "".join(keep).encode("utf-8") != data:
        atomic_write_text(path, "".join(keep))
