"""Which LM score reranks: a hypothesis's sum over tokens (the PLL) or its length-normalised mean per token.
`electric rerank`/`eval nbest --lm-score auto` and scripts/adapt_recipe.py both tune each and keep the one
better on dev (never on test) by `choose_lm_score`; ties keep the sum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from electric.evaluation.nbest.combination import LM_SCORES, Weights
from electric.evaluation.nbest.lists import NBestError, NBestList
from electric.evaluation.nbest.report import rerank_report

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


def rerank_report_choosing_lm_score(lists: Sequence[NBestList], pairs: Sequence[np.ndarray], *, lm_score: str = "auto",
                                    dev_lists: Sequence[NBestList] | None = None, weights: Weights | None = None,
                                    **report_options) -> tuple[Weights, dict, list[np.ndarray]]:
    """`rerank_report` with the LM score `lm_score` ("sum", "mean", or "auto": tune both and keep the one better
    on dev; with fixed `weights` auto means the sum). `pairs` holds (sum, mean) per hypothesis of `lists` and
    then of `dev_lists`, or (sum, mean, pieces) rows of `sum_mean_pieces` (then the no-LM baseline gets a piece
    bonus too). Returns the weights, the report (with "lm_score", and for auto "lm_score_dev") and the chosen
    test scores."""
    kinds = list(LM_SCORES) if lm_score == "auto" and weights is None else ["sum" if lm_score == "auto" else lm_score]
    pieces = piece_counts(pairs)
    if pieces is not None:
        report_options = {**report_options, "pieces": pieces[: len(lists)]}
        if dev_lists is not None:
            report_options["dev_pieces"] = pieces[len(lists):]
    tried = {}
    for kind in kinds:
        scores = lm_score_column(pairs, kind)
        test_scores, dev_scores = scores[: len(lists)], scores[len(lists):]
        given = None if weights is None else replace(weights, lm_score=kind)
        w, rep = rerank_report(lists, test_scores, dev=(dev_lists, dev_scores) if dev_lists is not None else None,
                               weights=given, **report_options)
        for key in ("weights", "weights_lm", "weights_no_lm"):  # every combination says which LM score it uses
            if key in rep:
                rep[key]["lm_score"] = kind
        tried[kind] = (replace(w, lm_score=kind), rep, test_scores)
    kind, dev_of = kinds[0], None
    if len(kinds) > 1:
        dev_of = {k: rep["dev"]["reranked"] for k, (_, rep, _) in tried.items()}
        kind = choose_lm_score(dev_of, tried[kind][1]["higher_is_better"])
    weights, report, test_scores = tried[kind]
    report = {"lm_score": kind, **report}
    if dev_of is not None:
        report["lm_score_dev"] = dev_of
    return weights, report, test_scores


def require_refs(lists: Sequence[NBestList], path: str | Path | None, fmt: str) -> None:
    """An error rate needs a reference for every utterance: raise `NBestError` naming the first without."""
    for nb in lists:
        if nb.ref is None:
            hint = " (plain text lists carry none: pass --refs FILE)" if fmt == "text" else ""
            raise NBestError(path, f"no reference; an error rate needs one for every utterance{hint}", repr(nb.utt_id))
