"""Combination: total(h) = a(h) + lm_weight * lm(h) + length_weight * words(h) [+ piece_weight * pieces(h)]
[+ ngram_weight * ngram(h)]; rerank lists with given weights (what /v1/rerank and `electric rerank` apply). lm(h) is the LM's sum over
tokens or its mean per token (`Weights.lm_score`); pieces(h) is the number of tokenizer pieces the LM scored:
the length an LM score carries for free, which the no-LM baseline gets too; ngram(h) is a word n-gram LM's ln P of
the hypothesis (an `electric adapt` model directory carries one: electric.evaluation.arpa). A `Weights` is the whole
combination: the `weights` of a rerank report can be given as is to `electric serve --rerank-weights` or in a
/v1/rerank request."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from electric.evaluation.nbest.lists import NBestError, NBestList
from electric.results import RerankedList

PRIORS = ("rank", "none")  # a(h) of a list without first-pass scores: -beta * rank, or 0
LM_SCORES = ("sum", "mean")  # lm(h): the LM's sum over tokens (the PLL) or its mean per token


@dataclass
class Weights:
    lm: float = 0.0  # lambda_lm: weight of the LM score
    length: float = 0.0  # lambda_len: bonus per word
    beta: float = 1.0  # rank prior -beta * rank, only for lists without first-pass scores and prior "rank"
    prior: str = "none"  # a(h) of a list without first-pass scores: "rank" (-beta * rank: its order is a
    #                      first-pass order) or "none" (0: the order means nothing)

    piece: float = 0.0  # bonus per tokenizer piece (the no-LM baseline's second length feature); needs the
    #                      pieces of every hypothesis wherever it is not 0
    lm_score: str = "sum"  # which LM score lm(h) is: "sum" over tokens or "mean" per token
    ngram: float = 0.0  # weight of the n-gram LM's ln P(h); needs the n-gram score of every hypothesis wherever it
    #                     is not 0

    def __post_init__(self):
        if self.prior not in PRIORS:
            raise ValueError(f"prior must be one of {', '.join(map(repr, PRIORS))}, got {self.prior!r}")
        if self.lm_score not in LM_SCORES:
            raise ValueError(f"lm_score must be one of {', '.join(map(repr, LM_SCORES))}, got {self.lm_score!r}")

    def to_dict(self) -> dict:
        return {"lm": self.lm, "length": self.length, "beta": self.beta, "prior": self.prior, "piece": self.piece,
                "lm_score": self.lm_score, "ngram": self.ngram}

    @classmethod
    def from_dict(cls, d: dict) -> Weights:
        """The inverse of `to_dict`; a key it does not know is an error naming it (missing keys keep defaults)."""
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown weight(s) {', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(f.name for f in dataclasses.fields(cls))}")
        return cls(**d)


def weights_in_report(data: object) -> dict:
    """The weights a rerank report (`electric rerank --report`: its "weights", what the guarded tuning applied) or
    a bare weights object gives, only the keys it gives, checked by `Weights.from_dict`. A ValueError says what
    is wrong."""
    weights = data.get("weights", data) if isinstance(data, dict) else None
    if not isinstance(weights, dict):
        raise ValueError("expected a JSON object of weights or a rerank report")
    try:
        Weights.from_dict(weights)
    except TypeError as e:
        raise ValueError(str(e)) from None
    return dict(weights)


def num_words(text: str) -> int:
    return len(text.split())


def prior_scores(nb: NBestList, weights: Weights) -> np.ndarray:
    """a(h): the first-pass scores; for a list without, -beta * rank with prior "rank", else 0."""
    if nb.first_pass_scores is not None:
        return np.asarray(nb.first_pass_scores, dtype=np.float64)
    beta = weights.beta if weights.prior == "rank" else 0.0
    return -beta * np.arange(len(nb.hyps), dtype=np.float64) + 0.0  # + 0.0: -0.0 (-beta * 0, or beta 0) is 0.0


def combine(nb: NBestList, lm_scores: Sequence[float] | np.ndarray, weights: Weights,
            pieces: Sequence[float] | np.ndarray | None = None,
            ngram: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """total(h) = a(h) + lm * lm(h) + length * words(h) + piece * pieces(h) + ngram * ngram(h), one value per
    hypothesis (`pieces`: tokenizer pieces per hypothesis, needed only when weights.piece is not 0; `ngram`: the
    n-gram LM's scores, needed only when weights.ngram is not 0)."""
    lm = np.asarray(lm_scores, dtype=np.float64)
    if lm.shape != (len(nb.hyps),):
        raise NBestError(None, f"{lm.shape[0] if lm.ndim == 1 else lm.shape} LM scores for {len(nb.hyps)} "
                               "hypotheses", repr(nb.utt_id))
    words = np.array([num_words(h) for h in nb.hyps], dtype=np.float64)
    n = None if pieces is None else np.asarray(pieces, dtype=np.float64)
    if n is not None and n.shape != (len(nb.hyps),):
        raise NBestError(None, f"{len(n)} piece counts for {len(nb.hyps)} hypotheses", repr(nb.utt_id))
    g = None if ngram is None else np.asarray(ngram, dtype=np.float64)
    if g is not None and g.shape != (len(nb.hyps),):
        raise NBestError(None, f"{len(g)} n-gram scores for {len(nb.hyps)} hypotheses", repr(nb.utt_id))
    return weighted_total(prior_scores(nb, weights), lm, words, n, weights, g)


def weighted_total(prior: np.ndarray, lm: np.ndarray, words: np.ndarray, pieces: np.ndarray | None,
                   weights: Weights, ngram: np.ndarray | None = None) -> np.ndarray:
    """The one formula, for arrays of one shape (a list's hypotheses, or the (U, N) grid `tuning` searches):
    a(h) + lm * lm(h) + length * words(h) [+ piece * pieces(h)] [+ ngram * ngram(h)]."""
    total = prior + weights.lm * lm + weights.length * words
    if weights.piece:
        if pieces is None:
            raise ValueError(f"a piece bonus ({weights.piece:g}) needs the pieces of every hypothesis")
        total = total + weights.piece * pieces
    if weights.ngram:
        if ngram is None:
            raise ValueError(f"an n-gram weight ({weights.ngram:g}) needs the n-gram score of every hypothesis")
        total = total + weights.ngram * ngram
    return total


def rerank_one(nb: NBestList, lm_scores: Sequence[float] | np.ndarray, weights: Weights,
               pieces: Sequence[float] | np.ndarray | None = None,
               ngram: Sequence[float] | np.ndarray | None = None) -> RerankedList:
    total = combine(nb, lm_scores, weights, pieces, ngram)
    # stable: ties keep the list's order; a NaN LM score (no token to score) ranks last, never first
    order = sorted(range(len(total)), key=lambda i: (bool(np.isnan(total[i])), -total[i]))
    prior = prior_scores(nb, weights)
    best = order[0]
    tied = any(total[i] == total[best] and nb.hyps[i] != nb.hyps[best] for i in order[1:])
    return RerankedList(nb.utt_id, order, [nb.hyps[i] for i in order], [float(total[i]) for i in order],
                        [float(prior[i]) for i in order], [float(lm_scores[i]) for i in order],
                        [num_words(nb.hyps[i]) for i in order], bool(tied),
                        None if pieces is None else [int(pieces[i]) for i in order],
                        None if ngram is None else [float(ngram[i]) for i in order])


def rerank_lists(lists: Sequence[NBestList], lm_scores: Sequence[Sequence[float] | np.ndarray], weights: Weights,
                 pieces: Sequence[Sequence[float] | np.ndarray] | None = None,
                 ngram: Sequence[Sequence[float] | np.ndarray] | None = None) -> list[RerankedList]:
    """Reorder every list by total(h) with the given weights and precomputed LM scores (and piece counts, for a
    piece bonus; n-gram scores, for an n-gram weight)."""
    if len(lists) != len(lm_scores):
        raise ValueError(f"{len(lm_scores)} LM score lists for {len(lists)} n-best lists")
    if pieces is not None and len(pieces) != len(lists):
        raise ValueError(f"{len(pieces)} piece count lists for {len(lists)} n-best lists")
    if ngram is not None and len(ngram) != len(lists):
        raise ValueError(f"{len(ngram)} n-gram score lists for {len(lists)} n-best lists")
    return [rerank_one(nb, s, weights, None if pieces is None else pieces[k], None if ngram is None else ngram[k])
            for k, (nb, s) in enumerate(zip(lists, lm_scores, strict=True))]


def reranked_nbest(nb: NBestList, r: RerankedList, drop: Sequence[str] = ()) -> NBestList:
    """`nb` reordered as `r` (per-hypothesis fields with their hypotheses), without the utterance-level fields
    `drop`, with the LM and combined scores added as fields (per hypothesis when the list has such fields)."""
    out = nb.reordered(r.order)
    for k in drop:
        out.extra.pop(k, None)
    lm, total = _nan_to_none(r.lm), _nan_to_none(r.total)  # NaN: no token to score; null in JSON
    if out.hyp_extra is not None:
        out.hyp_extra = [{**e, "lm_score": s, "total_score": t} for e, s, t in zip(out.hyp_extra, lm, total,
                                                                                  strict=True)]
    else:
        out.extra.update(lm_score=lm, total_score=total)
    return out


def _nan_to_none(xs: Sequence[float]) -> list[float | None]:
    return [None if x != x else x for x in xs]


def unreorderable_fields(lists: Sequence[NBestList]) -> list[str]:
    """Utterance-level fields that hold one entry per hypothesis in some list but are not per-hypothesis in all
    (so not known to be per-hypothesis): reordering the hypotheses would leave them out of step, so reranked
    output drops them."""
    return sorted({k for nb in lists for k, v in nb.extra.items()
                   if len(nb.hyps) > 1 and isinstance(v, list) and len(v) == len(nb.hyps)})


def prior_note(lists: Sequence[NBestList], prior: str) -> str | None:
    """What the prior assumed about the lists without first-pass scores, or None when every list has scores."""
    n = sum(nb.first_pass_scores is None for nb in lists)
    if n == 0:
        return None
    which = "all" if n == len(lists) else f"{n} of {len(lists)}"
    if prior == "rank":
        return (f"prior rank: {which} lists have no first-pass scores; their order is taken as a first-pass order "
                "(-beta * rank)")
    return (f"prior none: {which} lists have no first-pass scores and their order is not used: the choice is "
            "LM + word bonus alone (ties go to the earlier position). If the order is a first-pass order (best "
            "first), ask for --prior rank")
