"""The optimizer and the learning-rate schedule (linear warmup, linear decay to 0), for pretraining and
fine-tuning: one AdamW builder (`adamw`), one schedule (`warmup_then_decay`, which pretraining's `lr_at` and
fine-tuning call with their own warmup lengths) and one way to set it (`set_lr`, each group at its lr_scale)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from electric.pretraining.config import PretrainConfig

if TYPE_CHECKING:  # pretraining need not import fine-tuning's tasks
    from electric.finetuning.config import FinetuneConfig

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


def adamw(groups: list[dict], cfg: PretrainConfig | FinetuneConfig, fused: bool) -> torch.optim.Optimizer:
    """AdamW over parameter groups (each with its weight_decay and lr_scale) at the config's lr, betas and eps.
    fused: the fused kernel (pretraining; it runs on CPU and CUDA), or torch's default one (fine-tuning: for-each
    on CUDA, a loop on CPU)."""
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                             fused=True if fused else None)  # None, not False: False would also turn for-each off


def build_optimizer(model: torch.nn.Module, cfg: PretrainConfig) -> torch.optim.Optimizer:
    """Pretraining's fused AdamW over `optimizer_groups`; `optimizer_step` sets each group's lr (`set_lr`)."""
    scale = cfg.gen_lr / cfg.lr if cfg.gen_lr and cfg.objective != "mlm" else 1.0
    return adamw(optimizer_groups(model, cfg.weight_decay, scale, cfg.head_lr_scale), cfg, fused=True)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Each parameter group at `lr` times its lr_scale (1 if it has none)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def warmup_length(cfg: PretrainConfig, total_steps: int) -> int:
    """warmup_steps, capped at 10% of the run but never below min_warmup_steps (nor above half the run)."""
    cap = max(total_steps // 10, min(cfg.min_warmup_steps, total_steps // 2))
    return max(1, min(cfg.warmup_steps, cap))


def warmup_then_decay(step: int, peak: float, warmup: int, total_steps: int) -> float:
    """The learning rate `step` steps (from 0) into a run of total_steps: rising linearly to `peak` over the first
    `warmup` steps (none if 0), then falling linearly to 0 at total_steps."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


def lr_at(step: int, cfg: PretrainConfig, total_steps: int) -> float:
    """Pretraining's learning rate: `warmup_then_decay` to cfg.lr, with warmup_length steps of warmup."""
    return warmup_then_decay(step, cfg.lr, warmup_length(cfg, total_steps), total_steps)


def temperature_at(step: int, cfg: PretrainConfig, total_steps: int) -> float:
    """The sampling temperature `step` steps into the objective's stage of `total_steps`: constant
    `temperature`, or with temperature_start > 0 falling linearly from it to `temperature` (Fast-ELECTRA)."""
    if not cfg.temperature_start:
        return cfg.temperature
    progress = min(1.0, step / max(1, total_steps))
    return cfg.temperature_start + (cfg.temperature - cfg.temperature_start) * progress
