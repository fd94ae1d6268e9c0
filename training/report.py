"""What a run shows a person: the progress bar's fields, OUT/curves.png and the closing summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from electric.pretraining import health
from electric.pretraining.config import PretrainConfig
from training.run_dir import TrainerState


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


def print_summary(out: Path, cfg: PretrainConfig, trainer: TrainerState, last: dict, reason: str) -> None:
    el = trainer.elapsed
    lines = [
        f"stopped after {trainer.step} steps ({reason}); {trainer.tokens:,} tokens in {el / 60:.1f} min "
        f"({trainer.tokens / max(el, 1e-9):,.0f} tokens/s)",
    ]
    keys = [k for k in ("loss", "gen_loss", "disc_loss", "disc_acc", "val_loss", "val_gen_loss",
                        "val_disc_loss", "val_disc_acc") if k in last]
    if keys:
        lines.append("final: " + ", ".join(f"{k} {last[k]:.4f}" for k in keys))
    health_keys = [k for k in ("val_disc_auc", "val_energy_auc", "val_unigram_noise_auc", "val_disc_acc_gain",
                               "val_logit_spread", "val_token_cosine", "val_gen_nll", "val_unigram_nll") if k in last]
    if health_keys:
        lines.append("health: " + ", ".join(f"{k[4:]} {last[k]:.4f}" for k in health_keys))
    if trainer.collapse:
        c = trainer.collapse
        lines.append(f"WARNING: collapsed at step {c['step']} ({'; '.join(c['reasons'])}): "
                     f"{health.collapse_advice(cfg.start)}")
    if (out / "curves.png").is_file():
        lines.append(f"curves: {out / 'curves.png'}")
    for name in ("discriminator", "generator"):
        if (out / name).is_dir():
            lines.append(f"{name}: {out / name}")
    if reason in ("SIGINT", "SIGTERM", "--stop-at", "collapse"):
        lines.append(f"checkpoint saved; continue with: python -m training.pretrain --resume --out {out} --data ...")
    print("\n".join(lines))
