"""n-best lists: formats, score combination, weight tuning and error rates (docs/scoring.md).

Formats, read into one `NBestList(utt_id, hyps, first_pass_scores, ref, extra)` and written back:
- `hyporadise`: a JSON list `[{"input": [hyps], "output": ref, "score"|"am_score": [...]?, ...}]`;
- `espnet` (also mlm-scoring): a JSON object `{utt: {"hyp_1": {"score": s, "text": "..."}, ..., "ref": "..."}}`;
- `text`: one hypothesis a line, a blank line between utterances (no scores, no references).
Unknown fields are kept in `extra` (and `hyp_extra`) so that a file round-trips.

Combination: total(h) = a(h) + lm_weight * lm(h) + length_weight * words(h) [+ piece_weight * pieces(h), the
tokenizer pieces the LM scored: a bonus only the no-LM baseline tunes], where a(h) is the first-pass
score when the list has one; for a list without, a(h) = -beta * rank(h) (rank 0 = the recogniser's best) only
with `prior="rank"` (the user says the list's order is a first-pass order), else 0 (`prior="none"`, the
default: LM + word bonus alone). Ties go to the earlier position in the list, and are counted. `rerank_lists`
applies given weights (the server's /v1/rerank calls it); `rerank_report` grid-searches them on a dev split to
minimise WER/CER (jiwer, corpus-level) or maximise BLEU/chrF (sacrebleu), and keeps a non-zero LM weight only
when its dev gain over the result without the LM (first pass + word and piece bonuses) is significant
(`paired_bootstrap`), and those bonuses only when their dev gain over the first pass is significant.

One shape: every path builds a `ScoredLists` (the lists and the sum, mean and pieces of every hypothesis, a
hypothesis with no token to score NaN) and reorders it with `ScoredLists.rerank(weights)`.
`rerank_nbest(lists, score_texts, RerankOptions(...), dev_lists=...) -> RerankResult` scores every distinct
hypothesis once, tunes or applies the weights (with lm_score auto, the sum or the mean, chosen on dev) and
reorders the lists; `rerank_scored` does the same for lists scored already. The result's `report` is a
`RerankReport`, whose `to_dict()` is the JSON report.

Modules: `scored` (`ScoredLists`, the no-token rule, `score_nbest`), `rerank` (`rerank_nbest`, `rerank_scored`),
`lists` (NBestList, formats), `readers`, `writers`, `combination` (the formula, `Weights`, `rerank_lists`),
`corpus_metrics` (WER/CER/BLEU/chrF statistics, `Evaluator`), `tuning` (grid search, bootstrap guard, dev
split), `report` (`RerankOptions`, `rerank_report`, `RerankReport`, `format_report`).
"""

from electric.evaluation.nbest.combination import (
    LM_SCORES,
    PRIORS,
    RerankedList,
    Weights,
    rerank_lists,
    reranked_nbest,
    unreorderable_fields,
    weights_in_report,
)
from electric.evaluation.nbest.corpus_metrics import METRICS, Evaluator, make_metric, require_metric
from electric.evaluation.nbest.lists import FORMATS, NBestError, NBestList
from electric.evaluation.nbest.readers import read_nbest, require_refs
from electric.evaluation.nbest.report import RerankOptions, RerankReport, format_report, rerank_report
from electric.evaluation.nbest.rerank import RerankResult, rerank_nbest, rerank_scored
from electric.evaluation.nbest.scored import ScoredLists, score_nbest
from electric.evaluation.nbest.tuning import DEFAULT_LENGTH_GRID, DEFAULT_LM_GRID, dev_test_split
from electric.evaluation.nbest.writers import write_nbest

__all__ = [
    "DEFAULT_LENGTH_GRID",
    "DEFAULT_LM_GRID",
    "FORMATS",
    "LM_SCORES",
    "METRICS",
    "PRIORS",
    "Evaluator",
    "NBestError",
    "NBestList",
    "RerankOptions",
    "RerankReport",
    "RerankResult",
    "RerankedList",
    "ScoredLists",
    "Weights",
    "dev_test_split",
    "format_report",
    "make_metric",
    "read_nbest",
    "require_metric",
    "require_refs",
    "rerank_lists",
    "rerank_nbest",
    "rerank_report",
    "rerank_scored",
    "reranked_nbest",
    "score_nbest",
    "unreorderable_fields",
    "weights_in_report",
    "write_nbest",
]
