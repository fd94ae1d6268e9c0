"""The validation pass of pretraining: losses and training health on the fixed validation slice (`evaluate`), with
the unigram baseline the health measures compare against (`unigram_baseline`). training/report.py logs the result.
"""

from __future__ import annotations

import math

import torch

from electric.pretraining import health
from electric.pretraining.batches import collate, step_rng
from electric.pretraining.config import PretrainConfig
from electric.pretraining.modeling import PretrainingModel

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
             unigram_lp: torch.Tensor | None = None, temperature: float | None = None) -> dict:
    """Mean metrics and training health over the fixed validation slice, with fixed masking seeds
    (comparable across steps), the samples drawn at `temperature` (None: the config's)."""
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
        ids, mask = (t.to(device) for t in collate(val_ds[b * bs: (b + 1) * bs]["input_ids"], pad_id))
        noise = model.draw_noise(ids, step_rng(cfg.seed + 7, 0, b, device), temperature)
        with autocast():
            out = model(ids, mask, noise, details=True)
        details.append({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in out.pop("details").items()})
        if noise_probs is not None:
            with autocast():
                s, labels = model.fixed_noise_scores(ids, mask, noise_probs, step_rng(cfg.seed + 11, 0, b, device))
            details[-1].update(noise_scores=s.float().cpu(), noise_labels=labels.cpu())
        for k, v in out.items():
            totals[k] = totals.get(k, 0.0) + float(v)
        n += 1
    model.train()
    return {**{f"val_{k}": v / n for k, v in totals.items()},
            **{f"val_{k}": v for k, v in health.health_metrics(details, unigram_lp).items()}}
