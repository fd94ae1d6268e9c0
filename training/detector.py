"""The detector fine-tuned on a recogniser's real errors: replaced-token detection (ELECTRA's objective) with labels
from the n-best lists' hypotheses aligned with their references (electric.finetuning.asr_errors).

    record = train_detector(DetectorSpec(source=RUN/discriminator, out=DIR, lists=train_lists, test=test_lists))

The loop: every distinct hypothesis of the lists, its words labelled 1 where the recogniser substituted or inserted
them; a seeded tenth of the lists held back; binary cross-entropy of sigma(s_t) against the piece labels (each piece
its word's), AdamW at `lr`, BATCH hypotheses a step, `epochs` over them or `minutes` at most. The AUC of real errors
(a word's score: the maximum over its pieces) is measured on the held-back hypotheses before and after (the trained
model is kept only when it is higher) and, with `test`, on the test lists' hypotheses: the zero-shot detector (the
adapted energy model as it came) against the trained one. Ctrl-C stops it with nothing kept (it takes minutes: the
next run starts it again).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electric.finetuning.asr_errors import piece_labels, piece_words, word_error_labels, word_scores

BATCH = 32
HELD_BACK_FRACTION = 0.1


@dataclass(frozen=True)
class DetectorSpec:
    source: Path  # an ElectraForPreTraining directory (the adapted energy model)
    out: Path  # where the trained detector is written (a copy of `source` with new weights)
    lists: list  # NBestList with references: what the detector learns from
    test: list | None = None  # NBestList with references: the AUC of real errors is reported on them
    epochs: int = 1
    minutes: float = 4.0
    lr: float = 5e-5
    seed: int = 0
    progress: bool = True


@dataclass
class Labelled:
    ids: list[np.ndarray]  # per hypothesis: its token ids
    labels: list[np.ndarray]  # per hypothesis: (T,) piece labels, -1 where not scored
    words: list[np.ndarray]  # per hypothesis: (T,) whitespace word of each piece, -1 for the others
    word_labels: list[list[int]]


def label(lists: list, tokenizer: Any, max_length: int) -> Labelled:
    """Every distinct (hypothesis, reference) of the lists, encoded as the server encodes it, with its labels."""
    from electric.inference.encoding import encode

    pairs = list(dict.fromkeys((h, nb.ref or "") for nb in lists for h in nb.hyps if h.strip()))
    enc = encode(tokenizer, [h for h, _ in pairs], max_length, truncate=True)
    out = Labelled([], [], [], [])
    for (h, ref), e in zip(pairs, enc, strict=True):
        wl = word_error_labels(h, ref)
        pw = piece_words(h, e.offsets, np.asarray(e.candidates, dtype=bool))
        out.ids.append(e.input_ids)
        out.labels.append(piece_labels(wl, pw))
        out.words.append(pw)
        out.word_labels.append(wl)
    return out


def batch(data: Labelled, rows: list[int], pad_id: int) -> tuple[torch.Tensor, ...]:
    """(ids, attention mask, piece labels), each (B, T); the labels -1 where a piece is not scored."""
    from electric.batching import pad_rows

    ids, mask = pad_rows([data.ids[r] for r in rows], pad_id)  # type: ignore[misc]  # (T,) id arrays are rows
    lab = np.full(ids.shape, -1.0, dtype=np.float32)
    for b, r in enumerate(rows):
        lab[b, : len(data.labels[r])] = data.labels[r]
    return torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(lab)


@torch.no_grad()
def error_auc(model: torch.nn.Module, data: Labelled, rows: list[int], pad_id: int) -> float:
    """ROC-AUC of the words' scores (max s_t over their pieces) against their real-error labels."""
    from electric.evaluation.metrics import roc_auc

    was = model.training
    model.eval()
    y, s = [], []
    order = sorted(rows, key=lambda r: len(data.ids[r]))
    for lo in range(0, len(order), 64):
        chunk = order[lo: lo + 64]
        ids, mask, _ = batch(data, chunk, pad_id)
        logits = model(input_ids=ids, attention_mask=mask).logits.float().numpy()
        for b, r in enumerate(chunk):
            ws = word_scores(logits[b, : len(data.ids[r])], data.words[r], len(data.word_labels[r]))
            ok = ~np.isnan(ws)
            y += list(np.asarray(data.word_labels[r])[ok])
            s += list(ws[ok])
    model.train(was)
    return float(roc_auc(y, s)) if 0 < sum(y) < len(y) else float("nan")


