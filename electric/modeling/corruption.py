"""How pretraining corrupts text, as pure functions over tensors: which positions are candidates, which k of them
are chosen, what a generator sees there, the replacements it draws and how the result is labelled.

Pretraining's objectives (`electric.pretraining.objectives`, `electric.pretraining.modeling`) corrupt every batch
with these, and `electric export` corrupts its calibration text with the same ones (`generator_samples`), so that a
calibrated probability means "replaced as in pretraining".

Conventions: `input_ids`, `attention_mask` are (B, T); a boolean (B, T) mask selects positions and `x[mask]`
flattens them row-major to (N, ...). Randomness comes only from the `torch.Generator` passed in, so a step is
reproducible from its seed; a training step draws its uniforms from that generator first and passes them in its
place (`Draw`), so that the step itself holds no generator and compiles to one graph.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import ElectraForMaskedLM

from electric.modeling.cloze import ElectricForClozeLM

Draw = torch.Generator | torch.Tensor  # a generator to draw from, or the uniforms already drawn from one


def uniforms(rng: Draw, shape: torch.Size | tuple[int, ...], device: torch.device) -> torch.Tensor:
    """U(0, 1) fp32 of `shape` from `rng`, or `rng` itself when it is the tensor drawn beforehand."""
    if isinstance(rng, torch.Generator):
        return torch.rand(shape, generator=rng, device=device, dtype=torch.float32)
    if rng.shape != shape:
        raise ValueError(f"uniforms drawn as {tuple(rng.shape)}, needed {tuple(shape)}")
    return rng


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
    candidates: torch.Tensor, mask_prob: float, max_predictions: int, rng: Draw
) -> torch.Tensor:
    """Choose k positions per row uniformly among candidates, without duplicates: (B, T) bool."""
    if max_predictions < 1:
        raise ValueError(f"max_predictions must be >= 1, got {max_predictions}")
    noise = uniforms(rng, candidates.shape, candidates.device)  # (B, T)
    noise = noise.masked_fill(~candidates, 2.0)  # non-candidates sort last
    rank = noise.argsort(dim=1).argsort(dim=1)  # (B, T): rank of each position's noise in its row
    k = num_to_mask(candidates.sum(dim=1), mask_prob, max_predictions)  # (B,)
    return (rank < k[:, None]) & candidates


def chosen_slots(chosen: torch.Tensor, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The chosen positions (B, T) bool as a fixed number of flat indices into the (B * T) batch, so that a step's
    shapes never depend on how many positions its batch chose (a boolean index would read that count back from the
    device): `index` (B * S,) and `valid` (B * S,) bool, True where the index is a chosen position, S = min(slots, T).

    The chosen come first, in the row-major order `x[chosen]` flattens them: `x.flatten(0, 1)[index][valid]` is
    `x[chosen]`. The rest are distinct unchosen positions, so a scatter to `index` never writes one place twice.
    `slots` must be at least the most positions one row chose (`max_predictions` caps them)."""
    B, T = chosen.shape
    in_row = torch.argsort((~chosen).to(torch.uint8), dim=1, stable=True)[:, :min(slots, T)]  # (B, S): chosen first
    picked = chosen.gather(1, in_row).flatten()  # (B * S,)
    flat = (in_row + torch.arange(B, device=chosen.device)[:, None] * T).flatten()  # (B * S,)
    order = torch.argsort((~picked).to(torch.uint8), stable=True)  # the chosen of every row first, rows in order
    return flat[order], picked[order]


def replace_at(input_ids: torch.Tensor, index: torch.Tensor, valid: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`input_ids` (B, T) with `values` (N,) written at the flat positions `index` (N,) where `valid` (N,) holds:
    `chosen_slots`' indices, so `x[chosen] = values[valid]` without a boolean index."""
    flat = input_ids.flatten()  # (B * T,)
    return flat.scatter(0, index, torch.where(valid, values, flat[index])).view_as(input_ids)


def electra_mask_inputs(
    input_ids: torch.Tensor, chosen: torch.Tensor, mask_id: int, rng: Draw, keep_prob: float = 0.15
) -> torch.Tensor:
    """ELECTRA generator input: 85% of chosen positions become [MASK], 15% keep the original token."""
    u = uniforms(rng, input_ids.shape, input_ids.device)
    return input_ids.masked_fill(chosen & (u >= keep_prob), mask_id)


def bert_mask_inputs(
    input_ids: torch.Tensor, chosen: torch.Tensor, mask_id: int, vocab_size: int,
    rng: torch.Generator | tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """BERT MLM input: of the chosen positions 80% [MASK], 10% a random token, 10% unchanged. `rng`: a generator,
    or the (B, T) uniforms and random token ids already drawn from one (`bert_draws`)."""
    u, random_ids = bert_draws(rng, input_ids.shape, vocab_size, input_ids.device) if isinstance(
        rng, torch.Generator) else rng
    out = input_ids.masked_fill(chosen & (u < 0.8), mask_id)
    swap = chosen & (u >= 0.8) & (u < 0.9)
    return torch.where(swap, random_ids, out)


def bert_draws(rng: torch.Generator, shape: torch.Size | tuple[int, ...], vocab_size: int,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """What `bert_mask_inputs` draws: (B, T) uniforms, then (B, T) random token ids."""
    return uniforms(rng, shape, device), torch.randint(vocab_size, shape, generator=rng, device=device)


@torch.no_grad()
def sample_replacements(logits: torch.Tensor, temperature: float, rng: Draw) -> torch.Tensor:
    """x_hat ~ softmax(logits / temperature) by Gumbel-max, in fp32, without gradient: (N, V) -> (N,)."""
    u = uniforms(rng, logits.shape, logits.device)
    gumbel = u.clamp(1e-10, 1.0 - 1e-7).log_().neg_().log_().neg_()  # -log(-log u): one new (N, V); u stays as drawn
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
