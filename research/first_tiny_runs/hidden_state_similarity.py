"""How alike are an encoder's last hidden states for unrelated sentences? A collapse check.

    python research/first_tiny_runs/hidden_state_similarity.py runs/mlm-tiny runs/electra-tiny runs/electric-tiny

For each run (its discriminator/, else its generator/), encodes two unrelated sentences and prints the
cosine between their [CLS] states and the mean cosine between their first four tokens' states. Values near
1 mean the encoder gives every input nearly the same representation (nothing for a fine-tuned head to
use); a healthy encoder is well below that.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SENTENCES = ("the movie was a wonderful surprise", "a dull , lifeless film")


def encoder_dir(run: Path) -> Path:
    from electric.checkpoint import resolve_model_dir

    return resolve_model_dir(run, ("discriminator", "generator"))


def similarity(model_dir: Path) -> tuple[float, float]:
    """(cosine of the two [CLS] states, mean cosine of tokens 1-4) for SENTENCES."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoTokenizer, ElectraModel

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = ElectraModel.from_pretrained(str(model_dir)).eval()
    batch = tok(list(SENTENCES), return_tensors="pt", padding=True)
    with torch.inference_mode():
        h = model(**batch).last_hidden_state
    cls = F.cosine_similarity(h[0, 0], h[1, 0], dim=0).item()
    tokens = F.cosine_similarity(h[0, 1:5], h[1, 1:5], dim=-1).mean().item()
    return cls, tokens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="pretraining run or model directories")
    args = ap.parse_args(argv)
    print(f"sentences: {SENTENCES[0]!r} vs {SENTENCES[1]!r}")
    print("| model | [CLS] cosine | token cosine (tokens 1-4) |\n|---|---:|---:|")
    for run in args.runs:
        if not run.exists():
            print(f"error: {run} does not exist", file=sys.stderr)
            return 2
        cls, tokens = similarity(encoder_dir(run))
        print(f"| {run} | {cls:.4f} | {tokens:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
