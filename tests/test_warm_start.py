"""Warm start: MLM first, then the discriminator objective on its encoder (in one run, or --init-from a masked LM),
with the generator trained jointly at its own lr or frozen with a temperature schedule (Fast-ELECTRA)."""

import json
import math

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, ElectraForMaskedLM, ElectraForPreTraining

from electric.modeling.cloze import ElectricForClozeLM
from electric.pretraining.config import PretrainConfig, resolve_config
from electric.pretraining.handover import model_on_masked_lm
from electric.pretraining.modeling import PretrainingModel, SpecialIds
from training.pretrain import main
from training.schedule import build_optimizer, optimizer_groups, temperature_at


def special_ids(vocab=50) -> SpecialIds:
    return SpecialIds(pad=0, mask=1, cls=2, sep=3, vocab_size=vocab, all_special=(0, 1, 2, 3))


def debug_cfg(objective="electra", **kw) -> PretrainConfig:
    return resolve_config("debug", objective, kw)


# ---- config ----------------------------------------------------------------------------------------------------

def test_the_warm_stage_is_mlm_at_the_mlm_recipes_lr_with_the_same_model():
    cfg = resolve_config("tiny", "electra", {"warm_start": 0.4})
    warm = cfg.warm_stage
    assert (warm.objective, warm.lr, warm.warm_start) == ("mlm", 1e-3, 0.0)  # tiny's MLM lr, not electra's 1e-4
    assert (warm.hidden_size, warm.batch_size, warm.max_seq_length) == (cfg.hidden_size, cfg.batch_size,
                                                                         cfg.max_seq_length)
    assert resolve_config("tiny", "electra", {"warm_start": 0.4, "warm_start_lr": 3e-4}).warm_stage.lr == 3e-4


@pytest.mark.parametrize("values, message", [
    ({"objective": "mlm", "warm_start": 0.4}, "objective mlm has none"),
    ({"warm_start": 1.0}, "fraction"),
    ({"warm_start": 0.4, "init_from": "x"}, "pass one"),
    ({"objective": "electric", "generator_mode": "frozen"}, "two-tower cloze"),
    ({"gen_lr": -1.0}, "gen_lr"),
    ({"temperature_start": -1.0}, "temperature"),
])
def test_bad_warm_start_settings_are_refused_with_the_reason(values, message):
    with pytest.raises(ValueError, match=message):
        resolve_config("debug", values.pop("objective", "electra"), values)


# ---- models ----------------------------------------------------------------------------------------------------

def small_mlm(vocab=50, hidden=32) -> ElectraForMaskedLM:
    torch.manual_seed(0)
    cfg = debug_cfg("mlm", hidden_size=hidden, embedding_size=hidden)
    return PretrainingModel(cfg, special_ids(vocab)).generator


@pytest.mark.parametrize("objective", ["electra", "electric"])
def test_a_warm_started_discriminator_has_the_mlms_encoder_and_a_fresh_head_at_the_prior(objective):
    mlm = small_mlm()
    cfg = debug_cfg(objective, hidden_size=32, embedding_size=32, gen_lr=3e-3)
    model = model_on_masked_lm(cfg, special_ids(), mlm)
    disc = model.discriminator
    for name, p in mlm.electra.state_dict().items():
        assert torch.equal(disc.electra.state_dict()[name], p), name
    assert disc.electra.embeddings.word_embeddings.weight.data_ptr() != mlm.electra.embeddings.word_embeddings.weight.data_ptr()
    bias = disc.discriminator_predictions.dense_prediction.bias.item()
    expected = math.log(0.15 / 0.85) if objective == "electra" else math.log(50)
    assert bias == pytest.approx(expected, abs=1e-5)
    # joint: a fresh generator of the preset's width, reading the (warm) shared embeddings
    gen = model.generator
    assert isinstance(gen, ElectricForClozeLM if objective == "electric" else ElectraForMaskedLM)
    assert gen.config.hidden_size == 8
    gen_emb = gen.embeddings if objective == "electric" else gen.electra.embeddings
    assert gen_emb is disc.electra.embeddings


def test_a_frozen_generator_is_the_mlm_itself_fixed_and_not_sharing_weights():
    mlm = small_mlm()
    cfg = debug_cfg("electra", hidden_size=32, embedding_size=32, generator_mode="frozen", temperature_start=2.0)
    model = model_on_masked_lm(cfg, special_ids(), mlm)
    assert model.generator is mlm and model.frozen_generator
    assert not any(p.requires_grad for p in mlm.parameters())
    model.train()
    assert not mlm.training and model.discriminator.training
    before = {k: v.clone() for k, v in mlm.state_dict().items()}
    ids = torch.randint(4, 50, (4, 16))
    ids[:, 0], ids[:, -1] = 2, 3
    opt = build_optimizer(model, cfg)
    out = model(ids, torch.ones_like(ids), model.draw_noise(ids, torch.Generator().manual_seed(0)))
    out["loss"].backward()
    opt.step()
    assert all(torch.equal(before[k], v) for k, v in mlm.state_dict().items())  # the generator never moves
    assert all(p.grad is None for p in mlm.parameters())


