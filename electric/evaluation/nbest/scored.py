"""n-best lists with the LM's score of every hypothesis: `ScoredLists`, the one value every reranking path builds
and reorders.

    scored, unscored = ScoredLists.score(lists, score_texts)     # each distinct hypothesis scored once
    scored = ScoredLists.from_scores(lists, per_list_scores)      # scores in hand (the server's, per hypothesis)
    reranked = scored.rerank(weights)                             # `RerankedList`s, best first

`electric rerank` (plain and `--ray`), `electric score --ray --weights`, the server's /v1/rerank and the quick start
all build a `ScoredLists` here and reorder it with `ScoredLists.rerank`. The two rules every path shares are
written once, here:
- a hypothesis with no token to score (blank, or only characters the tokenizer drops) has NaN sum and mean and
  0 pieces (`lm_row`): it ranks last and is never chosen, where a 0.0 would outrank every real sentence;
- lm(h) is the sum over tokens or the mean per token as `Weights.lm_score` says (`ScoredLists.lm`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from electric.evaluation.nbest.combination import LM_SCORES, RerankedList, Weights, combine, rerank_lists
from electric.evaluation.nbest.lists import NBestError, NBestList
from electric.evaluation.nbest.tuning import Components


class ScoredText(Protocol):
    """What a scorer gives per text (`electric.inference.scoring.TextScore` is one)."""

    score: float  # sum over the tokens scored
    mean: float  # per token
    num_tokens: int  # tokens scored; 0: nothing to score


ScoreTexts = Callable[[list[str]], Sequence[ScoredText]]


def lm_row(r: ScoredText) -> tuple[float, float, float]:
    """(sum, mean, pieces) of one scored text; NaN, NaN, 0 for a text with no token to score."""
    if not r.num_tokens:
        return math.nan, math.nan, 0.0
    return float(r.score), float(r.mean), float(r.num_tokens)


@dataclass(frozen=True)
class ScoredLists:
    """n-best lists and the LM's scores of their hypotheses, one (N,) array per list: the sum over tokens, the
    mean per token, the pieces scored (None when not known: then the no-LM baseline has no piece bonus) and an
    n-gram LM's ln P (None when not known: then no combination may weight it)."""

    lists: list[NBestList]
    sum: list[np.ndarray]
    mean: list[np.ndarray]
    pieces: list[np.ndarray] | None = None
    ngram: list[np.ndarray] | None = None

    def __post_init__(self):
        columns = {"sum": self.sum, "mean": self.mean, **({"pieces": self.pieces} if self.pieces is not None else {}),
                   **({"ngram": self.ngram} if self.ngram is not None else {})}
        for name, column in columns.items():
            if len(column) != len(self.lists):
                raise ValueError(f"{len(column)} {name} arrays for {len(self.lists)} n-best lists")
            for nb, a in zip(self.lists, column, strict=True):
                if np.shape(a) != (len(nb.hyps),):
                    raise NBestError(None, f"{np.shape(a)} {name} scores for {len(nb.hyps)} hypotheses",
                                     repr(nb.utt_id))

    @classmethod
    def from_rows(cls, lists: Sequence[NBestList], rows: Sequence[np.ndarray]) -> ScoredLists:
        """From one (N, 2) array of (sum, mean) or (N, 3) of (sum, mean, pieces) per list (`lm_row`s)."""
        rows = [np.asarray(a, dtype=np.float64).reshape(len(nb.hyps), -1) for nb, a in zip(lists, rows, strict=True)]
        has_pieces = bool(rows) and all(a.shape[1] > 2 for a in rows)
        return cls(list(lists), [a[:, 0] for a in rows], [a[:, 1] for a in rows],
                   [a[:, 2] for a in rows] if has_pieces else None)

    @classmethod
    def from_scores(cls, lists: Sequence[NBestList], scores: Sequence[Sequence[ScoredText]]) -> ScoredLists:
        """From one scored text per hypothesis of each list (`lm_row` of each)."""
        return cls.from_rows(lists, [np.array([lm_row(r) for r in s], dtype=np.float64).reshape(len(s), 3)
                                     for s in scores])

    @classmethod
    def score(cls, lists: Sequence[NBestList], score_texts: ScoreTexts, *, chunk_size: int = 2048,
              progress: bool = False) -> tuple[ScoredLists, list[str]]:
        """Every distinct hypothesis scored once (`chunk_size` texts a call); returns the scored lists and the
        texts that had no token to score."""
        unscored: list[str] = []

        def rows(texts: list[str]) -> list[tuple[float, float, float]]:
            scored = score_texts(texts)
            unscored.extend(t for t, r in zip(texts, scored, strict=True) if not r.num_tokens)
            return [lm_row(r) for r in scored]

        return cls.from_rows(lists, score_nbest(lists, rows, chunk_size=chunk_size, progress=progress)), unscored

    def lm(self, kind: str) -> list[np.ndarray]:
        """lm(h) per list: "sum" or "mean" (`Weights.lm_score`)."""
        if kind not in LM_SCORES:
            raise ValueError(f"LM score must be one of {', '.join(LM_SCORES)}, got {kind!r}")
        return self.sum if kind == "sum" else self.mean

    def rerank(self, weights: Weights) -> list[RerankedList]:
        """Every list reordered by total(h) with `weights` (their LM score, and the pieces for a piece bonus)."""
        return rerank_lists(self.lists, self.lm(weights.lm_score), weights, self.pieces,
                            self.ngram if weights.ngram else None)

    def totals(self, weights: Weights) -> list[np.ndarray]:
        """total(h) of every hypothesis with `weights`, in each list's own order."""
        lm = self.lm(weights.lm_score)
        return [combine(nb, lm[k], weights, None if self.pieces is None else self.pieces[k],
                        None if self.ngram is None else self.ngram[k])
                for k, nb in enumerate(self.lists)]

    def components(self, lm_score: str = "sum") -> Components:
        """The (U, N) arrays `tuning` searches over (`lm_score`: which LM score is lm(h))."""
        return Components.of(self.lists, self.lm(lm_score), self.pieces, self.ngram)

    def with_ngram(self, ngram: ScoredLists) -> ScoredLists:
        """These scores with another scorer's sums (an n-gram LM's ln P of the same lists) as the n-gram column."""
        if len(ngram.lists) != len(self.lists):
            raise ValueError(f"{len(ngram.lists)} n-gram-scored lists for {len(self.lists)} n-best lists")
        return replace(self, ngram=ngram.sum)

    def split(self, n: int) -> tuple[ScoredLists, ScoredLists]:
        """The first n lists and the rest."""
        def cut(a, lo, hi):
            return None if a is None else a[lo:hi]

        return (ScoredLists(self.lists[:n], self.sum[:n], self.mean[:n], cut(self.pieces, 0, n), cut(self.ngram, 0, n)),
                ScoredLists(self.lists[n:], self.sum[n:], self.mean[n:], cut(self.pieces, n, None),
                            cut(self.ngram, n, None)))

    def without_pieces(self) -> ScoredLists:
        """The same scores with the piece counts unknown (a no-LM baseline with a word bonus only)."""
        return replace(self, pieces=None)


def score_nbest(lists: Sequence[NBestList], score_fn: Callable[[list[str]], Sequence], *,
                chunk_size: int = 2048, progress: bool = False) -> list[np.ndarray]:
    """Scores of every hypothesis; each distinct text is scored once, `chunk_size` texts at a time.
    `score_fn` returns one score per text, or one row of K scores per text (then each list's array is (N, K))."""
    index: dict[str, int] = {}
    for nb in lists:
        for h in nb.hyps:
            index.setdefault(h, len(index))
    texts = list(index)
    scores: np.ndarray | None = None
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(texts), unit="hyp", desc="scoring", leave=False, dynamic_ncols=True)
    for lo in range(0, len(texts), chunk_size):
        chunk = texts[lo: lo + chunk_size]
        got = np.asarray(score_fn(chunk), dtype=np.float64)
        if scores is None:
            scores = np.empty((len(texts), *got.shape[1:]), dtype=np.float64)
        scores[lo: lo + len(chunk)] = got
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    if scores is None:
        scores = np.empty(0, dtype=np.float64)
    return [scores[[index[h] for h in nb.hyps]] for nb in lists]
