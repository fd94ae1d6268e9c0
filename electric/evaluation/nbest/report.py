"""The rerank report (`electric eval nbest`, `electric rerank --report`): how to rerank (`RerankOptions`), one LM
score's tuning and figures (`rerank_report`), the whole report (`RerankReport`) and its text form
(`format_report`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from electric.evaluation.nbest.combination import LM_SCORES, Weights, prior_note
from electric.evaluation.nbest.corpus_metrics import Evaluator, make_metric
from electric.evaluation.nbest.lists import NBestList
from electric.evaluation.nbest.tuning import (
    DEFAULT_BONUS_GRID,
    DEFAULT_LENGTH_GRID,
    DEFAULT_LM_GRID,
    Components,
    dev_test_split,
    evaluate_split,
    tune_guarded,
)


@dataclass(frozen=True)
class RerankOptions:
    """How to rerank: given weights (applied as they are), or tuned on a dev split by the guarded grid search."""

    metric: str = "wer"  # wer | cer | bleu | chrf: tuning and report metric
    weights: Weights | None = None  # given: no tuning; their lm_score says which LM score
    lm_score: str = "auto"  # tuning: "sum", "mean", or "auto" (tune both, keep the one better on dev)
    dev_fraction: float | None = 0.5  # without a dev file: tune on this seeded fraction, report on the rest
    seed: int = 0  # of the dev split and the bootstraps
    lm_grid: Sequence[float] = DEFAULT_LM_GRID
    length_grid: Sequence[float] = DEFAULT_LENGTH_GRID  # word bonus in LM-score units
    bonus_grid: Sequence[float] = DEFAULT_BONUS_GRID  # the no-LM baseline's word and piece bonuses
    beta: float = 1.0  # of the -beta * rank prior
    prior: str = "none"  # a(h) of a list without first-pass scores: "rank" or "none"
    resamples: int = 1000  # paired bootstrap
    confidence: float = 0.95
    need_refs: bool = True  # given weights on lists without references: no error rates, no error

    def __post_init__(self):
        if self.lm_score not in (*LM_SCORES, "auto"):
            raise ValueError(f"lm_score must be one of {', '.join(LM_SCORES)} or auto, got {self.lm_score!r}")

    def kinds(self) -> list[str]:
        """The LM scores to try: the given weights' own, else both for auto, else the one asked for."""
        if self.weights is not None:
            return [self.weights.lm_score]
        return list(LM_SCORES) if self.lm_score == "auto" else [self.lm_score]


