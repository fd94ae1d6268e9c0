"""n-best lists: formats, score combination, weight tuning and error rates (DESIGN §1 "Reranking", §2).

Formats, read into one `NBestList(utt_id, hyps, first_pass_scores, ref, extra)` and written back:
- `hyporadise`: a JSON list `[{"input": [hyps], "output": ref, "score"|"am_score": [...]?, ...}]`;
- `espnet` (also mlm-scoring): a JSON object `{utt: {"hyp_1": {"score": s, "text": "..."}, ..., "ref": "..."}}`;
- `text`: one hypothesis a line, a blank line between utterances (no scores, no references).
Unknown fields are kept in `extra` (and `hyp_extra`) so that a file round-trips.

Combination: total(h) = a(h) + lm_weight * lm(h) + length_weight * words(h), where a(h) is the first-pass
score when the list has one; for a list without, a(h) = -beta * rank(h) (rank 0 = the recogniser's best) only
with `prior="rank"` (the user says the list's order is a first-pass order), else 0 (`prior="none"`, the
default: LM + word bonus alone). Ties go to the earlier position in the list, and are counted. `rerank_lists`
applies given weights (the server's /v1/rerank calls it); `rerank_report` grid-searches them on a dev split to
minimise WER/CER (jiwer, corpus-level) or maximise BLEU/chrF (sacrebleu), and keeps a non-zero LM weight only
when its dev gain over the result without the LM is significant (`paired_bootstrap`).
"""

from __future__ import annotations

import codecs
import json
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from electric.textio import decode_text, iter_lines, quote

FORMATS = ("hyporadise", "espnet", "text")
SCORE_KEYS = ("score", "am_score")  # HyPoradise first-pass score fields, in order of preference
METRICS = ("wer", "cer", "bleu", "chrf")
PRIORS = ("rank", "none")  # a(h) of a list without first-pass scores: -beta * rank, or 0


class NBestError(ValueError):
    """A malformed n-best file; the message names the file and the utterance."""

    def __init__(self, path: str | Path | None, message: str, utt: str | None = None):
        self.path, self.utt = path, utt
        where = str(path) if path is not None else "n-best input"
        super().__init__(f"{where}: {'utterance ' + utt + ': ' if utt is not None else ''}{message}")


@dataclass
class NBestList:
    utt_id: str
    hyps: list[str]
    first_pass_scores: list[float] | None = None  # higher = better, one per hypothesis
    ref: str | None = None
    extra: dict = field(default_factory=dict)  # unknown utterance-level fields, kept on round trip
    hyp_extra: list[dict] | None = None  # unknown per-hypothesis fields, kept on round trip and reordered
    score_key: str | None = None  # the field the first-pass scores came from ("score" or "am_score")

    def __post_init__(self):
        if self.first_pass_scores is not None and len(self.first_pass_scores) != len(self.hyps):
            raise NBestError(None, f"{len(self.first_pass_scores)} first-pass scores for {len(self.hyps)} "
                                   "hypotheses", self.utt_id)

    def reordered(self, order: Sequence[int]) -> NBestList:
        """The same list with hypotheses (and their scores and fields) in `order`."""
        return replace(
            self,
            hyps=[self.hyps[i] for i in order],
            first_pass_scores=None if self.first_pass_scores is None else [self.first_pass_scores[i] for i in order],
            hyp_extra=None if self.hyp_extra is None else [self.hyp_extra[i] for i in order],
            extra=dict(self.extra),
        )


def _utt_name(utt_id: str, index: int) -> str:
    return f"{utt_id!r}" if utt_id == str(index) else f"{utt_id!r} (item {index})"


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---- reading -----------------------------------------------------------------------------------------


def detect_format(path: str | Path) -> str:
    """`hyporadise` for a file starting with '[', `espnet` for '{', otherwise `text`."""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(4096)
            if not chunk:
                raise NBestError(path, "the file is empty (no utterances)")
            stripped = chunk.removeprefix(codecs.BOM_UTF8).lstrip()
            if stripped:
                return {ord("["): "hyporadise", ord("{"): "espnet"}.get(stripped[0], "text")


