"""Training-health metrics and the collapse rule, on hand-made tensors whose answers are known."""

import math

import pytest
import torch

from electric.pretraining import health


def test_auc_counts_correctly_ranked_pairs_and_ties_as_half():
    # positives 0.35, 0.8; negatives 0.1, 0.4: pairs (0.35>0.1 yes, 0.35>0.4 no, 0.8>both yes) = 3 of 4
    assert health.tensor_auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])) == pytest.approx(0.75)
    assert health.tensor_auc(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1, 0, 0])) == pytest.approx(0.5)
    # one tie between a positive and a negative (2.0), the other pair ordered: (1 + 0.5) / 2
    assert health.tensor_auc(torch.tensor([2.0, 2.0, 3.0]), torch.tensor([0, 1, 1])) == pytest.approx(0.75)
    assert health.tensor_auc(torch.tensor([3.0, 1.0]), torch.tensor([0, 1])) == 0.0  # worse than chance
    assert math.isnan(health.tensor_auc(torch.tensor([1.0, 2.0]), torch.tensor([1, 1])))


def test_auc_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="differ in shape"):
        health.tensor_auc(torch.zeros(3), torch.zeros(4))


def test_token_cosine_averages_cross_sequence_pairs_only_over_real_tokens():
    e1, e2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    same = torch.stack([torch.stack([e1, e1, e2]), torch.stack([2 * e1, e1, -e1])])  # pads differ: ignored
    assert health.token_cosine(same, mask) == pytest.approx(1.0)
    orth = torch.stack([torch.stack([e1, e1, e1]), torch.stack([e2, e2, e2])])
    assert health.token_cosine(orth, mask) == pytest.approx(0.0)
    # within-sequence pairs do not count: seq 0 = [e1, e2], seq 1 = [e1, -e2]
    mixed = torch.stack([torch.stack([e1, e2, e1]), torch.stack([e1, -e2, e1])])
    # cross pairs: (e1,e1)=1, (e1,-e2)=0, (e2,e1)=0, (e2,-e2)=-1 -> mean 0
    assert health.token_cosine(mixed, mask) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="must be"):
        health.token_cosine(torch.zeros(2, 3), mask)


def test_logit_spread_ignores_padding():
    logits = torch.tensor([[1.0, 3.0, 100.0]])
    assert health.logit_spread(logits, torch.tensor([[1, 1, 0]])) == pytest.approx(math.sqrt(2.0))


def test_unigram_log_probs_are_add_one_frequencies():
    lp = health.unigram_log_probs(torch.tensor([3, 0, 1]))  # (3+1)/(4+3), (0+1)/7, (1+1)/7
    assert torch.allclose(lp.exp(), torch.tensor([4 / 7, 1 / 7, 2 / 7], dtype=torch.float64))


@pytest.mark.parametrize("auc, cosine, spread, collapsed", [
    (0.53, 0.998, 0.001, True),    # the collapse measured on the old tiny recipe (ELECTRA)
    (0.42, 0.998, 0.05, True),     # Electric: corrected logit worse than chance, tokens share one state
    (0.55, 0.50, 0.005, True),     # flat outputs alone are enough with a low AUC
    (0.563, 0.944, 0.547, True),   # lr 5e-4 at tiny after 1.6M tokens: drifting into the collapsed state
    (0.70, 0.95, 0.3, False),      # healthy at ~2M tokens (ELECTRA, new recipe)
    (0.55, 0.60, 0.5, False),      # early and weak, but neither one state nor flat outputs
    (0.90, 0.999, 0.001, False),   # ranking well is never a collapse
    (math.nan, 0.999, 0.0, False),  # no discriminator (mlm)
])
def test_collapse_rule(auc, cosine, spread, collapsed):
    assert health.collapse_reasons(auc, cosine, spread, 7.0, 6.8) == health.collapse_reasons(auc, cosine, spread)

    reasons = health.collapse_reasons(auc, cosine, spread)
    assert bool(reasons) == collapsed
    if collapsed:
        assert reasons[0].startswith("AUC")


def _batch(objective: str):
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    labels = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    logits = torch.tensor([[-2.0, 1.0, -1.0, 9.0], [0.5, -3.0, 0.0, -1.0]])
    hidden = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0))
    d = {"disc_logits": logits, "disc_output": logits * 0 + 7.0 if objective == "electric" else logits,
         "labels": labels, "attention_mask": mask, "hidden": hidden,
         "gen_nll": torch.tensor([1.0, 3.0]), "gen_targets": torch.tensor([0, 2])}
    if objective == "electric":
        d["corrected"] = True
    return d


def test_health_metrics_from_model_details():
    uni = torch.log(torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64))
    m = health.health_metrics([_batch("electra")], uni)
    # real tokens: logits -2, 1, -1, 0.5, -3, 0, -1 with labels 0, 1, 0, 1, 0, 0, 0: both positives above all
    assert m["disc_auc"] == pytest.approx(1.0)
    # predictions > 0: tokens 1 and 3, both replaced -> accuracy 7/7, always-original 5/7
    assert m["disc_acc_gain"] == pytest.approx(2 / 7)
    assert m["gen_nll"] == pytest.approx(2.0)
    assert m["unigram_nll"] == pytest.approx(-(math.log(0.5) + math.log(0.25)) / 2)
    assert "energy_auc" not in m and -1 <= m["token_cosine"] <= 1
    e = health.health_metrics([_batch("electric")], None)
    # Electric: the energy alone is a constant here -> AUC 0.5 and spread 0, beside the corrected logit's 1.0
    assert e["disc_auc"] == pytest.approx(1.0) and e["energy_auc"] == pytest.approx(0.5)
    assert e["logit_spread"] == pytest.approx(0.0) and "unigram_nll" not in e



@pytest.mark.parametrize("auc, gen_nll, unigram_nll, collapsed", [
    (0.431, 5.14, 6.84, True),     # Electric at lr 1e-3: below chance against a cloze model better than unigram
    (0.418, 8.90, 6.84, False),    # debug Electric at step 10: its cloze model is still worse than unigram
    (0.48, 5.14, 6.84, False),     # just under 0.5 is noise on a validation slice, not a verdict
    (0.431, math.nan, 6.84, False),  # generator NLL unknown
])
def test_below_chance_counts_once_the_generator_beats_unigram(auc, gen_nll, unigram_nll, collapsed):
    # states that look healthy (cosine 0.77, spread 2.5): only the ranking is wrong
    reasons = health.collapse_reasons(auc, 0.771, 2.52, gen_nll, unigram_nll)
    assert bool(reasons) == collapsed
    row = {"val_disc_auc": auc, "val_token_cosine": 0.771, "val_logit_spread": 2.52, "val_gen_nll": gen_nll,
           "val_unigram_nll": unigram_nll}
    assert health.collapse_reasons_in(row) == reasons
