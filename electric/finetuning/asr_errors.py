"""A recogniser's real errors as token labels: each hypothesis aligned with its reference (jiwer's word alignment),
its words labelled 1 where the recogniser substituted or inserted them and 0 where they match, each piece carrying
its word's label. What the detector is fine-tuned on (replaced-token detection on real errors) and what its AUC is
measured against.

    word_error_labels("show me fights from the boston", "show me flights from boston")  # [0, 0, 1, 0, 1, 0]
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

_SPACE_WORD = re.compile(r"\S+")


def word_error_labels(hyp: str, ref: str) -> list[int]:
    """Per whitespace word of `hyp`: 1 when the alignment with `ref` substitutes or inserts it, else 0."""
    import jiwer

    words = hyp.split()
    if not words:
        return []
    if not ref.split():
        return [1] * len(words)  # every word of a hypothesis of silence is inserted
    labels = [0] * len(words)
    for chunk in jiwer.process_words(ref, hyp).alignments[0]:
        if chunk.type in ("substitute", "insert"):
            for k in range(chunk.hyp_start_idx, chunk.hyp_end_idx):
                labels[k] = 1
    return labels


def piece_words(text: str, offsets: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """(T,) the whitespace word of each candidate piece by its character offset (-1 for the others)."""
    starts = [m.start() for m in _SPACE_WORD.finditer(text)]
    out = np.full(len(candidates), -1, dtype=np.int64)
    for t in np.flatnonzero(candidates):
        out[t] = int(np.searchsorted(starts, int(offsets[t, 0]), side="right")) - 1
    return out


def piece_labels(word_labels: Sequence[int], words_of_pieces: np.ndarray) -> np.ndarray:
    """(T,) float labels of the pieces (their word's label), -1 where a piece has no word."""
    labels = np.asarray(list(word_labels) + [-1], dtype=np.float32)  # index -1: no word
    return np.where(words_of_pieces >= 0, labels[words_of_pieces], -1.0).astype(np.float32)


def word_scores(piece_scores: np.ndarray, words_of_pieces: np.ndarray, num_words: int) -> np.ndarray:
    """(num_words,) each word's score: the maximum over its pieces (NaN for a word with none)."""
    out = np.full(num_words, np.nan)
    for t in np.flatnonzero(words_of_pieces >= 0):
        w = words_of_pieces[t]
        out[w] = piece_scores[t] if np.isnan(out[w]) else max(out[w], piece_scores[t])
    return out