def test_the_generators_own_parameters_get_gen_lr_and_shared_ones_the_discriminators():
    cfg = debug_cfg("electra", gen_lr=3e-3)  # debug lr 1e-3
    model = PretrainingModel(cfg, special_ids())
    groups = build_optimizer(model, cfg).param_groups
    scaled = {id(p) for g in groups if g["lr_scale"] != 1.0 for p in g["params"]}
    assert all(g["lr_scale"] in (1.0, 3.0) for g in groups)
    gen_own = [p for n, p in model.generator.named_parameters() if "embeddings" not in n and p.requires_grad]
    assert gen_own and all(id(p) in scaled for p in gen_own)
    assert id(model.discriminator.electra.embeddings.word_embeddings.weight) not in scaled  # shared: the disc's lr
    assert not any(id(p) in scaled for p in model.discriminator.parameters())
    # without --gen-lr every group moves at the one lr
    assert {g["lr_scale"] for g in optimizer_groups(model, 0.01)} == {1.0}


def test_the_temperature_falls_linearly_from_its_start_to_the_sampling_temperature():
    cfg = debug_cfg("electra", temperature_start=2.0, temperature=1.0)
    assert [temperature_at(s, cfg, 10) for s in (0, 5, 10, 20)] == [2.0, 1.5, 1.0, 1.0]
    assert temperature_at(3, debug_cfg("electra"), 10) == 1.0


# ---- runs ------------------------------------------------------------------------------------------------------

def run_args(wiki_sample, tokenizer_dir, out, *extra, steps=12):
    return [str(a) for a in ("--objective", "electra", "--preset", "debug", "--data", wiki_sample, "--tokenizer",
                             tokenizer_dir, "--out", out, "--max-steps", steps, "--num-proc", "1", "--log-every", 1,
                             "--eval-every", 4, *extra)]


@pytest.mark.integration
def test_a_warm_started_run_switches_objective_and_resumes_across_the_switch_bit_exactly(wiki_sample, tokenizer_dir,
                                                                                         tmp_path, capsys):
    extra = ("--warm-start", "0.5", "--generator-mode", "frozen", "--temperature-start", "2")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert main(run_args(wiki_sample, tokenizer_dir, whole, *extra)) == 0
    assert "warm start done after 6 steps" in capsys.readouterr().err
    rows = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    train = {r["step"]: r for r in rows if "lr" in r}
    assert "disc_loss" not in train[6] and "disc_loss" in train[7]  # MLM for 6 steps, then ELECTRA
    assert train[1]["lr"] == train[7]["lr"] == pytest.approx(1e-3 / 3)  # each stage warms up (3 of its 6 steps)
    assert ElectraForMaskedLM.from_pretrained(whole / "warm_start").config.hidden_size == 64
    assert ElectraForPreTraining.from_pretrained(whole / "discriminator").config.hidden_size == 64
    assert json.loads((whole / "generator" / "config.json").read_text())["hidden_size"] == 64  # the frozen MLM
    # stopped before the switch, and again after it: the same weights as one uninterrupted run
    assert main(run_args(wiki_sample, tokenizer_dir, parts, *extra, "--stop-at", "4")) == 0
    assert main(["--resume", "--out", str(parts), "--data", str(wiki_sample), "--stop-at", "9"]) == 0
    assert main(["--resume", "--out", str(parts), "--data", str(wiki_sample)]) == 0
    a = torch.load(whole / "state" / "model.pt")
    b = torch.load(parts / "state" / "model.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.integration
def test_init_from_a_bert_masked_lm_of_another_size_warm_starts_electric(wiki_sample, tokenizer_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    bert_dir = tmp_path / "bert"
    bert = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=48, num_hidden_layers=3, num_attention_heads=3,
                                      intermediate_size=96, max_position_embeddings=128, pad_token_id=tok.pad_token_id))
    bert.save_pretrained(bert_dir)
    tok.save_pretrained(bert_dir)
    out = tmp_path / "electric"
    args = run_args(wiki_sample, tokenizer_dir, out, "--init-from", bert_dir, steps=4)
    args[args.index("electra")] = "electric"
    args.remove("--tokenizer")
    args.remove(str(tokenizer_dir))  # the source's tokenizer
    assert main(args) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["lr"]) == (48, 3, 1e-3)  # its sizes; not 1/5 of lr
    # the discriminator started from BERT's encoder: its untouched position embeddings beyond the data are BERT's
    disc = ElectraForPreTraining.from_pretrained(out / "discriminator")
    torch.testing.assert_close(disc.electra.embeddings.position_embeddings.weight[100:],
                               bert.bert.embeddings.position_embeddings.weight[100:])
    assert json.loads((out / "generator" / "config.json").read_text())["hidden_size"] == 12  # fresh, 1/4 width


