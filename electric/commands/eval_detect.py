"""`electric eval detect`: zero-shot grammatical error detection with a pretrained discriminator.

Each word of an FCE-format file (`token<TAB>c|i`, a blank line between sentences) gets the discriminator's
replaced probability sigma(s_t), the maximum over the word's pieces, with no fine-tuning. Against the
gold "incorrect" tags we report ROC-AUC and the F0.5 of the best threshold (chosen on the same data, so
it is an upper bound of what a fixed threshold would give): what `/v1/detect` is worth on real errors.

    electric eval detect --model runs/electra-tiny --data ../shared/data/tagging/fce/fce-public.test.original.tsv
    python -m electric.commands.eval_detect --model RUN --data FILE      # the same, without the dispatcher
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from pathlib import Path

import numpy as np

from electric import metrics as M
from electric.checkpoint import CheckpointError
from electric.tasks import TASKS, TaskDataError

POSITIVE = "incorrect"


def word_scores(scorer, sentences: list[list[str]]) -> list[list[float | None]]:
    """Per word: max over its pieces of sigma(s_t); None for a word the tokenizer turns into no piece.

    The words are joined with single spaces and every piece is assigned to the word its character offset
    falls in, so the file's own word boundaries are kept (not the tokenizer's punctuation splitting).
    Long sentences are scored with sliding windows (the scorer's setting), never truncated.
    """
    texts, starts = [], []
    for words in sentences:
        pos, st = 0, []
        for w in words:
            st.append(pos)
            pos += len(w) + 1
        texts.append(" ".join(words))
        starts.append(st)
    encoded = scorer.encode(texts)
    rows = scorer.logits(encoded)
    out: list[list[float | None]] = []
    for e, row, st, words in zip(encoded, rows, starts, sentences, strict=True):
        prob = 1.0 / (1.0 + np.exp(-np.asarray(row, dtype=np.float64)[: e.length]))  # (T,) sigma(s_t)
        scores: list[float | None] = [None] * len(words)
        for t in np.flatnonzero(e.candidates):
            k = bisect.bisect_right(st, int(e.offsets[t, 0])) - 1
            if 0 <= k < len(words):
                scores[k] = float(prob[t]) if scores[k] is None else max(scores[k], float(prob[t]))
        out.append(scores)
    return out


def evaluate_detection(labels: list[list[str]], scores: list[list[float | None]]) -> dict:
    """ROC-AUC and best-threshold F0.5 of `scores` against the words tagged POSITIVE."""
    y, s = [], []
    skipped = 0
    for tags, sc in zip(labels, scores, strict=True):
        for tag, v in zip(tags, sc, strict=True):
            if v is None:
                skipped += 1
                continue
            y.append(tag == POSITIVE)
            s.append(v)
    y_arr, s_arr = np.asarray(y), np.asarray(s)
    rate = float(y_arr.mean()) if len(y_arr) else 0.0
    best = M.best_threshold_fbeta(y_arr, s_arr, beta=0.5)
    return {
        "words": len(y), "words_without_pieces": skipped, "incorrect_rate": rate,
        "roc_auc": M.roc_auc(y_arr, s_arr),
        "f0.5": best["f"], "precision": best["precision"], "recall": best["recall"], "threshold": best["threshold"],
        # the trivial detector that flags every word, for scale
        "f0.5_all_incorrect": 1.25 * rate / (0.25 * rate + 1) if rate else 0.0,
    }


def run(args: argparse.Namespace) -> int:
    from electric.scoring import load_scorer

    fce = TASKS["fce"]
    data = Path(args.data)
    try:
        if data.is_dir():
            data = data / fce.test
            print(f"reading {data}", file=sys.stderr)
        examples = fce.read(data)
        if args.max_sentences:
            examples = examples[: args.max_sentences]
        scorer = load_scorer(args.model, "electra", backend=args.backend, device=args.device,
                             sliding_window=True, batch_size=args.batch_size, progress=not args.quiet)
        scores = word_scores(scorer, [e.text for e in examples])
        result = evaluate_detection([e.label for e in examples], scores)
    except (CheckpointError, TaskDataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = {"model": str(args.model), "data": str(data), "sentences": len(examples), **result}
    print(f"{result['sentences']} sentences, {result['words']} words ({result['incorrect_rate']:.1%} incorrect)\n"
          f"ROC-AUC {result['roc_auc']:.4f}\n"
          f"best F0.5 {result['f0.5']:.4f} at sigma(s) >= {result['threshold']:.4f} "
          f"(precision {result['precision']:.4f}, recall {result['recall']:.4f}; "
          f"flagging every word: F0.5 {result['f0.5_all_incorrect']:.4f})")
    if args.json:
        text = json.dumps(result, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            Path(args.json).write_text(text)
    return 0


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--model", required=True, help="pretraining run directory (uses discriminator/), an "
                                                  "ElectraForPreTraining directory, or its `electric export`")
    p.add_argument("--data", required=True, help="FCE-format file (token<TAB>c|i); a directory means its "
                                                 f"{TASKS['fce'].test}")
    p.add_argument("--backend", choices=("auto", "torch", "onnx"), default="auto",
                   help="auto = onnx for an exported directory, else torch")
    p.add_argument("--device", help="torch device (default: cuda if available)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass")
    p.add_argument("--max-sentences", type=int, help="score only the first N sentences")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE (- for stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def add_eval_parser(eval_subparsers) -> argparse.ArgumentParser:
    """Add `detect` to the `electric eval` subcommand group (called by electric/commands/score.py)."""
    return configure(eval_subparsers.add_parser(
        "detect", help="zero-shot error detection on FCE with a pretrained discriminator (ROC-AUC, F0.5)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))


def main(argv: list[str] | None = None) -> int:
    ap = configure(argparse.ArgumentParser(prog="python -m electric.commands.eval_detect", description=__doc__,
                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
