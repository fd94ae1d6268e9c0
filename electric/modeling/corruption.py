"""How pretraining corrupts text: which positions are candidates, which k of them are chosen, what a generator sees
there, its logits, the replacements it draws and how the result is labelled.

Randomness enters in one place, one way: `draw_noise` draws from a `torch.Generator`, in one fixed order, everything
one corruption of a (B, T) batch reads, into a `Noise` of tensors (the sampling temperature included, as a 0-d
tensor). Every other function here takes those tensors, so a training step that receives a `Noise` holds no
generator, reads no Python number that changes from step to step, and compiles to one graph.

`corrupt` is the one generator pass: pretraining's ELECTRA and Electric steps (`electric.pretraining.modeling`) and
`electric export`'s calibration both corrupt their text through it, so a calibrated probability means "replaced as
in pretraining".

Conventions: `input_ids`, `attention_mask` are (B, T); a boolean (B, T) mask selects positions and `x[mask]`
flattens them row-major to (N, ...). The chosen positions of a batch are `chosen_slots`: B x S flat indices and a
`valid` mask, False at a slot that holds no chosen position, the one encoding of an unused slot.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import ElectraForMaskedLM

from electric.modeling.cloze import ElectricForClozeLM

OBJECTIVES = ("mlm", "electra", "electric")  # what a corruption is drawn for: `draw_noise`'s `objective`


@dataclass(frozen=True)
class Noise:
    """The random draws of one corruption of a (B, T) batch, made by `draw_noise` before it runs: tensors only."""

    choose: torch.Tensor  # (B, T) uniforms: which positions are chosen (mask_tokens)
    show: torch.Tensor | None  # (B, T) uniforms: what a masked LM sees at them (mlm, electra)
    swap_ids: torch.Tensor | None  # (B, T) random token ids: BERT's random replacements (mlm)
    gumbel: torch.Tensor | None  # (B * S, V) uniforms: a sample at each of chosen_slots' slots (electra, electric)
    temperature: torch.Tensor  # () fp32: the temperature the samples are drawn at


def slots_per_row(max_predictions: int, length: int) -> int:
    """S: the slots each row of a batch of `length` columns gives its chosen positions (`chosen_slots`)."""
    return min(max_predictions, length)


def draw_noise(rng: torch.Generator, shape: torch.Size | tuple[int, ...], *, objective: str, vocab_size: int,
               max_predictions: int, temperature: float) -> Noise:
    """Everything one corruption of a (B, T) batch reads, drawn from `rng` on its device, in this order: the
    choice; for mlm and electra what the masked LM sees; for mlm the random token ids, else the Gumbel uniforms
    (B * S, V); then the temperature as a 0-d tensor (a fill, not a copy from the host)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    B, T = shape
    device = rng.device

    def uniforms(*size: int) -> torch.Tensor:
        return torch.rand(size, generator=rng, device=device, dtype=torch.float32)

    choose = uniforms(B, T)
    show = uniforms(B, T) if objective in ("mlm", "electra") else None
    swap_ids = gumbel = None
    if objective == "mlm":
        swap_ids = torch.randint(vocab_size, (B, T), generator=rng, device=device)
    else:
        gumbel = uniforms(B * slots_per_row(max_predictions, T), vocab_size)
    return Noise(choose, show, swap_ids, gumbel, torch.full((), temperature, dtype=torch.float32, device=device))


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


def mask_tokens(candidates: torch.Tensor, mask_prob: float, max_predictions: int, u: torch.Tensor) -> torch.Tensor:
    """Choose k positions per row uniformly among candidates, without duplicates, by the uniforms `u` (B, T):
    (B, T) bool."""
    if max_predictions < 1:
        raise ValueError(f"max_predictions must be >= 1, got {max_predictions}")
    if u.shape != candidates.shape:
        raise ValueError(f"uniforms {tuple(u.shape)} for candidates {tuple(candidates.shape)}")
    noise = u.masked_fill(~candidates, 2.0)  # (B, T): non-candidates sort last
    rank = noise.argsort(dim=1).argsort(dim=1)  # (B, T): rank of each position's noise in its row
    k = num_to_mask(candidates.sum(dim=1), mask_prob, max_predictions)  # (B,)
    return (rank < k[:, None]) & candidates


