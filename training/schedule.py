"""The optimizer's parameter groups and the learning-rate schedule (linear warmup, linear decay to 0)."""

from __future__ import annotations

import torch

from electric.pretraining.config import PretrainConfig


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
