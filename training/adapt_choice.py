"""`electric adapt`'s choice of the served combination among four, simplest first, and every candidate's figures
against the trigram.

    choice = choose(dev, test, tuned, metric, seed)     # dev, test: ScoredLists with the model's and the n-gram's scores

The candidates, each a whole `Weights` the server applies as is (total = first pass + lm * model + ngram * n-gram
+ bonuses):
- no_lm: the first pass with the word and piece bonuses the guard kept (or the first pass alone);
- ngram: the n-gram LM with its tuned weight and word bonus;
- model: the adapted model with its tuned weight and word bonus;
- model_and_ngram: one LM tuned on top of the other's combination (the order better on dev: training.adapt).
The guard walks them in that order: a candidate replaces the one chosen so far only when its dev gain over it is
significant (a seeded paired bootstrap). What it ends on is what the model directory serves. Each candidate is also
measured against the n-gram's choice on dev and on test, so that the card says how it compares with the baseline a
user would build first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from electric.evaluation.nbest import RerankResult, ScoredLists, Weights

CANDIDATES = ("no_lm", "ngram", "model", "model_and_ngram")  # simplest first: the order the guard walks
LABELS = {"no_lm": "without an LM", "ngram": "3-gram LM", "model": "adapted model", "model_and_ngram": "model + 3-gram",
          "first_pass": "first pass alone"}
PARTS = {"no_lm": "the first pass with tuned bonuses", "ngram": "the first pass and the n-gram LM",
         "model": "the first pass and the adapted model",
         "model_and_ngram": "the first pass, the adapted model and the n-gram LM"}


def candidate_weights(tuned: Mapping[str, dict]) -> dict[str, Weights]:
    """The four candidates' whole weights from the three tunings (`tuned`: "model", "ngram" and "model_and_ngram",
    each a record of training.adapt.figures: its "weights_lm", "weights_no_lm" and guards). The n-gram's were tuned
    with its score as the LM (their lm is the n-gram's weight); the last was tuned over one LM's combination as its
    first pass (its "order"), so it is folded into one weights: each LM's weight, the bonuses added."""
    from electric.evaluation.nbest import Weights
    from electric.evaluation.nbest.tuning import first_pass_weights

    model = Weights.from_dict(tuned["model"]["weights_lm"])
    no_lm = Weights.from_dict(tuned["model"]["weights_no_lm"])
    if not tuned["model"]["guard_no_lm"]["significant"]:
        no_lm = first_pass_weights(no_lm.beta, no_lm.prior)
    ng = Weights.from_dict(tuned["ngram"]["weights_lm"])
    ngram = dataclasses.replace(ng, lm=0.0, ngram=ng.lm)
    both_rec = tuned["model_and_ngram"]
    top = Weights.from_dict(both_rec["weights_lm"])
    if both_rec.get("order") == "ngram_over_model":  # the n-gram's weight tuned over the model's combination
        both = dataclasses.replace(model, ngram=top.lm, length=round(model.length + top.length, 9),
                                   piece=round(model.piece + top.piece, 9))
    else:  # the model's weight tuned over the n-gram's combination
        both = dataclasses.replace(ngram, lm=top.lm, lm_score=top.lm_score, length=round(ngram.length + top.length, 9),
                                   piece=round(ngram.piece + top.piece, 9))  # the sum's last-digit noise off
    return {"no_lm": no_lm, "ngram": ngram, "model": model, "model_and_ngram": both}


def choose(dev: ScoredLists, test: ScoredLists | None, weights: Mapping[str, Weights], metric: str,
           seed: int) -> dict:
    """The guard's walk over CANDIDATES on dev (each step: the candidate, the one it was measured against, the
    gain and its interval), the candidate it chose with its weights and parts, and every candidate's figure on dev
    (and test) with its paired interval against the n-gram's choice."""
    from electric.evaluation.nbest import Evaluator, make_metric
    from electric.evaluation.nbest.tuning import paired_bootstrap

    def selections(scored: ScoredLists) -> tuple[Evaluator, dict[str, np.ndarray]]:
        ev = Evaluator(scored.lists, make_metric(metric))
        return ev, {c: ev.select(scored.components(w.lm_score).totals(w)) for c, w in weights.items()}

    def boot(ev: Evaluator, base: np.ndarray, new: np.ndarray) -> dict:
        b = paired_bootstrap(ev, base, new, seed=seed)
        return {"gain": b["gain"], "ci": b["ci"], "significant": b["significant"]}

    ev_dev, sel_dev = selections(dev)
    chosen, steps = "no_lm", []
    for c in CANDIDATES[1:]:
        g = boot(ev_dev, sel_dev[chosen], sel_dev[c])
        steps.append({"candidate": c, "over": chosen, **g})
        if g["significant"]:
            chosen = c
    ev_test, sel_test = selections(test) if test is not None else (None, None)
    candidates = {}
    for c in CANDIDATES:
        rec: dict = {"weights": weights[c].to_dict(), "dev": ev_dev.score_selection(sel_dev[c]),
                     "dev_vs_ngram": boot(ev_dev, sel_dev["ngram"], sel_dev[c])}
        if ev_test is not None and sel_test is not None:
            rec["test"] = ev_test.score_selection(sel_test[c])
            rec["test_vs_ngram"] = boot(ev_test, sel_test["ngram"], sel_test[c])
        candidates[c] = rec
    out = {"served": chosen, "weights": weights[chosen].to_dict(), "parts": PARTS[chosen], "steps": steps,
           "candidates": candidates}
    if ev_test is not None and sel_test is not None:
        base, after = sel_test["no_lm"], sel_test[chosen]
        better, worse = ev_test.compare(base, after)
        changed = sum(nb.hyps[a] != nb.hyps[b] for nb, a, b in zip(ev_test.lists, base, after, strict=True))
        out["test"] = {"num_utterances": len(ev_test.lists), "first": ev_test.first(),
                       "no_lm": ev_test.score_selection(base), "after": ev_test.score_selection(after),
                       "oracle": ev_test.oracle(), "changed": changed, "better": better, "worse": worse,
                       "same": changed - better - worse}
    return out


def step_sentence(step: dict, metric: str) -> str:
    """One step of the guard's walk, in words."""
    lo, hi = step["ci"]
    verdict = "chosen" if step["significant"] else "not chosen"
    return (f"{LABELS[step['candidate']]} over {LABELS[step['over']]}: dev gain {step['gain']:+.2f} {metric.upper()} "
            f"points, 95% interval [{lo:+.2f}, {hi:+.2f}]: {verdict}")


# ---- the tunings the candidates come from --------------------------------------------------------------------


def tune(dev: ScoredLists, test: ScoredLists | None, metric: str, seed: int) -> RerankResult:
    """`rerank_scored` with the weights tuned on `dev` by the guard (the LM summed over tokens, as the server's
    default); figures on `test` (on dev again without one)."""
    from electric.evaluation.nbest import RerankOptions, rerank_scored

    return rerank_scored(test if test is not None else dev, RerankOptions(metric=metric, lm_score="sum", seed=seed),
                         dev=dev)


def figures(result: RerankResult, test: ScoredLists | None, metric: str) -> dict:
    """One system's record: the weights applied and which (lm, no_lm, first_pass), the guard on dev, and on the
    test lists (when there are) first, no-LM, after, oracle and what the LM changed against the no-LM choice."""
    import numpy as np

    from electric.evaluation.nbest import Evaluator, Weights, make_metric

    tuning = result.report.tuning
    out = {"applied": tuning["applied"], "weights": result.weights.to_dict(),
           "weights_no_lm": tuning["weights_no_lm"], "weights_lm": tuning["weights_lm"],
           "guard": _guard(tuning["guard"]), "guard_no_lm": _guard(tuning["guard_no_lm"]),
           "dev": {k: tuning["dev"][k] for k in ("num_utterances", "first", "no_lm", "with_lm", "reranked",
                                                  "oracle")}}
    if test is not None:
        ev = Evaluator(test.lists, make_metric(metric))
        chosen = np.array([r.order[0] for r in test.rerank(result.weights)])
        without = np.array([r.order[0] for r in test.rerank(Weights.from_dict(tuning["weights_no_lm"]))])
        better, worse = ev.compare(without, chosen)
        changed = sum(nb.hyps[a] != nb.hyps[b] for nb, a, b in zip(test.lists, without, chosen, strict=True))
        out["test"] = {"num_utterances": len(test.lists), "first": ev.first(), "no_lm": ev.score_selection(without),
                       "after": ev.score_selection(chosen), "oracle": ev.oracle(),
                       "changed": changed, "better": better, "worse": worse, "same": changed - better - worse}
    return out


def _guard(g: dict) -> dict:
    return {"gain": g["gain"], "ci": g["ci"], "confidence": g["confidence"], "significant": g["significant"]}


def with_prior(scored: ScoredLists, first: ScoredLists, weights: Weights) -> ScoredLists:
    """`scored` (one LM's scores of the lists) with the whole combination of another LM's `first` (the same lists,
    its scores) under its `weights` as their first-pass score: what the second LM is tuned on top of."""
    return dataclasses.replace(scored, lists=[dataclasses.replace(nb, first_pass_scores=[float(x) for x in tot])
                                              for nb, tot in zip(scored.lists, first.totals(weights), strict=True)])
