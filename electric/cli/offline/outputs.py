"""What offline scoring writes beyond `electric score`'s records: n-best rows, and the Parquet schema of each kind.

An n-best list becomes one row: its hypotheses with their LM scores (sum, mean and pieces, as `electric rerank`
scores them), and with the weights of a tuned rerank (its --report) the combined score of each hypothesis and
the reranked choice, by the same `ScoredLists` as `electric rerank`. A Parquet file needs one schema
for every part, so each column is declared here (a JSON-lines part writes the records as they are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from electric.evaluation.nbest import NBestList


def score_nbest_records(scorer, read: list[tuple[int, NBestList | None, str | None]], job,
                        where: str) -> tuple[list[dict], dict]:
    """One record per n-best list of a shard; a list with a hypothesis too long for the model is a bad record
    (`where`: "PATH: line" for JSON lines, "PATH: utterance" for a JSON document)."""
    from electric.evaluation.nbest import ScoredLists, Weights
    from electric.inference.encoding import InputTooLongError

    weights = Weights.from_dict(job.weights) if job.weights else None
    records: list[dict] = []
    bad: list[str] = []
    stats = {"records": len(read), "scored": 0, "blank": 0, "tokens": 0}

    asked: list[list[str]] = []

    def score_texts(texts):
        asked[:] = [texts]
        return scorer.score(texts, method=job.method)

    for line, nb, err in read:
        if nb is not None:  # read without error
            try:
                scored, _ = ScoredLists.score([nb], score_texts)
            except InputTooLongError as e:
                hyp = nb.hyps.index(asked[0][e.index]) + 1
                err = (f"{where} {line}: utterance {nb.utt_id!r}, hypothesis {hyp} has {e.describe()}; pass "
                       "--truncate or --sliding-window")
        if err is not None:
            bad.append(err)
            records.append({"line": line, "utt_id": None if nb is None else nb.utt_id, "error": err})
            continue
        assert nb is not None and scored.pieces is not None  # read and scored, so its pieces are known
        pieces = scored.pieces[0]
        rec = {"line": line, "utt_id": nb.utt_id, "hyps": nb.hyps, "score": _floats(scored.sum[0]),
               "mean": _floats(scored.mean[0]), "num_tokens": [int(n) for n in pieces],
               "first_pass": nb.first_pass_scores, "ref": nb.ref}
        if weights is not None:
            (r,) = scored.rerank(weights)
            rec.update(total=_floats(scored.totals(weights)[0]), order=r.order, best=r.hyps[0],
                       best_index=r.order[0], tied=r.tied)
        records.append(rec)
        stats["scored"] += 1
        stats["blank"] += int((pieces == 0).sum())
        stats["tokens"] += int(pieces.sum())
    return records, {**stats, "bad": bad}


def _floats(xs) -> list[float | None]:
    return [None if x != x else float(x) for x in xs]  # NaN (no token to score) -> null


def record_schema(kind: str, job):
    """The Parquet schema of a part of `kind` for `job` (method, per_token, weights)."""
    import pyarrow as pa

    f64, i64, s = pa.float64(), pa.int64(), pa.string()
    if kind in ("nbest", "nbest-jsonl"):
        fields = [("line", i64), ("utt_id", s), ("hyps", pa.list_(s)), ("score", pa.list_(f64)),
                  ("mean", pa.list_(f64)), ("num_tokens", pa.list_(i64)), ("first_pass", pa.list_(f64)), ("ref", s)]
        if job.weights:
            fields += [("total", pa.list_(f64)), ("order", pa.list_(i64)), ("best", s), ("best_index", i64),
                       ("tied", pa.bool_())]
        return pa.schema([*fields, ("error", s)])
    fields = [("line", i64), ("text", s), ("score", f64), ("mean", f64), ("num_tokens", i64)]
    detect = job.method == "electra" and job.per_token
    if not detect:
        fields.append(("method", s))
    fields += [("truncated", pa.bool_()), ("error", s)]
    if detect:
        fields.append(("tokens", pa.list_(pa.struct([("token", s), ("start", i64), ("end", i64), ("prob", f64),
                                                     ("logit", f64)]))))
        fields.append(("words", pa.list_(pa.struct([("word", s), ("start", i64), ("end", i64), ("max_prob", f64),
                                                    ("mean_prob", f64), ("num_pieces", i64)]))))
    elif job.per_token:
        fields.append(("tokens", pa.list_(pa.struct([("token", s), ("start", i64), ("end", i64), ("score", f64)]))))
    return pa.schema(fields)
