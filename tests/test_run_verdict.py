"""How a run from a checkpoint starts and ends: a fresh head at the prior, Electric's noise tempered at first, and the
verdict (below chance, worse than the checkpoint it started from), on hand-made rows and a tiny model. The run
itself: tests/test_init_from_checkpoint.py."""

from __future__ import annotations

import pytest
import torch

from electric.pretraining.config import resolve_config
from training.report import verdict

ELECTRIC = resolve_config("debug", "electric")


def evals(*aucs, baseline=True, key="val_energy_auc", noise=(0.7, 0.7)):
    """Logged evaluations with these AUCs, the first a step-0 baseline when `baseline`."""
    rows = [{"step": 10 * i, "val_disc_auc": 0.7, key: a, "val_unigram_noise_auc": noise[min(i, 1)]}
            for i, a in enumerate(aucs)]
    if baseline:
        rows[0]["baseline"] = True
    return rows


def test_a_healthy_run_ends_without_a_warning():
    assert verdict(ELECTRIC, evals(0.52, 0.61)) == []
    assert verdict(resolve_config("debug", "mlm"), [{"step": 1, "val_gen_nll": 3.0}]) == []  # no discriminator
    assert verdict(ELECTRIC, []) == []  # never evaluated


def test_scores_below_chance_are_said_plainly():
    [w] = verdict(ELECTRIC, evals(0.45, 0.461, baseline=False))
    assert "energy AUC on held-out text is 0.461, below chance (0.5)" in w and "backwards" in w
    [w] = verdict(resolve_config("debug", "electra"), evals(0.6, 0.48, baseline=False, key="val_disc_auc"))
    assert "discriminator AUC" in w and "0.480" in w


def test_a_run_that_ends_worse_than_its_checkpoint_is_told_so():
    ws = verdict(ELECTRIC, evals(0.58, 0.52, noise=(0.80, 0.70)))
    assert [w.split(":")[0] for w in ws] == ["it ends worse than it started"] * 2
    assert "energy AUC 0.520 against 0.580 for the checkpoint under a fresh head at step 0" in ws[0]
    assert "fixed unigram noise 0.700 against 0.800" in ws[1]
    assert verdict(ELECTRIC, evals(0.58, 0.57)) == []  # within noise
    assert verdict(ELECTRIC, evals(0.58, 0.40, baseline=False))[0].startswith("its energy AUC")  # no baseline


def test_a_fresh_head_on_a_trained_encoder_starts_at_the_prior_for_every_token():
    from transformers import ElectraConfig, ElectraModel

    from electric.modeling.pretrained import discriminator_on

    config = ElectraConfig(vocab_size=50, embedding_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32)
    trained = ElectraModel(config).state_dict()  # stands for a checkpoint's encoder
    model = discriminator_on(config, trained, output_bias=2.5, where="test").eval()
    ids = torch.randint(0, 50, (3, 7))
    with torch.no_grad():
        s = model(ids).logits
    assert torch.equal(s, torch.full_like(s, 2.5))  # no random direction that ranks replaced tokens either way


def test_every_electric_step_logs_where_its_corrected_logits_sit():
    from electric.pretraining.modeling import PretrainingModel, SpecialIds

    torch.manual_seed(0)
    model = PretrainingModel(ELECTRIC, SpecialIds(pad=0, mask=3, cls=1, sep=2, vocab_size=40,
                                                  all_special=(0, 1, 2, 3))).train()
    ids, mask = torch.randint(4, 40, (4, 16)), torch.ones(4, 16, dtype=torch.long)
    out = model(ids, mask, model.draw_noise(ids, torch.Generator().manual_seed(1)), details=True)
    assert float(out["logit_mean"]) == pytest.approx(float(out["details"]["disc_logits"].mean()), abs=1e-5)
