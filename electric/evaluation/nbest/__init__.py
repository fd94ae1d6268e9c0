"""n-best lists: formats, score combination, weight tuning and error rates (DESIGN §1 "Reranking", §2).

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

One call reranks: `rerank_nbest(lists, score_texts, RerankOptions(...), dev_lists=...) -> RerankResult` scores
every distinct hypothesis once into `LMScores` (sum, mean, pieces per hypothesis), tunes or applies the weights
and reorders the lists; `rerank_scored` does the same for lists scored already.

Modules: `rerank` (`rerank_nbest`, `LMScores`), `lists` (NBestList, formats), `readers`, `writers`,
`combination` (the formula, `Weights`, `rerank_lists`), `corpus_metrics` (WER/CER/BLEU/chrF statistics,
`Evaluator`), `tuning` (grid search, bootstrap guard, dev split), `report` (`RerankOptions`, `rerank_report`,
`format_report`), `lm_score` (sum or mean LM score, chosen on dev).
"""

from electric.evaluation.nbest.combination import (
    PRIORS,
    RerankedList,
    Weights,
    combine,
    num_words,
    prior_note,
    prior_scores,
    rerank_lists,
    rerank_one,
    reranked_nbest,
    score_nbest,
    unreorderable_fields,
)
from electric.evaluation.nbest.corpus_metrics import (
    METRICS,
    ErrorRate,
    Evaluator,
    Metric,
    SacreMetric,
    make_metric,
    require_metric,
)
from electric.evaluation.nbest.lists import FORMATS, SCORE_KEYS, NBestError, NBestList
from electric.evaluation.nbest.lm_score import (
    LM_SCORES,
    choose_lm_score,
    lm_score_column,
    piece_counts,
    require_refs,
    sum_and_mean,
    sum_mean_pieces,
)
from electric.evaluation.nbest.readers import (
    attach_refs,
    detect_format,
    iter_text_nbest,
    parse_espnet,
    parse_hyporadise,
    read_nbest,
)
from electric.evaluation.nbest.report import RerankOptions, format_report, rerank_report
from electric.evaluation.nbest.rerank import LMScores, RerankResult, rerank_nbest, rerank_scored, score_lists
from electric.evaluation.nbest.tuning import (
    APPLIED,
    DEFAULT_BONUS_GRID,
    DEFAULT_LENGTH_GRID,
    DEFAULT_LM_GRID,
    Components,
    GuardedTuning,
    TuneResult,
    dev_test_split,
    evaluate_split,
    first_pass_weights,
    paired_bootstrap,
    tune_guarded,
    tune_weights,
    tune_without_lm,
)
from electric.evaluation.nbest.writers import to_espnet, to_hyporadise, to_text, write_nbest

__all__ = [
    "APPLIED",
    "Components",
    "DEFAULT_BONUS_GRID",
    "DEFAULT_LENGTH_GRID",
    "DEFAULT_LM_GRID",
    "ErrorRate",
    "Evaluator",
    "FORMATS",
    "GuardedTuning",
    "LM_SCORES",
    "METRICS",
    "Metric",
    "NBestError",
    "NBestList",
    "PRIORS",
    "RerankedList",
    "SCORE_KEYS",
    "SacreMetric",
    "TuneResult",
    "Weights",
    "attach_refs",
    "choose_lm_score",
    "combine",
    "detect_format",
    "evaluate_split",
    "first_pass_weights",
    "format_report",
    "iter_text_nbest",
    "lm_score_column",
    "make_metric",
    "num_words",
    "paired_bootstrap",
    "parse_espnet",
    "parse_hyporadise",
    "piece_counts",
    "prior_note",
    "prior_scores",
    "read_nbest",
    "require_metric",
    "require_refs",
    "rerank_lists",
    "rerank_one",
    "rerank_report",
    "rerank_nbest",
    "rerank_scored",
    "score_lists",
    "LMScores",
    "RerankOptions",
    "RerankResult",
    "reranked_nbest",
    "score_nbest",
    "dev_test_split",
    "sum_and_mean",
    "sum_mean_pieces",
    "to_espnet",
    "to_hyporadise",
    "to_text",
    "tune_guarded",
    "tune_weights",
    "tune_without_lm",
    "unreorderable_fields",
    "write_nbest",
]
