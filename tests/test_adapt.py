"""`electric adapt` (training/adapt.py): every bad input stops in one line with nothing written; a model that is not
fit to serve is never written; an interrupted run resumes; and the whole command on a tiny random checkpoint gives a
directory that `electric serve` answers score, rerank (with the tuned weights) and detect from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import manifest_values, require_shared

from electric.checkpoint import CheckpointError, serving_defaults
from training import adapt, adapt_card, adapt_choice
from training.adapt_choice import candidate_weights, choose


@pytest.fixture(scope="module")
def bert(tokenizer_dir, tmp_path_factory) -> Path:
    from test_init_from_checkpoint import save_bert
    from transformers import BertModel

    return save_bert(BertModel, tokenizer_dir, tmp_path_factory.mktemp("adapt") / "bert")


@pytest.fixture(scope="module")
def domain(tmp_path_factory) -> dict[str, Path]:
    """ATIS as a user's domain: 1,000 training references as text, 60 training lists to tune on, 30 test lists."""
    train = json.loads(require_shared("nbest/atis_train.whisper5best.json").read_text())
    test = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())
    d = tmp_path_factory.mktemp("domain")
    (d / "text.txt").write_text("\n".join(u["output"] for u in train[200:1200]) + "\n")
    (d / "dev.json").write_text(json.dumps(train[:60]))
    (d / "test.json").write_text(json.dumps(test[:30]))
    held = {u["output"] for u in train[:60] + test[:30]}
    (d / "train.json").write_text(json.dumps([u for u in train[1300:1500] if u["output"] not in held][:120]))
    return {"text": d / "text.txt", "dev": d / "dev.json", "test": d / "test.json", "train": d / "train.json"}


def argv(bert: Path, domain: dict, out: Path, *extra: str) -> list[str]:
    return ["--checkpoint", str(bert), "--text", str(domain["text"]), "--dev", str(domain["dev"]),
            "--test", str(domain["test"]), "--out", str(out), "--minutes", "0.2", *extra]


