"""Summarise pretraining runs: curves (PNG), final validation figures, and the unigram baseline.

    python research/first_tiny_runs/pretrain_quality.py runs/mlm-tiny runs/electra-tiny runs/electric-tiny \\
        --data ../shared/data/corpus/enwiki

For each run: tokens seen, wall time, first and last validation losses, the discriminator's accuracy
beside always answering "original", and (generator/cloze) perplexity exp(val_gen_loss) beside the
unigram perplexity of the same validation slice (token frequencies counted on the training split).
Writes research/first_tiny_runs/results/pretrain_quality.md and research/first_tiny_runs/results/pretrain_curves.png.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from electric.pretraining.config import PretrainConfig  # noqa: E402
from electric.pretraining.data import build_datasets  # noqa: E402
from electric.tokenization import load_tokenizer  # noqa: E402


def read_run(run: Path) -> tuple[PretrainConfig, list[dict], list[dict]]:
    cfg = PretrainConfig.load(run / "config.json")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return cfg, [r for r in rows if "loss" in r], [r for r in rows if "val_loss" in r]


def unigram_perplexity(run: Path, cfg: PretrainConfig, data: list[str]) -> float:
    """Perplexity of the validation slice's non-special tokens under add-one unigram frequencies of train."""
    tok_dir = run / ("generator" if cfg.objective == "mlm" else "discriminator")
    tok = load_tokenizer(tok_dir)
    train, val = build_datasets(data, tok, cfg.max_seq_length, cfg.val_sequences, num_proc=1)
    special = set(tok.all_special_ids)
    counts: Counter = Counter()
    for batch in train.iter(batch_size=2000):
        for ids in batch["input_ids"]:
            counts.update(i for i in ids if i not in special)
    total, V = sum(counts.values()), len(tok)
    nll, n = 0.0, 0
    for ids in val["input_ids"]:
        for i in ids:
            if i not in special:
                nll -= math.log((counts[i] + 1) / (total + V))
                n += 1
    return math.exp(nll / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--data", nargs="+", required=True, help="the runs' training data (for the unigram baseline)")
    ap.add_argument("--out", default="research/first_tiny_runs/results/pretrain_quality.md")
    ap.add_argument("--plot", default="research/first_tiny_runs/results/pretrain_curves.png")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    lines = ["# Pretraining quality at `tiny` size", "",
             f"Command: `python research/first_tiny_runs/pretrain_quality.py {' '.join(map(str, sys.argv[1:]))}`", "",
             "| run | objective | steps | tokens | minutes | val gen loss first → last | gen/cloze ppl | unigram ppl "
             "| val disc loss first → last | disc acc | always-original acc |",
             "|---|---|---:|---:|---:|---|---:|---:|---|---:|---:|"]
    unigram_cache: dict[tuple, float] = {}
    for run in args.runs:
        cfg, train, val = read_run(run)
        key = (cfg.max_seq_length, cfg.val_sequences)
        if key not in unigram_cache:
            unigram_cache[key] = unigram_perplexity(run, cfg, args.data)
        last, v0, v1 = train[-1], val[0], val[-1]
        disc = (f"{v0['val_disc_loss']:.3f} → {v1['val_disc_loss']:.3f}", f"{v1['val_disc_acc']:.3f}",
                f"{v1['val_disc_baseline_acc']:.3f}") if "val_disc_loss" in v1 else ("–", "–", "–")
        lines.append(
            f"| {run.name} | {cfg.objective} | {last['step']} | {last['tokens']:,} | {last['elapsed_s'] / 60:.1f} "
            f"| {v0['val_gen_loss']:.3f} → {v1['val_gen_loss']:.3f} | {math.exp(v1['val_gen_loss']):,.0f} "
            f"| {unigram_cache[key]:,.0f} | {disc[0]} | {disc[1]} | {disc[2]} |")
        axes[0].plot([r["tokens"] for r in train], [r["gen_loss"] for r in train], label=f"{run.name} train")
        tokens_per_step = last["tokens"] / last["step"]  # fixed batch: validation rows placed by step
        axes[0].plot([r["step"] * tokens_per_step for r in val], [r["val_gen_loss"] for r in val], "o--",
                     label=f"{run.name} val")
        if "disc_loss" in last:
            axes[1].plot([r["tokens"] for r in train], [r["disc_loss"] for r in train], label=run.name)
            axes[2].plot([r["tokens"] for r in train], [r["disc_acc"] - r["disc_baseline_acc"] for r in train],
                         label=run.name)
    for ax, title in zip(axes, ("generator / cloze / MLM loss", "discriminator BCE",
                                "disc accuracy − always-original"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("tokens")
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=90)
    lines += ["", f"Curves: `{args.plot}`.", "",
              "gen/cloze ppl = exp(validation generator loss): the masked LM's perplexity at masked positions "
              "(electra: the ¼-width generator; mlm: the full model) or the two-tower cloze model's at every "
              "candidate position (electric). Unigram ppl: the same validation tokens under train-split unigram "
              "frequencies (add-one)."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
