"""The optimizer's parameter groups and the learning-rate schedule (linear warmup, linear decay to 0)."""

from __future__ import annotations

import torch

from electric.pretraining.config import PretrainConfig

HEAD = "discriminator.discriminator_predictions."  # the replaced-token head: dense -> GELU -> dense(H -> 1)


def optimizer_groups(model: torch.nn.Module, weight_decay: float, gen_lr_scale: float = 1.0,
                     head_lr_scale: float = 1.0) -> list[dict]:
    """Weight decay on matrices only (not LayerNorm weights, biases or embeddings' norms). The generator's own
    parameters (not those it shares with the discriminator) get `lr_scale` gen_lr_scale: --gen-lr / --lr; the
    discriminator's head gets head_lr_scale (--disc-head-lr-scale)."""
    groups: dict[tuple[bool, float], list] = {}
    seen: set[int] = set()
    for name, p in model.named_parameters():  # the discriminator's first, so shared embeddings count as its own
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        decay = not (p.dim() < 2 or "LayerNorm" in name)
        scale = gen_lr_scale if name.startswith(("generator.", "gdes_delta")) else 1.0
        scale = head_lr_scale if name.startswith(HEAD) else scale
        groups.setdefault((decay, scale), []).append(p)
    return [{"params": ps, "weight_decay": weight_decay if decay else 0.0, "lr_scale": scale}
            for (decay, scale), ps in groups.items()]


def build_optimizer(model: torch.nn.Module, cfg: PretrainConfig) -> torch.optim.Optimizer:
    """AdamW over `optimizer_groups`; `optimizer_step` sets each group's lr from the schedule and its lr_scale."""
    scale = cfg.gen_lr / cfg.lr if cfg.gen_lr and cfg.objective != "mlm" else 1.0
    return torch.optim.AdamW(optimizer_groups(model, cfg.weight_decay, scale, cfg.head_lr_scale), lr=cfg.lr,
                             betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                             fused=True)  # fused AdamW runs on CPU and CUDA


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


def temperature_at(step: int, cfg: PretrainConfig, total_steps: int) -> float:
    """The sampling temperature `step` steps into the objective's stage of `total_steps`: constant
    `temperature`, or with temperature_start > 0 falling linearly from it to `temperature` (Fast-ELECTRA)."""
    if not cfg.temperature_start:
        return cfg.temperature
    progress = min(1.0, step / max(1, total_steps))
    return cfg.temperature_start + (cfg.temperature - cfg.temperature_start) * progress