def one_error(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1, errors
    return errors[0]


def nothing_written(out: Path) -> None:
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_each_bad_input_is_named_in_one_line_and_nothing_is_written(bert, domain, tmp_path, capsys):
    out = tmp_path / "model"
    (tmp_path / "empty.txt").write_text("\n  \n")
    no_refs = [{"input": u["input"], "am_score": u["am_score"]} for u in json.loads(domain["dev"].read_text())]
    (tmp_path / "norefs.json").write_text(json.dumps(no_refs))
    (tmp_path / "few.json").write_text(json.dumps(json.loads(domain["dev"].read_text())[:10]))
    (tmp_path / "notnbest.json").write_text('{"a": 1}')
    (tmp_path / "roberta").mkdir()
    (tmp_path / "roberta" / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    (tmp_path / "taken").mkdir()
    cases = [
        (["--text", str(tmp_path / "missing.txt")], "--text", "no such file"),
        (["--text", str(tmp_path / "empty.txt")], "empty.txt", "empty"),
        (["--dev", str(tmp_path / "norefs.json")], "--dev", "no reference"),
        (["--dev", str(tmp_path / "few.json")], "10 n-best lists, too few to tune on; give at least 50", ""),
        (["--dev", str(tmp_path / "notnbest.json")], "--dev", "notnbest.json"),
        (["--checkpoint", str(tmp_path / "roberta")], "--checkpoint", "roberta"),
        (["--out", str(tmp_path / "taken")], "--out", "exists; give a new directory, or --overwrite"),
        (["--minutes", "0"], "--minutes 0", "positive"),
    ]
    train = json.loads(domain["train"].read_text())
    (tmp_path / "train_norefs.json").write_text(json.dumps([{"input": u["input"]} for u in train]))
    (tmp_path / "train_one.json").write_text(json.dumps([{**u, "input": u["input"][:1], "am_score": u["am_score"][:1]} for u in train]))
    (tmp_path / "train_few.json").write_text(json.dumps(train[:99]))
    (tmp_path / "train_dev.json").write_text(json.dumps(train + json.loads(domain["dev"].read_text())[:7]))
    cases += [
        (["--train-lists", str(tmp_path / "train_norefs.json")], "--train-lists", "no reference"),
        (["--train-lists", str(tmp_path / "train_one.json")], "train_one.json", "every list has one hypothesis"),
        (["--train-lists", str(tmp_path / "train_few.json")], "train_few.json", "99 n-best lists, too few to train on"),
        (["--train-lists", str(tmp_path / "train_dev.json")], "7 of its", "repeat a --dev utterance"),
        (["--train-lists", str(domain["train"]), "--metric", "bleu"], "--train-lists", "--metric bleu cannot"),
    ]
    for extra, *words in cases:
        assert adapt.main(argv(bert, domain, out) + extra) == 2
        line = one_error(capsys)
        assert all(w in line for w in words), (extra, line)
        nothing_written(out)
    with pytest.raises(SystemExit) as e:  # argparse names the choices
        adapt.main(argv(bert, domain, out, "--metric", "ter"))
    assert e.value.code == 2 and "invalid choice: 'ter'" in capsys.readouterr().err
    nothing_written(out)


def test_a_model_that_is_not_fit_to_serve_stops_in_one_line(bert, domain, tmp_path, capsys, monkeypatch):
    """The health gate, without training: the run's health says the energy ranks replaced tokens below chance."""
    def trained_badly(inputs, work):
        work.mark("trained", {"steps": 3, "tokens": 99, "minutes": 0.1, "warnings": [],
                              "start": {"val_energy_auc": 0.5}, "end": {"val_energy_auc": 0.41}})

    monkeypatch.setattr(adapt, "adapt", trained_badly)
    out = tmp_path / "model"
    assert adapt.main(argv(bert, domain, out)) == 2
    line = one_error(capsys)
    assert "below chance" in line and "energy AUC 0.410 < 0.5" in line and "not served" in line
    nothing_written(out)
    with pytest.raises(adapt.NotServable, match="ends worse than it started"):
        adapt.health_gate({"end": {"val_energy_auc": 0.7}, "warnings": [
            "it ends worse than it started: energy AUC 0.700 against 0.760 for the checkpoint under a fresh head"]})
    adapt.health_gate({"end": {"val_energy_auc": 0.7}, "warnings": []})  # fine: no error


def test_too_little_text_for_one_batch_stops_in_one_line(bert, domain, tmp_path, capfd):
    """Pretraining (its own process) says it, once."""
    (tmp_path / "two.txt").write_text("show me flights to boston\nlist all fares\n")
    out = tmp_path / "model"
    assert adapt.main(argv(bert, domain, out, "--text", str(tmp_path / "two.txt"))) == 2
    line = one_error(capfd)
    assert "training sequences" in line and "give more text" in line
    nothing_written(out)


def test_a_detector_outside_the_model_directory_is_refused(tmp_path):
    (tmp_path / "electric.json").write_text(json.dumps(manifest_values(kind="cloze", detector="../elsewhere")))
    with pytest.raises(CheckpointError, match="not an export directory inside"):
        serving_defaults(tmp_path)
    (tmp_path / "electric.json").write_text(json.dumps(manifest_values(kind="cloze", rerank_weights={"lm": 0.5})))
    assert serving_defaults(tmp_path).rerank_weights == {"lm": 0.5} and serving_defaults(tmp_path).detector is None


def test_the_server_takes_the_models_weights_unless_a_file_or_a_flag_says_otherwise(tmp_path):
    from server.settings import Settings

    (tmp_path / "electric.json").write_text(json.dumps(manifest_values(kind="cloze", rerank_weights={
        "lm": 0.02, "length": 0.1, "beta": 1.0, "prior": "none", "piece": -0.05, "lm_score": "sum"})))
    s = Settings(model=tmp_path)
    assert (s.lm_weight, s.length_weight, s.piece_weight) == (0.02, 0.1, -0.05)
    (tmp_path / "w.json").write_text(json.dumps({"weights": {"lm": 0.3}}))
    s = Settings(model=tmp_path, rerank_weights=tmp_path / "w.json")
    assert (s.lm_weight, s.length_weight) == (0.3, 0.1)  # the file wins where it speaks
    s = Settings(model=tmp_path, rerank_weights=tmp_path / "w.json", lm_weight=2.0)
    assert s.lm_weight == 2.0  # a flag wins over both
    (tmp_path / "electric.json").write_text(json.dumps(manifest_values(kind="cloze", rerank_weights={"lm": "x"})))
    with pytest.raises(ValueError, match="electric.json rerank_weights"):
        Settings(model=tmp_path)


@pytest.mark.integration
def test_adapt_end_to_end_resumes_after_an_interrupt_and_serves_score_rerank_and_detect(bert, domain, tmp_path,
                                                                                        capsys, monkeypatch):
    import httpx

    from server.app import BackgroundServer
    from server.settings import Settings

    out = tmp_path / "model"
    gate = adapt.health_gate

    def interrupted(health):  # Ctrl-C once the model is trained
        raise KeyboardInterrupt

    monkeypatch.setattr(adapt, "health_gate", interrupted)
    assert adapt.main(argv(bert, domain, out)) == 130
    assert "interrupted: nothing was written" in capsys.readouterr().err
    assert not out.exists() and (tmp_path / "model.partial" / "trained.done").is_file()

    monkeypatch.setattr(adapt, "health_gate", gate)
    assert adapt.main(argv(bert, domain, out)) == 0
    printed = capsys.readouterr().out
    assert "resuming the interrupted run" in printed and "adapted already (resumed)" in printed
    assert "WER 3-gram LM:" in printed and "WER adapted model:" in printed and "WER oracle:" in printed
    assert not (tmp_path / "model.partial").exists()

    manifest = json.loads((out / "electric.json").read_text())
    report = json.loads((out / "adapt.json").read_text())
    weights = report["results"]["choice"]["weights"]  # the guard's choice among no-LM, n-gram, model and both
    assert manifest["kind"] == "cloze" and manifest["rerank_weights"] == weights and manifest["detector"] == "detector"
    assert manifest["ngram"] == "ngram.arpa" and (out / "ngram.arpa").read_text().startswith("\\data\\")
    assert [s["candidate"] for s in report["results"]["choice"]["steps"]] == ["ngram", "model", "model_and_ngram"]
    assert json.loads((out / "detector" / "electric.json").read_text())["kind"] == "discriminator"
    assert report["results"]["model"]["test"]["num_utterances"] == 30 and report["results"]["ngram"]["order"] == 3
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: electric\n")
    for section in ("## Made from", "## Training health", "## Reranking weights: the guard's decision",
                    "## Dev figures", "## Test figures", "## Versions", "## Command"):
        assert section in card
    assert report["inputs"]["checkpoint"]["sha256"] in card and "electric adapt --checkpoint" in card

    assert adapt.main(argv(bert, domain, out)) == 2  # exists
    assert "exists" in one_error(capsys)

    with BackgroundServer(Settings(model=out, http_port=0, grpc_port=-1, warmup=False)) as srv:
        info = httpx.get(f"{srv.url}/info").json()
        assert info["rerank_defaults"] == weights
        assert [(m["name"], m["kind"]) for m in info["models"]] == [("scorer", "cloze"), ("detector", "discriminator")]
        r = httpx.post(f"{srv.url}/v1/rerank", json={"hypotheses": ["show me flights", "show me fights"],
                                                     "scores": [-1.0, -1.1]})
        assert r.status_code == 200 and r.json()["weights"] == weights
        assert info["ngram"].startswith("3-gram ARPA LM") and info["rerank_parts"][0] == "first_pass"
        r = httpx.post(f"{srv.url}/v1/detect", json={"texts": ["show me flights to boston"]})
        assert r.status_code == 200 and r.json()["model"] == "detector"
        r = httpx.post(f"{srv.url}/v1/score", json={"texts": ["show me flights to boston"]})
        assert r.status_code == 200 and r.json()["model"] == "scorer"


def test_tuning_for_bleu_reports_every_system_in_bleu_points():
    """The stages after the export, on synthetic LM scores: tuned for BLEU (a translation user's metric), the
    summary and the guard's sentence speak BLEU, and the n-gram's combination can be put under a second LM."""
    import numpy as np

    from electric.evaluation.nbest import NBestList, ScoredLists, Weights

    utts = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:120]
    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    rng = np.random.default_rng(0)
    scored = ScoredLists(lists, [rng.normal(size=len(nb.hyps)) for nb in lists],
                         [rng.normal(size=len(nb.hyps)) for nb in lists])
    dev, test = scored.split(60)
    model = adapt_choice.figures(adapt_choice.tune(dev, test, "bleu", 0), test, "bleu")
    assert set(model["test"]) >= {"first", "no_lm", "after", "oracle", "better", "worse"}
    assert model["test"]["oracle"] >= model["test"]["first"]  # BLEU: higher is better
    assert "BLEU points" in adapt_card.guard_sentence("the adapted model", model, "bleu")
    stacked = adapt_choice.with_prior(test, test, Weights(lm=1.0))
    assert np.allclose(stacked.lists[0].first_pass_scores, test.totals(Weights(lm=1.0))[0])
    tuned = {"model": model, "ngram": model, "model_and_ngram": model}
    both_dev, both_test = dev.with_ngram(dev), test.with_ngram(test)
    choice = choose(both_dev, both_test, candidate_weights(tuned), "bleu", 0)
    report = {"inputs": {"metric": "bleu", "test": {"file": "test.json"}, "dev": {"file": "dev.json"}},
              "results": {"model": model, "choice": choice}}
    rows = adapt_card.summary(report)
    assert rows[0].startswith("test, 60 utterances (test.json)") and all(r.startswith("  BLEU ") for r in rows[1:7])
    assert adapt_card.summary(report, "dev")[0].startswith("dev, 60 utterances (dev.json)")


def test_the_ngram_is_measured_against_the_adapted_models_no_lm_combination():
    """Both LMs are guarded against one baseline: the n-gram's no-LM weights and figures are the adapted model's."""
    import numpy as np

    from electric.evaluation.nbest import NBestList, ScoredLists

    utts = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:120]
    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    rng = np.random.default_rng(1)
    pieces = [np.array([len(h.split()) + 2.0 + (k % 3) for k, h in enumerate(nb.hyps)]) for nb in lists]
    lm = [rng.normal(size=len(nb.hyps)) for nb in lists]
    dev, test = ScoredLists(lists, lm, lm, pieces).split(60)
    inputs = type("Inputs", (), {"sentences": [u["output"] for u in utts[60:]] * 2, "dev": lists[:60],
                                 "test": lists[60:], "metric": "wer", "seed": 0})()
    model = adapt_choice.figures(adapt_choice.tune(dev, test, "wer", 0), test, "wer")
    ngram, both, *_ = adapt.ngram_baseline(inputs, dev, test, model)
    assert both["order"] in ("model_over_ngram", "ngram_over_model")
    assert ngram["weights_no_lm"] == model["weights_no_lm"] and ngram["test"]["no_lm"] == model["test"]["no_lm"]


