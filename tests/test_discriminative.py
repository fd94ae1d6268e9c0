"""Discriminative n-best training: the MWER loss checked by hand, the score trained equal to the score served, and
the loop (training/discriminative.py) on a tiny model: it trains, keeps the best epoch, and resumes after Ctrl-C."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import require_shared

from electric.evaluation.nbest import NBestList
from electric.finetuning.mwer import hypothesis_errors, informative, mwer_loss, padded, sentence_scores


def test_mwer_loss_on_hand_checked_lists():
    # list 1: p = softmax(ln 1, ln 2, ln 1) = (1/4, 1/2, 1/4); errors (2, 0, 4), mean 2 -> sum p (e - 2) = -1/2
    # list 2: two hypotheses and a padded slot: p = (1/2, 1/2); errors (1, 3), mean 2 -> 0
    logits = torch.tensor([[0.0, math.log(2.0), 0.0], [5.0, 5.0, 0.0]], requires_grad=True)
    errors = torch.tensor([[2.0, 0.0, 4.0], [1.0, 3.0, 99.0]])
    valid = torch.tensor([[True, True, True], [True, True, False]])
    loss = mwer_loss(logits, errors, valid)
    assert loss.item() == pytest.approx((-0.5 + 0.0) / 2)
    loss.backward()
    # d/dz_i = p_i (e_i - E_p[e]) / L: list 1 E_p[e] = 1.5; list 2 E_p[e] = 2; the padding gets none
    expected = torch.tensor([[0.25 * 0.5, 0.5 * -1.5, 0.25 * 2.5], [0.5 * -1.0, 0.5 * 1.0, 0.0]]) / 2
    assert torch.allclose(logits.grad, expected)


def test_mwer_loss_refuses_mismatched_shapes_and_empty_lists():
    with pytest.raises(ValueError, match="one \\(L, N\\) shape"):
        mwer_loss(torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="list 1 has no valid hypothesis"):
        mwer_loss(torch.zeros(2, 2), torch.zeros(2, 2), torch.tensor([[True, True], [False, False]]))


def test_hypothesis_errors_count_word_edits_and_padded_rows_mark_the_padding():
    lists = [NBestList("a", ["show me flights", "show fights", "show me the flights to"], None, "show me flights"),
             NBestList("b", ["list fares", "list fares"], None, "list fares")]
    e = hypothesis_errors(lists, "wer")
    assert e[0].tolist() == [0.0, 2.0, 2.0] and e[1].tolist() == [0.0, 0.0]
    assert informative(e[0]) and not informative(e[1])  # a list whose hypotheses all have the same errors
    x, valid = padded(e)
    assert x.shape == (2, 3) and valid.tolist() == [[True, True, True], [True, True, False]]
    with pytest.raises(ValueError, match="wer or cer"):
        hypothesis_errors(lists, "bleu")


@pytest.mark.parametrize("part,method", [("discriminator", "electric"), ("generator", "cloze")])
def test_the_score_trained_is_the_score_served(cloze_run, part, method):
    """sentence_scores (differentiable, what MWER trains) equals the scorer's one-pass score of the same texts."""
    from electric.inference.scoring import load_scorer
    from training.discriminative import batch_tensors, encode_lists, load_part

    texts = ["show me flights from boston to denver", "list all fares", "what is the earliest flight to dallas"]
    model, kind, tokenizer, max_length = load_part(cloze_run, part)
    model.eval()
    enc = encode_lists([NBestList("u", texts, None, texts[0])], tokenizer, max_length, "wer")
    with torch.no_grad():
        trained = sentence_scores(model, kind, *batch_tensors(enc, np.arange(len(texts)))).numpy()
    served = [r.score for r in load_scorer(cloze_run / part, method, backend="torch").score(texts)]
    assert np.allclose(trained, served, atol=1e-4)


@pytest.fixture(scope="module")
def atis_lists() -> list[NBestList]:
    utts = json.loads(require_shared("nbest/atis_train.whisper5best.json").read_text())[:150]
    return [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]