def test_frozen_without_a_masked_lm_to_freeze_is_refused(trained_run, tmp_path, capsys):
    rc = main(["--objective", "electra", "--preset", "debug", "--init-from", str(trained_run / "discriminator"),
               "--generator-mode", "frozen", "--out", str(tmp_path / "x"), "--data", "unused", "--max-steps", "2"])
    assert rc == 2
    assert "needs a masked LM to freeze" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_objective_needs_a_warm_start_sources_sizes(tmp_path):
    with pytest.raises(ValueError, match="hidden/embedding/layers/vocab"):
        model_on_masked_lm(debug_cfg("electra"), special_ids(), small_mlm(hidden=32))


def test_the_resume_flags_do_not_include_the_recipe():
    from electric.pretraining.config import RESUME_FLAGS

    assert not {"warm_start", "gen_lr", "generator_mode", "temperature_start"} & set(RESUME_FLAGS)


def test_tiny_electra_warm_starts_by_default_unless_told_otherwise_or_given_weights():
    cfg = resolve_config("tiny", "electra")
    assert (cfg.warm_start, cfg.gen_lr, cfg.lr, cfg.temperature) == (0.4, 1e-3, 1e-4, 2.0)
    assert resolve_config("tiny", "electra", {"temperature": 1.0}).temperature == 1.0  # a flag wins
    checkpoint = resolve_config("tiny", "electra", {"init_from": "runs/mlm"})
    assert (checkpoint.warm_start, checkpoint.temperature) == (0.0, 1.0)  # as measured from a real checkpoint
    assert resolve_config("tiny", "electra", {"init_from": "runs/mlm", "temperature": 2.0}).temperature == 2.0
    assert resolve_config("tiny", "electra", {"warm_start": 0.0}).warm_start == 0.0  # from scratch
    assert resolve_config("tiny", "electra", {"init_from": "runs/mlm"}).warm_start == 0.0  # its weights instead
    assert resolve_config("small", "electra").warm_start == 0.0  # GPU-scale presets: the paper's recipe
    electric = resolve_config("tiny", "electric")
    assert (electric.warm_start, electric.gen_lr, electric.lr) == (0.0, 1e-3, 1e-4)  # the cloze model at its own lr


@pytest.mark.integration
def test_an_mlm_still_in_its_unigram_phase_is_not_handed_over_and_the_run_ends_healthy(wiki_sample, tokenizer_dir,
                                                                                       tmp_path, capsys):
    """A short warm start at a hot MLM lr leaves the MLM predicting word frequencies from one shared state (token
    cosine ~0.97): handing that encoder over started ELECTRA collapsed (issue 34). The discriminator starts fresh
    instead, and the run ends with a discriminator that tells replaced tokens apart."""
    out = tmp_path / "warm"
    args = run_args(wiki_sample, tokenizer_dir, out, "--warm-start", "0.4", "--warm-start-lr", "5e-3", steps=60)
    args[args.index("--eval-every") + 1] = "10"
    assert main(args) == 0
    err = capsys.readouterr().err
    warm = torch.load(out / "state" / "trainer.pt", weights_only=False)["warm_start"]
    assert warm["token_cosine"] >= 0.9 and warm["handed_over"] is False
    assert "still in the unigram phase" in err and "starts fresh" in err
    last = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "val_disc_auc" in line][-1]
    assert last["val_disc_auc"] >= 0.65 and last["val_token_cosine"] < 0.9, last
    assert "collapsed" not in last


def test_the_collapse_advice_never_tells_a_run_to_do_what_it_did():
    from electric.pretraining import health

    assert "--warm-start 0.4" in health.collapse_advice("scratch")
    assert "--init-from" in health.collapse_advice("scratch")
    warm, ckpt = health.collapse_advice("warm"), health.collapse_advice("checkpoint")
    assert "--warm-start 0.4" not in warm and "warm-start it" not in warm and "larger --warm-start" in warm
    assert "warm-start" not in ckpt and "lower --lr" in ckpt
    assert resolve_config("tiny", "electra").start == "warm"
    assert resolve_config("tiny", "electra", {"init_from": "x"}).start == "checkpoint"
    assert resolve_config("tiny", "electric").start == "scratch"
