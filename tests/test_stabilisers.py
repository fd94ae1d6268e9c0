"""The stabilisers' flags: embedding sharing (shared, separate, GDES) and dropout."""

import pytest
import torch
from transformers import AutoModelForMaskedLM

from electric.modeling.cloze import ElectricForClozeLM
from electric.pretraining.config import resolve_config
from electric.pretraining.modeling import PretrainingModel, SpecialIds
from training.pretrain_args import parse_args, resolve_run
from training.run_dir import TrainerState, save_checkpoint
from training.schedule import build_optimizer


def special_ids(vocab=50) -> SpecialIds:
    return SpecialIds(pad=0, mask=1, cls=2, sep=3, vocab_size=vocab, all_special=(0, 1, 2, 3))


def batch():
    torch.manual_seed(0)
    ids = torch.randint(4, 50, (4, 16))
    ids[:, 0], ids[:, -1] = 2, 3
    return ids, torch.ones_like(ids)


def gen_word_embeddings(model):
    g = model.generator
    return (g.embeddings if isinstance(g, ElectricForClozeLM) else g.electra.embeddings).word_embeddings


@pytest.mark.parametrize("objective", ["electra", "electric"])
def test_gdes_keeps_the_generators_loss_off_the_discriminators_embeddings(objective):
    cfg = resolve_config("debug", objective, {"embedding_sharing": "gdes", "gen_weight": 1.0, "disc_weight": 0.0})
    model = PretrainingModel(cfg, special_ids())
    disc_words = model.discriminator.electra.embeddings.word_embeddings.weight
    assert gen_word_embeddings(model) is not model.discriminator.electra.embeddings.word_embeddings
    torch.testing.assert_close(model.generator_word_weight(), disc_words.detach())  # delta starts at 0
    ids, am = batch()
    out = model(ids, am, model.draw_noise(ids, torch.Generator().manual_seed(0)))
    out["loss"].backward()  # the generator's loss alone (disc_weight 0)
    assert disc_words.grad is None or disc_words.grad.abs().max() == 0
    assert model.gdes_delta.grad is not None and model.gdes_delta.grad.abs().max() > 0
    # the discriminator's own loss still trains its embeddings
    model.zero_grad()
    cfg2 = resolve_config("debug", objective, {"embedding_sharing": "gdes", "gen_weight": 0.0})
    model2 = PretrainingModel(cfg2, special_ids())
    model2(ids, am, model2.draw_noise(ids, torch.Generator().manual_seed(0)))["loss"].backward()
    assert model2.discriminator.electra.embeddings.word_embeddings.weight.grad.abs().max() > 0


def test_the_delta_moves_at_gen_lr_and_a_saved_gdes_generator_is_a_plain_model_with_its_effective_embeddings(
        tmp_path, tokenizer_dir):
    from electric.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    cfg = resolve_config("debug", "electra", {"embedding_sharing": "gdes", "gen_lr": 2e-3})
    model = PretrainingModel(cfg, SpecialIds.from_tokenizer(tok))
    opt = build_optimizer(model, cfg)
    assert any(g["lr_scale"] == 2.0 and any(p is model.gdes_delta for p in g["params"]) for g in opt.param_groups)
    with torch.no_grad():
        model.gdes_delta.normal_()
    save_checkpoint(tmp_path, model, tok, opt, TrainerState())
    gen = AutoModelForMaskedLM.from_pretrained(tmp_path / "generator")
    torch.testing.assert_close(gen.electra.embeddings.word_embeddings.weight, model.generator_word_weight().detach())
    torch.testing.assert_close(gen.generator_lm_head.weight, gen.electra.embeddings.word_embeddings.weight)


def test_separate_embeddings_are_the_generators_own():
    model = PretrainingModel(resolve_config("debug", "electra", {"embedding_sharing": "separate"}), special_ids())
    assert model.generator.electra.embeddings is not model.discriminator.electra.embeddings
    assert model.generator.generator_lm_head.weight is model.generator.electra.embeddings.word_embeddings.weight
    shared = PretrainingModel(resolve_config("debug", "electra", {}), special_ids())
    assert shared.generator.electra.embeddings is shared.discriminator.electra.embeddings


def test_gdes_with_a_frozen_generator_is_refused():
    with pytest.raises(ValueError, match="gdes"):
        resolve_config("debug", "electra", {"embedding_sharing": "gdes", "generator_mode": "frozen"})


def test_dropout_sets_hidden_and_attention_dropout(tmp_path, tokenizer_dir):
    args = parse_args(["--preset", "tiny", "--dropout", "0.05", "--data", "x", "--tokenizer", str(tokenizer_dir),
                       "--out", str(tmp_path / "r")])
    cfg = resolve_run(args).pretrain
    assert (cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob) == (0.05, 0.05)
    assert resolve_run(parse_args(["--preset", "tiny", "--data", "x", "--tokenizer", str(tokenizer_dir), "--out",
                                   str(tmp_path / "s")])).pretrain.hidden_dropout_prob == 0.0
