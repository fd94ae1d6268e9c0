"""Validation during pretraining: losses and training health on a fixed slice, and logging them."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from electric.pretraining import health
from electric.pretraining.config import PretrainConfig
from electric.pretraining.modeling import PretrainingModel
from training.batches import collate, step_rng
from training.run_dir import TrainerState

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
            out = model(ids.to(device), mask.to(device), step_rng(cfg.seed + 7, 0, b, device), details=True)
        details.append({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in out.pop("details").items()})
        if noise_probs is not None:
            with autocast():
                s, labels = model.fixed_noise_scores(ids.to(device), mask.to(device), noise_probs,
                                                     step_rng(cfg.seed + 11, 0, b, device))
            details[-1].update(noise_scores=s.float().cpu(), noise_labels=labels.cpu())
        for k, v in out.items():
            totals[k] = totals.get(k, 0.0) + float(v)
        n += 1
    model.train()
    return {**{f"val_{k}": v / n for k, v in totals.items()},
            **{f"val_{k}": v for k, v in health.health_metrics(details, unigram_lp).items()}}


def record_eval(metrics_path: Path, step: int, trainer: TrainerState, val: dict, last: dict, bar, start: str) -> bool:
    """Log one evaluation; warn (once) when it finds the discriminator collapsed, with the advice for a run that
    started `start` (`PretrainConfig.start`). True iff it did."""
    if not val:
        return False
    reasons = health.collapse_reasons_in(val)
    row = {"step": step, "tokens": trainer.tokens, **{k: round(v, 5) for k, v in val.items()}}
    if reasons:
        row["collapsed"] = True
    with metrics_path.open("a") as f:
        f.write(json.dumps(row) + "\n")
    last.update(val)
    if reasons and trainer.collapse is None:
        trainer.collapse = {"step": step, "reasons": reasons}
        msg = f"WARNING at step {step}: {health.collapse_advice(start)} ({'; '.join(reasons)})"
        (bar.write if bar is not None else print)(msg, file=sys.stderr)
    return bool(reasons)


def record_baseline(metrics_path: Path, val: dict) -> None:
    """Log the evaluation of a run's first weights (step 0, `"baseline": true`): where a run --init-from a checkpoint
    starts, so that its end can be compared with it (training.report.verdict). No collapse check: a fresh head on a
    trained encoder has not learned anything yet."""
    if val:
        with metrics_path.open("a") as f:
            f.write(json.dumps({"step": 0, "tokens": 0, "baseline": True, **{k: round(v, 5) for k, v in val.items()}})
                    + "\n")