def chosen_slots(chosen: torch.Tensor, max_predictions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The chosen positions (B, T) bool as a fixed number of flat indices into the (B * T) batch, so that a step's
    shapes never depend on how many positions its batch chose (a boolean index would read that count back from the
    device): `index` (B * S,) and `valid` (B * S,) bool, False at a slot that holds no chosen position,
    S = `slots_per_row(max_predictions, T)`.

    The chosen come first, in the row-major order `x[chosen]` flattens them: `x.flatten(0, 1)[index][valid]` is
    `x[chosen]`. The rest are distinct unchosen positions, so a scatter to `index` never writes one place twice.
    No row may choose more than `max_predictions` positions (`mask_tokens` caps them there)."""
    B, T = chosen.shape
    S = slots_per_row(max_predictions, T)
    in_row = torch.argsort((~chosen).to(torch.uint8), dim=1, stable=True)[:, :S]  # (B, S): chosen first
    picked = chosen.gather(1, in_row).flatten()  # (B * S,)
    flat = (in_row + torch.arange(B, device=chosen.device)[:, None] * T).flatten()  # (B * S,)
    order = torch.argsort((~picked).to(torch.uint8), stable=True)  # the chosen of every row first, rows in order
    return flat[order], picked[order]


def replace_at(input_ids: torch.Tensor, index: torch.Tensor, valid: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`input_ids` (B, T) with `values` (N,) written at the flat positions `index` (N,) where `valid` (N,) holds:
    `chosen_slots`' indices, so `x[chosen] = values[valid]` without a boolean index."""
    flat = input_ids.flatten()  # (B * T,)
    return flat.scatter(0, index, torch.where(valid, values, flat[index])).view_as(input_ids)


def electra_mask_inputs(input_ids: torch.Tensor, chosen: torch.Tensor, mask_id: int, u: torch.Tensor,
                        keep_prob: float = 0.15) -> torch.Tensor:
    """ELECTRA generator input: 85% of chosen positions become [MASK], 15% keep the original token, by the
    uniforms `u` (B, T)."""
    return input_ids.masked_fill(chosen & (u >= keep_prob), mask_id)


def bert_mask_inputs(input_ids: torch.Tensor, chosen: torch.Tensor, mask_id: int, u: torch.Tensor,
                     random_ids: torch.Tensor) -> torch.Tensor:
    """BERT MLM input: of the chosen positions 80% [MASK], 10% a random token, 10% unchanged, by the uniforms `u`
    (B, T); the random tokens are `random_ids` (B, T)."""
    out = input_ids.masked_fill(chosen & (u < 0.8), mask_id)
    swap = chosen & (u >= 0.8) & (u < 0.9)
    return torch.where(swap, random_ids, out)


@torch.no_grad()
def sample_replacements(logits: torch.Tensor, temperature: torch.Tensor | float, u: torch.Tensor) -> torch.Tensor:
    """x_hat ~ softmax(logits / temperature) by Gumbel-max over the uniforms `u` (N, V), in fp32, without gradient:
    (N, V) -> (N,). A step passes its temperature as the 0-d tensor of its `Noise`."""
    if u.shape != logits.shape:
        raise ValueError(f"uniforms {tuple(u.shape)} for logits {tuple(logits.shape)}")
    gumbel = u.clamp(1e-10, 1.0 - 1e-7).log_().neg_().log_().neg_()  # -log(-log u): one new (N, V); u stays as drawn
    return gumbel.add_(logits.detach().float() / temperature).argmax(dim=-1)


def key_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, 1, 1, T) bool, True = may be attended to: the mask SDPA reads. transformers passes a 4D mask
    through as it is; from a 2D one it would first ask the device whether the batch has any padding at all (to
    skip the mask), a read that makes the host wait for the GPU twice a step."""
    return attention_mask.bool()[:, None, None, :]


def masked_lm_logits(model: ElectraForMaskedLM, inputs: torch.Tensor, attention_mask: torch.Tensor,
                     index: torch.Tensor, words: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A masked LM's vocabulary head only at the flat positions `index` (N,): logits (N, V) and the last layer
    (B, T, H). `words` (V, E): the word embeddings in and out in place of the model's own (pretraining's GDES)."""
    mask = key_mask(attention_mask)  # (B, 1, 1, T)
    if words is None:
        h = model.electra(inputs, attention_mask=mask).last_hidden_state  # (B, T, H)
        return model.generator_lm_head(model.generator_predictions(h.flatten(0, 1)[index])), h  # (N, V)
    h = model.electra(inputs_embeds=F.embedding(inputs, words), attention_mask=mask).last_hidden_state
    features = model.generator_predictions(h.flatten(0, 1)[index])  # (N, E)
    return F.linear(features, words, model.generator_lm_head.bias), h  # (N, V), (B, T, H)


