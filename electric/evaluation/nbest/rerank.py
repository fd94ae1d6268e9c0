"""Reranking n-best lists as one call: score every distinct hypothesis once, choose the LM score and the
weights on dev (or take given ones), and reorder the lists.

    result = rerank_nbest(lists, scorer_fn, RerankOptions(metric="wer"), dev_lists=dev)
    result.weights, result.report, result.reranked

`electric rerank`, `electric eval nbest` (plain and `--ray`) and scripts/adapt_recipe.py go through it; the
server applies given weights to the lists of one request with `rerank_lists`, the same formula.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from electric.evaluation.nbest.combination import LM_SCORES, RerankedList, Weights, rerank_lists, score_nbest
from electric.evaluation.nbest.lists import NBestList
from electric.evaluation.nbest.lm_score import choose_lm_score
from electric.evaluation.nbest.report import RerankOptions, rerank_report


class ScoredText(Protocol):
    """What a scorer gives per text (`electric.inference.scoring.TextScore` is one)."""

    score: float  # sum over the tokens scored
    mean: float  # per token
    num_tokens: int  # tokens scored; 0: nothing to score


ScoreTexts = Callable[[list[str]], Sequence[ScoredText]]


@dataclass(frozen=True)
class LMScores:
    """The LM's scores of every hypothesis of a set of lists, one array per list: the sum over tokens, the mean
    per token, and the pieces scored (None when not known: then the no-LM baseline has no piece bonus). A
    hypothesis with no token to score has NaN sum and mean (ranked last, never chosen) and 0 pieces."""

    sum: list[np.ndarray]
    mean: list[np.ndarray]
    pieces: list[np.ndarray] | None = None

    def column(self, kind: str) -> list[np.ndarray]:
        """lm(h) per list: "sum" or "mean" (`Weights.lm_score`)."""
        if kind not in LM_SCORES:
            raise ValueError(f"LM score must be one of {', '.join(LM_SCORES)}, got {kind!r}")
        return self.sum if kind == "sum" else self.mean

    def split(self, n: int) -> tuple[LMScores, LMScores]:
        """The first n lists' scores and the rest's."""
        def cut(a, lo, hi):
            return None if a is None else a[lo:hi]

        return (LMScores(self.sum[:n], self.mean[:n], cut(self.pieces, 0, n)),
                LMScores(self.sum[n:], self.mean[n:], cut(self.pieces, n, None)))

    @classmethod
    def from_rows(cls, rows: Sequence[np.ndarray]) -> LMScores:
        """From one (n, 2) array of (sum, mean) or (n, 3) of (sum, mean, pieces) per list."""
        rows = [np.asarray(a, dtype=np.float64) for a in rows]
        has_pieces = bool(rows) and all(a.ndim == 2 and a.shape[1] > 2 for a in rows)
        return cls([a[:, 0] for a in rows], [a[:, 1] for a in rows],
                   [a[:, 2] for a in rows] if has_pieces else None)

    def without_pieces(self) -> LMScores:
        """The same scores with the piece counts unknown (a no-LM baseline with a word bonus only)."""
        return replace(self, pieces=None)


def score_lists(lists: Sequence[NBestList], score_texts: ScoreTexts, *, chunk_size: int = 2048,
                progress: bool = False) -> tuple[LMScores, list[str]]:
    """Every distinct hypothesis scored once (`chunk_size` texts a call); returns the scores and the texts that
    had no token to score."""
    unscored: list[str] = []

    def rows(texts: list[str]) -> list[tuple[float, float, float]]:
        scored = score_texts(texts)
        unscored.extend(t for t, r in zip(texts, scored, strict=True) if not r.num_tokens)
        return [(r.score, r.mean, float(r.num_tokens)) if r.num_tokens else (np.nan, np.nan, 0.0) for r in scored]

    per_list = [np.asarray(a, dtype=np.float64).reshape(len(nb.hyps), 3)
                for nb, a in zip(lists, score_nbest(lists, rows, chunk_size=chunk_size, progress=progress),
                                 strict=True)]
    return LMScores([a[:, 0] for a in per_list], [a[:, 1] for a in per_list], [a[:, 2] for a in per_list]), unscored


@dataclass
class RerankResult:
    weights: Weights  # applied (tuned or given), with the LM score they use
    report: dict  # `rerank_report`'s, with "lm_score" (and for auto "lm_score_dev", "by_lm_score")
    reranked: list[RerankedList]  # the lists (the test split's and the dev split's alike), best first
    scores: LMScores  # of the lists
    unscored: list[str] = field(default_factory=list)  # distinct hypotheses with no token to score


def rerank_scored(lists: Sequence[NBestList], scores: LMScores, options: RerankOptions = RerankOptions(), *,
                  dev: tuple[Sequence[NBestList], LMScores] | None = None, path: str | Path | None = None,
                  dev_path: str | Path | None = None) -> RerankResult:
    """Rerank lists whose hypotheses are scored already (`scores`; `dev`: a dev file's lists and scores)."""
    tried: dict[str, tuple[Weights, dict]] = {}
    for kind in options.kinds():
        w, rep = rerank_report(lists, scores.column(kind), options,
                               dev=None if dev is None else (dev[0], dev[1].column(kind)),
                               pieces=scores.pieces, dev_pieces=None if dev is None else dev[1].pieces,
                               path=path, dev_path=dev_path)
        for key in ("weights", "weights_lm", "weights_no_lm"):  # every combination says which LM score it uses
            if key in rep:
                rep[key]["lm_score"] = kind
        tried[kind] = (replace(w, lm_score=kind), rep)
    kind = next(iter(tried))
    extra: dict = {}
    if len(tried) > 1:
        dev_of = {k: rep["dev"]["reranked"] for k, (_, rep) in tried.items()}
        kind = choose_lm_score(dev_of, tried[kind][1]["higher_is_better"])
        extra = {"lm_score_dev": dev_of, "by_lm_score": {k: _summary(w, rep) for k, (w, rep) in tried.items()}}
    weights, report = tried[kind]
    reranked = rerank_lists(lists, scores.column(kind), weights, scores.pieces)
    return RerankResult(weights, {"lm_score": kind, **report, **extra}, reranked, scores)


def rerank_nbest(lists: Sequence[NBestList], score_texts: ScoreTexts, options: RerankOptions = RerankOptions(), *,
                 dev_lists: Sequence[NBestList] | None = None, path: str | Path | None = None,
                 dev_path: str | Path | None = None, chunk_size: int = 2048, progress: bool = False) -> RerankResult:
    """Score every distinct hypothesis of `lists` (and `dev_lists`) once with `score_texts`, then
    `rerank_scored`: tune on `dev_lists` (or a seeded fraction of `lists`) or apply `options.weights`."""
    scores, unscored = score_lists([*lists, *(dev_lists or [])], score_texts, chunk_size=chunk_size,
                                   progress=progress)
    test, dev = scores.split(len(lists))
    result = rerank_scored(lists, test, options, dev=None if dev_lists is None else (dev_lists, dev), path=path,
                           dev_path=dev_path)
    result.unscored = unscored
    return result


def _summary(weights: Weights, report: dict) -> dict:
    """One LM score's tuned weights and results, kept beside the chosen one's report."""
    return {"weights": weights.to_dict(), "dev": report["dev"]["reranked"], "test": report["test"]["reranked"],
            "lm_only": report["test"]["lm_only"], "on_edge": report["grid"]["on_edge"]}
