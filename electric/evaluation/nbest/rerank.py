"""Reranking n-best lists as one call: score every distinct hypothesis once, choose the LM score and the
weights on dev (or take given ones), and reorder the lists.

    result = rerank_nbest(lists, score_texts, RerankOptions(metric="wer"), dev_lists=dev)
    result.weights, result.report, result.reranked

`electric rerank` and `electric eval nbest` (plain and `--ray`) call `rerank_nbest`; the quick start scores its
lists through the server and calls `rerank_scored`. Both end in `ScoredLists.rerank`, which the server's
/v1/rerank applies to the lists of one request with the request's weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from electric.evaluation.nbest.combination import LM_SCORES, RerankedList, Weights
from electric.evaluation.nbest.lists import NBestList
from electric.evaluation.nbest.report import RerankOptions, RerankReport, rerank_report
from electric.evaluation.nbest.scored import ScoredLists, ScoreTexts


@dataclass
class RerankResult:
    weights: Weights  # applied (tuned or given), with the LM score they use
    report: RerankReport
    reranked: list[RerankedList]  # the lists (the test split's and the dev split's alike), best first
    scored: ScoredLists  # the lists and their LM scores
    unscored: list[str] = field(default_factory=list)  # distinct hypotheses with no token to score


def choose_lm_score(dev: Mapping[str, float], higher_is_better: bool) -> str:
    """The LM score whose dev result is better; a tie keeps the sum."""
    sign = 1 if higher_is_better else -1
    return max((k for k in LM_SCORES if k in dev), key=lambda k: sign * dev[k])


def rerank_scored(scored: ScoredLists, options: RerankOptions = RerankOptions(), *,
                  dev: ScoredLists | None = None, path: str | Path | None = None,
                  dev_path: str | Path | None = None) -> RerankResult:
    """Rerank lists whose hypotheses are scored already (`dev`: a dev file's, to tune on). With
    `options.lm_score` "auto" both LM scores are tuned and the one better on dev (never on test) is kept."""
    tried: dict[str, tuple[Weights, dict]] = {}
    for kind in options.kinds():
        tried[kind] = rerank_report(
            scored.lists, scored.lm(kind), replace(options, lm_score=kind) if options.weights is None else options,
            dev=None if dev is None else (dev.lists, dev.lm(kind)), pieces=scored.pieces,
            dev_pieces=None if dev is None else dev.pieces, path=path, dev_path=dev_path)
    kind = next(iter(tried))
    dev_of = by_kind = None
    if len(tried) > 1:
        dev_of = {k: rep["dev"]["reranked"] for k, (_, rep) in tried.items()}
        kind = choose_lm_score(dev_of, tried[kind][1]["higher_is_better"])
        by_kind = {k: _summary(w, rep) for k, (w, rep) in tried.items()}
    weights, tuning = tried[kind]
    return RerankResult(weights, RerankReport(kind, tuning, dev_of, by_kind), scored.rerank(weights), scored)


def rerank_nbest(lists: Sequence[NBestList], score_texts: ScoreTexts, options: RerankOptions = RerankOptions(), *,
                 dev_lists: Sequence[NBestList] | None = None, path: str | Path | None = None,
                 dev_path: str | Path | None = None, chunk_size: int = 2048, progress: bool = False) -> RerankResult:
    """Score every distinct hypothesis of `lists` (and `dev_lists`) once with `score_texts`, then
    `rerank_scored`: tune on `dev_lists` (or a seeded fraction of `lists`) or apply `options.weights`."""
    scored, unscored = ScoredLists.score([*lists, *(dev_lists or [])], score_texts, chunk_size=chunk_size,
                                         progress=progress)
    test, dev = scored.split(len(lists))
    result = rerank_scored(test, options, dev=None if dev_lists is None else dev, path=path, dev_path=dev_path)
    result.unscored = unscored
    return result


def _summary(weights: Weights, report: dict) -> dict:
    """One LM score's tuned weights and results, kept beside the chosen one's report."""
    return {"weights": weights.to_dict(), "dev": report["dev"]["reranked"], "test": report["test"]["reranked"],
            "lm_only": report["test"]["lm_only"], "on_edge": report["grid"]["on_edge"]}