def test_a_graph_whose_int8_fails_its_gate_is_exported_in_fp32_and_a_wrong_fp32_stops(tmp_path, monkeypatch):
    """int8 ranking texts unlike fp32 is the int8 graph's failure: that model is served in fp32, and the card says
    so; an fp32 graph unlike torch is a wrong export: nothing is written."""
    from electric.export import exporter
    from electric.export.errors import ParityError

    calls = []

    def export_model(src, dest, options, log):
        calls.append((src.name, dest.name, options.quantize))
        if src.name == "discriminator" and options.quantize == "int8":
            raise ParityError("int8 sentence-score Spearman vs fp32 is 0.98 (< 0.99)", 0.98)

    monkeypatch.setattr(exporter, "export_model", export_model)
    work = adapt.Work(tmp_path / "m.partial")
    work.root.mkdir()
    inputs = type("Inputs", (), {"precision": "int8", "scorer": "cloze", "train": None})()
    adapt.export(inputs, work)
    assert calls == [("generator", "model", "int8"), ("discriminator", "detector", "int8"),
                     ("discriminator", "detector", None)]
    assert work.read("exported") == {"model": "int8", "detector": "fp32", "int8_refused": {"detector": 0.98}}

    def wrong(src, dest, options, log):
        raise ParityError("fp32 ONNX logits differ from torch by 0.5 (> 0.001); the export is wrong, not saved")

    monkeypatch.setattr(exporter, "export_model", wrong)
    with pytest.raises(adapt.AdaptError, match="the export of the cloze model .* failed: fp32 ONNX logits differ"):
        adapt.export(inputs, work)


