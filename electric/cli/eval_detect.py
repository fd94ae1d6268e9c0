"""`electric eval detect`: zero-shot grammatical error detection with a pretrained discriminator.

Each word of an FCE-format file (`token<TAB>c|i`, a blank line between sentences) gets the discriminator's
replaced probability p_t (calibrated at export, electric.inference.calibration; sigma(s_t) for a model without a
calibration), the maximum over the word's pieces, with no fine-tuning. Against the gold "incorrect" tags
we report, on the test sentences: ROC-AUC, the F0.5 at the threshold that is best on a separate dev part
(never chosen on the test sentences themselves), the F0.5 at p >= 0.5 (what a calibrated probability's
natural threshold gives) and the F0.5 of flagging every word: what `/v1/detect` is worth on real errors.

The dev part: `--dev FILE`; else, for `--data DIR`, a seeded 10% of DIR's training file (FCE has no dev
split); else a seeded `--dev-fraction` of the `--data` file's sentences, the rest being the test part.

    electric eval detect --model runs/electra-tiny/onnx --data ../shared/data/tagging/fce
    python -m electric.cli.eval_detect --model RUN --data FILE      # the same, without the dispatcher
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from pathlib import Path

import numpy as np

from electric.checkpoint import CheckpointError
from electric.evaluation import metrics as M
from electric.finetuning.tasks import DEV_FRACTION, DEV_SEED, TASKS, TaskDataError, subsample, train_dev_split
from electric.inference.calibration import describe, replaced_probs

POSITIVE = "incorrect"
BETA = 0.5
FIXED_THRESHOLD = 0.5  # "more likely replaced than not": meaningful once the model is calibrated


def word_scores(scorer, sentences: list[list[str]]) -> list[list[float | None]]:
    """Per word: max over its pieces of the replaced probability p_t (the scorer's calibration, else
    sigma(s_t)); None for a word the tokenizer turns into no piece.

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
    calibration = getattr(scorer, "calibration", None)
    out: list[list[float | None]] = []
    for e, row, st, words in zip(encoded, rows, starts, sentences, strict=True):
        prob = replaced_probs(np.asarray(row)[: e.length], calibration)  # (T,)
        scores: list[float | None] = [None] * len(words)
        for t in np.flatnonzero(e.candidates):
            k = bisect.bisect_right(st, int(e.offsets[t, 0])) - 1
            if 0 <= k < len(words):
                previous = scores[k]
                scores[k] = float(prob[t]) if previous is None else max(previous, float(prob[t]))
        out.append(scores)
    return out


def flatten(labels: list[list[str]], scores: list[list[float | None]]) -> tuple[np.ndarray, np.ndarray, int]:
    """(is incorrect, score) over the words that have a score, and how many had none."""
    y, s = [], []
    skipped = 0
    for tags, sc in zip(labels, scores, strict=True):
        for tag, v in zip(tags, sc, strict=True):
            if v is None:
                skipped += 1
                continue
            y.append(tag == POSITIVE)
            s.append(v)
    return np.asarray(y, dtype=bool), np.asarray(s, dtype=np.float64), skipped


def fbeta_at(y: np.ndarray, s: np.ndarray, threshold: float) -> dict:
    """Precision, recall and F0.5 of flagging the words with score >= threshold."""
    r = M.precision_recall_fbeta(y, s >= threshold, True, beta=BETA)
    return {"threshold": float(threshold), "f0.5": r["f"], "precision": r["precision"], "recall": r["recall"]}


def choose_threshold(labels: list[list[str]], scores: list[list[float | None]]) -> dict:
    """The threshold with the best F0.5 on these (dev) words, and the F0.5 it gets there."""
    y, s, _ = flatten(labels, scores)
    if not y.any() or y.all():
        raise ValueError(f"the dev part ({len(y)} scored words) needs both correct and incorrect words to choose a "
                         "threshold; give a larger one (--dev FILE, --dev-fraction)")
    best = M.best_threshold_fbeta(y, s, beta=BETA)
    return {"words": len(y), "threshold": best["threshold"], "f0.5": best["f"], "precision": best["precision"],
            "recall": best["recall"]}


def evaluate_detection(labels: list[list[str]], scores: list[list[float | None]], threshold: float) -> dict:
    """ROC-AUC and F0.5 of `scores` against the words tagged POSITIVE, at `threshold` (chosen elsewhere)
    and at FIXED_THRESHOLD."""
    y, s, skipped = flatten(labels, scores)
    rate = float(y.mean()) if len(y) else 0.0
    at = fbeta_at(y, s, threshold)
    return {
        "words": len(y), "words_without_pieces": skipped, "incorrect_rate": rate,
        "roc_auc": M.roc_auc(y, s),
        "threshold": at["threshold"], "f0.5": at["f0.5"], "precision": at["precision"], "recall": at["recall"],
        "at_0.5": fbeta_at(y, s, FIXED_THRESHOLD),
        # the trivial detector that flags every word, for scale
        "f0.5_all_incorrect": 1.25 * rate / (0.25 * rate + 1) if rate else 0.0,
    }


