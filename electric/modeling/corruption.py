"""How pretraining corrupts text, as pure functions over tensors: which positions are candidates, which k of them
are chosen, what a generator sees there, the replacements it draws and how the result is labelled.

Pretraining's objectives (`electric.pretraining.objectives`, `electric.pretraining.modeling`) corrupt every batch
with these, and `electric export` corrupts its calibration text with the same ones (`generator_samples`), so that a
calibrated probability means "replaced as in pretraining".

Conventions: `input_ids`, `attention_mask` are (B, T); a boolean (B, T) mask selects positions and `x[mask]`
flattens them row-major to (N, ...). Randomness comes only from the `torch.Generator` passed in, so a step is
reproducible from its seed.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import ElectraForMaskedLM

from electric.modeling.cloze import ElectricForClozeLM


def candidate_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: torch.Tensor) -> torch.Tensor:
    """Positions that are neither special tokens nor padding: (B, T) bool."""
    return attention_mask.bool() & ~torch.isin(input_ids, special_ids)


def max_predictions(mask_prob: float, max_seq_length: int) -> int:
    """The most positions chosen in one sequence of `max_seq_length` tokens: int((mask_prob + 0.005) * length),
    at least 1 (ELECTRA's `max_predictions_per_seq`)."""
    return max(1, int((mask_prob + 0.005) * max_seq_length))


def num_to_mask(n_candidates: torch.Tensor, mask_prob: float, max_predictions: int) -> torch.Tensor:
    """k = max(1, round(mask_prob * n)) capped at max_predictions, per row; 0 for rows with no candidates."""
    k = torch.clamp(torch.round(n_candidates.float() * mask_prob), min=1).long()
    k = torch.minimum(k, torch.full_like(k, max_predictions))
    return torch.where(n_candidates > 0, torch.minimum(k, n_candidates), torch.zeros_like(k))


def mask_tokens(
    candidates: torch.Tensor, mask_prob: float, max_predictions: int, rng: torch.Generator
) -> torch.Tensor:
    """Choose k positions per row uniformly among candidates, without duplicates: (B, T) bool."""
    if max_predictions < 1:
        raise ValueError(f"max_predictions must be >= 1, got {max_predictions}")
    noise = torch.rand(candidates.shape, generator=rng, device=candidates.device)  # (B, T)
    noise = noise.masked_fill(~candidates, 2.0)  # non-candidates sort last
    rank = noise.argsort(dim=1).argsort(dim=1)  # (B, T): rank of each position's noise in its row
    k = num_to_mask(candidates.sum(dim=1), mask_prob, max_predictions)  # (B,)
    return (rank < k[:, None]) & candidates


def electra_mask_inputs(
    input_ids: torch.Tensor, chosen: torch.Tensor, mask_id: int, rng: torch.Generator, keep_prob: float = 0.15
) -> torch.Tensor:
    """ELECTRA generator input: 85% of chosen positions become [MASK], 15% keep the original token."""
    u = torch.rand(input_ids.shape, generator=rng, device=input_ids.device)
    return input_ids.masked_fill(chosen & (u >= keep_prob), mask_id)


def bert_mask_inputs(
    input_ids: torch.Tensor, chosen: torch.Tensor, mask_id: int, vocab_size: int, rng: torch.Generator
) -> torch.Tensor:
    """BERT MLM input: of the chosen positions 80% [MASK], 10% a random token, 10% unchanged."""
    u = torch.rand(input_ids.shape, generator=rng, device=input_ids.device)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=rng, device=input_ids.device)
    out = input_ids.masked_fill(chosen & (u < 0.8), mask_id)
    swap = chosen & (u >= 0.8) & (u < 0.9)
    return torch.where(swap, random_ids, out)


@torch.no_grad()
def sample_replacements(logits: torch.Tensor, temperature: float, rng: torch.Generator) -> torch.Tensor:
    """x_hat ~ softmax(logits / temperature) by Gumbel-max, in fp32, without gradient: (N, V) -> (N,)."""
    u = torch.rand(logits.shape, generator=rng, device=logits.device, dtype=torch.float32)
    gumbel = u.clamp_(1e-10, 1.0 - 1e-7).log_().neg_().log_().neg_()  # -log(-log u), in place: (N, V) once
    return gumbel.add_(logits.detach().float() / temperature).argmax(dim=-1)


@torch.no_grad()
def generator_samples(generator: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      chosen: torch.Tensor, mask_id: int, temperature: float, rng: torch.Generator) -> torch.Tensor:
    """The discriminator's input as pretraining builds it: `input_ids` (B, T) with the `chosen` (B, T)
    positions replaced by samples of `generator` (an ELECTRA `ElectraForMaskedLM`, which sees the chosen
    positions masked, or Electric's `ElectricForClozeLM`, which sees the clean text): (B, T)."""
    if isinstance(generator, ElectricForClozeLM):
        logits = generator.lm_head(generator.cloze_hidden(input_ids, attention_mask)[chosen])  # (N, V)
    elif isinstance(generator, ElectraForMaskedLM):
        inputs = electra_mask_inputs(input_ids, chosen, mask_id, rng)  # (B, T)
        h = generator.electra(inputs, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        logits = generator.generator_lm_head(generator.generator_predictions(h[chosen]))  # (N, V)
    else:
        raise ValueError(f"generator {type(generator).__name__}: expected ElectraForMaskedLM or ElectricForClozeLM")
    noisy = input_ids.clone()
    noisy[chosen] = sample_replacements(logits, temperature, rng)
    return noisy


def electra_labels(original: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """1 ("replaced") iff the token differs from the original; a sample equal to it counts as original."""
    return (original != corrupted).float()


def electric_labels(chosen: torch.Tensor) -> torch.Tensor:
    """Electric labels every sampled position "noise", even when the sample equals the original."""
    return chosen.float()