def cloze_products(model: ElectricForClozeLM, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   words: torch.Tensor | None = None) -> torch.Tensor:
    """The cloze model's vocabulary head at every position of the clean input, without its bias: (B * T, V), so
    logits = products + model.lm_head.bias. `words` (V, E) as in `masked_lm_logits`."""
    # on a CPU the towers' small masked attention (tiny: 1 head of 32) runs faster unfused (~5% of a training step)
    with sdpa_kernel(SDPBackend.MATH) if input_ids.device.type == "cpu" else contextlib.nullcontext():
        feats = model.cloze_hidden(input_ids, attention_mask, words)  # (B, T, E)
    return F.linear(feats.flatten(0, 1), model.lm_head.weight if words is None else words)  # (B * T, V)


@dataclass(frozen=True)
class Corruption:
    """A batch corrupted by a generator (`corrupt`): what the discriminator sees, and what the losses read."""

    candidates: torch.Tensor  # (B, T) bool: neither special nor padding
    chosen: torch.Tensor  # (B, T) bool: the positions replaced by samples
    index: torch.Tensor  # (B * S,) the chosen as flat positions (chosen_slots)
    valid: torch.Tensor  # (B * S,) bool: False at a slot that holds no chosen position
    logits: torch.Tensor  # (B * S, V) the generator's logits at the slots, untempered
    products: torch.Tensor | None  # (B * T, V) the cloze head at every position, bias apart (Electric); else None
    corrupted: torch.Tensor  # (B, T) the discriminator's input: the samples at the chosen positions


def corrupt(generator: ElectraForMaskedLM | ElectricForClozeLM, input_ids: torch.Tensor,
            attention_mask: torch.Tensor, special_ids: torch.Tensor, noise: Noise, *, mask_prob: float,
            max_predictions: int, mask_id: int, words: torch.Tensor | None = None) -> Corruption:
    """The generator pass, as pretraining's ELECTRA and Electric steps and export's calibration all run it: k
    candidates chosen per row (`noise.choose`), the generator's logits at them, and replacements sampled from those
    at `noise.temperature` (`noise.gumbel`). An ELECTRA `ElectraForMaskedLM` sees the chosen positions masked
    (`noise.show`); Electric's `ElectricForClozeLM` sees the clean text. `words` (V, E): GDES's word embeddings."""
    candidates = candidate_mask(input_ids, attention_mask, special_ids)  # (B, T)
    chosen = mask_tokens(candidates, mask_prob, max_predictions, noise.choose)  # (B, T)
    index, valid = chosen_slots(chosen, max_predictions)  # (B * S,) each
    products = None
    if isinstance(generator, ElectricForClozeLM):
        products = cloze_products(generator, input_ids, attention_mask, words)  # (B * T, V)
        logits = torch.add(products[index], generator.lm_head.bias)  # (B * S, V)
    elif isinstance(generator, ElectraForMaskedLM):
        if noise.show is None:
            raise ValueError("a masked-LM generator's noise needs `show`: draw it for objective electra")
        inputs = electra_mask_inputs(input_ids, chosen, mask_id, noise.show)  # (B, T)
        logits, _ = masked_lm_logits(generator, inputs, attention_mask, index, words)  # (B * S, V)
    else:
        raise ValueError(f"generator {type(generator).__name__}: expected ElectraForMaskedLM or ElectricForClozeLM")
    if noise.gumbel is None:
        raise ValueError("noise without Gumbel uniforms: draw it for objective electra or electric")
    sampled = sample_replacements(logits, noise.temperature, noise.gumbel)  # (B * S,)
    corrupted = replace_at(input_ids, index, valid, sampled)  # (B, T)
    return Corruption(candidates, chosen, index, valid, logits, products, corrupted)


def electra_labels(original: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """1 ("replaced") iff the token differs from the original; a sample equal to it counts as original."""
    return (original != corrupted).float()


def electric_labels(chosen: torch.Tensor) -> torch.Tensor:
    """Electric labels every sampled position "noise", even when the sample equals the original."""
    return chosen.float()
