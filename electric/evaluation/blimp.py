"""BLiMP minimal pairs: read the sets (`read_blimp`) and the accuracy of a scorer on them (`blimp_accuracy`:
a pair is right when the good sentence scores strictly higher), per set, per linguistics field and overall, and
two scorers compared pair by pair (`paired_bootstrap_mean_diff`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from electric.textio import quote


class BlimpDataError(ValueError):
    """A missing or malformed BLiMP file; the message names the file and line."""


BLIMP_FIELDS = ("morphology", "syntax", "semantics", "syntax_semantics")  # BLiMP's four fields


class BlimpSet(list):
    """One BLiMP set: its (good, bad) pairs, and its `field` (normalised by `blimp_field`; None if unlabelled)."""

    field: str | None = None


def blimp_field(raw) -> str | None:
    """BLiMP's linguistics field, one spelling each: its files say "syntax_semantics" (one set of the full
    release "syntax/semantics"), its README "syntax-semantics"; all become "syntax_semantics"."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    return "_".join(raw.strip().lower().replace("-", " ").replace("_", " ").replace("/", " ").split())


def read_blimp(data: str | Path, limit: int | None = None) -> dict[str, BlimpSet]:
    """{phenomenon: [(good, bad), ...]} from a directory of BLiMP .jsonl files (or one file); each value is a
    `BlimpSet`, a list that also carries the set's field (its lines' "field")."""
    p = Path(data)
    if p.is_dir():
        files = sorted(p.glob("*.jsonl"))
        if not files:
            raise BlimpDataError(f"{p}: no .jsonl files (expected BLiMP sets)")
    elif p.is_file():
        files = [p]
    else:
        raise BlimpDataError(f"{p}: no such file or directory")
    sets: dict[str, BlimpSet] = {}
    for f in files:
        pairs = BlimpSet()
        with open(f, encoding="utf-8") as fh:
            for ln, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                if limit is not None and len(pairs) >= limit:
                    break
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BlimpDataError(f"{f}: line {ln}: not valid JSON ({e}): {quote(line.strip())}") from e
                if not isinstance(obj, dict) or not isinstance(obj.get("sentence_good"), str) \
                        or not isinstance(obj.get("sentence_bad"), str):
                    raise BlimpDataError(f"{f}: line {ln}: expected an object with string \"sentence_good\" and "
                                     f"\"sentence_bad\": {quote(line.strip())}")
                pairs.append((obj["sentence_good"], obj["sentence_bad"]))
                pairs.field = pairs.field or blimp_field(obj.get("field"))
        if not pairs:
            raise BlimpDataError(f"{f}: no sentence pairs")
        sets[f.stem] = pairs
    return sets


def blimp_accuracy(sets: Mapping[str, Sequence[tuple[str, str]]], score_fn, *, chunk_size: int = 4096,
                   progress: bool = False, per_pair: bool = False) -> dict:
    """Accuracy per set, per field (pairs pooled over the field's sets, for `BlimpSet`s that carry one)
    and overall; a pair is right when the good sentence scores strictly higher. `per_pair`: also
    "correct" = {set: [bool per pair, in order]}, for paired comparisons of two scorers on the same pairs."""
    from electric.evaluation.nbest import NBestList, score_nbest

    order = list(sets)
    lists = [NBestList(f"{k}:{i}", [g, b]) for k in order for i, (g, b) in enumerate(sets[k])]
    scores = score_nbest(lists, score_fn, chunk_size=chunk_size, progress=progress)
    out: dict = {"sets": {}}
    pos = 0
    right_all = ties_all = 0
    fields: dict[str, dict[str, int]] = {}
    correct: dict[str, list[bool]] = {}
    for k in order:
        n = len(sets[k])
        sc = scores[pos: pos + n]
        pos += n
        correct[k] = [bool(s[0] > s[1]) for s in sc]
        right = sum(correct[k])
        ties = sum(int(s[0] == s[1]) for s in sc)
        field = getattr(sets[k], "field", None)
        out["sets"][k] = {"accuracy": 100.0 * right / n, "pairs": n, "ties": ties, **({"field": field} if field else {})}
        right_all, ties_all = right_all + right, ties_all + ties
        if field:
            tally = fields.setdefault(field, {"right": 0, "pairs": 0, "ties": 0, "sets": 0})
            for key, value in (("right", right), ("pairs", n), ("ties", ties), ("sets", 1)):
                tally[key] += value
    named = [f for f in BLIMP_FIELDS if f in fields] + sorted(set(fields) - set(BLIMP_FIELDS))
    out["fields"] = {f: {"accuracy": 100.0 * fields[f]["right"] / fields[f]["pairs"], "pairs": fields[f]["pairs"],
                         "ties": fields[f]["ties"], "sets": fields[f]["sets"]} for f in named}
    total = sum(len(v) for v in sets.values())
    out["overall"] = {"accuracy": 100.0 * right_all / total, "pairs": total, "ties": ties_all,
                      "macro_accuracy": sum(v["accuracy"] for v in out["sets"].values()) / len(order)}
    if per_pair:
        out["correct"] = correct
    return out


def paired_bootstrap_mean_diff(a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000, seed: int = 0,
                               confidence: float = 0.95) -> dict:
    """mean(a) - mean(b) of paired per-item values (e.g. 1/0 correctness of two scorers on the same BLiMP pairs,
    `blimp_accuracy(..., per_pair=True)`)
    with its percentile confidence interval over `resamples` seeded resamplings of the items with replacement
    (paired: both are read on the same resample). `significant`: the whole interval lies above 0."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"a and b differ in shape: {x.shape} vs {y.shape}")
    if x.size == 0:
        raise ValueError("no items to resample")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    d = x - y  # (N,)
    rng = np.random.default_rng(seed)
    block = max(1, 4_000_000 // d.size)  # resamples per (block, N) index matrix: bounded memory
    means = np.concatenate([d[rng.integers(0, d.size, size=(min(block, resamples - done), d.size))].mean(1)
                            for done in range(0, resamples, block)])  # (resamples,)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2]) + 0.0  # + 0.0: no -0.0
    return {"diff": float(d.mean()) + 0.0, "ci": [float(lo), float(hi)], "confidence": confidence,
            "resamples": resamples, "seed": seed, "items": int(d.size), "significant": bool(lo > 0)}
