"""Evaluation metrics for fine-tuning and detection, in NumPy only (no scikit-learn / seqeval / scipy).

Every function takes plain sequences (lists or arrays) and returns a float, or a dict of floats.
Conventions follow the reference tools: `chunk_f1` reproduces conlleval's span rules (an I- tag after O or
after a different type opens a new chunk), `roc_auc` is the Mann-Whitney statistic with ties counted as
one half, and an undefined ratio (no positive predictions, a constant series) is reported as 0.0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _pair(y_true: Sequence, y_pred: Sequence) -> tuple[np.ndarray, np.ndarray]:
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {t.shape} vs {p.shape}")
    if t.size == 0:
        raise ValueError("no examples to score")
    return t, p


def _div(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def accuracy(y_true: Sequence, y_pred: Sequence) -> float:
    t, p = _pair(y_true, y_pred)
    return float(np.mean(t == p))


def matthews_corrcoef(y_true: Sequence, y_pred: Sequence) -> float:
    """Matthews correlation (multi-class R_K of Gorodkin 2004; equals the binary formula for 2 classes)."""
    t, p = _pair(y_true, y_pred)
    classes = np.unique(np.concatenate([t, p]))
    ti, pi = np.searchsorted(classes, t), np.searchsorted(classes, p)
    c = np.zeros((len(classes), len(classes)), dtype=np.float64)  # (true, pred)
    np.add.at(c, (ti, pi), 1)
    n, correct = c.sum(), np.trace(c)
    true_k, pred_k = c.sum(axis=1), c.sum(axis=0)
    cov = correct * n - pred_k @ true_k
    denom = np.sqrt((n * n - pred_k @ pred_k) * (n * n - true_k @ true_k))
    return float(cov / denom) if denom else 0.0


def precision_recall_fbeta(y_true: Sequence, y_pred: Sequence, positive, beta: float = 1.0) -> dict[str, float]:
    """Precision, recall and F-beta of the class `positive` (beta 0.5 weighs precision twice as much)."""
    t, p = _pair(y_true, y_pred)
    tp = float(np.sum((p == positive) & (t == positive)))
    precision = _div(tp, np.sum(p == positive))
    recall = _div(tp, np.sum(t == positive))
    b2 = beta * beta
    f = _div((1 + b2) * precision * recall, b2 * precision + recall)
    return {"precision": precision, "recall": recall, "f": f}


def f1(y_true: Sequence, y_pred: Sequence, positive=1) -> float:
    return precision_recall_fbeta(y_true, y_pred, positive, 1.0)["f"]


def macro_f1(y_true: Sequence, y_pred: Sequence) -> float:
    """Unweighted mean of the per-class F1 over the classes present in y_true."""
    t, p = _pair(y_true, y_pred)
    return float(np.mean([precision_recall_fbeta(t, p, c)["f"] for c in np.unique(t)]))


def rankdata(x: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties given their average rank (scipy.stats.rankdata's default)."""
    a = np.asarray(x, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    # start index of each run of equal values
    starts = np.flatnonzero(np.r_[True, sorted_a[1:] != sorted_a[:-1]])
    ends = np.r_[starts[1:], len(a)]
    avg = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(len(a), dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    a, b = _pair(x, y)
    a, b = a.astype(np.float64) - np.mean(a), b.astype(np.float64) - np.mean(b)
    denom = np.sqrt(np.sum(a * a) * np.sum(b * b))
    return float(np.sum(a * b) / denom) if denom else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    a, b = _pair(x, y)
    return pearson(rankdata(a), rankdata(b))


def roc_auc(y_true: Sequence, scores: Sequence[float]) -> float:
    """Area under the ROC curve for binary labels (1/True = positive), by the rank-sum formula."""
    t, s = _pair(y_true, scores)
    pos = t.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"ROC-AUC needs both classes; got {n_pos} positive and {n_neg} negative examples")
    r = rankdata(s)
    return float((r[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def best_threshold_fbeta(y_true: Sequence, scores: Sequence[float], beta: float = 0.5) -> dict[str, float]:
    """The threshold on `scores` (predict positive when score >= threshold) that maximises F-beta."""
    t, s = _pair(y_true, scores)
    pos = t.astype(bool)
    order = np.argsort(-s.astype(np.float64), kind="mergesort")
    s_sorted, pos_sorted = s[order], pos[order]
    tp = np.cumsum(pos_sorted)
    predicted = np.arange(1, len(s) + 1)
    last_of_tie = np.r_[s_sorted[1:] != s_sorted[:-1], True]  # cut only between distinct scores
    tp, predicted, thresholds = tp[last_of_tie], predicted[last_of_tie], s_sorted[last_of_tie]
    n_pos = max(int(pos.sum()), 1)
    precision, recall = tp / predicted, tp / n_pos
    b2 = beta * beta
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(precision + recall > 0, (1 + b2) * precision * recall / (b2 * precision + recall), 0.0)
    i = int(np.argmax(f))
    return {"threshold": float(thresholds[i]), "f": float(f[i]), "precision": float(precision[i]),
            "recall": float(recall[i])}


# ---- chunks (CoNLL-2000 conlleval rules) -----------------------------------------------------------

def _split_tag(tag: str) -> tuple[str, str]:
    if tag == "O" or "-" not in tag:
        return "O", ""
    prefix, kind = tag.split("-", 1)
    return prefix, kind


def chunk_spans(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """(start, end exclusive, type) of every chunk in a BIO (or IOB1) tag sequence, as conlleval reads it."""
    spans: set[tuple[int, int, str]] = set()
    start, kind = None, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, k = _split_tag(tag)
        # conlleval: a chunk starts at B-, or at I- after O or after a chunk of another type
        begins = prefix in ("B", "S") or (prefix in ("I", "E") and (start is None or k != kind))
        ends = start is not None and (prefix == "O" or begins)
        if ends:
            spans.add((start, i, kind))
            start = None
        if begins:
            start, kind = i, k
        if prefix in ("E", "S") and start is not None:
            spans.add((start, i + 1, kind))
            start = None
    return spans


def chunk_f1(true_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 over chunks (exact span and type), as CoNLL-2000's conlleval."""
    if len(true_seqs) != len(pred_seqs):
        raise ValueError(f"{len(true_seqs)} gold sentences but {len(pred_seqs)} predicted")
    n_true = n_pred = n_ok = 0
    for i, (t, p) in enumerate(zip(true_seqs, pred_seqs, strict=True)):
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(t)} gold tags but {len(p)} predicted")
        ts, ps = chunk_spans(t), chunk_spans(p)
        n_true, n_pred, n_ok = n_true + len(ts), n_pred + len(ps), n_ok + len(ts & ps)
    precision, recall = _div(n_ok, n_pred), _div(n_ok, n_true)
    return {"precision": precision, "recall": recall, "f1": _div(2 * precision * recall, precision + recall)}