def guarded_choice(model_scores: list, ngram_scores: list, lists: list, seed: int = 0) -> dict:
    """The stages after scoring, on given scores: the three tunings and the guard's walk over the four candidates."""
    import numpy as np

    from electric.evaluation.nbest import ScoredLists, Weights

    pieces = [np.array([len(h.split()) + 1.0 for h in nb.hyps]) for nb in lists]
    dev, test = ScoredLists(lists, model_scores, model_scores, pieces).split(150)
    ng_dev, ng_test = ScoredLists(lists, ngram_scores, ngram_scores, pieces).split(150)
    model = adapt_choice.figures(adapt_choice.tune(dev, test, "wer", seed), test, "wer")
    ngram = adapt_choice.figures(adapt_choice.tune(ng_dev, ng_test, "wer", seed), ng_test, "wer")
    w = Weights.from_dict(ngram["weights_lm"])
    both_dev, both_test = adapt_choice.with_prior(dev, ng_dev, w), adapt_choice.with_prior(test, ng_test, w)
    both = adapt_choice.figures(adapt_choice.tune(both_dev, both_test, "wer", seed), both_test, "wer")
    tuned = {"model": model, "ngram": ngram, "model_and_ngram": both}
    return choose(dev.with_ngram(ng_dev), test.with_ngram(ng_test), candidate_weights(tuned), "wer", seed)


