"""Write `NBestList`s back in any of the formats (unknown fields round-trip)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from electric.evaluation.nbest.lists import FORMATS, NBestError, NBestList
from electric.textio import atomic_write_text


def to_hyporadise(lists: Sequence[NBestList]) -> list[dict]:
    """Per-hypothesis fields become lists, one entry per hypothesis; a field that only some hypotheses of a list
    have (possible in ESPnet input) cannot be written so and is left out."""
    out = []
    for nb in lists:
        item: dict[str, object] = {"input": list(nb.hyps)}
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
    """Write `lists` in `format`, whole or not at all (`atomic_write_text`)."""
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
    atomic_write_text(path, text)
