"""The pretraining objectives' losses as pure functions over tensors: the cloze model's log q, the discriminator's
output bias at the label prior, Electric's corrected logits, and the MLM, ELECTRA and Electric losses.

How a batch is corrupted first (candidates, the chosen positions, a generator's replacements, the labels) is
`electric.modeling.corruption`, which export's calibration shares. Conventions: `input_ids`, `attention_mask` are
(B, T); a boolean (B, T) mask selects positions and `x[mask]` flattens them row-major to (N, ...).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# Electric's cloze model needs log q at every token (its loss at every candidate, the correction at every
# position), so its (N, V) logits are ~7x ELECTRA's. They are formed and read in blocks of rows: the head's product
# without its bias (bf16 under autocast) plus the bias, then log-softmax, gathers and the row's maximum; the
# backward recomputes the softmax the same way. That replaces a full-size bias copy, an fp32 copy, a full
# log-softmax, a zero-filled gradient for the gather, an argmax and a second log-softmax at the sampling temperature
# (benchmarks/archive/pretraining_throughput.md, "Pretraining throughput v4"). On a CPU a block is ROW_BLOCK rows, which stay in
# cache; on a GPU a block is as many rows as fit GPU_BLOCK_ELEMENTS logits, so a batch takes a few kernel launches.
ROW_BLOCK = 128
GPU_BLOCK_ELEMENTS = 2**27  # 512 MB of fp32 logits per block

def _blocks(n: int, vocab_size: int, device: torch.device):
    rows = ROW_BLOCK if device.type == "cpu" else max(ROW_BLOCK, GPU_BLOCK_ELEMENTS // max(1, vocab_size))
    return (slice(a, a + rows) for a in range(0, n, rows))


class _ClozeLogQ(torch.autograd.Function):
    @staticmethod
    def forward(ctx, products, bias, targets, present, temperature):
        n = products.shape[0]
        target_log_q = torch.empty(n, dtype=torch.float32, device=products.device)
        noise_log_q, best = torch.empty_like(target_log_q), torch.empty_like(target_log_q)
        for rows in _blocks(n, products.shape[1], products.device):
            logits = torch.add(products[rows], bias)  # (b, V) fp32
            log_q = torch.log_softmax(logits, -1)
            target_log_q[rows] = log_q.gather(-1, targets[rows, None]).squeeze(-1)
            best[rows] = log_q.amax(-1)  # (argmax is ~30x slower on CPU)
            if temperature is not None:
                log_q = torch.log_softmax(logits.div_(temperature), -1)
            noise_log_q[rows] = log_q.gather(-1, present[rows, None]).squeeze(-1)
        ctx.save_for_backward(products, bias, targets)
        ctx.mark_non_differentiable(noise_log_q, best)
        return target_log_q, noise_log_q, best

    @staticmethod
    def backward(ctx, g, _noise, _best):  # d log q(target) / d logits = onehot(target) - softmax, times g
        products, bias, targets = ctx.saved_tensors
        grad = torch.empty_like(products)
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        for rows in _blocks(products.shape[0], products.shape[1], products.device):
            p = torch.softmax(torch.add(products[rows], bias), -1).mul_(-g[rows, None])
            p.scatter_add_(-1, targets[rows, None], g[rows, None])
            grad_bias += p.sum(0)
            grad[rows] = p
        return grad, grad_bias.to(bias.dtype), None, None, None


def cloze_log_q(products: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor, present: torch.Tensor,
                temperature: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From the cloze head at N positions, its product (N, V) without the bias (V,) — logits = products + bias:
    log q(targets) (N,) fp32, differentiable in both; log q_T(present) (N,) fp32 at the sampling temperature T,
    the noise's log-probability of the token each position now holds, without gradient; and the largest log q
    (N,), which log q(targets) reaches when the target is the model's first choice.

    `temperature`: T as a 0-d tensor, or None when the noise is drawn at 1 (which spares a second softmax). Whether
    it is None is fixed for a run; its value may change every step without changing the graph."""
    return _ClozeLogQ.apply(products, bias, targets, present, temperature)


def log_odds(p: float) -> float:
    return math.log(p / (1.0 - p))


