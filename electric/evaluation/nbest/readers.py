"""Read n-best files (hyporadise, espnet, text) into `NBestList`s; attach references."""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from electric.evaluation.nbest.lists import FORMATS, SCORE_KEYS, NBestError, NBestList
from electric.textio import decode_text, iter_lines, quote


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
        first_pass = [s for s in scores if s is not None] if has_scores else None
        out.append(NBestList(str(utt_id), hyps, first_pass, ref, extra,
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


def require_refs(lists: Sequence[NBestList], path: str | Path | None, fmt: str) -> None:
    """An error rate needs a reference for every utterance: raise `NBestError` naming the first without."""
    for nb in lists:
        if nb.ref is None:
            hint = " (plain text lists carry none: pass --refs FILE)" if fmt == "text" else ""
            raise NBestError(path, f"no reference; an error rate needs one for every utterance{hint}", repr(nb.utt_id))
