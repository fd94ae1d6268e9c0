"""--init-from any BERT-family checkpoint: reading (transformers and sentence-transformers directories, refusals),
conversion parity with transformers' own classes, and a pretraining run from a small random `BertModel` written
here that adopts its sizes, resumes, exports and scores. The real checkpoint (all-MiniLM-L6-v2) is used by the
integration test at the end when `scripts/fetch_checkpoint.sh` has put it in runs/checkpoints/all-MiniLM-L6-v2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    ElectraForMaskedLM,
)

from electric.checkpoint import CheckpointError
from electric.modeling.pretrained import discriminator_from, masked_lm_from, read_pretrained
from electric.pretraining.init_from import adopt_architecture, pretraining_model, resolve_init

REPO = Path(__file__).resolve().parents[1]
REAL_CHECKPOINT = REPO / "runs" / "checkpoints" / "all-MiniLM-L6-v2"


def bert_config(tok, **kw) -> BertConfig:
    return BertConfig(vocab_size=len(tok), hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=96, max_position_embeddings=96, type_vocab_size=3,
                      pad_token_id=tok.pad_token_id, **kw)


def save_bert(cls, tokenizer_dir: Path, out: Path, sentence_transformers: str | None = None) -> Path:
    """A random `cls` (BertModel, BertForMaskedLM, ...) saved with the tokenizer; with `sentence_transformers`
    set, as a sentence-transformers directory whose first module lies in that folder ("" = the root)."""
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    model_dir = out if sentence_transformers is None else out / sentence_transformers
    cls(bert_config(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    if sentence_transformers is not None:
        modules = [{"idx": 0, "name": "0", "path": sentence_transformers, "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        (out / "modules.json").write_text(json.dumps(modules))
        (out / "1_Pooling").mkdir()
        (out / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 48}')
    return out


@pytest.fixture(scope="module")
def st_dir(tokenizer_dir, tmp_path_factory) -> Path:
    """A sentence-transformers directory with a random BertModel at its root, as all-MiniLM-L6-v2 ships."""
    return save_bert(BertModel, tokenizer_dir, tmp_path_factory.mktemp("st") / "minibert", sentence_transformers="")


def ids_for(tokenizer_dir: Path) -> torch.Tensor:
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    return tok(["the cat sat on the mat", "a second sentence of text"], padding=True, return_tensors="pt")


# ---- reading and converting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", ["", "0_Transformer"])
def test_a_sentence_transformers_directory_is_read_at_its_root_or_its_first_modules_folder(tokenizer_dir, tmp_path,
                                                                                           folder):
    root = save_bert(BertModel, tokenizer_dir, tmp_path / "st", sentence_transformers=folder)
    src = read_pretrained(root)
    assert src.architecture == "BertModel" and src.carries == "encoder"
    assert src.model_dir == root / folder and (src.tokenizer_dir / "tokenizer.json").is_file()


def test_a_bert_encoder_becomes_the_discriminators_with_the_same_hidden_states(tokenizer_dir, tmp_path):
    d = save_bert(BertModel, tokenizer_dir, tmp_path / "bert")
    bert = BertModel.from_pretrained(d).eval()
    disc = discriminator_from(read_pretrained(d), output_bias=-1.7).eval()
    enc = ids_for(tokenizer_dir)
    with torch.no_grad():
        want = bert(**enc).last_hidden_state
        got = disc(**enc, output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert disc.config.type_vocab_size == 3 and disc.config.max_position_embeddings == 96
    assert torch.all(disc.discriminator_predictions.dense_prediction.bias == -1.7), "a fresh head at the given prior"


@pytest.mark.parametrize("cls", [BertForMaskedLM, BertForPreTraining])
def test_a_bert_masked_lm_converts_to_electra_with_the_same_predictions(tokenizer_dir, tmp_path, cls):
    d = save_bert(cls, tokenizer_dir, tmp_path / "bert")
    bert = cls.from_pretrained(d).eval()
    mlm = masked_lm_from(read_pretrained(d)).eval()
    assert isinstance(mlm, ElectraForMaskedLM)
    enc = ids_for(tokenizer_dir)
    with torch.no_grad():
        want = bert(**enc).logits if cls is BertForMaskedLM else bert(**enc).prediction_logits
        torch.testing.assert_close(mlm(**enc).logits, want, atol=1e-5, rtol=1e-5)


def test_an_encoder_without_an_mlm_head_gets_a_fresh_head_tied_to_its_embeddings(st_dir):
    mlm = masked_lm_from(read_pretrained(st_dir))
    assert mlm.generator_lm_head.weight is mlm.electra.embeddings.word_embeddings.weight
    bert = BertModel.from_pretrained(st_dir)
    assert torch.equal(mlm.electra.embeddings.word_embeddings.weight, bert.embeddings.word_embeddings.weight)


def test_other_families_and_broken_directories_are_refused_in_one_line(tokenizer_dir, tmp_path):
    roberta = tmp_path / "roberta"
    roberta.mkdir()
    (roberta / "config.json").write_text(json.dumps({"model_type": "roberta", "architectures": ["RobertaModel"]}))
    with pytest.raises(CheckpointError, match=r"roberta checkpoint \(RobertaModel\); supported: BERT") as e:
        read_pretrained(roberta)
    assert "\n" not in str(e.value)
    no_weights = tmp_path / "empty"
    no_weights.mkdir()
    (no_weights / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(CheckpointError, match="holds no weights"):
        read_pretrained(no_weights)
    d = save_bert(BertModel, tokenizer_dir, tmp_path / "notok")
    for f in ("tokenizer.json", "vocab.txt"):
        (d / f).unlink(missing_ok=True)
    with pytest.raises(CheckpointError, match="holds no tokenizer"):
        read_pretrained(d)
    with pytest.raises(CheckpointError, match="does not exist"):
        read_pretrained(tmp_path / "nope")


def test_the_run_adopts_the_checkpoints_sizes_and_builds_a_fresh_generator_at_the_configured_width(st_dir):
    from electric.pretraining.config import resolve_config
    from electric.pretraining.modeling import SpecialIds
    from electric.tokenization import load_tokenizer

    source = resolve_init(str(st_dir))
    cfg = adopt_architecture(resolve_config("tiny", "electric", {"init_from": str(st_dir)}), source)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.intermediate_size) == (48, 2, 4, 96)
    assert (cfg.embedding_size, cfg.max_position_embeddings, cfg.type_vocab_size, cfg.max_seq_length) == (48, 96, 3, 96)
    model = pretraining_model(cfg, SpecialIds.from_tokenizer(load_tokenizer(source.tokenizer)), source)
    assert model.generator.config.hidden_size == 12 and model.generator.embeddings is model.discriminator.electra.embeddings
    bert = BertModel.from_pretrained(st_dir)
    assert torch.equal(model.discriminator.electra.encoder.layer[1].output.dense.weight,
                       bert.encoder.layer[1].output.dense.weight)


# ---- a run from a checkpoint ----------------------------------------------------------------------------------

def pretrain(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "training.pretrain", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.integration
def test_a_run_from_a_sentence_transformers_checkpoint_trains_resumes_and_exports(st_dir, wiki_sample, tmp_path):
    out = tmp_path / "run"
    common = ["--objective", "electric", "--preset", "debug", "--init-from", st_dir, "--data", wiki_sample,
              "--out", out, "--max-steps", 8, "--num-proc", "1", "--log-every", 1, "--eval-every", 4]
    first = pretrain(*common, "--stop-at", 4)
    assert first.returncode == 0, first.stderr[-2000:]
    resumed = pretrain(*common[:-8], "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    saved = json.loads((out / "config.json").read_text())
    assert (saved["hidden_size"], saved["type_vocab_size"], saved["max_position_embeddings"]) == (48, 3, 96)
    assert (out / "discriminator" / "tokenizer.json").is_file()
    assert "collapsed" not in resumed.stderr
    export = subprocess.run([sys.executable, "-m", "electric.cli", "export", "--model", str(out / "discriminator"), "--out",
                             str(tmp_path / "onnx")], cwd=REPO, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert export.returncode == 0, export.stderr[-2000:]
    manifest = json.loads((tmp_path / "onnx" / "electric.json").read_text())
    assert manifest["kind"] == "discriminator"


@pytest.mark.integration
def test_a_run_from_a_checkpoint_is_measured_at_step_0_and_ends_with_its_health_written(st_dir, wiki_sample,
                                                                                        tmp_path):
    from electric.checkpoint import TRAINING_HEALTH, training_health

    out = tmp_path / "run"
    common = ["--objective", "electric", "--preset", "debug", "--init-from", st_dir, "--data", wiki_sample,
              "--out", out, "--max-steps", 6, "--num-proc", "1", "--log-every", 1, "--eval-every", 3]
    first = pretrain(*common, "--stop-at", 2)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "electric from minibert" in first.stderr  # the progress names the checkpoint, not a preset
    resumed = pretrain(*common[:-8], "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and rows[0]["baseline"] and "val_energy_auc" in rows[0]
    steps = {r["step"]: r for r in rows if "loss" in r}
    assert sorted(steps) == [1, 2, 3, 4, 5, 6]
    assert all("logit_mean" in r for r in steps.values())  # where the corrected logits sit
    assert json.loads((out / "config.json").read_text())["temperature_start"] == 4.0  # easy noise first
    health = json.loads((out / "discriminator" / TRAINING_HEALTH).read_text())
    assert health["steps"] == 6 and health["start"]["baseline"] and health["end"]["step"] == 6
    assert health == json.loads((out / "generator" / TRAINING_HEALTH).read_text())
    assert all(f"WARNING: {w}" in resumed.stdout for w in health["warnings"])
    assert training_health(out / "generator") == health


@pytest.mark.integration
def test_the_real_checkpoint_starts_an_electric_run(tmp_path, wiki_sample):
    if not (REAL_CHECKPOINT / "modules.json").is_file():
        pytest.skip(f"{REAL_CHECKPOINT} is absent: run `scripts/fetch_checkpoint.sh {REAL_CHECKPOINT}`")
    out = tmp_path / "minilm"
    r = pretrain("--objective", "electric", "--preset", "tiny", "--init-from", REAL_CHECKPOINT, "--data", wiki_sample,
                 "--out", out, "--max-steps", 2, "--batch-size", 4, "--num-proc", "1", "--eval-every", 2)
    assert r.returncode == 0, r.stderr[-2000:]
    saved = json.loads((out / "config.json").read_text())
    assert (saved["hidden_size"], saved["num_hidden_layers"], saved["num_attention_heads"]) == (384, 6, 12)
    assert len(AutoTokenizer.from_pretrained(out / "discriminator")) == 30522
    shutil.rmtree(out)


def test_fine_tuning_takes_a_sentence_transformers_checkpoint_as_its_encoder(st_dir):
    from transformers import ElectraForPreTraining

    from training.finetune import encoder_dir

    d = encoder_dir(str(st_dir))
    assert json.loads((d / "config.json").read_text())["model_type"] == "electra"
    electra = ElectraForPreTraining.from_pretrained(d)
    bert = BertModel.from_pretrained(st_dir)
    assert torch.equal(electra.electra.encoder.layer[0].attention.self.query.weight,
                       bert.encoder.layer[0].attention.self.query.weight)
    assert (d / "tokenizer.json").is_file()


def test_a_fresh_head_on_a_trained_encoder_trains_at_its_own_lr(st_dir):
    from electric.pretraining.config import resolve_config
    from electric.pretraining.modeling import SpecialIds
    from electric.tokenization import load_tokenizer
    from training.schedule import HEAD, build_optimizer

    source = resolve_init(str(st_dir))
    cfg = adopt_architecture(resolve_config("debug", "electra", {"init_from": str(st_dir)}), source)
    assert cfg.head_lr_scale == 30.0  # from a checkpoint: auto
    assert resolve_config("debug", "electra").head_lr_scale == 1.0  # from scratch
    assert resolve_config("debug", "electra", {"disc_head_lr_scale": 5.0}).head_lr_scale == 5.0
    model = pretraining_model(cfg, SpecialIds.from_tokenizer(load_tokenizer(source.tokenizer)), source)
    scale = {id(p): g["lr_scale"] for g in build_optimizer(model, cfg).param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        if name.startswith(HEAD):
            assert scale[id(p)] == 30.0, name
        elif name.startswith("discriminator."):
            assert scale[id(p)] == 1.0, name


def test_a_mistyped_local_path_is_called_missing_not_a_hub_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(CheckpointError, match="'runs/nope' does not exist") as e:
        resolve_init("runs/nope")
    assert "hub" not in str(e.value)
    with pytest.raises(CheckpointError, match="looks like a model-hub name"):
        resolve_init("google/electra-small-discriminator")


def test_a_discriminator_checkpoint_keeps_its_head_at_the_runs_lr(disc_dir, wiki_sample, tmp_path):
    from training.pretrain_args import parse_args, resolve_run

    args = ["--objective", "electra", "--init-from", str(disc_dir), "--data", str(wiki_sample), "--out",
            str(tmp_path / "o")]
    run = resolve_run(parse_args(args))
    assert run.pretrain.head_lr_scale == 1.0  # its trained head: no faster than the encoder
    assert run.tokenizer == str(disc_dir)  # the source's tokenizer, from the one resolution


def test_electric_from_a_checkpoint_starts_with_easy_noise_that_hardens(st_dir, cloze_run, wiki_sample, tmp_path):
    """A fresh cloze model beside a trained encoder: noise at temperature 4 falling to 1 (its log q climbs fast at
    first); a run's own cloze model continued, a flag given, or another objective: the usual constant 1."""
    from electric.pretraining.config import CHECKPOINT_TEMPERATURE_START
    from training.pretrain_args import parse_args, resolve_run
    from training.schedule import temperature_at

    def resolved(*flags):
        args = ["--init-from", *map(str, flags), "--data", str(wiki_sample), "--out", str(tmp_path / "o"),
                "--overwrite"]
        return resolve_run(parse_args(args)).pretrain

    cfg = resolved(st_dir, "--objective", "electric")
    assert (cfg.temperature_start, cfg.temperature) == (CHECKPOINT_TEMPERATURE_START, 1.0)
    assert [temperature_at(s, cfg, 10) for s in (0, 5, 10)] == [4.0, 2.5, 1.0]
    assert resolved(st_dir, "--objective", "electric", "--temperature-start", 0).temperature_start == 0
    assert resolved(st_dir, "--objective", "electra").temperature_start == 0
    assert resolved(cloze_run, "--objective", "electric").temperature_start == 0  # its cloze model goes on
