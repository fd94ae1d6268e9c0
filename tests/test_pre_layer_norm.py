"""Pre-LayerNorm ELECTRA (--layer-norm pre): each sublayer reads LN(x) and adds to x, a last LayerNorm closes the
encoder; it trains, warm-starts and loads back, and what cannot run it (export, scoring, fine-tuning) refuses it."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining
from transformers.models.electra.modeling_electra import ElectraEncoder

from electric.checkpoint import CheckpointError
from electric.modeling.loading import load_model
from electric.modeling.pre_layer_norm import (
    PreLayerNormEncoder,
    electra_model,
    require_post_layer_norm,
)
from electric.pretraining.config import resolve_config
from training.pretrain import main


def small_config(**kw) -> ElectraConfig:
    return ElectraConfig(vocab_size=60, embedding_size=16, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw)


def test_a_pre_ln_layer_adds_each_sublayer_of_the_normalised_stream_to_the_stream():
    torch.manual_seed(0)
    model = electra_model(ElectraForPreTraining, small_config(layer_norm_position="pre")).eval()
    layer = model.electra.encoder.layer[0]
    x = torch.randn(1, 5, 16)
    attn, out = layer.attention, layer.output
    ln_x = attn.output.LayerNorm(x)
    h = x + attn.output.dense(attn.self(ln_x)[0])
    expected = h + out.dense(layer.intermediate(out.LayerNorm(h)))
    assert torch.allclose(layer(x), expected, atol=1e-6)
    # the encoder's output is normalised: zero mean, unit variance per token (LayerNorm at its initial weights)
    last = model.electra(torch.randint(5, 60, (2, 7))).last_hidden_state
    assert torch.allclose(last.mean(-1), torch.zeros(2, 7), atol=1e-5)


def test_without_the_setting_the_model_is_transformers_own_post_ln_electra():
    model = electra_model(ElectraForPreTraining, small_config())
    assert type(model.electra.encoder) is ElectraEncoder


@pytest.mark.parametrize("cls", [ElectraForPreTraining, ElectraForMaskedLM])
def test_a_saved_pre_ln_model_loads_back_with_the_same_outputs(cls, tmp_path):
    torch.manual_seed(0)
    model = electra_model(cls, small_config(layer_norm_position="pre")).eval()
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["layer_norm_position"] == "pre"
    assert "electra.encoder.final_layer_norm.weight" in load_file(tmp_path / "model.safetensors")
    again = load_model(tmp_path, cls)
    assert isinstance(again.electra.encoder, PreLayerNormEncoder)
    ids = torch.randint(5, 60, (2, 6))
    assert torch.allclose(again(ids).logits, model(ids).logits, atol=1e-6)


def test_export_and_fine_tuning_refuse_a_pre_ln_checkpoint(tmp_path):
    from electric.export.graph import load_for_export

    electra_model(ElectraForPreTraining, small_config(layer_norm_position="pre")).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="pre-LayerNorm checkpoint.*fine-tuning"):
        require_post_layer_norm(tmp_path, "fine-tuning")
    with pytest.raises(CheckpointError, match="pre-LayerNorm checkpoint.*the ONNX export"):
        load_for_export(tmp_path, "ElectraForPreTraining")


def test_layer_norm_is_post_or_pre():
    assert resolve_config("debug", "electra", {}).layer_norm == "post"
    with pytest.raises(ValueError, match="layer_norm must be post or pre"):
        resolve_config("debug", "electra", {"layer_norm": "sandwich"})


@pytest.mark.integration
def test_a_pre_ln_run_warm_starts_trains_and_an_electra_run_initialises_from_it(wiki_sample, tokenizer_dir, tmp_path):
    common = ["--preset", "debug", "--data", str(wiki_sample), "--tokenizer", str(tokenizer_dir), "--num-proc", "1",
              "--eval-every", "4", "--layer-norm", "pre"]
    run = tmp_path / "warm"
    assert main(["--objective", "electra", "--warm-start", "0.5", "--max-steps", "8", "--out", str(run), *common]) == 0
    for part in ("warm_start", "discriminator", "generator"):
        assert json.loads((run / part / "config.json").read_text())["layer_norm_position"] == "pre"
    disc = load_model(run / "discriminator", ElectraForPreTraining)
    warm = load_model(run / "warm_start", ElectraForMaskedLM)
    assert isinstance(disc.electra.encoder, PreLayerNormEncoder)
    assert not torch.equal(disc.electra.encoder.final_layer_norm.weight, warm.electra.encoder.final_layer_norm.weight)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows if "loss" in r)
    # the torch scorer runs it as the pre-LN network it is
    from electric.inference.scoring import load_scorer

    scorer = load_scorer(run, "electra", backend="torch")
    assert isinstance(scorer.backend.model.electra.encoder, PreLayerNormEncoder)
    assert all(math.isfinite(r.score) for r in scorer.score(["the cat sat on the mat .", "a b c"], method="electra"))
    # a user's pre-LN masked LM as --init-from: the architecture (pre-LN included) is adopted
    again = tmp_path / "again"
    assert main(["--objective", "electra", "--init-from", str(run / "warm_start"), "--max-steps", "2",
                 "--out", str(again), *common[:-2]]) == 0
    assert json.loads((again / "discriminator" / "config.json").read_text())["layer_norm_position"] == "pre"
