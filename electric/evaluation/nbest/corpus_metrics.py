"""Corpus metrics of chosen hypotheses from additive sufficient statistics (WER/CER with jiwer,
BLEU/chrF with sacrebleu), and the `Evaluator` that scores any selection of hypotheses."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from electric.evaluation.nbest.lists import NBestError, NBestList

METRICS = ("wer", "cer", "bleu", "chrf")
METRIC_MODULES = {"wer": ("jiwer",), "cer": ("jiwer",), "bleu": ("sacrebleu",), "chrf": ("sacrebleu",)}


def require_metric(name: str, command: str = "an n-best report") -> None:
    """Raise `MissingExtra` naming the `score` extra unless the modules of metric `name` are installed (looked
    up, not imported): call it before any work, so that a serving-only install fails in one line, not after
    scoring every list."""
    from electric.checkpoint import require_extra

    if name not in METRIC_MODULES:
        raise ValueError(f"unknown metric {name!r} ({', '.join(METRICS)})")
    require_extra(f"{command} ({name.upper()})", METRIC_MODULES[name], "score")




class Metric:
    """A corpus metric from additive sufficient statistics, so that any selection of hypotheses is scored
    by summing per-hypothesis statistics (corpus WER = sum of edits / sum of reference words)."""

    name = ""
    higher_is_better = False

    def stats(self, ref: str, hyps: Sequence[str]) -> np.ndarray:  # (len(hyps), K)
        raise NotImplementedError

    def score(self, total: np.ndarray) -> float:  # (K,) -> metric
        raise NotImplementedError


class ErrorRate(Metric):
    def __init__(self, unit: str = "word"):
        import jiwer

        self.name = "wer" if unit == "word" else "cer"
        self._process = jiwer.process_words if unit == "word" else jiwer.process_characters

    def stats(self, ref, hyps):
        out = np.zeros((len(hyps), 2))
        for k, h in enumerate(hyps):
            o = self._process(ref, h)
            out[k] = (o.substitutions + o.deletions + o.insertions, o.substitutions + o.deletions + o.hits)
        return out

    def score(self, total):
        if total[1] == 0:
            raise ValueError(f"{self.name.upper()} is undefined: the references hold no "
                             f"{'words' if self.name == 'wer' else 'characters'}")
        return 100.0 * total[0] / total[1]


class SacreMetric(Metric):
    """sacrebleu's corpus BLEU or chrF (its default settings) from per-hypothesis sufficient statistics.

    BLEU goes through sacrebleu's public API: `sentence_score` gives each hypothesis' lengths and n-gram
    counts, `BLEU.compute_bleu` the corpus score of their sums. For chrF the public API returns only the
    F-score, so the statistics and the score of their sums come from the two methods chrF's own
    `corpus_score` is built on; if an upgrade renames them this fails at construction, and
    tests/test_nbest.py holds both metrics to the public `corpus_score`."""

    higher_is_better = True
    _CHRF_METHODS = ("_extract_corpus_statistics", "_compute_score_from_stats")

    def __init__(self, name: str):
        import sacrebleu
        from sacrebleu.metrics import BLEU, CHRF

        self.name = name
        if name == "bleu":
            self._bleu = BLEU()
            # the statistics do not depend on effective_order; it only silences sacrebleu's sentence-BLEU advice
            self._sentence = BLEU(effective_order=True)
            return
        self._chrf = CHRF()
        missing = [m for m in self._CHRF_METHODS if not callable(getattr(self._chrf, m, None))]
        if missing:
            raise RuntimeError(f"sacrebleu {sacrebleu.__version__} has no CHRF.{missing[0]}, which chrF's "
                               "sufficient statistics come from; install sacrebleu>=2.3,<3")

    def stats(self, ref, hyps):  # (len(hyps), K)
        if self.name == "bleu":
            rows = [self._sentence.sentence_score(h, [ref]) for h in hyps]
            return np.array([[s.sys_len, s.ref_len, *s.counts, *s.totals] for s in rows], dtype=np.float64)
        return np.asarray(self._chrf._extract_corpus_statistics(list(hyps), [[ref] * len(hyps)]), dtype=np.float64)

    def score(self, total):
        if self.name == "bleu":
            bleu = self._bleu
            n, m = bleu.max_ngram_order, [int(round(x)) for x in total]
            return float(bleu.compute_bleu(correct=m[2: 2 + n], total=m[2 + n:], sys_len=m[0], ref_len=m[1],
                                           smooth_method=bleu.smooth_method, smooth_value=bleu.smooth_value,
                                           effective_order=bleu.effective_order, max_ngram_order=n).score)
        # sacrebleu hints counts as ints; these sums of counts are whole numbers held as floats
        return float(self._chrf._compute_score_from_stats([float(x) for x in total]).score)  # type: ignore[misc]


def make_metric(name: str) -> Metric:
    if name in ("wer", "cer"):
        return ErrorRate("word" if name == "wer" else "char")
    if name in ("bleu", "chrf"):
        return SacreMetric(name)
    raise ValueError(f"unknown metric {name!r} ({', '.join(METRICS)})")


class Evaluator:
    """Per-hypothesis statistics of a set of lists, for fast corpus scores of any selection."""

    def __init__(self, lists: Sequence[NBestList], metric: Metric, path: str | Path | None = None):
        missing = [nb.utt_id for nb in lists if nb.ref is None]
        if missing:
            raise NBestError(path, f"no reference (an error rate needs one for every utterance; {len(missing)} of "
                                   f"{len(lists)} lack one)", repr(missing[0]))
        if not lists:
            raise ValueError("no utterances to evaluate")
        self.lists, self.metric = list(lists), metric
        n_max = max(len(nb.hyps) for nb in lists)
        refs = [nb.ref for nb in lists if nb.ref is not None]  # every one (checked above)
        stats0 = metric.stats(refs[0], lists[0].hyps[:1])
        self.stats = np.zeros((len(lists), n_max, stats0.shape[1]))  # (U, N, K)
        self.valid = np.zeros((len(lists), n_max), dtype=bool)  # (U, N)
        self.text_ids = np.full((len(lists), n_max), -1)  # (U, N) the same number for the same text in a list
        for u, nb in enumerate(lists):
            uniq = {h: i for i, h in enumerate(dict.fromkeys(nb.hyps))}
            st = dict(zip(uniq, metric.stats(refs[u], list(uniq)), strict=True))
            for k, h in enumerate(nb.hyps):
                self.stats[u, k], self.text_ids[u, k] = st[h], uniq[h]
            self.valid[u, : len(nb.hyps)] = True

    def subset(self, idx: Sequence[int]) -> Evaluator:
        """The evaluator of lists[idx] (statistics are sliced, not recomputed)."""
        sub = object.__new__(Evaluator)
        sub.lists, sub.metric = [self.lists[i] for i in idx], self.metric
        if not sub.lists:
            raise ValueError("no utterances to evaluate")
        n_max = max(len(nb.hyps) for nb in sub.lists)  # the subset's own longest list, as Components.of pads
        sub.stats, sub.valid = self.stats[list(idx), :n_max], self.valid[list(idx), :n_max]
        sub.text_ids = self.text_ids[list(idx), :n_max]
        return sub

    def score_selection(self, sel: np.ndarray) -> float:
        """Corpus metric of choosing hypothesis sel[u] for utterance u."""
        return self.metric.score(self.stats[np.arange(len(sel)), sel].sum(0))

    def first(self) -> float:
        return self.score_selection(np.zeros(len(self.lists), dtype=np.int64))

    def oracle(self) -> float:
        """Per-utterance best hypothesis: fewest edits for WER/CER; best sentence-level score for BLEU/chrF."""
        if isinstance(self.metric, ErrorRate):
            edits = np.where(self.valid, self.stats[..., 0], np.inf)
            return self.score_selection(np.argmin(edits, axis=1))
        sel = []
        for u, nb in enumerate(self.lists):
            per = [self.metric.score(self.stats[u, k]) for k in range(len(nb.hyps))]
            sel.append(int(np.argmax(per)))
        return self.score_selection(np.array(sel))

    def select(self, totals: np.ndarray) -> np.ndarray:
        """(U, N) combined scores -> best index per utterance (first of ties); a NaN score (a hypothesis with no
        token to score) is never chosen over a number."""
        if totals.shape != self.valid.shape:
            raise ValueError(f"combined scores of shape {totals.shape} for {self.valid.shape} (utterances, "
                             "longest list)")
        return np.argmax(np.where(self.valid & ~np.isnan(totals), totals, -np.inf), axis=1)

    def ties(self, totals: np.ndarray) -> int:
        """Utterances whose best combined score is shared by a hypothesis of another text (`select` took the
        earlier position); a duplicate of the chosen text is no tie."""
        sel, u = self.select(totals), np.arange(len(self.lists))
        top = self.valid & (totals == totals[u, sel][:, None])  # (U, N)
        return int((top & (self.text_ids != self.text_ids[u, sel][:, None])).any(axis=1).sum())

    def compare(self, base: np.ndarray, new: np.ndarray) -> tuple[int, int]:
        """(utterances better with `new`, utterances worse) than with `base`, two selections: by their own
        sentence-level score (for an error rate, fewer edits is better)."""
        u = np.arange(len(self.lists))
        if isinstance(self.metric, ErrorRate):
            a, b = -self.stats[u, base, 0], -self.stats[u, new, 0]
        else:
            a = np.array([self.metric.score(self.stats[i, base[i]]) for i in u])
            b = np.array([self.metric.score(self.stats[i, new[i]]) for i in u])
        return int((b > a).sum()), int((b < a).sum())

    def better(self, a: float, b: float) -> bool:
        return a > b if self.metric.higher_is_better else a < b
