"""scripts/quickstart.py's closing summary (the training and serving it runs first are tested elsewhere)."""

from __future__ import annotations

import importlib.util
import json

import jiwer
import numpy as np
import pytest
from conftest import REPO, require_shared

from electric.evaluation.nbest import NBestList, Weights, rerank_lists


@pytest.fixture(scope="module")
def quickstart():
    spec = importlib.util.spec_from_file_location("quickstart", REPO / "scripts" / "quickstart.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_summary_shows_the_wer_without_the_lm(quickstart):
    utts = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:40]
    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    rng = np.random.default_rng(0)
    lm = [rng.normal(size=len(nb.hyps)) for nb in lists]
    results = [r.to_dict() for r in rerank_lists(lists, lm, Weights(lm=1.0))]  # what /v1/rerank answers
    no_lm = Weights(lm=0.0, length=0.05)
    text = quickstart.summarise_test(utts, results, no_lm, took=1.0)
    refs = [u["output"] for u in utts]
    without = 100 * jiwer.wer(refs, [r.hyps[0] for r in rerank_lists(lists, lm, no_lm)])
    after = 100 * jiwer.wer(refs, [r["best"] for r in results])
    assert f"WER without the LM:            {without:.2f}%" in text and "a bonus of 0.05/word, tuned on dev" in text
    assert f"WER after  (/v1/rerank):       {after:.2f}%" in text
    assert f"WER before (first hypothesis): {100 * jiwer.wer(refs, [u['input'][0] for u in utts]):.2f}%" in text


def test_the_after_row_is_the_combination_the_guard_applied(quickstart):
    """When the guard applies the no-LM combination (first pass + word and piece bonuses), the server applies
    exactly it: 'after' equals 'without the LM' and says which combination it is."""
    utts = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:40]
    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    rng = np.random.default_rng(1)
    lm = [rng.normal(size=len(nb.hyps)) for nb in lists]
    pieces = [np.array([len(h.split()) + 1.0 + (k % 2) for k, h in enumerate(nb.hyps)]) for nb in lists]
    no_lm = Weights(lm=0.0, length=0.3, piece=-0.4)
    results = [r.to_dict() for r in rerank_lists(lists, lm, no_lm, pieces)]  # what /v1/rerank answers now
    text = quickstart.summarise_test(utts, results, no_lm, 1.0, [list(p) for p in pieces], "no_lm")
    without = text.split("WER without the LM:")[1].split("%")[0].strip()
    after = text.split("WER after  (/v1/rerank):")[1].split("%")[0].strip()
    assert after == without and "(the no-LM combination: the LM's dev gain was not significant;" in text
    assert "and -0.4/piece" in text


def test_health_line_says_what_the_figures_mean(quickstart, tmp_path):
    """The quick start's run logs health figures; one line says what they mean (or points to the doc)."""
    assert quickstart.health_line(tmp_path) is None  # no metrics.jsonl: nothing to say
    rows = [{"step": 50, "loss": 9.0},
            {"step": 68, "val_disc_auc": 0.32, "val_energy_auc": 0.72, "val_disc_acc_gain": 0.0,
             "val_gen_nll": 8.64, "val_unigram_nll": 6.92}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    line = quickstart.health_line(tmp_path)
    assert "discriminator AUC 0.32 (below 0.75: it has not learned" in line and "energy AUC 0.72" in line
    assert "generator NLL 8.64 vs unigram 6.92 (not yet better than word frequencies" in line
    assert "accuracy gain 0.00 over always answering 'original' (it never says" in line
    assert 'docs/pretraining.md "Training health"' in line
    rows[-1].update(val_disc_auc=0.8, val_gen_nll=5.0)
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    line = quickstart.health_line(tmp_path)
    assert "(it tells replaced tokens from original ones)" in line and "its scores carry context" in line
