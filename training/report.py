"""What a run writes down and shows a person: its evaluations in metrics.jsonl (a collapse warned once), the
progress bar's fields, OUT/curves.png and the closing summary."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from electric.checkpoint import TRAINING_HEALTH, atomic_write_text, install_hint
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
        print(f"note: matplotlib is not installed ({install_hint('train')}); no curves.png", file=sys.stderr)
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


SCORE_AUC = {"electric": ("val_energy_auc", "energy AUC"), "electra": ("val_disc_auc", "discriminator AUC")}
WORSE_BY = 0.02  # an AUC this much below the baseline's is "worse than where it started", not noise


def read_metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def verdict(cfg: PretrainConfig, rows: list[dict]) -> list[str]:
    """What a person must know about the model a run ends with, one sentence each: its scores rank replaced tokens
    below chance (the energy's AUC for Electric, the discriminator's for ELECTRA), or a run --init-from a
    checkpoint ends worse than its first weights did (the baseline evaluation, step 0) on that AUC or on fixed
    unigram noise. [] when neither, or when the run has no discriminator or was never evaluated."""
    evals = [r for r in rows if "val_disc_auc" in r]
    if cfg.objective not in SCORE_AUC or not evals:
        return []
    end, out = evals[-1], []
    base = evals[0] if evals[0].get("baseline") and len(evals) > 1 else None
    key, name = SCORE_AUC[cfg.objective]
    if end.get(key, 1.0) < 0.5:
        out.append(f"its {name} on held-out text is {end[key]:.3f}, below chance (0.5): its scores rank replaced "
                   "tokens above original ones, so they would rank texts backwards")
    for k, label in ((key, name), ("val_unigram_noise_auc", "AUC against fixed unigram noise")):
        if base is not None and k in base and k in end and end[k] < base[k] - WORSE_BY:
            out.append(f"it ends worse than it started: {label} {end[k]:.3f} against {base[k]:.3f} for the "
                       "checkpoint under a fresh head at step 0")
    return out


def write_health(out: Path, trainer: TrainerState, warnings: list[str]) -> None:
    """electric.checkpoint.TRAINING_HEALTH in each saved model directory: the run's last evaluation, its baseline and `warnings`
    (`electric export` carries it into the manifest, the server into /info)."""
    rows = [r for r in read_metrics(out) if "val_loss" in r]
    health = {"steps": trainer.step, "tokens": trainer.tokens, "warnings": warnings,
              "start": next((r for r in rows if r.get("baseline")), None), "end": rows[-1] if rows else None}
    for name in ("discriminator", "generator"):
        if (out / name).is_dir():
            atomic_write_text(out / name / TRAINING_HEALTH, json.dumps(health, indent=1) + "\n")


def print_summary(out: Path, cfg: PretrainConfig, trainer: TrainerState, last: dict, reason: str,
                  warnings: Sequence[str] = ()) -> None:
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
    lines += [f"WARNING: {w}" for w in warnings]
    if (out / "curves.png").is_file():
        lines.append(f"curves: {out / 'curves.png'}")
    for name in ("discriminator", "generator"):
        if (out / name).is_dir():
            lines.append(f"{name}: {out / name}")
    if reason in ("SIGINT", "SIGTERM", "--stop-at", "collapse"):
        lines.append(f"checkpoint saved; continue with: python -m training.pretrain --resume --out {out} --data ...")
    print("\n".join(lines))


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
