"""Fine-tuning end to end on a few dozen real examples with a tiny model, its errors, and `eval detect`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from electric.finetuning.config import FinetuneConfig
from electric.finetuning.tasks import CONLL2000_TAGS, TASKS
from tests.conftest import require_shared
from training import finetune
from training.finetune import encoder_dir, param_groups


def head(src: Path, dst: Path, n: int) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, encoding="utf-8") as f:
        dst.write_text("".join(line for _, line in zip(range(n), f, strict=False)), encoding="utf-8")
    return dst


def sentences_head(src: Path, dst: Path, n: int) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    out, seen = [], 0
    with open(src, encoding="utf-8") as f:
        for line in f:
            out.append(line)
            seen += not line.strip()
            if seen == n:
                break
    dst.write_text("".join(out), encoding="utf-8")
    return dst


def run(argv: list[str], capsys=None) -> tuple[int, str]:
    rc = finetune.main([str(a) for a in argv])
    err = capsys.readouterr().err if capsys is not None else ""
    return rc, err


def load_eval(out: Path) -> dict:
    return json.loads((out / "eval.json").read_text())


# ---- end to end ----------------------------------------------------------------------------------

@pytest.mark.integration
def test_classification_task_folder_end_to_end(disc_dir, tmp_path):
    from electric.inference.backend import load_backend

    src = require_shared("glue/sst2")
    head(src / "train.tsv", tmp_path / "sst2" / "train.tsv", 41)
    head(src / "dev.tsv", tmp_path / "sst2" / "dev.tsv", 21)
    out = tmp_path / "out"
    rc, _ = run(["--task", "sst2", "--model", disc_dir, "--data", tmp_path / "sst2", "--out", out,
                 "--epochs", "2", "--batch-size", "8", "--seed", "1"])
    assert rc == 0
    ev = load_eval(out)
    assert ev["task"] == "sst2" and ev["train_examples"] == 40 and ev["dev_examples"] == 20
    assert 0.0 <= ev["dev"]["accuracy"] <= 1.0 and ev["best_epoch"] in (1, 2) and len(ev["history"]) == 2
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["ElectraForSequenceClassification"]
    assert cfg["id2label"] == {"0": "negative", "1": "positive"} and cfg["label2id"]["positive"] == 1
    assert cfg["hidden_dropout_prob"] == 0.1
    fc = json.loads((out / "finetune_config.json").read_text())
    assert (fc["epochs"], fc["layer_decay"], fc["lr"], fc["seed"]) == (2, 0.8, 3e-4, 1)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]  # nothing left from atomic_dir

    backend = load_backend(out)
    assert backend.kind == "classifier"
    enc = backend.tokenizer(["a charming movie", "dull"], padding=True, return_tensors="np")
    logits = backend.run(enc["input_ids"], enc["attention_mask"])
    assert logits.shape == (2, 2) and np.isfinite(logits).all()


@pytest.mark.integration
def test_tagging_end_to_end_maps_pieces_back_to_words(disc_dir, tmp_path):
    from electric.inference.backend import load_backend

    src = require_shared("tagging/conll2000")
    sentences_head(src / "train.txt", tmp_path / "conll" / "train.txt", 40)
    sentences_head(src / "test.txt", tmp_path / "conll" / "test.txt", 6)
    out = tmp_path / "out"
    rc, _ = run(["--task", "conll2000", "--model", disc_dir, "--data", tmp_path / "conll", "--out", out,
                 "--epochs", "2", "--batch-size", "8", "--lr", "1e-3"])
    assert rc == 0
    ev = load_eval(out)
    assert ev["dev_examples"] == 4 and ev["test_examples"] == 6 and ev["train_examples"] == 36
    assert set(ev["dev"]) == {"chunk_f1", "chunk_precision", "chunk_recall", "token_accuracy"}
    assert "test" in ev and ev["dev_words_truncated"] == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["ElectraForTokenClassification"]
    assert [cfg["id2label"][str(i)] for i in range(len(CONLL2000_TAGS))] == list(CONLL2000_TAGS)
    assert load_backend(out).kind == "tagger"

    # word-level prediction: one tag per word, whatever the number of pieces, and a word cut by
    # truncation gets the fallback tag and is counted
    from electric.finetuning.tasks import Example
    from electric.tokenization import load_tokenizer

    tok = load_tokenizer(out)
    words = ["Unbelievably", "long", "words", "here"] * 10
    ex = [Example(words, ["O"] * len(words))]
    enc = finetune.encode(ex, tok, "tagging", {t: i for i, t in enumerate(CONLL2000_TAGS)}, max_len=16)
    model = load_backend(out).model
    cfg_ft = FinetuneConfig(task="conll2000", task_type="tagging", model=str(out))
    preds, cut = finetune.predict(model, enc, cfg_ft, tok.pad_token_id, torch.device("cpu"),
                                  finetune.contextlib.nullcontext, fallback=0)
    assert len(preds[0]) == len(words) and cut > 0
    assert preds[0][-cut:] == [0] * cut


@pytest.mark.integration
def test_regression_pairs_generic_jsonl_random_init(disc_dir, tmp_path):
    ex = TASKS["stsb"].read(head(require_shared("glue/stsb/sts-train.csv"), tmp_path / "sts.csv", 40))
    rows = [json.dumps({"s1": e.text, "s2": e.text_pair, "score": e.label}) for e in ex]
    (tmp_path / "train.jsonl").write_text("\n".join(rows[:30]) + "\n")
    (tmp_path / "dev.jsonl").write_text("\n".join(rows[30:]) + "\n")
    out = tmp_path / "out"
    rc, _ = run(["--task-type", "regression", "--train", tmp_path / "train.jsonl", "--dev", tmp_path / "dev.jsonl",
                 "--text-column", "s1", "--text-pair-column", "s2", "--label-column", "score",
                 "--model", disc_dir, "--out", out, "--epochs", "1", "--random-init"])
    assert rc == 0
    ev = load_eval(out)
    assert set(ev["dev"]) == {"pearson", "spearman"} and ev["random_init"] is True and ev["labels"] == []
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["problem_type"] == "regression" and cfg["id2label"] == {"0": "score"}


@pytest.mark.integration
def test_learns_a_separable_task(disc_dir, tmp_path):
    """A keyword decides the label: fine-tuning must get (nearly) all of dev right."""
    rng = np.random.default_rng(0)
    filler = ["the", "a", "film", "story", "was", "is", "very", "quite", "plot", "actors", "scene", "and", "of"]

    def rows(n):
        out = []
        for i in range(n):
            words = list(rng.choice(filler, size=6))
            good = i % 2 == 0
            words.insert(int(rng.integers(0, 6)), "excellent" if good else "terrible")
            out.append(f"{' '.join(words)},{'pos' if good else 'neg'}")
        return "text,label\n" + "\n".join(out) + "\n"

    (tmp_path / "train.csv").write_text(rows(64))
    (tmp_path / "dev.csv").write_text(rows(20))
    out = tmp_path / "out"
    rc, _ = run(["--task-type", "classification", "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv",
                 "--text-column", "text", "--label-column", "label", "--model", disc_dir, "--out", out,
                 "--epochs", "6", "--batch-size", "8", "--lr", "2e-3"])
    assert rc == 0
    ev = load_eval(out)
    assert ev["dev"]["accuracy"] >= 0.9, ev["history"]
    assert ev["history"][-1]["train_loss"] < ev["history"][0]["train_loss"]


@pytest.mark.integration
def test_keeps_best_epoch_and_stops_early(disc_dir, tmp_path, monkeypatch):
    """Scripted dev scores 0.5, 0.9, 0.6, 0.4: with patience 2 training stops after epoch 4 and the saved
    weights are those of epoch 2."""
    from safetensors.torch import load_file

    src = require_shared("glue/sst2")
    head(src / "train.tsv", tmp_path / "sst2" / "train.tsv", 17)
    head(src / "dev.tsv", tmp_path / "sst2" / "dev.tsv", 9)
    scripted = iter([0.5, 0.9, 0.6, 0.4, 0.3, 0.2])
    snapshots = []
    real_predict = finetune.predict

    def predict(model, *a, **kw):
        snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return real_predict(model, *a, **kw)

    monkeypatch.setattr(finetune, "predict", predict)
    monkeypatch.setattr(finetune, "score", lambda *a: {"accuracy": next(scripted)})
    out = tmp_path / "out"
    rc, _ = run(["--task", "sst2", "--model", disc_dir, "--data", tmp_path / "sst2", "--out", out, "--epochs", "6",
                 "--patience", "2", "--batch-size", "4", "--lr", "1e-3"])
    assert rc == 0
    ev = load_eval(out)
    assert (ev["best_epoch"], ev["epochs_run"], ev["dev"]) == (2, 4, {"accuracy": 0.9})
    saved = load_file(out / "model.safetensors")
    w = "classifier.out_proj.weight"
    assert torch.equal(saved[w], snapshots[1][w]) and not torch.equal(saved[w], snapshots[3][w])


def test_layerwise_lr_decay_and_weight_decay_groups(disc_dir):
    cfg = FinetuneConfig(task="sst2", task_type="classification", model=str(disc_dir)).resolved(
        num_hidden_layers=2, hidden_size=64)
    model = finetune.finetuning_model(cfg, disc_dir, ["negative", "positive"])
    scale = {}
    for g in param_groups(model, cfg):
        for p in g["params"]:
            scale[id(p)] = (g["lr_scale"], g["weight_decay"])
    named = dict(model.named_parameters())
    # 2 layers. ELECTRA: depth 0 embeddings, i + 1 layer i, n + 2 head; scale = 0.8 ** (n + 2 - depth)
    assert scale[id(named["electra.embeddings.word_embeddings.weight"])] == (pytest.approx(0.8 ** 4), 0.01)
    assert scale[id(named["electra.embeddings_project.weight"])][0] == pytest.approx(0.8 ** 4)
    assert scale[id(named["electra.encoder.layer.0.attention.self.query.weight"])][0] == pytest.approx(0.8 ** 3)
    assert scale[id(named["electra.encoder.layer.1.output.dense.weight"])][0] == pytest.approx(0.8 ** 2)
    assert scale[id(named["classifier.out_proj.weight"])] == (1.0, 0.01)
    assert scale[id(named["electra.encoder.layer.1.output.LayerNorm.weight"])][1] == 0.0
    assert scale[id(named["classifier.dense.bias"])][1] == 0.0
    assert len(scale) == len(named)


def test_the_schedule_warms_up_then_decays_linearly():
    from training.schedule import warmup_then_decay

    # peak 1, 4 warmup steps, 10 in all: up by 1/4 a step, then down by 1/6 a step to 0 at step 10
    assert [warmup_then_decay(s, 1.0, 4, 10) for s in (0, 1, 3, 4, 7, 10, 12)] == [0.25, 0.5, 1.0, 1.0, 0.5, 0.0, 0.0]
    assert warmup_then_decay(0, 2.0, 0, 10) == 2.0  # no warmup: the peak at once


def test_finetuning_on_the_shared_schedule_and_adamw_gives_the_same_run(disc_dir, tmp_path, monkeypatch):
    """A seeded run with training/schedule.py's schedule and AdamW builder ends with the losses and weights of one
    with the inline schedule and AdamW fine-tuning had before it shared them (same optimiser, same lrs)."""
    rng = np.random.default_rng(0)
    words = ["the", "a", "film", "was", "very", "plot", "and", "of"]
    rows = [f"{' '.join(rng.choice(words, size=5))} {'excellent' if i % 2 else 'terrible'},{i % 2}" for i in range(16)]
    (tmp_path / "train.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    (tmp_path / "dev.csv").write_text("text,label\n" + "\n".join(rows[:6]) + "\n")

    def fine_tune(out: Path) -> tuple[list, bytes]:
        rc, _ = run(["--task-type", "classification", "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv",
                     "--text-column", "text", "--label-column", "label", "--model", disc_dir, "--out", out,
                     "--epochs", "2", "--batch-size", "4", "--lr", "1e-3", "--warmup-fraction", "0.3",
                     "--patience", "0"])
        assert rc == 0
        return load_eval(out)["history"], (out / "model.safetensors").read_bytes()

    shared = fine_tune(tmp_path / "shared")

    def inline_lr(step, peak, warmup, total_steps):  # the schedule as training/finetune.py wrote it
        return peak * (min(1.0, (step + 1) / warmup) if step < warmup else
                       max(0.0, (total_steps - step) / max(1, total_steps - warmup)))

    def inline_set_lr(optimizer, lr):
        for g in optimizer.param_groups:
            g["lr"] = lr * g["lr_scale"]

    monkeypatch.setattr(finetune, "warmup_then_decay", inline_lr)
    monkeypatch.setattr(finetune, "set_lr", inline_set_lr)
    monkeypatch.setattr(finetune, "adamw", lambda groups, cfg, fused: torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps))
    inline = fine_tune(tmp_path / "inline")
    assert shared[0] == inline[0] and len(shared[0]) == 2
    assert shared[1] == inline[1]


def test_defaults_follow_design():
    cfg = FinetuneConfig(task="rte", task_type="pair-classification", model="m").resolved(
        num_hidden_layers=24, hidden_size=1024)
    assert (cfg.epochs, cfg.layer_decay, cfg.lr, cfg.warmup_fraction, cfg.adam_eps, cfg.weight_decay) == \
        (10, 0.9, 5e-5, 0.1, 1e-6, 0.01)
    cfg = FinetuneConfig(task="sst2", task_type="classification", model="m").resolved(
        num_hidden_layers=12, hidden_size=256)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0  # derived once, then frozen
    assert (cfg.epochs, cfg.layer_decay, cfg.lr) == (3, 0.8, 3e-4)


# ---- --model resolution and errors ---------------------------------------------------------------

@pytest.mark.integration
def test_model_argument_accepts_runs_and_model_dirs(disc_dir, mlm_dir, tmp_path, capsys):
    run_dir = tmp_path / "electra-run"
    shutil.copytree(disc_dir, run_dir / "discriminator")
    shutil.copytree(mlm_dir, run_dir / "generator")
    assert encoder_dir(str(run_dir)) == run_dir / "discriminator"
    mlm_run = tmp_path / "mlm-run"
    shutil.copytree(mlm_dir, mlm_run / "generator")
    assert encoder_dir(str(mlm_run)) == mlm_run / "generator"
    assert encoder_dir(str(mlm_dir)) == mlm_dir
    cloze = tmp_path / "cloze"
    cloze.mkdir()
    (cloze / "config.json").write_text(json.dumps({"model_type": "electric-cloze",
                                                   "architectures": ["ElectricForClozeLM"]}))
    with pytest.raises(ValueError, match="two-tower cloze generator"):
        encoder_dir(str(cloze))

    src = require_shared("glue/sst2")
    head(src / "train.tsv", tmp_path / "sst2" / "train.tsv", 9)
    head(src / "dev.tsv", tmp_path / "sst2" / "dev.tsv", 5)
    rc, err = run(["--task", "sst2", "--model", "google/electra-small-discriminator", "--data", tmp_path / "sst2",
                   "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "never downloads" in err
    rc, _ = run(["--task", "sst2", "--model", mlm_run, "--data", tmp_path / "sst2", "--out", tmp_path / "o",
                 "--epochs", "1"])  # an MLM baseline run fine-tunes from its generator
    assert rc == 0


def test_cli_errors_exit_nonzero_naming_file_and_line(disc_dir, tmp_path, capsys):
    (tmp_path / "train.csv").write_text("text,label\ngood film,pos\nbad film,neg\n")
    (tmp_path / "dev.csv").write_text("text,label\nok film,pos\nmeh film,neutral\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "short.tsv").write_text("text\tlabel\ngood film\tpos\nbad film\n")
    (tmp_path / "reg.csv").write_text("text,score\ngood,4.5\nbad,n/a\n")
    common = ["--model", disc_dir, "--out", tmp_path / "out", "--text-column", "text"]
    cases = [
        (["--task-type", "classification", "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv",
          "--label-column", "label"], "dev.csv:3: unknown label 'neutral'"),
        (["--task-type", "classification", "--train", tmp_path / "empty.csv", "--dev", tmp_path / "dev.csv",
          "--label-column", "label"], "empty.csv: empty file"),
        (["--task-type", "classification", "--train", tmp_path / "short.tsv", "--label-column", "label"],
         "short.tsv:3: expected at least 2 tab-separated columns, found 1"),
        (["--task-type", "regression", "--train", tmp_path / "reg.csv", "--label-column", "score"],
         "reg.csv:3: label 'n/a' is not a number"),
        (["--task-type", "classification", "--train", tmp_path / "train.csv", "--label-column", "y"],
         "train.csv:1: no column named 'y'"),
        (["--task", "sst2", "--task-type", "classification"], "either --task NAME"),
        (["--task", "sst2", "--data", tmp_path / "nowhere"], "is not a directory"),
    ]
    for argv, message in cases:
        rc, err = run([*argv, *common], capsys)
        assert rc == 2, argv
        assert message in err, (message, err)
    assert not (tmp_path / "out").exists()

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    rc, err = run(["--task-type", "classification", "--train", tmp_path / "train.csv", "--label-column", "label",
                   *common], capsys)
    assert rc == 2 and "--overwrite" in err and (tmp_path / "out" / "keep.txt").exists()


# ---- eval detect ---------------------------------------------------------------------------------

@pytest.mark.integration
def test_eval_detect_subcommand(trained_run, tmp_path, capsys):
    from electric.cli.eval_detect import add_eval_parser

    fce = sentences_head(require_shared("tagging/fce/fce-public.test.original.tsv"), tmp_path / "fce.tsv", 30)
    ap = argparse.ArgumentParser(prog="electric")
    eval_group = ap.add_subparsers(dest="command").add_parser("eval").add_subparsers(dest="eval_command")
    add_eval_parser(eval_group)
    args = ap.parse_args(["eval", "detect", "--model", str(trained_run), "--data", str(fce), "--quiet",
                          "--json", str(tmp_path / "detect.json")])
    assert args.func(args) == 0
    res = json.loads((tmp_path / "detect.json").read_text())
    from electric.finetuning.tasks import TASKS

    sents = TASKS["fce"].read(fce)
    assert res["sentences"] + res["dev"]["sentences"] == len(sents) == 30  # a seeded half is dev
    n_words = sum(len(e.text) for e in sents)
    assert res["words"] + res["words_without_pieces"] + res["dev"]["words"] <= n_words
    assert 0.0 <= res["roc_auc"] <= 1.0 and 0.0 <= res["f0.5"] <= 1.0 and 0 < res["incorrect_rate"] < 1
    assert res["threshold"] == res["dev"]["threshold"] and res["calibrated"] is False
    out = capsys.readouterr().out
    assert "ROC-AUC" in out and "uncalibrated" in out

    args = ap.parse_args(["eval", "detect", "--model", str(tmp_path), "--data", str(fce), "--quiet"])
    assert args.func(args) == 2


@pytest.mark.integration
def test_detect_word_scores_take_the_max_over_pieces(trained_run):
    from electric.cli.eval_detect import word_scores
    from electric.inference.scoring import load_scorer

    scorer = load_scorer(trained_run, "electra", backend="torch", device="cpu", sliding_window=True)
    words = ["Unbelievably", ",", "the", "committee's", "decision"]
    (scores,) = word_scores(scorer, [words])
    assert len(scores) == len(words) and all(s is not None for s in scores)
    enc = scorer.tokenizer(words, is_split_into_words=True)
    ids = np.asarray([enc["input_ids"]])
    prob = 1 / (1 + np.exp(-scorer.backend.run(ids, np.ones_like(ids))[0]))
    for k in range(len(words)):
        pieces = [t for t, w in enumerate(enc.word_ids()) if w == k]
        assert scores[k] == pytest.approx(prob[pieces].max(), abs=1e-5)


# ---- the GLUE comparison study's script runs ----------------------------------------------------------

@pytest.mark.integration
def test_glue_compare_benchmark_smoke(disc_dir, tmp_path):
    from script_loader import load_script

    glue_compare = load_script("research/first_tiny_runs/glue_compare.py")
    run_dir = tmp_path / "tiny-run"
    shutil.copytree(disc_dir, run_dir / "discriminator")
    out = tmp_path / "glue.md"
    argv = ["--runs", str(run_dir), "--tasks", "rte", "--seeds", "0", "--max-train-examples", "16",
            "--max-eval-examples", "8", "--epochs", "1", "--data", str(require_shared("")), "--work",
            str(tmp_path / "work"), "--out", str(out)]
    assert glue_compare.main(argv) == 0
    md = out.read_text()
    assert "| tiny-run | " in md and "| random-init | " in md and "python -m training.finetune" in md
    figures = json.loads(out.with_suffix(".json").read_text())
    assert set(figures["runs"]) == {"tiny-run", "random-init"}
    assert 0.0 <= figures["medians"]["tiny-run"]["rte/accuracy"] <= 1.0
    assert (tmp_path / "work" / "random-init" / "rte" / "seed0" / "eval.json").is_file()
    assert glue_compare.main(argv) == 0  # a second call reuses the finished runs
