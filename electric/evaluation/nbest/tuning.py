"""Grid search of the combination weights on a dev split, the paired-bootstrap guard, dev/test splits."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from electric.evaluation.nbest.combination import Weights, num_words, weighted_total
from electric.evaluation.nbest.corpus_metrics import Evaluator
from electric.evaluation.nbest.lists import NBestError, NBestList


def _pad(rows: Sequence[np.ndarray], n_max: int) -> np.ndarray:
    out = np.zeros((len(rows), n_max))
    for u, r in enumerate(rows):
        out[u, : len(r)] = r
    return out


@dataclass
class Components:
    """(U, N) arrays of a(h) (first-pass, or -rank), lm(h), words(h) and pieces(h) of a set of lists."""

    first_pass: np.ndarray  # first-pass scores where present (0 elsewhere)
    has_first_pass: np.ndarray  # (U,) bool
    rank: np.ndarray
    lm: np.ndarray
    words: np.ndarray
    pieces: np.ndarray | None = None  # tokenizer pieces the LM scored per hypothesis; None: not known
    ngram: np.ndarray | None = None  # an n-gram LM's ln P per hypothesis; None: not known

    @classmethod
    def of(cls, lists: Sequence[NBestList], lm_scores: Sequence[Sequence[float] | np.ndarray],
           pieces: Sequence[Sequence[float] | np.ndarray] | None = None,
           ngram: Sequence[Sequence[float] | np.ndarray] | None = None) -> Components:
        """Each list padded to the longest of `lists` (N); the padding is never selected (Evaluator.valid)."""
        if len(lm_scores) != len(lists):
            raise ValueError(f"{len(lm_scores)} LM score lists for {len(lists)} n-best lists")
        if pieces is not None and len(pieces) != len(lists):
            raise ValueError(f"{len(pieces)} piece count lists for {len(lists)} n-best lists")
        for k, (nb, s) in enumerate(zip(lists, lm_scores, strict=True)):
            if len(s) != len(nb.hyps):
                raise NBestError(None, f"{len(s)} LM scores for {len(nb.hyps)} hypotheses", repr(nb.utt_id))
            if pieces is not None and len(pieces[k]) != len(nb.hyps):
                raise NBestError(None, f"{len(pieces[k])} piece counts for {len(nb.hyps)} hypotheses",
                                 repr(nb.utt_id))
        n_max = max(len(nb.hyps) for nb in lists)
        fp = _pad([np.asarray(nb.first_pass_scores if nb.first_pass_scores is not None else [0.0] * len(nb.hyps))
                   for nb in lists], n_max)
        return cls(fp, np.array([nb.first_pass_scores is not None for nb in lists]),
                   _pad([np.arange(len(nb.hyps), dtype=np.float64) for nb in lists], n_max),
                   _pad([np.asarray(s, dtype=np.float64) for s in lm_scores], n_max),
                   _pad([np.array([num_words(h) for h in nb.hyps], dtype=np.float64) for nb in lists], n_max),
                   None if pieces is None else _pad([np.asarray(p, dtype=np.float64) for p in pieces], n_max),
                   None if ngram is None else _pad([np.asarray(g, dtype=np.float64) for g in ngram], n_max))

    def totals(self, w: Weights) -> np.ndarray:
        beta = w.beta if w.prior == "rank" else 0.0
        a = np.where(self.has_first_pass[:, None], self.first_pass, -beta * self.rank)
        return weighted_total(a, self.lm, self.words, self.pieces, w, self.ngram)

    def scale_free(self, prior: str) -> bool:
        """No list has an a(h): then only the ratio of the LM weight to the word bonus matters."""
        return prior == "none" and not self.has_first_pass.any()


# ---- tuning --------------------------------------------------------------------------------------------

DEFAULT_LM_GRID = (0.0, *[float(f"{10 ** (e / 4):.4g}") for e in range(-16, 13)])  # 0 and 1e-4 .. 1e3
DEFAULT_LENGTH_GRID = tuple(float(g) for g in range(-4, 17))  # word bonus in LM-score units: -4 .. 16
# word bonus without an LM, in first-pass-score (or rank) units: 0 and +-1e-4 .. +-1e3
DEFAULT_BONUS_GRID = (0.0, *[sign * x for x in DEFAULT_LM_GRID[1:] for sign in (1.0, -1.0)])


@dataclass
class TuneResult:
    weights: Weights
    dev_score: float
    length_per_lm: float  # the chosen word bonus in LM units (length = lm * length_per_lm)
    on_edge: list[str]  # grid ends where the optimum lies (widen the grid)
    evaluated: int


def tune_weights(evaluator: Evaluator, comps: Components, *, lm_grid: Sequence[float] = DEFAULT_LM_GRID,
                 length_grid: Sequence[float] = DEFAULT_LENGTH_GRID, beta: float = 1.0,
                 prior: str = "none") -> TuneResult:
    """Grid search on dev: lm in `lm_grid`, length = lm * g for g in `length_grid` (a word bonus in LM-score
    units, so that its scale follows the LM weight). The rank prior is fixed at `beta` (only the ratios of
    the weights matter); when no list has an a(h) (`Components.scale_free`) the LM weight is 0 or 1.
    Ties keep the smaller LM weight and the smaller |g|."""
    lm_grid = sorted(set(float(x) for x in lm_grid))
    length_grid = sorted(set(float(x) for x in length_grid), key=lambda g: (abs(g), g))
    if any(x < 0 for x in lm_grid):
        raise ValueError("LM weights must be >= 0")
    if comps.scale_free(prior):  # only the ratio of length to lm matters
        lm_grid = sorted({0.0 if x == 0 else 1.0 for x in lm_grid})
    s, w, g, n = _grid_search(evaluator, comps, ((Weights(lm=lm, length=lm * g, beta=beta, prior=prior), g)
                                                 for lm in lm_grid for g in (length_grid if lm > 0 else [0.0])))
    on_edge = []
    positive = [x for x in lm_grid if x > 0]
    if positive and w.lm == max(positive) and len(positive) > 1:
        on_edge.append(f"lm weight at the grid's maximum ({w.lm:g})")
    if positive and w.lm == min(positive) and len(positive) > 1:
        on_edge.append(f"lm weight at the grid's smallest non-zero value ({w.lm:g})")
    if w.lm > 0 and len(length_grid) > 1 and g in (min(length_grid), max(length_grid)):
        on_edge.append(f"length bonus at the grid's {'maximum' if g == max(length_grid) else 'minimum'} "
                       f"({g:g} per word, in LM units)")
    return TuneResult(w, s, g, on_edge, n)


def tune_without_lm(evaluator: Evaluator, comps: Components, *, bonus_grid: Sequence[float] = DEFAULT_BONUS_GRID,
                    beta: float = 1.0, prior: str = "none") -> TuneResult:
    """The baseline an LM has to beat: a(h) + length * words(h) + piece * pieces(h) with no LM (lm = 0), the
    per-word bonus and (when `comps.pieces` is known) the per-piece bonus tuned together on dev over
    `bonus_grid` x `bonus_grid` (in first-pass-score or rank units). Any LM score carries the piece count for
    free (a model that gives every piece the same score is -c * pieces), so the baseline gets it too. When no
    list has an a(h) only the direction of (word, piece) matters: a sign for one, the grid for the other.
    Ties keep the smaller |word| + |piece|."""
    grid = sorted(set(float(x) for x in bonus_grid), key=lambda b: (abs(b), b))
    scale_free = comps.scale_free(prior)
    pieces = comps.pieces is not None
    signs = sorted(set(float(np.sign(x)) for x in grid), key=lambda b: (abs(b), b))
    if not pieces:
        pairs = [(b, 0.0) for b in (signs if scale_free else grid)]
    elif scale_free:  # (word, piece) up to a positive factor: piece = +-1 with any word bonus, or piece 0
        pairs = [(b, 0.0) for b in signs] + [(b, p) for p in signs if p for b in grid]
    else:
        pairs = [(b, p) for b in grid for p in grid]
    pairs = sorted(set(pairs), key=lambda bp: (abs(bp[0]) + abs(bp[1]), abs(bp[1]), bp))
    s, w, _, n = _grid_search(evaluator, comps, ((Weights(lm=0.0, length=b, beta=beta, prior=prior, piece=p), 0.0)
                                                 for b, p in pairs))
    on_edge = []
    top = max(abs(x) for x in grid)
    if len(grid) > 1:
        if not scale_free and w.length != 0 and abs(w.length) == top:
            on_edge.append(f"word bonus without the LM at the grid's {'maximum' if w.length > 0 else 'minimum'} "
                           f"({w.length:g})")
        if w.piece != 0 and abs(w.piece) == top and not (scale_free and abs(w.piece) == 1):
            on_edge.append(f"piece bonus without the LM at the grid's {'maximum' if w.piece > 0 else 'minimum'} "
                           f"({w.piece:g})")
        if scale_free and pieces and w.piece != 0 and abs(w.length) == top:
            on_edge.append(f"word bonus without the LM at the grid's {'maximum' if w.length > 0 else 'minimum'} "
                           f"({w.length:g} per piece bonus)")
    return TuneResult(w, s, 0.0, on_edge, n)


def _grid_search(evaluator: Evaluator, comps: Components,
                 candidates: Iterable[tuple[Weights, float]]) -> tuple[float, Weights, float, int]:
    """(dev score, weights, tag, candidates tried) of the best (weights, tag) candidate; the first of ties wins."""
    best: tuple[float, Weights, float] | None = None
    n = 0
    for w, tag in candidates:
        s = evaluator.score_selection(evaluator.select(comps.totals(w)))
        n += 1
        if best is None or evaluator.better(s, best[0]):
            best = (s, w, tag)
    if best is None:
        raise ValueError("an empty weight grid")
    return (*best, n)


def paired_bootstrap(evaluator: Evaluator, base: np.ndarray, new: np.ndarray, *, resamples: int = 1000,
                     seed: int = 0, confidence: float = 0.95) -> dict:
    """The gain of choosing hypotheses `new` (U,) over `base` (U,) on the evaluator's utterances, in metric
    points and positive when `new` is better (fewer errors, higher BLEU), with its percentile confidence
    interval over `resamples` seeded resamplings of the utterances with replacement (paired: both choices are
    scored on the same resample, as in Koehn 2004). `significant`: the whole interval lies above 0."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    metric, u = evaluator.metric, np.arange(len(base))
    a, b = evaluator.stats[u, base], evaluator.stats[u, new]  # (U, K) sufficient statistics of each choice
    sign = 1.0 if metric.higher_is_better else -1.0
    rng = np.random.default_rng(seed)
    block = max(1, 4_000_000 // len(u))  # resamples per (block, U) matrix of counts: bounded memory
    gains = []
    for done in range(0, resamples, block):
        counts = rng.multinomial(len(u), np.full(len(u), 1 / len(u)), size=min(block, resamples - done))  # (R, U)
        gains += [sign * (metric.score(sb) - metric.score(sa)) for sa, sb in zip(counts @ a, counts @ b, strict=True)]
    lo, hi = np.quantile(gains, [(1 - confidence) / 2, (1 + confidence) / 2]) + 0.0  # + 0.0: no -0.0
    return {"gain": sign * (metric.score(b.sum(0)) - metric.score(a.sum(0))) + 0.0, "ci": [float(lo), float(hi)],
            "confidence": confidence, "resamples": resamples, "seed": seed, "significant": bool(lo > 0)}


APPLIED = ("lm", "no_lm", "first_pass")  # what tune_guarded applies


@dataclass
class GuardedTuning:
    weights: Weights  # what to apply: with_lm when its dev gain over without_lm is significant, else without_lm
    #                   when its dev gain over the first pass is significant, else the first pass (all bonuses 0)
    with_lm: TuneResult
    without_lm: TuneResult
    guard: dict  # paired_bootstrap of with_lm over without_lm on dev, and "kept": "lm" or "no_lm"
    no_lm_guard: dict  # paired_bootstrap of without_lm over the first pass on dev, and "kept": "no_lm" or
    #                    "first_pass"
    applied: str  # one of APPLIED


def first_pass_weights(beta: float = 1.0, prior: str = "none") -> Weights:
    """The first pass alone: a(h) (first-pass score, -beta * rank, or 0: then the first hypothesis) and no
    bonus."""
    return Weights(lm=0.0, length=0.0, beta=beta, prior=prior)


def tune_guarded(evaluator: Evaluator, comps: Components, *, lm_grid: Sequence[float] = DEFAULT_LM_GRID,
                 length_grid: Sequence[float] = DEFAULT_LENGTH_GRID, bonus_grid: Sequence[float] = DEFAULT_BONUS_GRID,
                 beta: float = 1.0, prior: str = "none", resamples: int = 1000, confidence: float = 0.95,
                 seed: int = 0) -> GuardedTuning:
    """Tune with the LM (`tune_weights`) and without it (`tune_without_lm`: the first pass with word and piece
    bonuses) on dev. The LM is kept only when its dev gain over the no-LM combination is significant
    (`paired_bootstrap`); otherwise the no-LM combination is kept only when its own dev gain over the first
    pass is significant by the same bootstrap, else the first pass: neither an LM nor a bonus that does not
    help is applied by chance."""
    with_lm = tune_weights(evaluator, comps, lm_grid=lm_grid, length_grid=length_grid, beta=beta, prior=prior)
    without_lm = tune_without_lm(evaluator, comps, bonus_grid=bonus_grid, beta=beta, prior=prior)
    first = first_pass_weights(beta, prior)
    no_lm_sel = evaluator.select(comps.totals(without_lm.weights))
    boot = functools.partial(paired_bootstrap, evaluator, resamples=resamples, seed=seed, confidence=confidence)
    guard = boot(no_lm_sel, evaluator.select(comps.totals(with_lm.weights)))
    guard["kept"] = "lm" if guard["significant"] else "no_lm"
    no_lm_guard = boot(evaluator.select(comps.totals(first)), no_lm_sel)
    no_lm_guard["kept"] = "no_lm" if no_lm_guard["significant"] else "first_pass"
    applied = "lm" if guard["significant"] else no_lm_guard["kept"]
    weights = {"lm": with_lm.weights, "no_lm": without_lm.weights, "first_pass": first}[applied]
    return GuardedTuning(weights, with_lm, without_lm, guard, no_lm_guard, applied)


def dev_test_split(lists: Sequence[NBestList], fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """(dev indices, test indices): a seeded random `fraction` of the utterances for dev, in file order."""
    if not 0 < fraction < 1:
        raise ValueError(f"--dev-fraction must be between 0 and 1 (exclusive), got {fraction}")
    idx = list(range(len(lists)))
    random.Random(seed).shuffle(idx)
    n_dev = round(fraction * len(lists))
    if n_dev == 0 or n_dev == len(lists):
        raise ValueError(f"--dev-fraction {fraction} of {len(lists)} utterances leaves an empty dev or test split")
    return sorted(idx[:n_dev]), sorted(idx[n_dev:])


def evaluate_split(ev: Evaluator, lm_scores: Sequence[np.ndarray], weights: Weights | None = None,
                   no_lm: Weights | None = None, with_lm: Weights | None = None,
                   pieces: Sequence[np.ndarray] | None = None) -> dict:
    """first-hypothesis, oracle, LM-only, (with `no_lm`, weights whose lm is 0) the score without the LM,
    (with `with_lm`) the score with the LM weights tuned on dev whether kept or not, and (with `weights`) the
    reranked score of one split with `ties`: the utterances whose choice was a tie, broken by the earlier
    position. `pieces`: tokenizer pieces per hypothesis, for weights with a piece bonus."""
    lists = ev.lists
    comps = Components.of(lists, lm_scores, pieces)
    out = {"num_utterances": len(lists), "first": ev.first(), "oracle": ev.oracle(),
           "lm_only": ev.score_selection(ev.select(comps.lm))}
    if no_lm is not None:
        out["no_lm"] = ev.score_selection(ev.select(comps.totals(no_lm)))
    if with_lm is not None:
        out["with_lm"] = ev.score_selection(ev.select(comps.totals(with_lm)))
    if weights is not None:
        totals = comps.totals(weights)
        out["reranked"] = ev.score_selection(ev.select(totals))
        out["ties"] = ev.ties(totals)
    return out