def _load_json(path: str | Path):
    text = decode_text(Path(path).read_bytes(), str(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise NBestError(path, f"not valid JSON ({e}); for plain text n-best lists use --format text") from e


def _hyporadise_hyp_fields(data: list) -> list[str]:
    """Unknown fields that are per-hypothesis: in every item that has one, a list with one entry per hypothesis
    (e.g. a second score such as "am_score" next to "score"). They travel with their hypotheses when a list is
    reordered."""
    fields: dict[str, bool] = {}
    for item in data:
        if not isinstance(item, dict) or not isinstance(hyps := item.get("input"), list):
            continue  # parse_hyporadise names the bad item
        for k, v in item.items():
            if k not in ("input", "output"):
                fields[k] = fields.get(k, True) and isinstance(v, list) and len(v) == len(hyps)
    return [k for k, per_hyp in fields.items() if per_hyp]


def parse_hyporadise(data, path: str | Path | None = None) -> list[NBestList]:
    if not isinstance(data, list):
        raise NBestError(path, f"expected a JSON list of {{\"input\": [...], \"output\": ...}} objects (HyPoradise), "
                               f"got a JSON {type(data).__name__}")
    if not data:
        raise NBestError(path, "the list holds no utterances")
    out = []
    hyp_fields = _hyporadise_hyp_fields(data)
    for i, item in enumerate(data):
        utt_id = str(item["id"]) if isinstance(item.get("id"), (str, int)) else str(i)
        name = _utt_name(utt_id, i)
        hyps = item.get("input")
        if not isinstance(hyps, list) or not all(isinstance(h, str) for h in hyps):
            raise NBestError(path, "\"input\" must be a list of hypothesis strings", name)
        if not hyps:
            raise NBestError(path, "\"input\" is an empty list (no hypotheses)", name)
        ref = item.get("output")
        if ref is not None and not isinstance(ref, str):
            raise NBestError(path, f"\"output\" (the reference) must be a string, got {type(ref).__name__}", name)
        score_key = next((k for k in SCORE_KEYS if k in item), None)
        scores = None
        if score_key is not None:
            scores = item[score_key]
            if not isinstance(scores, list) or not all(_is_number(s) for s in scores):
                raise NBestError(path, f"\"{score_key}\" must be a list of finite numbers", name)
            if len(scores) != len(hyps):
                raise NBestError(path, f"\"{score_key}\" has {len(scores)} values for {len(hyps)} hypotheses", name)
            scores = [float(s) for s in scores]
        extra = {k: v for k, v in item.items() if k not in ("input", "output", score_key, *hyp_fields)}
        per_hyp = [k for k in hyp_fields if k in item and k != score_key]
        hyp_extra = [{k: item[k][j] for k in per_hyp} for j in range(len(hyps))] if per_hyp else None
        out.append(NBestList(utt_id, list(hyps), scores, ref, extra, hyp_extra, score_key))
    return out


def _hyp_number(key: str) -> int | None:
    if key.startswith("hyp_") and key[4:].isdigit():
        return int(key[4:])
    return None


def parse_espnet(data, path: str | Path | None = None) -> list[NBestList]:
    if not isinstance(data, dict):
        raise NBestError(path, f"expected a JSON object {{utt: {{\"hyp_1\": {{\"score\": s, \"text\": ...}}, ..., "
                               f"\"ref\": ...}}}} (ESPnet/mlm-scoring), got a JSON {type(data).__name__}")
    if not data:
        raise NBestError(path, "the object holds no utterances")
    out = []
    for utt_id, item in data.items():
        name = repr(utt_id)
        if not isinstance(item, dict):
            raise NBestError(path, f"expected an object of \"hyp_N\" entries, got a JSON {type(item).__name__}", name)
        keys = sorted((n, k) for k in item if (n := _hyp_number(k)) is not None)
        if not keys:
            raise NBestError(path, "no \"hyp_N\" entries (empty n-best list)", name)
        hyps, scores, hyp_extra = [], [], []
        for _, k in keys:
            h = item[k]
            if isinstance(h, str):  # tolerate {"hyp_1": "text"}
                h = {"text": h}
            if not isinstance(h, dict) or not isinstance(h.get("text"), str):
                raise NBestError(path, f"\"{k}\" must be an object with a string \"text\"", name)
            if "score" in h and not _is_number(h["score"]):
                raise NBestError(path, f"\"{k}\".\"score\" must be a finite number, got {quote(h['score'])}", name)
            hyps.append(h["text"])
            scores.append(float(h["score"]) if "score" in h else None)
            hyp_extra.append({kk: v for kk, v in h.items() if kk not in ("text", "score")})
        if any(s is None for s in scores) and not all(s is None for s in scores):
            missing = [k for (_, k), s in zip(keys, scores, strict=True) if s is None]
            raise NBestError(path, f"some hypotheses have a \"score\" and some do not (missing: {missing})", name)
        ref = item.get("ref")
        if ref is not None and not isinstance(ref, str):
            raise NBestError(path, f"\"ref\" must be a string, got {type(ref).__name__}", name)
        extra = {k: v for k, v in item.items() if k != "ref" and _hyp_number(k) is None}
        has_scores = scores[0] is not None
        out.append(NBestList(str(utt_id), hyps, scores if has_scores else None, ref, extra,
                             hyp_extra, "score" if has_scores else None))
    return out


def iter_text_nbest(path: str | Path) -> Iterator[NBestList]:
    """Plain text, read lazily: one hypothesis a line, blank lines between utterances."""
    hyps: list[str] = []
    i = 0
    for line in iter_lines(path):
        if line.strip():
            hyps.append(line)
        elif hyps:
            yield NBestList(str(i), hyps)
            i, hyps = i + 1, []
    if hyps:
        yield NBestList(str(i), hyps)


def read_nbest(path: str | Path, format: str = "auto", refs: str | Path | None = None) -> tuple[list[NBestList], str]:
    """(lists, format) of an n-best file; `refs`: a file with one reference a line, one per utterance."""
    path = Path(path)
    if not path.is_file():
        raise NBestError(path, "no such file" if not path.exists() else "not a file")
    if format == "auto":
        format = detect_format(path)
    if format == "hyporadise":
        lists = parse_hyporadise(_load_json(path), path)
    elif format == "espnet":
        lists = parse_espnet(_load_json(path), path)
    elif format == "text":
        lists = list(iter_text_nbest(path))
        if not lists:
            raise NBestError(path, "no hypotheses (the file is empty or blank)")
    else:
        raise ValueError(f"unknown n-best format {format!r} (auto, {', '.join(FORMATS)})")
    if refs is not None:
        lists = attach_refs(lists, refs)
    return lists, format


def attach_refs(lists: list[NBestList], refs_path: str | Path) -> list[NBestList]:
    refs = list(iter_lines(refs_path))
    if len(refs) != len(lists):
        raise NBestError(refs_path, f"{len(refs)} reference lines for {len(lists)} utterances (one a line expected)")
    return [replace(nb, ref=r) for nb, r in zip(lists, refs, strict=True)]


# ---- writing -----------------------------------------------------------------------------------------


def to_hyporadise(lists: Sequence[NBestList]) -> list[dict]:
    """Per-hypothesis fields become lists, one entry per hypothesis; a field that only some hypotheses of a list
    have (possible in ESPnet input) cannot be written so and is left out."""
    out = []
    for nb in lists:
        item = {"input": list(nb.hyps)}
        if nb.ref is not None:
            item["output"] = nb.ref
        if nb.first_pass_scores is not None:
            item[nb.score_key or "score"] = list(nb.first_pass_scores)
        if nb.hyp_extra:
            common = [k for k in nb.hyp_extra[0] if all(k in e for e in nb.hyp_extra)]
            item.update({k: [e[k] for e in nb.hyp_extra] for k in common})
        item.update(nb.extra)
        out.append(item)
    return out


def to_espnet(lists: Sequence[NBestList]) -> dict:
    out = {}
    for nb in lists:
        item: dict = {}
        for k, h in enumerate(nb.hyps):
            entry: dict = {}
            if nb.first_pass_scores is not None:
                entry["score"] = nb.first_pass_scores[k]
            entry["text"] = h
            if nb.hyp_extra is not None:
                entry.update(nb.hyp_extra[k])
            item[f"hyp_{k + 1}"] = entry
        if nb.ref is not None:
            item["ref"] = nb.ref
        item.update(nb.extra)
        if nb.utt_id in out:
            raise NBestError(None, "appears twice; ESPnet JSON needs unique utterance ids", repr(nb.utt_id))
        out[nb.utt_id] = item
    return out


def to_text(lists: Sequence[NBestList]) -> str:
    blocks = []
    for nb in lists:
        for k, h in enumerate(nb.hyps):
            if not h.strip() or "\n" in h:
                raise NBestError(None, f"hypothesis {k + 1} is {'empty' if not h.strip() else 'multi-line'}, which "
                                       "plain text cannot hold; write JSON (--format hyporadise or espnet)",
                                 repr(nb.utt_id))
        blocks.append("".join(h + "\n" for h in nb.hyps))
    return "\n".join(blocks)


def write_nbest(lists: Sequence[NBestList], path: str | Path, format: str) -> None:
    """Write `lists` in `format` (text goes to a temporary file renamed into place)."""
    if format == "hyporadise":
        text = json.dumps(to_hyporadise(lists), ensure_ascii=False, indent=1) + "\n"
    elif format == "espnet":
        text = json.dumps(to_espnet(lists), ensure_ascii=False, indent=1) + "\n"
    elif format == "text":
        text = to_text(lists)
    else:
        raise ValueError(f"unknown n-best format {format!r} ({', '.join(FORMATS)})")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# ---- combination ---------------------------------------------------------------------------------------


@dataclass
class Weights:
    lm: float = 0.0  # lambda_lm: weight of the LM score
    length: float = 0.0  # lambda_len: bonus per word
    beta: float = 1.0  # rank prior -beta * rank, only for lists without first-pass scores and prior "rank"
    prior: str = "none"  # a(h) of a list without first-pass scores: "rank" (-beta * rank: its order is a
    #                      first-pass order) or "none" (0: the order means nothing)

    def __post_init__(self):
        if self.prior not in PRIORS:
            raise ValueError(f"prior must be one of {', '.join(map(repr, PRIORS))}, got {self.prior!r}")

    def to_dict(self) -> dict:
        return {"lm": self.lm, "length": self.length, "beta": self.beta, "prior": self.prior}


def num_words(text: str) -> int:
    return len(text.split())


def prior_scores(nb: NBestList, weights: Weights) -> np.ndarray:
    """a(h): the first-pass scores; for a list without, -beta * rank with prior "rank", else 0."""
    if nb.first_pass_scores is not None:
        return np.asarray(nb.first_pass_scores, dtype=np.float64)
    beta = weights.beta if weights.prior == "rank" else 0.0
    return -beta * np.arange(len(nb.hyps), dtype=np.float64)


def combine(nb: NBestList, lm_scores: Sequence[float], weights: Weights) -> np.ndarray:
    """total(h) = a(h) + lm * lm(h) + length * words(h), one value per hypothesis."""
    lm = np.asarray(lm_scores, dtype=np.float64)
    if lm.shape != (len(nb.hyps),):
        raise NBestError(None, f"{lm.shape[0] if lm.ndim == 1 else lm.shape} LM scores for {len(nb.hyps)} "
                               "hypotheses", repr(nb.utt_id))
    words = np.array([num_words(h) for h in nb.hyps], dtype=np.float64)
    return prior_scores(nb, weights) + weights.lm * lm + weights.length * words


@dataclass
class RerankedList:
    utt_id: str
    order: list[int]  # original indices, best first
    hyps: list[str]  # reordered
    total: list[float]  # combined score, in the new order
    prior: list[float]  # a(h)
    lm: list[float]
    words: list[int]
    tied: bool = False  # a hypothesis of another text has the best total too; the earlier position won

    def to_dict(self) -> dict:
        return {"utt_id": self.utt_id, "best": self.hyps[0], "order": self.order, "tied": self.tied, "hyps": [
            {"text": h, "rank": r, "total": t, "prior": a, "lm": s, "words": w}
            for h, r, t, a, s, w in zip(self.hyps, self.order, self.total, self.prior, self.lm, self.words,
                                        strict=True)]}


def rerank_one(nb: NBestList, lm_scores: Sequence[float], weights: Weights) -> RerankedList:
    total = combine(nb, lm_scores, weights)
    order = sorted(range(len(total)), key=lambda i: -total[i])  # stable: ties keep the list's order
    prior = prior_scores(nb, weights)
    best = order[0]
    tied = any(total[i] == total[best] and nb.hyps[i] != nb.hyps[best] for i in order[1:])
    return RerankedList(nb.utt_id, order, [nb.hyps[i] for i in order], [float(total[i]) for i in order],
                        [float(prior[i]) for i in order], [float(lm_scores[i]) for i in order],
                        [num_words(nb.hyps[i]) for i in order], bool(tied))


def rerank_lists(lists: Sequence[NBestList], lm_scores: Sequence[Sequence[float]],
                 weights: Weights) -> list[RerankedList]:
    """Reorder every list by total(h) with the given weights and precomputed LM scores."""
    if len(lists) != len(lm_scores):
        raise ValueError(f"{len(lm_scores)} LM score lists for {len(lists)} n-best lists")
    return [rerank_one(nb, s, weights) for nb, s in zip(lists, lm_scores, strict=True)]


def reranked_nbest(nb: NBestList, r: RerankedList, drop: Sequence[str] = ()) -> NBestList:
    """`nb` reordered as `r` (per-hypothesis fields with their hypotheses), without the utterance-level fields
    `drop`, with the LM and combined scores added as fields (per hypothesis when the list has such fields)."""
    out = nb.reordered(r.order)
    for k in drop:
        out.extra.pop(k, None)
    if out.hyp_extra is not None:
        out.hyp_extra = [{**e, "lm_score": s, "total_score": t} for e, s, t in zip(out.hyp_extra, r.lm, r.total,
                                                                                  strict=True)]
    else:
        out.extra.update(lm_score=r.lm, total_score=r.total)
    return out


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


def score_nbest(lists: Sequence[NBestList], score_fn: Callable[[list[str]], Sequence], *,
                chunk_size: int = 2048, progress: bool = False) -> list[np.ndarray]:
    """LM scores of every hypothesis; each distinct text is scored once, `chunk_size` texts at a time.
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


# ---- metrics -------------------------------------------------------------------------------------------


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
            self._m = BLEU()
            # the statistics do not depend on effective_order; it only silences sacrebleu's sentence-BLEU advice
            self._sentence = BLEU(effective_order=True)
            return
        self._m = CHRF()
        missing = [m for m in self._CHRF_METHODS if not callable(getattr(self._m, m, None))]
        if missing:
            raise RuntimeError(f"sacrebleu {sacrebleu.__version__} has no CHRF.{missing[0]}, which chrF's "
                               "sufficient statistics come from; install sacrebleu>=2.3,<3")

    def stats(self, ref, hyps):  # (len(hyps), K)
        if self.name == "bleu":
            rows = [self._sentence.sentence_score(h, [ref]) for h in hyps]
            return np.array([[s.sys_len, s.ref_len, *s.counts, *s.totals] for s in rows], dtype=np.float64)
        return np.asarray(self._m._extract_corpus_statistics(list(hyps), [[ref] * len(hyps)]), dtype=np.float64)

    def score(self, total):
        if self.name == "bleu":
            n, m = self._m.max_ngram_order, [int(round(x)) for x in total]
            return float(self._m.compute_bleu(correct=m[2: 2 + n], total=m[2 + n:], sys_len=m[0], ref_len=m[1],
                                              smooth_method=self._m.smooth_method,
                                              smooth_value=self._m.smooth_value,
                                              effective_order=self._m.effective_order, max_ngram_order=n).score)
        return float(self._m._compute_score_from_stats([float(x) for x in total]).score)


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
        stats0 = metric.stats(lists[0].ref, lists[0].hyps[:1])
        self.stats = np.zeros((len(lists), n_max, stats0.shape[1]))  # (U, N, K)
        self.valid = np.zeros((len(lists), n_max), dtype=bool)  # (U, N)
        self.text_ids = np.full((len(lists), n_max), -1)  # (U, N) the same number for the same text in a list
        for u, nb in enumerate(lists):
            uniq = {h: i for i, h in enumerate(dict.fromkeys(nb.hyps))}
            st = dict(zip(uniq, metric.stats(nb.ref, list(uniq)), strict=True))
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
        """(U, N) combined scores -> best index per utterance (first of ties)."""
        if totals.shape != self.valid.shape:
            raise ValueError(f"combined scores of shape {totals.shape} for {self.valid.shape} (utterances, "
                             "longest list)")
        return np.argmax(np.where(self.valid, totals, -np.inf), axis=1)

    def ties(self, totals: np.ndarray) -> int:
        """Utterances whose best combined score is shared by a hypothesis of another text (`select` took the
        earlier position); a duplicate of the chosen text is no tie."""
        sel, u = self.select(totals), np.arange(len(self.lists))
        top = self.valid & (totals == totals[u, sel][:, None])  # (U, N)
        return int((top & (self.text_ids != self.text_ids[u, sel][:, None])).any(axis=1).sum())

    def better(self, a: float, b: float) -> bool:
        return a > b if self.metric.higher_is_better else a < b


def _pad(rows: Sequence[np.ndarray], n_max: int) -> np.ndarray:
    out = np.zeros((len(rows), n_max))
    for u, r in enumerate(rows):
        out[u, : len(r)] = r
    return out


@dataclass
class Components:
    """(U, N) arrays of a(h) (first-pass, or -rank), lm(h) and words(h) of a set of lists."""

    first_pass: np.ndarray  # first-pass scores where present (0 elsewhere)
    has_first_pass: np.ndarray  # (U,) bool
    rank: np.ndarray
    lm: np.ndarray
    words: np.ndarray

    @classmethod
    def of(cls, lists: Sequence[NBestList], lm_scores: Sequence[Sequence[float]]) -> Components:
        """Each list padded to the longest of `lists` (N); the padding is never selected (Evaluator.valid)."""
        if len(lm_scores) != len(lists):
            raise ValueError(f"{len(lm_scores)} LM score lists for {len(lists)} n-best lists")
        for nb, s in zip(lists, lm_scores, strict=True):
            if len(s) != len(nb.hyps):
                raise NBestError(None, f"{len(s)} LM scores for {len(nb.hyps)} hypotheses", repr(nb.utt_id))
        n_max = max(len(nb.hyps) for nb in lists)
        fp = _pad([np.asarray(nb.first_pass_scores if nb.first_pass_scores is not None else [0.0] * len(nb.hyps))
                   for nb in lists], n_max)
        return cls(fp, np.array([nb.first_pass_scores is not None for nb in lists]),
                   _pad([np.arange(len(nb.hyps), dtype=np.float64) for nb in lists], n_max),
                   _pad([np.asarray(s, dtype=np.float64) for s in lm_scores], n_max),
                   _pad([np.array([num_words(h) for h in nb.hyps], dtype=np.float64) for nb in lists], n_max))

    def totals(self, w: Weights) -> np.ndarray:
        beta = w.beta if w.prior == "rank" else 0.0
        a = np.where(self.has_first_pass[:, None], self.first_pass, -beta * self.rank)
        return a + w.lm * self.lm + w.length * self.words

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
    """The baseline an LM has to beat: a(h) + length * words(h) with no LM (lm = 0), the per-word bonus
    tuned on dev over `bonus_grid` (in first-pass-score or rank units; only its sign matters when no list has
    an a(h)). Ties keep the smaller |bonus|."""
    grid = sorted(set(float(x) for x in bonus_grid), key=lambda b: (abs(b), b))
    scale_free = comps.scale_free(prior)
    if scale_free:
        grid = sorted(set(float(np.sign(x)) for x in grid), key=lambda b: (abs(b), b))
    s, w, b, n = _grid_search(evaluator, comps, ((Weights(lm=0.0, length=b, beta=beta, prior=prior), b)
                                                 for b in grid))
    on_edge = []
    if not scale_free and b != 0 and abs(b) == max(abs(x) for x in grid) and len(grid) > 1:
        on_edge.append(f"word bonus without the LM at the grid's {'maximum' if b > 0 else 'minimum'} ({b:g})")
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


@dataclass
class GuardedTuning:
    weights: Weights  # what to apply: with_lm when its dev gain over without_lm is significant, else without_lm
    with_lm: TuneResult
    without_lm: TuneResult
    guard: dict  # paired_bootstrap of with_lm over without_lm on dev, and "kept": "lm" or "no_lm"


def tune_guarded(evaluator: Evaluator, comps: Components, *, lm_grid: Sequence[float] = DEFAULT_LM_GRID,
                 length_grid: Sequence[float] = DEFAULT_LENGTH_GRID, bonus_grid: Sequence[float] = DEFAULT_BONUS_GRID,
                 beta: float = 1.0, prior: str = "none", resamples: int = 1000, confidence: float = 0.95,
                 seed: int = 0) -> GuardedTuning:
    """Tune with the LM (`tune_weights`) and without it (`tune_without_lm`) on dev, and keep the LM only when
    its dev gain is significant (`paired_bootstrap`): otherwise the result without the LM (the first pass and
    a word bonus) is kept, so that an LM that does not help is not applied by chance."""
    with_lm = tune_weights(evaluator, comps, lm_grid=lm_grid, length_grid=length_grid, beta=beta, prior=prior)
    without_lm = tune_without_lm(evaluator, comps, bonus_grid=bonus_grid, beta=beta, prior=prior)
    guard = paired_bootstrap(evaluator, evaluator.select(comps.totals(without_lm.weights)),
                             evaluator.select(comps.totals(with_lm.weights)), resamples=resamples, seed=seed,
                             confidence=confidence)
    guard["kept"] = "lm" if guard["significant"] else "no_lm"
    return GuardedTuning(with_lm.weights if guard["significant"] else without_lm.weights, with_lm, without_lm, guard)


def split_dev(lists: Sequence[NBestList], fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
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
                   no_lm: Weights | None = None, with_lm: Weights | None = None) -> dict:
    """first-hypothesis, oracle, LM-only, (with `no_lm`, weights whose lm is 0) the score without the LM,
    (with `with_lm`) the score with the LM weights tuned on dev whether kept or not, and (with `weights`) the
    reranked score of one split with `ties`: the utterances whose choice was a tie, broken by the earlier
    position."""
    lists = ev.lists
    comps = Components.of(lists, lm_scores)
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


def rerank_report(lists: Sequence[NBestList], lm_scores: Sequence[np.ndarray], *, metric: str = "wer",
                  dev: tuple[Sequence[NBestList], Sequence[np.ndarray]] | None = None,
                  dev_fraction: float | None = 0.5, seed: int = 0, weights: Weights | None = None,
                  lm_grid: Sequence[float] = DEFAULT_LM_GRID, length_grid: Sequence[float] = DEFAULT_LENGTH_GRID,
                  bonus_grid: Sequence[float] = DEFAULT_BONUS_GRID, beta: float = 1.0, prior: str = "none",
                  resamples: int = 1000, confidence: float = 0.95, path: str | Path | None = None,
                  dev_path: str | Path | None = None, need_refs: bool = True) -> tuple[Weights, dict]:
    """Tune (unless `weights` is given) and evaluate. Dev is `dev` (lists, scores) when given, else a seeded
    `dev_fraction` of `lists`; the test split is the rest (or all of `lists` with a dev file). Tuning keeps the
    LM only when its dev gain is significant (`tune_guarded`: `guard` in the report, `weights_lm` the LM weights
    it tuned, `with_lm` their result on each split). Every split also reports `no_lm`: the first-pass score (or
    rank prior) with a word bonus tuned on dev and no LM (`weights_no_lm`; with given weights, those weights with
    lm 0), so the LM's own gain is visible. `prior` ("rank" or "none") says whether lists without first-pass
    scores get -beta * rank (`prior_note` in the report says what was assumed). Returns (weights, report)."""
    m = make_metric(metric)
    report: dict = {"metric": m.name, "higher_is_better": m.higher_is_better, "num_utterances": len(lists)}
    note = prior_note([*lists, *(dev[0] if dev is not None else [])], weights.prior if weights else prior)
    if note:
        report["prior_note"] = note
    if weights is not None:
        no_lm = replace(weights, lm=0.0)  # the same weights without the LM
        report.update(weights=weights.to_dict(), tuned=False, weights_no_lm=no_lm.to_dict())
        if need_refs or all(nb.ref is not None for nb in lists):
            report["test"] = {**evaluate_split(Evaluator(lists, m, path), lm_scores, weights, no_lm),
                              "ids": [nb.utt_id for nb in lists]}
        return weights, report
    ev_all = Evaluator(lists, m, path)
    if dev is not None:
        ev_dev, dev_scores = Evaluator(list(dev[0]), m, dev_path), list(dev[1])
        ev_test, test_scores = ev_all, list(lm_scores)
        report["dev_source"] = {"file": str(dev_path) if dev_path is not None else None}
    else:
        if dev_fraction is None:
            raise ValueError("tuning needs a dev file or a dev fraction")
        dev_idx, test_idx = split_dev(lists, dev_fraction, seed)
        ev_dev, dev_scores = ev_all.subset(dev_idx), [lm_scores[i] for i in dev_idx]
        ev_test, test_scores = ev_all.subset(test_idx), [lm_scores[i] for i in test_idx]
        report["dev_source"] = {"fraction": dev_fraction, "seed": seed}
    t = tune_guarded(ev_dev, Components.of(ev_dev.lists, dev_scores), lm_grid=lm_grid, length_grid=length_grid,
                     bonus_grid=bonus_grid, beta=beta, prior=prior, resamples=resamples, confidence=confidence,
                     seed=seed)
    rows = {"weights": t.weights, "no_lm": t.without_lm.weights, "with_lm": t.with_lm.weights}
    report.update(
        tuned=True,
        weights=t.weights.to_dict(),
        weights_lm=t.with_lm.weights.to_dict(),
        weights_no_lm=t.without_lm.weights.to_dict(),
        guard=t.guard,
        grid={"lm": list(lm_grid), "length_per_lm": list(length_grid), "beta": beta, "bonus_no_lm": list(bonus_grid),
              "evaluated": t.with_lm.evaluated + t.without_lm.evaluated,
              "chosen_length_per_lm": t.with_lm.length_per_lm, "on_edge": t.with_lm.on_edge + t.without_lm.on_edge},
        dev={**evaluate_split(ev_dev, dev_scores, **rows), "ids": [nb.utt_id for nb in ev_dev.lists]},
        test={**evaluate_split(ev_test, test_scores, **rows), "ids": [nb.utt_id for nb in ev_test.lists]},
    )
    if dev is None:  # the whole input, dev included (tuned on): optimistic next to test
        report["all"] = evaluate_split(ev_all, lm_scores, **rows)
    return t.weights, report


def format_report(report: dict) -> str:
    """A short human-readable summary of `rerank_report` (without the id lists)."""
    name = report["metric"].upper()
    unit = "%" if report["metric"] in ("wer", "cer") else ""
    lines = []
    w = report["weights"]
    prior = (f"rank prior -{w['beta']:g}*rank for lists without first-pass scores" if w.get("prior") == "rank"
             else "no rank prior")
    lines.append(f"weights: lm {w['lm']:g}, length {w['length']:g}/word, {prior}"
                 f"{'' if report.get('tuned') else ' (given, not tuned)'}")
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
        b = report["weights_no_lm"]["length"]
        lines.append(f"no_lm: without the LM: first-pass score (or rank prior) and a word bonus of {b:g}/word "
                     f"({'tuned on dev' if report.get('tuned') else 'the given weights with lm 0'})")
    g = report.get("guard")
    if g:
        wl = report["weights_lm"]
        lines.append(f"with_lm: the LM weights tuned on dev: lm {wl['lm']:g}, length {wl['length']:g}/word")
        verdict = ("significant: the LM is used (reranked = with_lm)" if g["significant"] else
                   "not significant: the LM is NOT used; the first pass is kept (reranked = no_lm)")
        lines.append(f"dev gain of with_lm over no_lm (positive = better): {g['gain']:+.2f} {name} points, "
                     f"{100 * g['confidence']:g}% CI [{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}] (paired bootstrap "
                     f"over {report['dev']['num_utterances']} dev utterances, {g['resamples']} resamples, seed "
                     f"{g['seed']}): {verdict}")
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
        unused = "" if g is None or g["significant"] else "; not applied: its dev gain was not significant"
        lines.append(f"the LM's own gain on test: {name} {test['no_lm']:.2f}{unit} without it, "
                     f"{lm:.2f}{unit} with it (gain {gain:+.2f}{unused})")
    return "\n".join(lines)
