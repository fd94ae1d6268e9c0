"""Parity of an exported graph with torch: the sentences (a file, the caller's default or built-in ones),
batches at shapes other than the export shape, and the measures (max logit difference, Spearman of
sentence scores)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from electric.checkpoint import Kind
from electric.evaluation.metrics import spearman
from electric.export.errors import ExportError
from electric.inference.runtime import INPUT_NAMES

PARITY_BATCHES = (1, 7, 24, 32)  # parity batch sizes; each padded to its own longest row
PARITY_MAX_TOKENS = 128
# Built-in parity sentences, used only when neither --parity-data nor a default sentence file is available.
BUILTIN_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "i would like to book a flight from boston to denver on monday morning",
    "She sells sea shells by the sea shore.",
    "The committee will meet again next week to discuss the budget.",
    "he was born in a small town near the river and moved to the city when he was twelve",
    "What time does the last train leave for the airport?",
    "Paris is the capital and most populous city of France.",
    "the results of the experiment were not consistent with the original hypothesis",
    "Please turn off the lights when you leave the room.",
    "A new species of frog was discovered in the rainforest last year.",
    "show me the cheapest fare from dallas to san francisco",
    "The museum is closed on Mondays and public holidays.",
    "they decided to postpone the meeting because of the storm",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The novel was translated into more than forty languages.",
    "could you tell me how to get to the nearest train station",
)


def read_sentences(path: str | Path, limit: int | None = None) -> list[str]:
    """One sentence a line; for a .tsv, the `sentence` column if the header has one, else the first."""
    p = Path(path)
    if not p.is_file():
        raise ExportError(f"sentence file {str(p)!r} is not a file")
    lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    col = 0
    if p.suffix == ".tsv" and lines and "sentence" in lines[0].split("\t"):
        col = lines.pop(0).split("\t").index("sentence")
    out = []
    for line in lines:
        text = (line.split("\t")[col] if p.suffix == ".tsv" else line).strip()
        if text:
            out.append(text)
        if limit and len(out) >= limit:
            break
    return out


def sentences_or_default(path: str | Path | None, limit: int, what: str,
                         default: str | Path | None = None) -> tuple[list[str], str]:
    """Up to `limit` sentences and where they came from: `path`, else the `default` file when it exists and holds
    some, else the built-in ones."""
    if path is not None:
        sents = read_sentences(path, limit)
        if not sents:
            raise ExportError(f"{what} {str(path)!r} holds no sentences")
        return sents, str(path)
    sents = read_sentences(default, limit) if default is not None and Path(default).is_file() else []
    return (sents, str(default)) if sents else (list(BUILTIN_SENTENCES), "built-in sentences")


def parity_sentences(path: str | Path | None = None, n: int = sum(PARITY_BATCHES),
                     default: str | Path | None = None) -> tuple[list[str], str]:
    """n real sentences: from `path`, else the `default` file, else built-in ones."""
    sents, source = sentences_or_default(path, n, "parity data", default)
    while len(sents) < n:  # repeat a short file; the batch shapes still differ
        sents = sents + sents[: n - len(sents)]
    return sents[:n], source


def parity_batches(tokenizer, sentences: Sequence[str], max_length: int, pairs: bool,
                   sizes: Sequence[int] = PARITY_BATCHES) -> list[dict]:
    """Batches of `sizes` sentences (PARITY_BATCHES), each padded to its own longest row (so T differs between them),
    up to PARITY_MAX_TOKENS tokens a row.
    With `pairs`, every other example is a sentence pair (token_type_ids 1 on the second segment)."""
    out, i = [], 0
    limit = min(max_length, PARITY_MAX_TOKENS)
    for size in sizes:
        chunk = list(sentences[i : i + size])
        i += size
        if not chunk:
            break
        if pairs:
            firsts = chunk
            seconds = [chunk[(j + 1) % len(chunk)] if j % 2 else None for j in range(len(chunk))]
            enc = [tokenizer(a, b, truncation=True, max_length=limit) if b else
                   tokenizer(a, truncation=True, max_length=limit) for a, b in zip(firsts, seconds, strict=True)]
            enc = tokenizer.pad({"input_ids": [e["input_ids"] for e in enc],
                                 "token_type_ids": [e.get("token_type_ids", [0] * len(e["input_ids"])) for e in enc],
                                 "attention_mask": [e["attention_mask"] for e in enc]}, return_tensors="np")
            ids = enc["input_ids"]
            special = np.isin(ids, tokenizer.all_special_ids)
        else:
            enc = tokenizer(chunk, padding=True, truncation=True, max_length=limit, return_tensors="np",
                            return_special_tokens_mask=True)
            special = enc["special_tokens_mask"].astype(bool)
        batch: dict[str, np.ndarray] = {k: np.asarray(enc[k], dtype=np.int64) for k in INPUT_NAMES if k in enc}
        batch.setdefault("token_type_ids", np.zeros_like(batch["input_ids"]))
        batch["candidates"] = batch["attention_mask"].astype(bool) & ~special  # (B, T)
        out.append(batch)
    return out


def sentence_scores(kind: Kind, logits: np.ndarray, batch: dict) -> np.ndarray:
    """One number per sentence (discriminator: PLL = -sum s_t over candidates; cloze: sum of log q(x_t | x_not_t) over
    candidates) or per logit (classifier: every class; tagger: every class at every real token), for rank
    correlation."""
    if kind == "discriminator":
        return -(logits * batch["candidates"]).sum(axis=1)  # (B,)
    if kind == "cloze":
        return (logits * batch["candidates"]).sum(axis=1)  # (B,)
    if kind == "classifier":
        return logits.reshape(-1)  # (B*C,)
    return logits[batch["attention_mask"].astype(bool)].reshape(-1)  # (N_real*C,)


def real_values(kind: Kind, logits: np.ndarray, batch: dict) -> np.ndarray:
    """The logits that mean something: all of a classifier's, the real tokens' otherwise."""
    return logits.reshape(-1) if kind == "classifier" else logits[batch["attention_mask"].astype(bool)].reshape(-1)


def compare(kind: Kind, batches: list[dict], ref: list[np.ndarray], got: list[np.ndarray]) -> dict:
    diff = max(float(np.abs(real_values(kind, g, b) - real_values(kind, r, b)).max())
               for b, r, g in zip(batches, ref, got, strict=True))
    s_ref = np.concatenate([sentence_scores(kind, r, b) for b, r in zip(batches, ref, strict=True)])
    s_got = np.concatenate([sentence_scores(kind, g, b) for b, g in zip(batches, got, strict=True)])
    out = {"max_abs_diff": diff, "spearman": spearman(s_ref, s_got)}
    if kind in ("discriminator", "cloze"):  # length-free view: PLL per token (sentence length drives the sum's ranks)
        n = np.concatenate([b["candidates"].sum(axis=1) for b in batches]).clip(min=1)
        out["spearman_per_token"] = spearman(s_ref / n, s_got / n)
    return out


def run_batches(run: Callable, batches: list[dict]) -> list[np.ndarray]:
    return [run(b["input_ids"], b["attention_mask"], b["token_type_ids"]) for b in batches]
