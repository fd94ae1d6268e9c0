"""Classifier and tagger outputs -> labels: a softmax over the model's labels (or a regression head's value)
per input, and a label per word piece and per word (its first piece, as fine-tuning trains it) per text.
What /v1/classify and Classification/Classify return; NumPy only."""

from __future__ import annotations

import numpy as np

from electric.inference.encoding import Encoded
from electric.results import Classification, TokenLabel
from electric.words import word_groups


def label_names(config: dict) -> list[str]:
    """Label names in id order from a config.json's id2label (keys may be strings)."""
    id2label = config.get("id2label") or {}
    n = int(config.get("num_labels") or len(id2label) or 2)
    return [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(n)]


def is_regression(config: dict, num_outputs: int) -> bool:
    return config.get("problem_type") == "regression" or num_outputs == 1


def softmax(x: np.ndarray) -> np.ndarray:
    """Probabilities over the last axis, in float64 (max subtracted first, so large logits do not overflow)."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def classify_row(labels: list[str], regression: bool, logits: np.ndarray, truncated: bool = False) -> Classification:
    """(C,) logits of one input -> label probabilities, or the value of a regression head."""
    logits = np.asarray(logits).reshape(-1)
    if regression:
        return Classification(label=None, value=float(logits[0]), truncated=truncated)
    p = softmax(logits)
    return Classification(label=labels[int(p.argmax())], probabilities={lab: float(q) for lab, q in zip(labels, p,
                                                                                                       strict=True)},
                          truncated=truncated)


def tag_row(labels: list[str], encoded: Encoded, logits: np.ndarray) -> Classification:
    """(T, C) logits of one text -> a label per word piece and per word (its first piece, as in training)."""
    logits = np.asarray(logits)[: encoded.length]  # (T, C)
    p = softmax(logits)  # (T, C)
    best = p.argmax(axis=-1)  # (T,)
    cand = np.flatnonzero(encoded.candidates)
    tokens = [TokenLabel(encoded.tokens[t], int(encoded.offsets[t, 0]), int(encoded.offsets[t, 1]),
                         labels[int(best[t])], float(p[t, best[t]])) for t in cand]
    words = []
    for w, pieces in word_groups(encoded.word_ids, cand).items():
        if w < 0:  # a piece without a word
            continue
        first = pieces[0]  # the word's label is its first piece's (as fine-tuning trains it)
        start, end = int(encoded.offsets[first, 0]), int(encoded.offsets[pieces, 1].max())
        words.append(TokenLabel(encoded.text[start:end], start, end, labels[int(best[first])], float(p[first, best[first]])))
    return Classification(label=None, tokens=tokens, words=words, truncated=encoded.truncated)

