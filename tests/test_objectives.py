"""Each objective rule, the corruption and the losses, on tiny hand-made inputs where the right answer is known."""

import math

import pytest
import torch

from electric.modeling import corruption
from electric.pretraining import objectives as obj

SPECIAL = torch.tensor([0, 1, 2, 3, 4])  # [PAD] [UNK] [CLS] [SEP] [MASK]


def uniforms(shape, seed=0):
    """U(0, 1) draws, as `corruption.draw_noise` makes them for the functions that take them."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed))


def test_candidates_exclude_special_and_padding():
    ids = torch.tensor([[2, 10, 11, 3, 0, 0]])
    am = torch.tensor([[1, 1, 1, 1, 0, 0]])
    assert corruption.candidate_mask(ids, am, SPECIAL).tolist() == [[False, True, True, False, False, False]]


@pytest.mark.parametrize(
    "n, p, cap, k",
    [(10, 0.15, 19, 2), (3, 0.15, 19, 1), (100, 0.15, 19, 15), (200, 0.15, 19, 19), (0, 0.15, 19, 0),
     (4, 0.25, 10, 1), (126, 0.15, 19, 19), (20, 0.5, 19, 10)],
)
def test_num_to_mask_rule(n, p, cap, k):
    # k = max(1, round(p * n)), capped at max_predictions, 0 when nothing can be masked
    assert corruption.num_to_mask(torch.tensor([n]), p, cap).item() == k


def test_at_most_mask_prob_plus_half_a_percent_of_a_sequence_is_chosen_and_never_none():
    assert corruption.max_predictions(0.15, 128) == 19 and corruption.max_predictions(0.25, 512) == 130
    assert corruption.max_predictions(0.1, 8) == 1  # int(0.84) would be 0: nothing could be chosen


def test_mask_tokens_chooses_k_candidates_without_duplicates():
    ids = torch.randint(5, 100, (64, 40))
    ids[:, 0], ids[:, -1] = 2, 3
    am = torch.ones_like(ids)
    am[::2, 30:] = 0  # half the rows are padded
    cand = corruption.candidate_mask(ids, am, SPECIAL)
    chosen = corruption.mask_tokens(cand, 0.15, max_predictions=int(0.155 * 40), u=uniforms(cand.shape))
    assert not (chosen & ~cand).any(), "only candidates may be chosen"
    expected = corruption.num_to_mask(cand.sum(1), 0.15, int(0.155 * 40))
    assert torch.equal(chosen.sum(1), expected)


def test_mask_tokens_is_uniform_over_candidates():
    cand = torch.zeros(4000, 12, dtype=torch.bool)
    cand[:, 1:11] = True  # 10 candidates, k = 2
    chosen = corruption.mask_tokens(cand, 0.15, 19, uniforms(cand.shape, 1))
    freq = chosen[:, 1:11].float().mean(0)  # each candidate chosen with probability 0.2
    assert torch.allclose(freq, torch.full_like(freq, 0.2), atol=0.03)


def test_mask_tokens_chooses_the_candidates_with_the_smallest_draws():
    cand = torch.tensor([[False, True, True, True, True, False]])
    u = torch.tensor([[0.0, 0.9, 0.2, 0.7, 0.1, 0.05]])  # the non-candidates' draws never count
    chosen = corruption.mask_tokens(cand, 0.5, 5, u)  # k = round(0.5 * 4) = 2
    assert chosen.tolist() == [[False, False, True, False, True, False]]


@pytest.mark.parametrize("objective", corruption.OBJECTIVES)
def test_draw_noise_draws_what_its_objective_reads_in_one_fixed_order(objective):
    B, T, V, most = 3, 10, 50, 4
    noise = corruption.draw_noise(torch.Generator().manual_seed(9), (B, T), objective=objective, vocab_size=V,
                                  max_predictions=most, temperature=2.5)
    g = torch.Generator().manual_seed(9)  # the same draws, by hand, in the documented order
    assert torch.equal(noise.choose, torch.rand(B, T, generator=g))
    assert (noise.show is not None) == (objective != "electric")
    if noise.show is not None:
        assert torch.equal(noise.show, torch.rand(B, T, generator=g))
    if objective == "mlm":
        assert noise.gumbel is None and torch.equal(noise.swap_ids, torch.randint(V, (B, T), generator=g))
    else:  # a row of uniforms for each of chosen_slots' B x min(max_predictions, T) slots
        assert noise.swap_ids is None and torch.equal(noise.gumbel, torch.rand(B * most, V, generator=g))
    assert noise.temperature.shape == () and noise.temperature.dtype == torch.float32
    assert noise.temperature.item() == 2.5
    with pytest.raises(ValueError, match="objective"):
        corruption.draw_noise(g, (B, T), objective="bert", vocab_size=V, max_predictions=most, temperature=1.0)


def test_electra_generator_input_masks_85_percent_of_chosen():
    ids = torch.randint(5, 100, (200, 50))
    chosen = uniforms((200, 50), 2) < 0.3
    out = corruption.electra_mask_inputs(ids, chosen, mask_id=4, u=uniforms(ids.shape, 4))
    assert torch.equal(out[~chosen], ids[~chosen]), "unchosen positions are untouched"
    masked = (out[chosen] == 4).float().mean().item()
    assert abs(masked - 0.85) < 0.03
    assert torch.equal(out[chosen][out[chosen] != 4], ids[chosen][out[chosen] != 4]), "the rest keep the original"


def test_bert_input_is_80_10_10():
    ids = torch.full((400, 50), 7)
    chosen = torch.ones(400, 50, dtype=torch.bool)
    chosen[:, 25:] = False
    random_ids = torch.randint(1000, ids.shape, generator=torch.Generator().manual_seed(5))
    out = corruption.bert_mask_inputs(ids, chosen, mask_id=4, u=uniforms(ids.shape, 5), random_ids=random_ids)
    assert torch.equal(out[~chosen], ids[~chosen])
    sel = out[chosen]
    frac_mask = (sel == 4).float().mean().item()
    frac_same = (sel == 7).float().mean().item()
    frac_random = 1 - frac_mask - frac_same
    assert abs(frac_mask - 0.8) < 0.02 and abs(frac_same - 0.1) < 0.02 and abs(frac_random - 0.1) < 0.02


def test_gumbel_max_samples_follow_softmax_in_fp32_without_gradient():
    logits = torch.tensor([[0.0, math.log(2.0), math.log(7.0)]]).repeat(20000, 1).bfloat16().requires_grad_()
    s = corruption.sample_replacements(logits, torch.tensor(1.0), uniforms(logits.shape, 6))
    assert s.grad_fn is None and not s.requires_grad
    freq = torch.bincount(s, minlength=3).float() / len(s)
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.7]), atol=0.015)
    # temperature sharpens: at T -> 0 the argmax wins
    assert (corruption.sample_replacements(logits.detach().float(), torch.tensor(1e-3), uniforms(logits.shape, 7)) == 2).all()


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.7])
@pytest.mark.parametrize("n", [1, 5, obj.ROW_BLOCK + 3])  # one block, and a block boundary
def test_cloze_log_q_is_the_log_softmax_gathered_with_its_gradient(temperature, n):
    g = torch.Generator().manual_seed(n)
    products = (3 * torch.randn(n, 11, generator=g)).requires_grad_()
    bias = torch.randn(11, generator=g).requires_grad_()
    targets, present = torch.randint(0, 11, (n,), generator=g), torch.randint(0, 11, (n,), generator=g)
    weights = torch.rand(n, generator=g)  # a loss that weighs rows differently, some not at all
    weights[0] = 0.0
    target_log_q, noise_log_q, best = obj.cloze_log_q(products, bias, targets, present,
                                                      None if temperature == 1.0 else torch.tensor(temperature))
    (target_log_q * weights).sum().backward()
    got = products.grad.clone(), bias.grad.clone()
    products.grad = bias.grad = None
    logits = products + bias
    expected = torch.log_softmax(logits, -1)
    assert torch.allclose(target_log_q, expected.gather(-1, targets[:, None]).squeeze(-1), atol=1e-6)
    assert torch.allclose(best, expected.max(-1).values, atol=1e-6)
    tempered = torch.log_softmax(logits.detach() / temperature, -1).gather(-1, present[:, None]).squeeze(-1)
    assert torch.allclose(noise_log_q, tempered, atol=1e-6) and not noise_log_q.requires_grad
    (expected.gather(-1, targets[:, None]).squeeze(-1) * weights).sum().backward()
    assert torch.allclose(got[0], products.grad, atol=1e-6) and torch.allclose(got[1], bias.grad, atol=1e-6)


def test_cloze_log_q_reads_bf16_products_in_fp32_and_returns_a_bf16_gradient():
    products = torch.randn(4, 9).bfloat16().requires_grad_()
    bias = torch.randn(9, requires_grad=True)
    targets = torch.tensor([0, 3, 8, 8])
    target_log_q, _, _ = obj.cloze_log_q(products, bias, targets, targets)
    reference = torch.log_softmax(products.detach().float() + bias.detach(), -1).gather(-1, targets[:, None])
    assert target_log_q.dtype == torch.float32 and torch.allclose(target_log_q, reference.squeeze(-1), atol=1e-6)
    target_log_q.sum().backward()
    assert products.grad.dtype == torch.bfloat16 and bias.grad.dtype == torch.float32


def test_a_sample_equal_to_the_original_is_original_for_electra_and_noise_for_electric():
    original = torch.tensor([[2, 10, 11, 12, 3]])
    chosen = torch.tensor([[False, True, True, False, False]])
    corrupted = original.clone()
    corrupted[0, 1] = 10  # sampled the original token
    corrupted[0, 2] = 99  # sampled something else
    assert corruption.electra_labels(original, corrupted).tolist() == [[0, 0, 1, 0, 0]]
    assert corruption.electric_labels(chosen).tolist() == [[0, 1, 1, 0, 0]]


def test_corrected_logit_adds_stopgrad_log_q_and_log_odds():
    s = torch.tensor([[0.5, -1.25, 2.0]], requires_grad=True)
    log_q = torch.tensor([[-3.0, -0.1, -7.5]], requires_grad=True)
    out = obj.electric_corrected_logits(s, log_q, mask_prob=0.15)
    expected = torch.tensor([[0.5 - 3.0, -1.25 - 0.1, 2.0 - 7.5]]) + math.log(0.15 / 0.85)
    assert torch.allclose(out, expected, atol=1e-6)
    out.sum().backward()
    assert log_q.grad is None, "no gradient flows into log q"
    assert torch.equal(s.grad, torch.ones_like(s))


def test_bce_is_averaged_over_non_pad_tokens_only():
    logits = torch.tensor([[0.0, 100.0, -100.0]])
    labels = torch.tensor([[1.0, 1.0, 1.0]])
    am = torch.tensor([[1, 1, 0]])
    assert obj.masked_bce(logits, labels, am).item() == pytest.approx(math.log(2) / 2, abs=1e-6)


def test_electra_loss_weights_generator_1_and_discriminator_50():
    gen_logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])  # CE: log 2, log(4/3)... target below
    gen_targets = torch.tensor([0, 0])
    disc = torch.zeros(1, 4)
    labels = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    am = torch.ones(1, 4, dtype=torch.long)
    out = obj.electra_loss(gen_logits, gen_targets, torch.tensor([True, True]), disc, labels, am)
    gen = (math.log(2.0) + math.log(4.0 / 3.0)) / 2
    assert out["gen_loss"].item() == pytest.approx(gen, abs=1e-6)
    assert out["disc_loss"].item() == pytest.approx(math.log(2.0), abs=1e-6)
    assert out["loss"].item() == pytest.approx(gen + 50 * math.log(2.0), abs=1e-5)
    assert out["disc_baseline_acc"].item() == pytest.approx(0.75)


def test_electric_loss_uses_the_corrected_logits():
    target_log_q = torch.tensor([[-math.log(2.0), -5.0]])  # q(target) = 1/2 at the one candidate
    candidates = torch.tensor([[True, False]])
    corrected = torch.tensor([[10.0, -10.0]])
    labels = torch.tensor([[1.0, 0.0]])
    am = torch.ones(1, 2, dtype=torch.long)
    out = obj.electric_loss(target_log_q, candidates, corrected, labels, am, gen_weight=1.0, disc_weight=50.0)
    bce = math.log1p(math.exp(-10.0))
    assert out["loss"].item() == pytest.approx(math.log(2.0) + 50 * bce, abs=1e-4)  # fp32 BCE
    assert out["disc_acc"].item() == 1.0


def test_discriminator_output_bias_sits_at_the_label_prior():
    # ELECTRA: log(p / (1 - p)); p = 0.15 -> log(0.15 / 0.85) = -1.734601...
    assert obj.disc_output_bias("electra", 0.15, 8000) == pytest.approx(-1.7346010553881064)
    assert obj.disc_output_bias("electra", 0.25, 30522) == pytest.approx(math.log(1 / 3))
    # Electric: log V; log(8000) = 8.987196...
    assert obj.disc_output_bias("electric", 0.15, 8000) == pytest.approx(8.987196820661973)
    with pytest.raises(ValueError, match="no discriminator"):
        obj.disc_output_bias("mlm", 0.15, 8000)
    with pytest.raises(ValueError, match="mask_prob"):
        obj.disc_output_bias("electra", 1.0, 8000)


def test_electric_bias_makes_the_initial_corrected_logit_the_prior_under_uniform_q():
    V, p = 300, 0.15
    s0 = torch.full((2, 3), obj.disc_output_bias("electric", p, V))
    log_q = torch.full((2, 3), -math.log(V))  # q uniform
    assert torch.allclose(obj.electric_corrected_logits(s0, log_q, p), torch.full((2, 3), math.log(p / (1 - p))))