def rerank_report(lists: Sequence[NBestList], lm_scores: Sequence[np.ndarray], options: RerankOptions | None = None,
                  *, dev: tuple[Sequence[NBestList], Sequence[np.ndarray]] | None = None,
                  pieces: Sequence[np.ndarray] | None = None, dev_pieces: Sequence[np.ndarray] | None = None,
                  path: str | Path | None = None, dev_path: str | Path | None = None) -> tuple[Weights, dict]:
    """Tune (unless `options.weights` is given) and evaluate one LM score. Dev is `dev` (lists, scores) when
    given, else a seeded `options.dev_fraction` of `lists`; the test split is the rest (or all of `lists` with a
    dev file). `pieces` (and `dev_pieces` for a dev file): the tokenizer pieces the LM scored per hypothesis,
    the length every LM score carries for free; without them the no-LM baseline has a word bonus only
    (`no_lm_features` says which).

    Tuning (`tune_guarded`) keeps the LM only when its dev gain over `no_lm` is significant (`guard`;
    `weights_lm` the LM weights it tuned, `with_lm` their result on each split); `no_lm` is the first-pass
    score (or rank prior) with a word and a piece bonus tuned on dev and no LM (`weights_no_lm`; with given
    weights, those weights with lm 0), kept only when its dev gain over the first pass is significant
    (`guard_no_lm`), else the first pass is applied. `applied` says which ("lm", "no_lm", "first_pass"),
    `bonuses` names the tuned bonuses of each run. `options.prior` ("rank" or "none") says whether lists
    without first-pass scores get -beta * rank (`prior_note` says what was assumed). Returns (weights, report)."""
    o = options or RerankOptions()
    metric, weights, dev_fraction, seed, prior = o.metric, o.weights, o.dev_fraction, o.seed, o.prior
    kind = weights.lm_score if weights is not None else o.kinds()[0]  # the LM score `lm_scores` are

    def labelled(w: Weights) -> Weights:  # tuned weights say which LM score they weigh
        return replace(w, lm_score=kind)
    m = make_metric(metric)
    report: dict = {"metric": m.name, "higher_is_better": m.higher_is_better, "num_utterances": len(lists),
                    "no_lm_features": ["words", "pieces"] if pieces is not None else ["words"]}
    if (dev is not None) and (pieces is None) != (dev_pieces is None):
        raise ValueError("give piece counts for both the lists and the dev lists, or for neither")
    note = prior_note([*lists, *(dev[0] if dev is not None else [])], weights.prior if weights else prior)
    if note:
        report["prior_note"] = note
    if weights is not None:
        no_lm = replace(weights, lm=0.0)  # the same weights without the LM
        report.update(weights=weights.to_dict(), tuned=False, weights_no_lm=no_lm.to_dict())
        if o.need_refs or all(nb.ref is not None for nb in lists):
            report["test"] = {**evaluate_split(Evaluator(lists, m, path), lm_scores, weights, no_lm,
                                               pieces=pieces), "ids": [nb.utt_id for nb in lists]}
        return weights, report
    ev_all = Evaluator(lists, m, path)
    if dev is not None:
        ev_dev, dev_scores = Evaluator(list(dev[0]), m, dev_path), list(dev[1])
        ev_test, test_scores = ev_all, list(lm_scores)
        dev_n, test_n = dev_pieces, pieces
        report["dev_source"] = {"file": str(dev_path) if dev_path is not None else None}
    else:
        if dev_fraction is None:
            raise ValueError("tuning needs a dev file or a dev fraction")
        dev_idx, test_idx = dev_test_split(lists, dev_fraction, seed)
        ev_dev, dev_scores = ev_all.subset(dev_idx), [lm_scores[i] for i in dev_idx]
        ev_test, test_scores = ev_all.subset(test_idx), [lm_scores[i] for i in test_idx]
        dev_n = None if pieces is None else [pieces[i] for i in dev_idx]
        test_n = None if pieces is None else [pieces[i] for i in test_idx]
        report["dev_source"] = {"fraction": dev_fraction, "seed": seed}
    t = tune_guarded(ev_dev, Components.of(ev_dev.lists, dev_scores, dev_n), lm_grid=o.lm_grid,
                     length_grid=o.length_grid, bonus_grid=o.bonus_grid, beta=o.beta, prior=prior,
                     resamples=o.resamples, confidence=o.confidence, seed=seed)
    rows = {"weights": labelled(t.weights), "no_lm": labelled(t.without_lm.weights),
            "with_lm": labelled(t.with_lm.weights)}
    report.update(
        tuned=True,
        weights=rows["weights"].to_dict(),
        weights_lm=rows["with_lm"].to_dict(),
        weights_no_lm=rows["no_lm"].to_dict(),
        guard=t.guard,
        guard_no_lm=t.no_lm_guard,
        applied=t.applied,
        bonuses={"with_lm": {"per_word": t.with_lm.weights.length},
                 "no_lm": {"per_word": t.without_lm.weights.length, "per_piece": t.without_lm.weights.piece}},
        grid={"lm": list(o.lm_grid), "length_per_lm": list(o.length_grid), "beta": o.beta,
              "bonus_no_lm": list(o.bonus_grid),
              "evaluated": t.with_lm.evaluated + t.without_lm.evaluated,
              "chosen_length_per_lm": t.with_lm.length_per_lm, "on_edge": t.with_lm.on_edge + t.without_lm.on_edge},
        dev={**evaluate_split(ev_dev, dev_scores, **rows, pieces=dev_n), "ids": [nb.utt_id for nb in ev_dev.lists]},
        test={**evaluate_split(ev_test, test_scores, **rows, pieces=test_n),
              "ids": [nb.utt_id for nb in ev_test.lists]},
    )
    if dev is None:  # the whole input, dev included (tuned on): optimistic next to test
        report["all"] = evaluate_split(ev_all, lm_scores, **rows, pieces=pieces)
    return rows["weights"], report


@dataclass(frozen=True)
class ReportInput:
    """What `electric rerank` / `electric eval nbest` read."""

    model: str
    method: str
    nbest: str
    format: str


@dataclass(frozen=True)
class ReportOutput:
    """What `electric rerank` wrote."""

    out: str
    ties: int  # lists whose choice was a tie (the earlier position won)
    dropped_fields: list[str]  # utterance-level fields that could not follow the reordered hypotheses


@dataclass(frozen=True)
class RerankReport:
    """The whole report of a rerank: the LM score applied and its `rerank_report` (`tuning`: the weights, the
    guards, each split's figures); with lm_score auto, each LM score's dev result (the choice) and summary; and
    what the command read and wrote. `to_dict` is the JSON of `--report` and `--json`."""

    lm_score: str  # "sum" or "mean": the LM score of the applied weights
    tuning: dict  # `rerank_report`'s for that LM score
    lm_score_dev: dict[str, float] | None = None  # lm_score auto: each LM score's reranked dev result
    by_lm_score: dict[str, dict] | None = None  # lm_score auto: each LM score's weights and results
    source: ReportInput | None = None
    output: ReportOutput | None = None

    def to_dict(self) -> dict:
        d: dict = {} if self.source is None else {"model": self.source.model, "method": self.source.method,
                                                  "nbest": self.source.nbest, "format": self.source.format}
        d.update(lm_score=self.lm_score, **self.tuning)
        if self.lm_score_dev is not None:
            d.update(lm_score_dev=self.lm_score_dev, by_lm_score=self.by_lm_score)
        if self.output is not None:
            d.update(out=self.output.out, out_ties=self.output.ties, out_dropped_fields=self.output.dropped_fields)
        return d

    def text(self) -> str:
        """`format_report` of `to_dict`."""
        return format_report(self.to_dict())


