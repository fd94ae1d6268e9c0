"""Word pieces <-> words: the one home of grouping a tokenizer's pieces by the word they belong to
(`word_ids[t]`: the word index of piece t, None for [CLS]/[SEP]).

Used by detection (a word's replaced probability from its pieces), tagging (a word's label from its first
piece) and fine-tuning (word labels onto pieces and back). Plain Python."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

IGNORE_INDEX = -100  # label of word pieces that carry no label (torch's cross-entropy ignore_index)


def word_groups(word_ids: Sequence[int | None], positions: Iterable[int]) -> dict[int, list[int]]:
    """{word index: its pieces among `positions`, in order}, words in the order of their first piece; a piece
    without a word (None) makes a group of its own, keyed -1 - position."""
    groups: dict[int, list[int]] = {}
    for t in positions:
        w = word_ids[t]
        groups.setdefault(-1 - int(t) if w is None else w, []).append(int(t))
    return groups


def align_word_labels(word_ids: Sequence[int | None], word_labels: Sequence[int]) -> list[int]:
    """Per-piece labels: each word's label on its first piece, IGNORE_INDEX on the others and on specials."""
    out, prev = [], None
    for w in word_ids:
        out.append(IGNORE_INDEX if w is None or w == prev else int(word_labels[w]))
        prev = w
    return out


def pieces_to_words(word_ids: Sequence[int | None], values: Sequence, n_words: int,
                    reduce: str = "first") -> list:
    """Per-word values from per-piece ones: the first piece's (`first`) or the largest (`max`).
    Words with no piece (cut by truncation, or empty after normalisation) get None."""
    out: list = [None] * n_words
    for i, w in enumerate(word_ids):
        if w is None:
            continue
        if out[w] is None:
            out[w] = values[i]
        elif reduce == "max":
            out[w] = max(out[w], values[i])
    return out
