"""The FLOPs-per-token formula of the GPU throughput benchmark (benchmarks/_flops.py) against torch's own count
(`torch.utils.flop_counter.FlopCounterMode`) over one real forward + backward of `PretrainingModel` at the debug
preset, for each objective: a change to what the model computes (the vocabulary head at every token, a third
tower, a wider head) moves the count and fails here until the formula follows.

The two agree within TOLERANCE: the vocabulary heads of mlm and electra run at max_predictions slots a row (9 of 64
at debug) in both. FlopCounterMode counts only matmuls too (mm, addmm, bmm; no LayerNorm, GELU, softmax, losses),
as the formula does. Attention runs under SDPA's math backend here: on CPU FlopCounterMode counts
the fused kernel (`_scaled_dot_product_flash_attention_for_cpu`) as 0 FLOPs, and the math backend's two bmm a call
(and their backward) are QK^T and AV, which the formula counts."""

import pytest
import torch
from script_loader import load_script
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from electric.pretraining.config import resolve_config
from electric.pretraining.modeling import PretrainingModel, SpecialIds

flops = load_script("benchmarks/_flops.py")

TOLERANCE = 0.005  # relative
VOCAB, BATCH = 2000, 4


def counted_flops_per_token(objective: str) -> tuple[float, float]:
    """(FlopCounterMode's FLOPs per token over one forward + backward, the formula's) at debug, every token real."""
    cfg = resolve_config("debug", objective, {"warm_start": 0.0})
    T = cfg.max_seq_length
    torch.manual_seed(0)
    model = PretrainingModel(cfg, SpecialIds(0, 4, 2, 3, VOCAB, (0, 1, 2, 3, 4))).train()
    ids = torch.randint(5, VOCAB, (BATCH, T), generator=torch.Generator().manual_seed(0))  # (B, T)
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(ids, torch.ones_like(ids), model.draw_noise(ids, torch.Generator().manual_seed(0)))["loss"].backward()
    return counter.get_total_flops() / (BATCH * T), flops.flops_per_token(cfg, VOCAB, T)


@pytest.mark.parametrize("objective", ["mlm", "electra", "electric"])
def test_the_formula_matches_torchs_count_of_one_training_step(objective: str) -> None:
    counted, formula = counted_flops_per_token(objective)
    assert counted > 0
    assert formula == pytest.approx(counted, rel=TOLERANCE), f"{objective}: formula {formula:,.0f}, counted {counted:,.0f}"


def test_the_parts_follow_the_objectives_networks() -> None:
    small = {o: resolve_config("small", o, {"warm_start": 0.0}) for o in ("mlm", "electra", "electric")}
    parts = {o: flops.flops_per_token_parts(cfg, 30522, 128) for o, cfg in small.items()}
    assert set(parts["mlm"]) == {"generator"} and set(parts["electric"]) == {"generator", "discriminator"}
    # the same discriminator in both; Electric's two towers and every-token head cost more than ELECTRA's generator
    assert parts["electra"]["discriminator"] == parts["electric"]["discriminator"]
    assert parts["electric"]["generator"] > 2 * parts["electra"]["generator"]
    # MLM's encoder is the discriminator's, with the vocabulary head at 15% of tokens instead of the 1-logit head
    assert parts["mlm"]["generator"] > parts["electra"]["discriminator"]
    with pytest.raises(ValueError, match="seq_len 0"):
        flops.flops_per_token(small["mlm"], 30522, 0)