def test_the_guard_chooses_among_no_lm_the_ngram_the_model_and_both():
    """The simplest combination whose dev gain is significant over the one held: an LM that knows the errors is
    chosen, the other is not added; noise from both keeps the no-LM combination."""
    import numpy as np

    from electric.evaluation.nbest import Evaluator, NBestList, make_metric

    utts = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:300]
    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    ev = Evaluator(lists, make_metric("wer"))
    knows = [-5.0 * ev.stats[u, : len(nb.hyps), 0] for u, nb in enumerate(lists)]  # minus its word errors
    rng = np.random.default_rng(0)
    noise = [rng.normal(size=len(nb.hyps)) for nb in lists]
    c = guarded_choice(knows, noise, lists)
    assert c["served"] == "model" and [s["significant"] for s in c["steps"]] == [False, True, False]
    assert c["weights"]["lm"] > 0 and c["weights"]["ngram"] == 0
    assert c["candidates"]["model"]["test"] < c["candidates"]["ngram"]["test"]
    assert c["candidates"]["model"]["test_vs_ngram"]["significant"] and "test" in c
    c = guarded_choice(noise, knows, lists)
    assert c["served"] == "ngram" and c["steps"][0]["significant"] and c["weights"]["ngram"] > 0
    assert c["steps"][1]["over"] == "ngram" and not c["steps"][1]["significant"]  # the model: measured on the n-gram
    assert c["weights"]["lm"] == 0.0
    c = guarded_choice(noise, [rng.normal(size=len(nb.hyps)) for nb in lists], lists)
    assert c["served"] == "no_lm" and not any(s["significant"] for s in c["steps"])
    assert c["weights"]["lm"] == 0.0 and c["weights"]["ngram"] == 0.0


@pytest.mark.integration
def test_adapt_with_train_lists_trains_the_scorer_on_them_and_serves_the_chosen_combination(bert, domain, tmp_path,
                                                                                               capsys):
    import httpx

    from server.app import BackgroundServer
    from server.settings import Settings

    out = tmp_path / "model"
    assert adapt.main(argv(bert, domain, out, "--train-lists", str(domain["train"]), "--train-minutes", "1",
                           "--train-epochs", "1")) == 0
    printed = capsys.readouterr().out
    assert "4/8 discriminative training on" in printed and "held-back WER" in printed
    report = json.loads((out / "adapt.json").read_text())
    d = report["discriminative"]
    assert d["steps"] >= 1 and d["train_lists"] + d["held_back_lists"] <= 120 and d["tokens_per_s"] > 0
    manifest = json.loads((out / "electric.json").read_text())
    assert manifest["kind"] == "discriminator" and manifest["detector"] == "detector"  # the lists' model, the text's
    assert manifest["rerank_weights"] == report["results"]["choice"]["weights"] and manifest["ngram"] == "ngram.arpa"
    card = (out / "README.md").read_text()
    assert "trained on 120 n-best lists" in card or "n-best lists with references" in card
    assert "train lists:" in card and "vs 3-gram" in card
    with BackgroundServer(Settings(model=out, http_port=0, grpc_port=-1, warmup=False)) as srv:
        r = httpx.post(f"{srv.url}/v1/rerank", json={"hypotheses": ["show me flights", "show me fights"],
                                                     "scores": [-1.0, -1.1]})
        assert r.status_code == 200 and r.json()["weights"] == report["results"]["choice"]["weights"]


def test_the_card_says_by_how_much_an_int8_graph_missed_its_gate_and_what_fp32_costs():
    assert adapt_card.refused_int8({}) == ""
    said = adapt_card.refused_int8({"detector": 0.98736, "model": None})
    assert "the detector's int8 graph ranked the parity sentences at Spearman 0.9874 against fp32" in said
    assert "the model's int8 graph ranked the parity sentences at Spearman below 0.99" in said
    assert "served fp32, about 2-3.4x the CPU time of int8 a request" in said


def test_a_refused_int8_graph_carries_its_spearman(monkeypatch, tmp_path):
    from electric.export.errors import ParityError

    e = ParityError("int8 sentence-score Spearman vs fp32 is 0.9874 (< 0.99)", 0.9874)
    assert e.spearman == 0.9874 and str(e).startswith("int8 sentence-score") and ParityError("x").spearman is None
