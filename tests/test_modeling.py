"""The networks: cloze blindness, parity with transformers, shared embeddings, sizes, round-trips."""

import math

import pytest
import torch
from transformers import AutoModelForMaskedLM, ElectraConfig, ElectraForPreTraining, ElectraModel

from electric.pretraining.config import resolve_config
from electric.pretraining.modeling import (
    ElectricClozeConfig,
    ElectricForClozeLM,
    PretrainingModel,
    SpecialIds,
)

SPECIAL = SpecialIds(pad=0, mask=4, cls=2, sep=3, vocab_size=300, all_special=(0, 1, 2, 3, 4))


def cloze_model(seed=0) -> ElectricForClozeLM:
    torch.manual_seed(seed)
    cfg = ElectricClozeConfig(vocab_size=300, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    return ElectricForClozeLM(cfg).eval()


def batch(B=2, T=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 300, (B, T), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    return ids, torch.ones_like(ids)


@pytest.mark.parametrize("t", [1, 5, 10])
def test_cloze_distribution_at_t_ignores_x_t(t):
    m = cloze_model()
    ids, am = batch()
    with torch.no_grad():
        before = m(ids, am)
        perturbed = ids.clone()
        perturbed[:, t] = (perturbed[:, t] + 17) % 295 + 5
        after = m(perturbed, am)
    assert torch.allclose(before[:, t], after[:, t], atol=1e-6), "q(.|x_\\t) must not see x_t"
    others = [i for i in range(ids.shape[1]) if i != t]
    assert not torch.allclose(before[:, others], after[:, others], atol=1e-4), "but it does see x_t elsewhere"


def test_cloze_ignores_padding():
    m = cloze_model()
    ids, am = batch(B=1, T=10)
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], 1)
    pam = torch.cat([am, torch.zeros(1, 5, dtype=torch.long)], 1)
    with torch.no_grad():
        assert torch.allclose(m(ids, am), m(padded, pam)[:, :10], atol=1e-5)
        assert torch.isfinite(m(padded, pam)).all()


def test_left_to_right_tower_matches_transformers_causal_electra():
    """Parity: our LTR tower with its boolean mask equals transformers' own causal ELECTRA (is_decoder)."""
    m = cloze_model()
    ref_cfg = ElectraConfig(**{k: v for k, v in m.config.to_dict().items() if k in ElectraConfig().to_dict()})
    ref_cfg.is_decoder = True
    ref = ElectraModel(ref_cfg).eval()
    ref.embeddings.load_state_dict(m.embeddings.state_dict())
    ref.embeddings_project.load_state_dict(m.embeddings_project.state_dict())
    ref.encoder.load_state_dict(m.ltr.state_dict())
    ids, am = batch(B=3, T=9)
    from electric.modeling.cloze import _tower_mask

    with torch.no_grad():
        h = m.embeddings_project(m.embeddings(input_ids=ids))
        ours = m.ltr(h, attention_mask=_tower_mask(am, True)).last_hidden_state
        theirs = ref(ids, attention_mask=am, use_cache=False).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize("objective", ["electra", "electric"])
def test_generator_is_quarter_width_same_depth_and_shares_embeddings(objective):
    cfg = resolve_config("debug", objective, {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 512})
    m = PretrainingModel(cfg, SPECIAL)
    g = m.generator.config
    assert (g.hidden_size, g.num_hidden_layers, g.num_attention_heads, g.intermediate_size) == (64, 2, 1, 256)
    d_emb = m.discriminator.electra.embeddings
    g_emb = m.generator.embeddings if objective == "electric" else m.generator.electra.embeddings
    assert g_emb is d_emb, "word, position, token-type embeddings and their LayerNorm are one module"
    assert m.generator.get_output_embeddings().weight is d_emb.word_embeddings.weight, "output layer tied"
    expected_kind = ElectricForClozeLM if objective == "electric" else type(m.generator)
    assert isinstance(m.generator, expected_kind)


def test_mlm_objective_has_no_discriminator():
    m = PretrainingModel(resolve_config("debug", "mlm"), SPECIAL)
    assert m.discriminator is None and m.generator.config.hidden_size == 64


@pytest.mark.parametrize("objective", ["mlm", "electra", "electric"])
def test_forward_returns_finite_loss_and_gradients_everywhere(objective):
    torch.manual_seed(0)
    m = PretrainingModel(resolve_config("debug", objective), SPECIAL)
    ids, am = batch(B=3, T=20)
    am[1, 15:] = 0
    out = m(ids, am, m.draw_noise(ids, torch.Generator().manual_seed(0)))
    assert torch.isfinite(out["loss"])
    out["loss"].backward()
    no_grad = [n for n, p in m.named_parameters() if p.grad is None]
    # the discriminator's token-type embeddings get gradient too; nothing is left out of the graph
    assert not no_grad, no_grad


