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
