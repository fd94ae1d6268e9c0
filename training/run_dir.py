"""The run directory on disk: checking it, and saving / loading resumable checkpoints atomically."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass
class TrainerState:
    """Where a run stands: saved with every checkpoint (state/trainer.pt, as a dict of these fields and the RNG
    states) and loaded back by --resume, in this one place.

    A run has one stage ("main": the objective) or two ("warm": the warm start's MLM first). `total_steps` is
    where the current stage's schedule ends (fitted to the time left under --time-budget), `run_steps` where
    the run's does; the current stage began at `stage_step` / `stage_elapsed`."""

    step: int = 0
    total_steps: int = 0
    run_steps: int = 0
    elapsed: float = 0.0  # seconds of training, over every invocation of the run
    tokens: int = 0  # over every process
    batches: dict | None = None  # the data position (Batches.state_dict)
    collapse: dict | None = None  # the first evaluation that found the discriminator collapsed: step, reasons
    stage: str = "main"  # "warm" | "main"
    stage_step: int = 0
    stage_elapsed: float = 0.0
    warm_start: dict | None = None  # the switch: steps, tokens, elapsed, token_cosine, handed_over
    processes: int = 1  # each process's data position is its own: a resume needs as many

    @property
    def warm(self) -> bool:
        """In the warm start's MLM stage."""
        return self.stage == "warm"

    @property
    def stage_steps_done(self) -> int:
        return self.step - self.stage_step

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> TrainerState:
        """A saved state (extra keys, such as the RNG states, are not part of it)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


def save_checkpoint(out: Path, model: PretrainingModel, tokenizer, optimizer, trainer: TrainerState) -> None:
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
        torch.save({**trainer.to_dict(), "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
                   tmp / "trainer.pt")


def load_checkpoint(out: Path, model: PretrainingModel, optimizer, device: torch.device) -> TrainerState:
    """The models' and the optimizer's state, the RNG states and the trainer state of the last checkpoint."""
    model.load_state_dict(torch.load(out / "state" / "model.pt", map_location=device))
    model.share_embeddings()
    optimizer.load_state_dict(torch.load(out / "state" / "optimizer.pt", map_location=device))
    saved = _read_trainer(out)
    torch.set_rng_state(saved["torch_rng"])
    if saved.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    return TrainerState.from_dict(saved)


def saved_trainer(out: Path) -> TrainerState:
    """The trainer state of the run's last checkpoint (step, stage, ...), without loading the models."""
    return TrainerState.from_dict(_read_trainer(out))


def _read_trainer(out: Path) -> dict:
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