def significance(gain: dict) -> str:
    """A paired_bootstrap's verdict in words: "significant" (its interval lies above 0), "significantly worse"
    (below 0) or "not significant" (it holds 0)."""
    return "significant" if gain["significant"] else "significantly worse" if gain["ci"][1] < 0 else "not significant"


def format_report(report: dict) -> str:
    """A short human-readable summary of `rerank_report` (without the id lists)."""
    name = report["metric"].upper()
    unit = "%" if report["metric"] in ("wer", "cer") else ""
    lines = []
    w = report["weights"]
    prior = (f"rank prior -{w['beta']:g}*rank for lists without first-pass scores" if w.get("prior") == "rank"
             else "no rank prior")
    piece = f", {w['piece']:g}/piece" if w.get("piece") else ""
    applied = {"lm": " (applied: with the LM)", "no_lm": " (applied: no LM, first pass + bonuses)",
               "first_pass": " (applied: the first pass alone)"}.get(report.get("applied", ""), "")
    lines.append(f"weights: lm {w['lm']:g}, length {w['length']:g}/word{piece}, {prior}"
                 f"{'' if report.get('tuned') else ' (given, not tuned)'}{applied}")
    if "prior_note" in report:
        lines.append(f"note: {report['prior_note']}")
    if "lm_score" in report:
        what = {"sum": "sum over tokens", "mean": "mean per token (length-normalised)"}[report["lm_score"]]
        dev = report.get("lm_score_dev")
        chosen = (" (chosen on dev: " + ", ".join(f"{k} {v:.2f}{unit}" for k, v in dev.items()) + ")") if dev else ""
        lines.append(f"LM score: {what}{chosen}")
    for edge in report.get("grid", {}).get("on_edge", []):
        lines.append(f"warning: optimum on the grid's edge: {edge}; widen the grid")
    if "no_lm" in report.get("test", report.get("dev", {})):
        wn = report["weights_no_lm"]
        if "pieces" in report.get("no_lm_features", []):
            bonus = f"a word bonus of {wn['length']:g}/word and a piece bonus of {wn.get('piece', 0.0):g}/piece"
        else:
            bonus = f"a word bonus of {wn['length']:g}/word (no piece counts given: no piece bonus)"
        lines.append(f"no_lm: without the LM: first-pass score (or rank prior), {bonus} "
                     f"({'tuned on dev' if report.get('tuned') else 'the given weights with lm 0'})")
    g, gn = report.get("guard"), report.get("guard_no_lm")
    if g:
        wl = report["weights_lm"]
        lines.append(f"with_lm: the LM weights tuned on dev: lm {wl['lm']:g}, word bonus {wl['length']:g}/word")
        dev_n = report['dev']['num_utterances']

        def gain(what: str, x: dict, verdict: str) -> str:
            return (f"dev gain of {what} (positive = better): {x['gain']:+.2f} {name} points, "
                    f"{100 * x['confidence']:g}% CI [{x['ci'][0]:+.2f}, {x['ci'][1]:+.2f}] (paired bootstrap over "
                    f"{dev_n} dev utterances, {x['resamples']} resamples, seed {x['seed']}): {verdict}")

        if gn:
            lines.append(gain("no_lm over the first pass", gn, "significant: the bonuses are worth applying"
                              if gn["significant"] else f"{significance(gn)}: without the LM the first pass is kept"))
        kept = "no_lm" if gn is None or gn["significant"] else "the first pass"
        lines.append(gain("with_lm over no_lm", g, "significant: the LM is used (reranked = with_lm)"
                          if g["significant"] else f"{significance(g)}: the LM is NOT used (reranked = {kept})"))
    for split in ("dev", "test", "all"):
        r = report.get(split)
        if not r:
            continue
        parts = [f"{k} {r[k]:.2f}{unit}" for k in ("first", "oracle", "lm_only", "no_lm", "with_lm", "reranked")
                 if k in r]
        label = {"all": "all (dev + test; dev was tuned on)"}.get(split, split)
        ties = f"; {r['ties']} tied choices (the earlier position won)" if r.get("ties") else ""
        lines.append(f"{label:>4} ({r['num_utterances']} utterances) {name}: " + ", ".join(parts) + ties)
    test = report.get("test", {})
    if "no_lm" in test and ("with_lm" in test or "reranked" in test):
        lm = test.get("with_lm", test.get("reranked"))
        gain = (lm - test["no_lm"]) * (1 if report["higher_is_better"] else -1) + 0.0
        unused = "" if g is None or g["significant"] else (
            "; not applied: it was significantly worse on dev" if significance(g) == "significantly worse" else
            "; not applied: its dev gain was not significant")
        lines.append(f"the LM's own gain on test: {name} {test['no_lm']:.2f}{unit} without it, "
                     f"{lm:.2f}{unit} with it (gain {gain:+.2f}{unused})")
    return "\n".join(lines)
