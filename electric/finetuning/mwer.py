"""Discriminative n-best training (minimum word error, after RescoreBERT, Xu et al. 2022): the loss and the lists'
tensors, pure functions over tensors; `training/discriminative.py` is the loop that uses them.

For a list with hypotheses h_1..h_n, the combined score of each is z_i = alpha * a_i + lam * s_i + gamma * words_i +
pi * pieces_i (a_i the first-pass score, s_i the model's one-pass sentence score, the one the server serves), and

    p_i = softmax_i(z_i)            L_MWER = sum_i p_i (e_i - mean_j e_j)

with e_i the word (or character) errors of h_i against the reference: the expected errors of the list relative to
its mean, so that the gradient only moves probability between the hypotheses of one list. A list whose hypotheses
all have the same errors carries no gradient (`informative`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from electric.evaluation.nbest.corpus_metrics import Evaluator
from electric.evaluation.nbest.lists import NBestList

ERROR_METRICS = ("wer", "cer")  # metrics whose sufficient statistics start with an edit count


def mwer_loss(logits: torch.Tensor, errors: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The mean over lists of sum_i p_i (e_i - mean e) with p = softmax over each list's valid hypotheses.

    logits, errors: (L, N) float; valid: (L, N) bool (False: padding of a shorter list). ValueError for shapes that
    differ or a list with no valid hypothesis."""
    if logits.shape != errors.shape or logits.shape != valid.shape or logits.dim() != 2:
        raise ValueError(f"logits {tuple(logits.shape)}, errors {tuple(errors.shape)} and valid {tuple(valid.shape)} "
                         "must be one (L, N) shape")
    counts = valid.sum(dim=1)  # (L,)
    if bool((counts == 0).any()):
        raise ValueError(f"list {int((counts == 0).nonzero()[0])} has no valid hypothesis")
    p = torch.softmax(logits.masked_fill(~valid, float("-inf")), dim=1)  # (L, N), 0 at padding
    e = errors.masked_fill(~valid, 0.0)
    mean = e.sum(dim=1, keepdim=True) / counts.unsqueeze(1)  # (L, 1)
    return (p * (e - mean)).sum(dim=1).mean()


def hypothesis_errors(lists: Sequence[NBestList], metric: str) -> list[np.ndarray]:
    """Per list, the (N,) edit errors of each hypothesis against its reference (`metric` wer: words, cer:
    characters), the statistics the corpus error rate sums. ValueError for another metric."""
    if metric not in ERROR_METRICS:
        raise ValueError(f"discriminative training minimises word or character errors (--metric wer or cer), not "
                         f"{metric!r}")
    from electric.evaluation.nbest import make_metric

    ev = Evaluator(list(lists), make_metric(metric))
    return [ev.stats[u, : len(nb.hyps), 0].astype(np.float64) for u, nb in enumerate(lists)]


def informative(errors: np.ndarray) -> bool:
    """True when a list's hypotheses differ in errors: only then does its MWER loss have a gradient."""
    return bool(len(errors) > 1 and np.ptp(errors) > 0)


def padded(rows: Sequence[np.ndarray], fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, N) float32 tensor of ragged rows padded with `fill`, and its (L, N) validity mask."""
    n = max(len(r) for r in rows)
    out = np.full((len(rows), n), fill, dtype=np.float32)
    valid = np.zeros((len(rows), n), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        valid[i, : len(r)] = True
    return torch.from_numpy(out), torch.from_numpy(valid)


def sentence_scores(model: torch.nn.Module, kind: str, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    candidates: torch.Tensor) -> torch.Tensor:
    """(B,) one-pass sentence scores, differentiable, equal to what the exported graph and the server give:
    kind "discriminator": Electric's sum of -s_t over the candidate tokens; "cloze": the sum of log q(x_t | x_not_t)
    (`model` an `electric.inference.cloze.ClozeTokenLogProbs`). Inputs (B, T); candidates (B, T) bool."""
    if kind == "cloze":
        per_token = model(input_ids, attention_mask)  # (B, T) log q
    elif kind == "discriminator":
        per_token = -model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T) -s_t
    else:
        raise ValueError(f"a one-pass sentence score comes from a discriminator or a cloze model, not a {kind!r}")
    return (per_token.float() * candidates).sum(dim=1)