@pytest.mark.integration
def test_training_keeps_the_best_epoch_and_resumes_after_an_interrupt(cloze_run, atis_lists, tmp_path, monkeypatch):
    from training import discriminative
    from training.discriminative import Interrupted, TrainSpec, train_on_lists

    spec = TrainSpec(source=cloze_run, part="discriminator", out=tmp_path / "d", lists=atis_lists, epochs=2,
                     minutes=5, progress=False)
    real, calls = discriminative.list_scores, {"n": 0}

    def interrupt_at_the_third_step(*a):  # list_scores runs once a training step
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(discriminative, "list_scores", interrupt_at_the_third_step)
    with pytest.raises(Interrupted, match="state is in"):
        train_on_lists(spec, log=lambda _: None)
    saved = torch.load(spec.out / "state.pt", weights_only=False)
    assert saved["step"] == 2 and saved["history"][0]["epoch"] == 0
    monkeypatch.setattr(discriminative, "list_scores", real)
    said: list[str] = []
    record = train_on_lists(spec, log=said.append)
    assert any("resuming discriminative training" in s for s in said)
    per_epoch = math.ceil(record["train_lists"] / discriminative.LISTS_PER_STEP)
    assert record["steps"] == 2 * per_epoch  # the interrupted steps are not done twice
    assert [h["epoch"] for h in record["history"]] == [0, 1, 2]
    best = min(record["history"], key=lambda h: (h["errors"], h["loss"]))
    assert record["chosen_epoch"] == best["epoch"] and record["held_back_after"] == best["rate"]
    assert (spec.out / "run" / "discriminator" / "model.safetensors").is_file()
    assert record["held_back_lists"] == discriminative.MIN_HELD_BACK and record["tokens_per_s"] > 0


def test_real_errors_label_the_words_a_recogniser_substituted_or_inserted():
    from electric.finetuning.asr_errors import piece_labels, piece_words, word_error_labels, word_scores

    assert word_error_labels("show me fights from the boston", "show me flights from boston") == [0, 0, 1, 0, 1, 0]
    assert word_error_labels("show flights", "show me flights") == [0, 0]  # a deletion labels no word
    assert word_error_labels("uh huh", "") == [1, 1] and word_error_labels("", "a b") == []
    # pieces by their character offsets: "what's" is one word of the hypothesis and three pieces of the tokenizer
    text = "what's the fare"
    offsets = np.array([[0, 0], [0, 4], [4, 5], [5, 6], [7, 10], [11, 15], [0, 0]])
    cand = np.array([False, True, True, True, True, True, False])
    words = piece_words(text, offsets, cand)
    assert words.tolist() == [-1, 0, 0, 0, 1, 2, -1]
    assert piece_labels([1, 0, 0], words).tolist() == [-1, 1, 1, 1, 0, 0, -1]
    assert word_scores(np.array([9, 0.1, 0.7, 0.2, 0.3, 0.4, 9]), words, 3).tolist() == [0.7, 0.3, 0.4]


@pytest.mark.integration
def test_the_detector_learns_real_errors_and_says_how_well(cloze_run, atis_lists, tmp_path):
    from training.detector import DetectorSpec, train_detector

    spec = DetectorSpec(source=cloze_run / "discriminator", out=tmp_path / "detector", lists=atis_lists[:100],
                        test=atis_lists[100:], epochs=1, minutes=2, progress=False)
    record = train_detector(spec, log=lambda _: None)
    assert record["steps"] >= 1 and record["held_back_hypotheses"] > 0
    assert 0 <= record["test_auc_zero_shot"] <= 1 and 0 <= record["test_auc_trained"] <= 1
    assert (spec.out / "model.safetensors").is_file() and (spec.out / "config.json").is_file()


@pytest.mark.integration
def test_the_cloze_scorer_trains_the_same_way_and_is_saved_as_a_cloze_model(cloze_run, atis_lists, tmp_path):
    from electric.modeling.loading import read_model_config
    from training.discriminative import TrainSpec, train_on_lists

    spec = TrainSpec(source=cloze_run, part="generator", out=tmp_path / "c", lists=atis_lists, epochs=1, minutes=2,
                     progress=False)
    record = train_on_lists(spec, log=lambda _: None)
    assert record["kind"] == "cloze" and record["steps"] >= 1
    assert read_model_config(spec.out / "run" / "generator")["model_type"] == "electric-cloze"
