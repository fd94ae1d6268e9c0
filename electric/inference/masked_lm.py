"""Torch masked LMs for the classic MLM pseudo-log-likelihood (Salazar et al. 2020): load and check a local
masked-LM checkpoint (ELECTRA generator/MLM, BERT, RoBERTa, ...), and the log-probability of every candidate token
with it masked - one masked copy per token, copies of many texts batched together, the vocabulary head only at the
masked position (`mlm_token_logprobs`; `word_l2r`: also mask the later pieces of the word, Kauf & Ivanova 2023).

`electric.inference.scoring.MaskedLMScorer` turns these log-probs into text scores beside the one-pass `Scorer`.
Needs the torch extra; nothing here is imported by serving an ONNX export.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from electric.batching import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    pad_rows,
    plan_batches,
    progress_bar,
)
from electric.checkpoint import CheckpointError, require_extra, require_local_dir
from electric.tokenization import load_tokenizer


def read_config(d: Path) -> dict:
    p = d / "config.json"
    if not p.is_file():
        raise CheckpointError(f"model directory {str(d)!r} has no config.json (not a transformers checkpoint)")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{p}: not valid JSON ({e})") from e


def check_masked_lm_config(d: Path) -> Path:
    """`d`, unless its config.json says it is not a masked LM (a discriminator, Electric's cloze generator)."""
    cfg = read_config(d)
    archs = cfg.get("architectures") or []
    if cfg.get("model_type") == "electric-cloze" or "ElectricForClozeLM" in archs:
        raise CheckpointError(
            f"{str(d)!r} holds Electric's two-tower cloze generator (ElectricForClozeLM), not a masked LM: it never "
            "sees a [MASK] token, so MLM PLL does not apply. Score it with --method cloze (one pass), the run's "
            "discriminator with --method electric, or point mlm-pll at the generator of an `--objective mlm` or "
            "`electra` run"
        )
    if any(a.endswith(("ForPreTraining", "ForSequenceClassification", "ForTokenClassification")) for a in archs) \
            and not any(a.endswith("ForMaskedLM") for a in archs) and cfg.get("model_type") == "electra":
        raise CheckpointError(f"{str(d)!r} holds an ELECTRA {archs[0]}, not a masked LM; use --method electric or "
                              "electra with it, or point mlm-pll at a generator / masked-LM directory")
    return d


def load_masked_lm(model_dir: str | Path, device: str | None = None, dtype=None):
    """(model, tokenizer) of a local masked-LM checkpoint: ELECTRA generator/MLM, BERT, RoBERTa, ...

    Rejects an ELECTRA discriminator and Electric's two-tower cloze generator, which are not masked LMs.
    """
    require_extra("MLM pseudo-log-likelihood (--method mlm-pll)")
    import torch
    from transformers import AutoModelForMaskedLM

    from electric.modeling.loading import no_progress_bar
    from electric.modeling.pre_layer_norm import require_post_layer_norm

    d = check_masked_lm_config(require_local_dir(model_dir, "model"))
    require_post_layer_norm(d, "MLM pseudo-log-likelihood")
    try:
        with no_progress_bar():
            model, info = AutoModelForMaskedLM.from_pretrained(d, output_loading_info=True,
                                                               **({"dtype": dtype} if dtype is not None else {}))
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"could not load a masked LM from {str(d)!r}: {e}") from e
    head_missing = [k for k in info.get("missing_keys", []) if not k.startswith(model.base_model_prefix + ".")]
    if head_missing:
        raise CheckpointError(f"{str(d)!r} has no trained masked-LM head (missing {sorted(head_missing)[:3]}); "
                              "it is not a masked-LM checkpoint")
    return model.to(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))).eval(), load_tokenizer(d)


def mlm_head(model) -> Callable | None:
    """The masked-LM head as a function of hidden states (..., H) -> (..., V), or None if unknown."""
    if hasattr(model, "generator_predictions") and hasattr(model, "generator_lm_head"):  # ELECTRA
        return lambda h: model.generator_lm_head(model.generator_predictions(h))
    if hasattr(model, "cls"):  # BERT
        return model.cls
    if hasattr(model, "lm_head"):  # RoBERTa, XLM-R, ...
        return model.lm_head
    if hasattr(model, "vocab_projector"):  # DistilBERT
        return lambda h: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(h))))
    return None


def mlm_token_logprobs(model, encoded: Sequence, *, mask_id: int, pad_id: int, word_l2r: bool = False,
                       max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, batch_size: int = DEFAULT_BATCH_SIZE,
                       progress: bool = False) -> list[np.ndarray]:
    """log p(x_t | x with t masked) for every candidate t of every text: one (T,) array per text (0 at
    non-candidates). One masked copy per candidate; copies of many texts are batched together (by length,
    under the token budget); the encoder runs on the copy and the vocabulary head only on the masked
    position's hidden state. `word_l2r`: also mask the later pieces of t's word (PLL-word-l2r)."""
    import torch

    head = mlm_head(model)
    base = getattr(model, model.base_model_prefix, None) if head is not None else None
    device = next(model.parameters()).device
    jobs = []  # (item, row index, row position to predict, extra masked row positions)
    rows_of = [e.rows() for e in encoded]
    for i, e in enumerate(encoded):
        for t in np.flatnonzero(e.candidates):
            k, p = e.row_position(int(t))
            extra: tuple[int, ...] = ()
            if word_l2r and e.word_ids[t] is not None:
                w, nxt = e.word_ids[t], int(t) + 1
                limit = e.length if e.windows is None else e.windows[k].end  # stay inside this row
                while nxt < limit and e.candidates[nxt] and e.word_ids[nxt] == w:
                    nxt += 1
                extra = tuple(range(p + 1, p + nxt - int(t)))
            jobs.append((i, k, p, extra))
    out = [np.zeros(e.length, dtype=np.float64) for e in encoded]
    lengths = [len(rows_of[i][k]) for i, k, _, _ in jobs]
    batches = plan_batches(lengths, max_batch_tokens=max_batch_tokens, batch_size=batch_size)
    with torch.inference_mode():
        for batch in progress_bar(batches, progress, "batches"):
            ids, mask = pad_rows([rows_of[jobs[j][0]][jobs[j][1]] for j in batch], pad_id)
            pos = np.array([jobs[j][2] for j in batch])
            b_idx = np.arange(len(batch))
            target = ids[b_idx, pos].copy()
            ids[b_idx, pos] = mask_id
            for b, j in enumerate(batch):
                for q in jobs[j][3]:
                    ids[b, q] = mask_id
            ids_t, mask_t = torch.as_tensor(ids, device=device), torch.as_tensor(mask, device=device)
            pos_t, b_t = torch.as_tensor(pos, device=device), torch.as_tensor(b_idx, device=device)
            if head is not None and base is not None:
                h = base(input_ids=ids_t, attention_mask=mask_t).last_hidden_state  # (B, T, H)
                logits = head(h[b_t, pos_t])  # (B, V): vocabulary head at the masked position only
            else:  # unknown architecture: full model, then pick the masked position
                logits = model(input_ids=ids_t, attention_mask=mask_t).logits[b_t, pos_t]  # (B, V)
            logp = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
            lp = logp[b_t, torch.as_tensor(target, device=device)].double().cpu().numpy()  # (B,)
            for b, j in enumerate(batch):
                i, k, p, _ = jobs[j]
                e = encoded[i]
                t = p if e.windows is None else e.windows[k].start + p - 1
                out[i][t] = lp[b]
    return out