def test_generator_vocabulary_head_runs_only_at_the_chosen_positions_slots(monkeypatch):
    torch.manual_seed(0)
    m = PretrainingModel(resolve_config("debug", "electra"), SPECIAL)
    seen = []
    head = m.generator.generator_lm_head
    monkeypatch.setattr(head, "forward", lambda x: (seen.append(x.shape), torch.nn.Linear.forward(head, x))[1])
    ids, am = batch(B=4, T=40)
    m(ids, am, m.draw_noise(ids, torch.Generator().manual_seed(0)))
    # each row's slots for its chosen positions, a fixed number (max_predictions) whatever the batch chose, not all T
    assert m.cfg.max_predictions == 9 < 40
    assert seen == [torch.Size([4 * m.cfg.max_predictions, m.cfg.embedding_size])]


def test_checkpoints_round_trip_through_transformers(tmp_path):
    torch.manual_seed(0)
    m = PretrainingModel(resolve_config("debug", "electric"), SPECIAL).eval()
    m.save_pretrained(tmp_path)
    ids, am = batch()
    disc = ElectraForPreTraining.from_pretrained(tmp_path / "discriminator").eval()
    gen = AutoModelForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    assert isinstance(gen, ElectricForClozeLM)
    assert gen.lm_head.weight is gen.embeddings.word_embeddings.weight
    with torch.no_grad():
        assert torch.allclose(disc(ids, attention_mask=am).logits, m.discriminator(ids, attention_mask=am).logits)
        assert torch.allclose(gen(ids, am), m.generator(ids, am), atol=1e-6)


@pytest.mark.parametrize("objective, expected", [("electra", math.log(0.15 / 0.85)), ("electric", math.log(300))])
def test_fresh_discriminator_output_bias_starts_at_the_prior(objective, expected):
    bias = lambda m: m.discriminator.discriminator_predictions.dense_prediction.bias  # noqa: E731
    m = PretrainingModel(resolve_config("debug", objective), SPECIAL)
    assert torch.allclose(bias(m), torch.tensor([expected]))
    ref = PretrainingModel(resolve_config("debug", objective, {"disc_bias_init": "zero"}), SPECIAL)
    assert torch.equal(bias(ref), torch.zeros(1))


@pytest.mark.parametrize("objective", ["mlm", "electra", "electric"])
def test_details_give_the_per_token_tensors_health_needs(objective):
    m = PretrainingModel(resolve_config("debug", objective), SPECIAL).eval()
    ids = torch.randint(5, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    d = m(ids, mask, m.draw_noise(ids, torch.Generator().manual_seed(1)), details=True)["details"]
    assert d["hidden"].shape == (2, 12, 64) and torch.equal(d["attention_mask"], mask)
    assert d["gen_nll"].shape == d["gen_targets"].shape and d["gen_nll"].numel() > 0 and (d["gen_nll"] > 0).all()
    if objective == "mlm":
        assert d["disc_logits"] is None
    else:
        assert d["disc_logits"].shape == d["labels"].shape == (2, 12)
        assert d.get("corrected", False) == (objective == "electric")


def test_fixed_noise_scores_replace_only_candidates_with_draws_from_the_given_distribution():
    m = PretrainingModel(resolve_config("debug", "electra"), SPECIAL).eval()
    ids = torch.randint(5, 300, (3, 16), generator=torch.Generator().manual_seed(0))
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    probs = torch.zeros(300)
    probs[7] = 1.0  # every draw is token 7
    s, labels = m.fixed_noise_scores(ids, torch.ones_like(ids), probs, torch.Generator().manual_seed(1))
    assert s.shape == labels.shape == (3, 16)
    assert labels[:, 0].sum() == 0 and labels[:, -1].sum() == 0  # [CLS] / [SEP] never replaced
    k = round(0.15 * 14)  # mask_prob of the 14 candidates per row
    assert (labels.sum(dim=1) <= k).all() and labels.sum() > 0  # a draw equal to the original is not "replaced"
    with pytest.raises(ValueError, match="no discriminator"):
        PretrainingModel(resolve_config("debug", "mlm"), SPECIAL).fixed_noise_scores(ids, ids, probs, None)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_electrics_correction_uses_the_log_q_of_the_noise_it_sampled_from(temperature, monkeypatch):
    """NCE's correction is log q of the noise distribution: with --temperature T the replacements come from
    softmax(logits / T), so the corrected logit adds that log-probability, not the untempered cloze model's."""
    from electric.pretraining import objectives as obj

    torch.manual_seed(0)
    m = PretrainingModel(resolve_config("debug", "electric", {"temperature": temperature}), SPECIAL).eval()
    seen = {}
    discriminate = m._discriminate
    monkeypatch.setattr(m, "_discriminate", lambda inputs, *a: seen.setdefault("inputs", inputs) is not None
                        and discriminate(inputs, *a))
    corrected = obj.electric_corrected_logits
    monkeypatch.setattr(obj, "electric_corrected_logits",
                        lambda s, log_q, p: seen.setdefault("log_q", log_q) is not None and corrected(s, log_q, p))
    ids, am = batch()
    with torch.no_grad():
        m(ids, am, m.draw_noise(ids, torch.Generator().manual_seed(0)))
        logits = m.generator(ids, am).float()  # (B, T, V): the cloze model on the clean input
    expected = torch.log_softmax(logits / temperature, -1).gather(-1, seen["inputs"][..., None]).squeeze(-1)
    assert torch.allclose(seen["log_q"], expected, atol=1e-4)
