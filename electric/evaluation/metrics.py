"""Evaluation metrics for fine-tuning and detection, computed by scikit-learn, SciPy and seqeval.

Every function takes plain sequences (lists or arrays) and returns a float, or a dict of floats. The
libraries do the counting; this module fixes the conventions the reports rely on, which are the same as
before the libraries took over (tests/test_metrics.py pins the values):
- mismatched or empty inputs raise `ValueError` naming the sizes;
- an undefined ratio (no positive predictions, a constant series, MCC of a constant prediction) is 0.0,
  never nan and never a warning;
- `chunk_f1` reads spans as CoNLL-2000's conlleval does (seqeval's default mode: an I- tag after O or after
  a different type opens a new chunk); a tag without a type ("O", "B") is outside every chunk;
- `roc_auc` counts tied scores one half and raises when y_true holds one class only.
The libraries are imported on first use, so importing this module (and electric.finetuning.tasks) stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _pair(y_true: Sequence | np.ndarray, y_pred: Sequence | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {t.shape} vs {p.shape}")
    if t.size == 0:
        raise ValueError("no examples to score")
    return t, p


def accuracy(y_true: Sequence, y_pred: Sequence) -> float:
    from sklearn.metrics import accuracy_score

    t, p = _pair(y_true, y_pred)
    return float(accuracy_score(t, p))


def matthews_corrcoef(y_true: Sequence, y_pred: Sequence) -> float:
    """Matthews correlation (multi-class R_K of Gorodkin 2004; equals the binary formula for 2 classes)."""
    from sklearn.metrics import matthews_corrcoef as mcc

    t, p = _pair(y_true, y_pred)
    if np.unique(np.concatenate([t, p])).size < 2:  # one label in both: undefined (scikit-learn would warn)
        return 0.0
    return float(mcc(t, p))


def precision_recall_fbeta(y_true: Sequence | np.ndarray, y_pred: Sequence | np.ndarray, positive, beta: float = 1.0) -> dict[str, float]:
    """Precision, recall and F-beta of the class `positive` (beta 0.5 weighs precision twice as much)."""
    from sklearn.metrics import precision_recall_fscore_support

    t, p = _pair(y_true, y_pred)
    precision, recall, f, _ = precision_recall_fscore_support(t, p, labels=[positive], average=None, beta=beta,
                                                              zero_division=0.0)
    return {"precision": float(precision[0]), "recall": float(recall[0]), "f": float(f[0])}


def f1(y_true: Sequence, y_pred: Sequence, positive=1) -> float:
    return precision_recall_fbeta(y_true, y_pred, positive, 1.0)["f"]


def macro_f1(y_true: Sequence, y_pred: Sequence) -> float:
    """Unweighted mean of the per-class F1 over the classes present in y_true."""
    from sklearn.metrics import f1_score

    t, p = _pair(y_true, y_pred)
    return float(f1_score(t, p, labels=np.unique(t), average="macro", zero_division=0.0))


def rankdata(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank (scipy.stats.rankdata)."""
    from scipy.stats import rankdata as ranks

    return ranks(np.asarray(x, dtype=np.float64))


def _correlation(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, kind: str) -> float:
    """Pearson's or Spearman's coefficient; 0.0 where it is undefined (a constant series, one example)."""
    from scipy import stats

    a, b = _pair(x, y)
    a, b = a.astype(np.float64), b.astype(np.float64)
    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return 0.0
    r = stats.pearsonr(a, b) if kind == "pearson" else stats.spearmanr(a, b)
    return float(r.statistic)


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    return _correlation(x, y, "pearson")


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation; 0.0 where it is undefined (a constant series, one example). The one Spearman
    of the project: fine-tuning's STS-B score and the export's parity gate (where 0.0 fails the gate) alike."""
    return _correlation(x, y, "spearman")


def roc_auc(y_true: Sequence[float] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """Area under the ROC curve for binary labels (1/True = positive); tied scores count one half. NaN where it
    is undefined (one class absent), so that a log of training health never stops on it; a caller that must not
    report NaN checks `math.isnan`. The one ROC-AUC of the project."""
    from sklearn.metrics import roc_auc_score

    t, s = _pair(y_true, scores)
    pos = t.astype(bool)
    if pos.all() or not pos.any():
        return float("nan")
    return float(roc_auc_score(pos, s.astype(np.float64)))


def best_threshold_fbeta(y_true: Sequence[float] | np.ndarray, scores: Sequence[float] | np.ndarray, beta: float = 0.5) -> dict[str, float]:
    """The threshold on `scores` (predict positive when score >= threshold) that maximises F-beta; the
    highest such threshold when several tie. Without positive examples every F is 0 and the threshold is the
    highest score."""
    from sklearn.metrics import precision_recall_curve

    t, s = _pair(y_true, scores)
    pos, s = t.astype(bool), s.astype(np.float64)
    if not pos.any():
        return {"threshold": float(s.max()), "f": 0.0, "precision": 0.0, "recall": 0.0}
    precision, recall, thresholds = precision_recall_curve(pos, s)
    # one cut per distinct score, highest first (the curve's last point, recall 0, has no threshold)
    precision, recall, thresholds = precision[-2::-1], recall[-2::-1], thresholds[::-1]
    b2 = beta * beta
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(precision + recall > 0, (1 + b2) * precision * recall / (b2 * precision + recall), 0.0)
    i = int(np.argmax(f))
    return {"threshold": float(thresholds[i]), "f": float(f[i]), "precision": float(precision[i]),
            "recall": float(recall[i])}


# ---- chunks (CoNLL-2000 conlleval rules, by seqeval) ------------------------------------------------

def _typed(tags: Sequence[str]) -> list[str]:
    """The tags with every untyped one (no "-": "O", a bare "B") written "O"."""
    return [t if "-" in t else "O" for t in tags]


def chunk_spans(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """(start, end exclusive, type) of every chunk in a BIO (or IOB1, IOBES) tag sequence, as conlleval reads it."""
    from seqeval.metrics.sequence_labeling import get_entities

    return {(start, end + 1, kind) for kind, start, end in get_entities(_typed(tags))}


def chunk_f1(true_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 over chunks (exact span and type), as CoNLL-2000's conlleval."""
    from seqeval.metrics.sequence_labeling import precision_recall_fscore_support

    if len(true_seqs) != len(pred_seqs):
        raise ValueError(f"{len(true_seqs)} gold sentences but {len(pred_seqs)} predicted")
    for i, (t, p) in enumerate(zip(true_seqs, pred_seqs, strict=True)):
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(t)} gold tags but {len(p)} predicted")
    if not true_seqs:  # no sentence, no chunk (seqeval wants at least one list)
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    precision, recall, f, _ = precision_recall_fscore_support([_typed(t) for t in true_seqs],
                                                              [_typed(p) for p in pred_seqs], average="micro",
                                                              zero_division=0)
    return {"precision": float(precision), "recall": float(recall), "f1": float(f)}
