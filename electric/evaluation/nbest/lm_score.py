"""Which LM score reranks: a hypothesis's sum over tokens (the PLL) or its length-normalised mean per token.
`rerank_scored` (`electric rerank`/`eval nbest --lm-score auto`, scripts/adapt_recipe.py) tunes each and keeps
the one better on dev (never on test) by `choose_lm_score`; ties keep the sum. The (sum, mean[, pieces]) rows
here are what offline scoring (`--ray`) writes per hypothesis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from electric.evaluation.nbest.combination import LM_SCORES
from electric.evaluation.nbest.lists import NBestError, NBestList

# LM_SCORES ("sum", "mean") are the columns of the (sum, mean) pairs that `sum_and_mean` gives per hypothesis
PIECES_COLUMN = 2  # `sum_mean_pieces` adds the number of pieces scored as a third column


def sum_and_mean(results) -> list[tuple[float, float]]:
    """(sum, mean) per scored text (`TextScore`s), the pairs `score_nbest` stores for `lm_score_column`."""
    return [(r.score, r.mean) for r in results]


def sum_mean_pieces(results) -> list[tuple[float, float, float]]:
    """(sum, mean, pieces scored) per scored text: `sum_and_mean` plus the length every LM score carries, which
    the no-LM baseline gets as a per-piece bonus (`piece_counts`)."""
    return [(r.score, r.mean, float(r.num_tokens)) for r in results]


def lm_score_column(pairs: Sequence[np.ndarray], kind: str) -> list[np.ndarray]:
    """One LM score per hypothesis of each list from its (n, 2) array of (sum, mean) pairs (or (n, 3) rows of
    `sum_mean_pieces`)."""
    if kind not in LM_SCORES:
        raise ValueError(f"LM score must be one of {', '.join(LM_SCORES)}, got {kind!r}")
    return [a[:, LM_SCORES.index(kind)] for a in pairs]


def piece_counts(rows: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """The pieces scored per hypothesis of each list from `sum_mean_pieces` rows; None for (sum, mean) pairs."""
    if not rows or np.asarray(rows[0]).ndim != 2 or np.asarray(rows[0]).shape[1] <= PIECES_COLUMN:
        return None
    return [np.asarray(a)[:, PIECES_COLUMN] for a in rows]


def choose_lm_score(dev: Mapping[str, float], higher_is_better: bool) -> str:
    """The LM score whose dev result is better; a tie keeps the sum."""
    sign = 1 if higher_is_better else -1
    return max((k for k in LM_SCORES if k in dev), key=lambda k: sign * dev[k])


def require_refs(lists: Sequence[NBestList], path: str | Path | None, fmt: str) -> None:
    """An error rate needs a reference for every utterance: raise `NBestError` naming the first without."""
    for nb in lists:
        if nb.ref is None:
            hint = " (plain text lists carry none: pass --refs FILE)" if fmt == "text" else ""
            raise NBestError(path, f"no reference; an error rate needs one for every utterance{hint}", repr(nb.utt_id))
