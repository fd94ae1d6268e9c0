"""Texts -> the JSON records `electric score` writes, one per input line (blank and tokenless lines included).

`electric score` writes them as JSON lines; `electric score --ray` (electric.cli.offline.ray_job) writes the same
records, with the line number, as Parquet or JSON lines. A blank line or one the tokenizer keeps nothing of gets
`"score": null` and an `"error"`, never a silent 0.0 (which would outrank every real sentence).

`electric rerank` scores its hypotheses through the same records (`text_scores`), plain or on Ray, so that both
send the model the same batches: an int8 export's scores depend on the batch a text is in (docs/scale.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from electric.inference.encoding import InputTooLongError
from electric.results import TextScore

BLANK = "blank line: nothing to score"
NO_TOKEN = "no token to score: the tokenizer keeps none of its characters (zero-width, control or lone combining)"


def blank_record(text: str, method: str, per_token: bool, error: str = BLANK) -> dict:
    """The record of a text that gets no score (the server rejects blank texts too)."""
    if method == "electra" and per_token:  # the fields of Detection.to_dict
        return {"text": text, "score": None, "mean": None, "num_tokens": 0, "tokens": [], "words": [],
                "error": error}
    row = {"text": text, "score": None, "mean": None, "num_tokens": 0, "method": method, "error": error}
    return {**row, "tokens": []} if per_token else row


def score_records(scorer, texts: Sequence[str], method: str, per_token: bool) -> tuple[list[dict], list[int], list[int]]:
    """One record per text (`Scorer.score` or, for electra with per_token, `Scorer.detect`), and the positions in
    `texts` of the blank ones and of those with no token to score. A text too long for the model raises
    InputTooLongError with its position in `texts`."""
    keep = [i for i, t in enumerate(texts) if t.strip()]
    kept = [texts[i] for i in keep]
    try:
        if method == "electra" and per_token:
            scored = [d.to_dict(per_token=True) for d in scorer.detect(kept)]
        else:
            scored = [s.to_dict() for s in scorer.score(kept, method=method, per_token=per_token)]
    except InputTooLongError as e:
        raise InputTooLongError(keep[e.index], e.num_tokens, e.max_length, e.at_least) from e
    rows = [blank_record(t, method, per_token) for t in texts]
    no_token = []
    for i, row in zip(keep, scored, strict=True):
        if row["num_tokens"]:
            rows[i] = row
        else:  # nothing the tokenizer keeps (zero-width, control characters): no score, as a blank line
            rows[i] = {**rows[i], "error": NO_TOKEN}
            no_token.append(i)
    blank = [i for i, t in enumerate(texts) if not t.strip()]
    return rows, blank, no_token


def record_text_score(text: str, record: dict, method: str) -> TextScore:
    """A record of `score_records` as the `TextScore` `Scorer.score` gives (0 tokens, 0.0, without a score: what a
    rerank makes of that is `electric.evaluation.nbest.scored.lm_row`'s rule)."""
    if record["score"] is None:
        return TextScore(text, 0.0, 0.0, 0, method)
    return TextScore(text, record["score"], record["mean"], int(record["num_tokens"]), method)


def text_scores(scorer, texts: Sequence[str], method: str) -> list[TextScore]:
    """`Scorer.score` of `texts` batched as `electric score` and `--ray` batch them (`score_records`: the blank ones
    are not sent to the model), for `electric rerank`."""
    rows, _, _ = score_records(scorer, texts, method, per_token=False)
    return [record_text_score(t, r, method) for t, r in zip(texts, rows, strict=True)]