def dev_and_test(args: argparse.Namespace):
    """(dev examples, test examples, where each came from), as the module docstring says."""
    fce = TASKS["fce"]
    assert fce.test is not None  # the FCE task names its test file
    data = Path(args.data)
    test_path = data / fce.test if data.is_dir() else data
    test = fce.read(test_path)
    if args.dev:
        dev, dev_source = fce.read(Path(args.dev)), str(args.dev)
    elif data.is_dir():
        _, dev = train_dev_split(fce.read(data / fce.train), DEV_FRACTION, DEV_SEED)
        dev_source = f"{DEV_FRACTION:.0%} of {data / fce.train} (seed {DEV_SEED})"
    else:
        if not 0 < args.dev_fraction < 1:
            raise ValueError(f"--dev-fraction must be between 0 and 1, got {args.dev_fraction}")
        test, dev = train_dev_split(test, args.dev_fraction, args.seed)
        dev_source = f"{args.dev_fraction:.0%} of {test_path} (seed {args.seed}); the rest is the test part"
    if args.max_sentences:
        test, dev = test[: args.max_sentences], subsample(dev, args.max_sentences, DEV_SEED)
    return dev, test, dev_source, str(test_path)


def run(args: argparse.Namespace) -> int:
    from electric.checkpoint import MissingExtra, require_extra
    from electric.cli import quiet_progress_bars
    from electric.inference.scoring import load_scorer

    try:  # ROC-AUC and the F0.5 threshold come from scikit-learn: say so before any work
        require_extra("electric eval detect (ROC-AUC)", ("sklearn",), "metrics")
    except MissingExtra as e:
        print(f"electric eval detect: error: {e}", file=sys.stderr)
        return 2
    if args.quiet:
        quiet_progress_bars()
    try:
        dev, test, dev_source, test_source = dev_and_test(args)
        scorer = load_scorer(args.model, "electra", backend=args.backend, device=args.device,
                             sliding_window=True, batch_size=args.batch_size, progress=not args.quiet)
        chosen = choose_threshold([e.label for e in dev], word_scores(scorer, [e.text for e in dev]))
        result = evaluate_detection([e.label for e in test], word_scores(scorer, [e.text for e in test]),
                                    chosen["threshold"])
    except (CheckpointError, TaskDataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    calibration = getattr(scorer, "calibration", None)
    result = {"model": str(args.model), "data": test_source, "probabilities": describe(calibration),
              "calibrated": calibration is not None, "sentences": len(test), **result,
              "dev": {"data": dev_source, "sentences": len(dev), **chosen}}
    at = result["at_0.5"]
    print(f"probabilities: {result['probabilities']}\n"
          f"test: {result['sentences']} sentences, {result['words']} words ({result['incorrect_rate']:.1%} incorrect)"
          f"\nROC-AUC {result['roc_auc']:.4f}\n"
          f"F0.5 {result['f0.5']:.4f} at p >= {result['threshold']:.6g} (chosen on dev: {len(dev)} sentences, "
          f"dev F0.5 {chosen['f0.5']:.4f}; precision {result['precision']:.4f}, recall {result['recall']:.4f})\n"
          f"F0.5 {at['f0.5']:.4f} at p >= 0.5 (precision {at['precision']:.4f}, recall {at['recall']:.4f}); "
          f"flagging every word: F0.5 {result['f0.5_all_incorrect']:.4f}")
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
    p.add_argument("--dev", metavar="FILE", help="FCE-format file on which the F0.5 threshold is chosen (default: "
                                                 f"{DEV_FRACTION:.0%}% of DIR's {TASKS['fce'].train} for a directory, "
                                                 "else --dev-fraction of --data)")
    p.add_argument("--dev-fraction", type=float, default=0.5,
                   help="share of a --data file's sentences held out as dev when there is no --dev (default 0.5)")
    p.add_argument("--seed", type=int, default=DEV_SEED, help="seed of that split (default 0)")
    p.add_argument("--backend", choices=("auto", "torch", "onnx"), default="auto",
                   help="auto = onnx for an exported directory, else torch")
    p.add_argument("--device", help="torch device (default: cuda if available)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass")
    p.add_argument("--max-sentences", type=int, help="score only the first N test sentences (and N dev sentences)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE (- for stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress bars (weight loading included)")
    p.set_defaults(func=run)
    return p


def add_eval_parser(eval_subparsers) -> argparse.ArgumentParser:
    """Add `detect` to the `electric eval` subcommand group (called by electric/cli/evaluate.py)."""
    return configure(eval_subparsers.add_parser(
        "detect", help="zero-shot error detection on FCE with a pretrained discriminator (ROC-AUC, F0.5 at a "
                       "dev-chosen threshold)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))


def main(argv: list[str] | None = None) -> int:
    ap = configure(argparse.ArgumentParser(prog="python -m electric.cli.eval_detect", description=__doc__,
                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