def train_detector(spec: DetectorSpec, log: Callable[[str], None] = print) -> dict:
    """Fine-tune the detector on the lists' real errors (the module's docstring); returns its record."""
    import transformers
    from tqdm.auto import tqdm

    from electric.checkpoint import trained_length
    from electric.modeling.loading import load_model, read_model_config
    from electric.tokenization import load_tokenizer

    torch.manual_seed(spec.seed)
    model = load_model(spec.source, transformers.ElectraForPreTraining).train()
    tokenizer = load_tokenizer(spec.source)
    max_length = trained_length(spec.source, read_model_config(spec.source))[0]
    pad_id = int(tokenizer.pad_token_id or 0)
    lists = list(spec.lists)
    random.Random(spec.seed).shuffle(lists)
    n_held = max(20, round(HELD_BACK_FRACTION * len(lists)))
    train, held = label(lists[n_held:], tokenizer, max_length), label(lists[:n_held], tokenizer, max_length)
    test = label(spec.test, tokenizer, max_length) if spec.test else None
    rows = list(range(len(train.ids)))
    before = error_auc(model, held, list(range(len(held.ids))), pad_id)
    test_before = error_auc(model, test, list(range(len(test.ids))), pad_id) if test else None
    log(f"detector: {len(rows):,} hypotheses to learn real errors from ({sum(map(sum, train.word_labels)):,} of "
        f"{sum(map(len, train.word_labels)):,} words wrong); held-back error AUC before {before:.3f}")
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01, eps=1e-6)
    steps = spec.epochs * -(-len(rows) // BATCH)
    bar = tqdm(total=steps, desc="detector training", unit="step", dynamic_ncols=True, disable=not spec.progress)
    t0, step, tokens = time.perf_counter(), 0, 0
    for epoch in range(spec.epochs):
        random.Random(spec.seed + epoch).shuffle(rows)
        for lo in range(0, len(rows), BATCH):
            ids, mask, lab = batch(train, rows[lo: lo + BATCH], pad_id)
            for g in opt.param_groups:
                g["lr"] = spec.lr * max(0.0, 1 - step / steps)
            logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T) s_t
            scored = lab >= 0
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[scored], lab[scored])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step, tokens = step + 1, tokens + int(mask.sum())
            bar.update(1)
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
            if time.perf_counter() - t0 > spec.minutes * 60:
                break
        if time.perf_counter() - t0 > spec.minutes * 60:
            break
    bar.close()
    seconds = time.perf_counter() - t0
    after = error_auc(model, held, list(range(len(held.ids))), pad_id)
    kept = after > before
    record = {"hypotheses": len(rows), "held_back_hypotheses": len(held.ids), "steps": step, "tokens": tokens,
              "seconds": round(seconds, 1), "tokens_per_s": round(tokens / max(seconds, 1e-9)),
              "held_back_auc_before": before, "held_back_auc_after": after, "kept": kept,
              "test_auc_zero_shot": test_before}
    if test:
        record["test_auc_trained"] = error_auc(model, test, list(range(len(test.ids))), pad_id)
    tmp = spec.out.with_name(spec.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(spec.source, tmp)
    if kept:
        model.save_pretrained(tmp)
    shutil.rmtree(spec.out, ignore_errors=True)
    tmp.rename(spec.out)
    verdict = "kept" if kept else "not kept: the zero-shot detector is served"
    on_test = f"; test {test_before:.3f} zero-shot, {record['test_auc_trained']:.3f} trained" if test else ""
    log(f"detector: held-back error AUC {before:.3f} -> {after:.3f} ({verdict}){on_test}")
    return record