def disc_output_bias(objective: str, mask_prob: float, vocab_size: int) -> float:
    """Initial bias of the discriminator's output unit, so that its first logits sit at the label prior.

    With the bias at 0 the first gradient is the same for every token ("move every logit to the prior"),
    which AdamW turns into near rank-1 updates that collapse the discriminator (docs/pretraining.md, "The recipe").
    - electra: log(p / (1 - p)), p = mask_prob, the expected replaced fraction (an untrained generator's
      samples almost never equal the original).
    - electric: log V. The corrected logit is s + log q + log(p / (1 - p)); with q uniform (log q = -log V)
      an energy of log V makes it exactly log(p / (1 - p)), the prior.
    """
    if not 0.0 < mask_prob < 1.0:
        raise ValueError(f"mask_prob must be in (0, 1), got {mask_prob}")
    if objective == "electra":
        return log_odds(mask_prob)
    if objective == "electric":
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
        return math.log(vocab_size)
    raise ValueError(f"objective {objective!r} has no discriminator (expected electra or electric)")


def electric_corrected_logits(energy: torch.Tensor, log_q: torch.Tensor, mask_prob: float) -> torch.Tensor:
    """l_t = s_t + stopgrad(log q(x~_t | x_\\t)) + log(p / (1 - p)): the noise-vs-data logit of NCE."""
    if energy.shape != log_q.shape:
        raise ValueError(f"energy {tuple(energy.shape)} and log_q {tuple(log_q.shape)} differ in shape")
    return energy.float() + log_q.detach().float() + log_odds(mask_prob)


def masked_bce(logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy averaged over non-pad tokens."""
    weights = attention_mask.float()
    per_token = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
    return (per_token * weights).sum() / weights.sum().clamp(min=1.0)


def mlm_loss(logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the slots where `valid` (N,) bool holds, of logits (N, V) and targets (N,); 0 with
    none (`chosen_slots`' unused slots are left out)."""
    # cross_entropy's own ignore_index skips the unused slots (a weighted sum of per-slot losses would round otherwise)
    total = F.cross_entropy(logits.float(), targets.masked_fill(~valid, -100), ignore_index=-100, reduction="sum")
    return total / valid.sum().clamp(min=1)


@torch.no_grad()
def accuracy(logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The share of the `valid` (N,) slots whose first choice (argmax of (N, V)) is the target (N,)."""
    return ((logits.argmax(dim=-1) == targets) & valid).sum() / valid.sum().clamp(min=1)


@torch.no_grad()
def _disc_metrics(logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor) -> dict:
    """Means over non-pad tokens, as weighted sums (a boolean index would read the token count back to the host)."""
    real = attention_mask.float()
    n = real.sum().clamp(min=1.0)
    return {
        "disc_acc": (((logits > 0).float() == labels).float() * real).sum() / n,
        "disc_baseline_acc": ((labels == 0).float() * real).sum() / n,  # always answering "original"
        "replaced_frac": (labels * real).sum() / n,
    }


def electra_loss(
    gen_logits: torch.Tensor,
    gen_targets: torch.Tensor,
    gen_valid: torch.Tensor,
    disc_logits: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: torch.Tensor,
    gen_weight: float = 1.0,
    disc_weight: float = 50.0,
) -> dict:
    """L = gen_weight * L_MLM (the valid slots) + disc_weight * BCE(sigma(s_t), label_t) (non-pad tokens)."""
    gen = mlm_loss(gen_logits, gen_targets, gen_valid)
    disc = masked_bce(disc_logits, labels, attention_mask)
    out = {"loss": gen_weight * gen + disc_weight * disc, "gen_loss": gen.detach(), "disc_loss": disc.detach()}
    out.update(_disc_metrics(disc_logits, labels, attention_mask))
    return out


def electric_loss(
    cloze_target_log_q: torch.Tensor,
    candidates: torch.Tensor,
    corrected_logits: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: torch.Tensor,
    gen_weight: float = 1.0,
    disc_weight: float = 50.0,
) -> dict:
    """Cloze likelihood on all candidates + NCE's BCE on the corrected logits over non-pad tokens.

    cloze_target_log_q: (B, T) log q(x_t | x_\\t) of the true token at every position (the log-softmax the corrected
    logits already need, so it is computed once); candidates: (B, T) bool, the positions whose log q the cloze loss
    averages.
    """
    if cloze_target_log_q.shape != candidates.shape:
        raise ValueError(f"cloze_target_log_q {tuple(cloze_target_log_q.shape)} and candidates "
                         f"{tuple(candidates.shape)} differ in shape")
    weights = candidates.float()
    gen = -(cloze_target_log_q.float() * weights).sum() / weights.sum().clamp(min=1.0)
    disc = masked_bce(corrected_logits, labels, attention_mask)
    out = {"loss": gen_weight * gen + disc_weight * disc, "gen_loss": gen.detach(), "disc_loss": disc.detach()}
    out.update(_disc_metrics(corrected_logits, labels, attention_mask))
    return out
