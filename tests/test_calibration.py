"""Calibrated replaced-token probabilities (issue 16, item 3): `electric export` fits sigma(scale * s + bias)
with the model's own generator, detect (library, server) returns it, older exports keep sigma(s), and
`electric eval detect` chooses its F0.5 threshold on a dev part, never on the test sentences."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from conftest import require_shared, save_random_electra  # noqa: E402

from electric.checkpoint import MANIFEST, ExportManifest  # noqa: E402
from electric.cli import main as cli  # noqa: E402
from electric.export.calibration import collect, corrupted_batches, fit_platt, load_generator, run_settings  # noqa: E402
from electric.inference.backend import load_backend  # noqa: E402
from electric.inference.calibration import Calibration, replaced_probs  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 0.03  # |mean probability - replaced fraction| on held-out text


def sigmoid(x):
    return 1 / (1 + np.exp(-np.asarray(x, dtype=np.float64)))


@pytest.fixture(scope="module")
def sst2_halves(tmp_path_factory) -> tuple[Path, list[str]]:
    """SST-2 dev sentences: the first half in a file to calibrate on, the second half held out."""
    from electric.export.parity import read_sentences

    sents = read_sentences(require_shared("glue/sst2/dev.tsv"))
    half = len(sents) // 2
    path = tmp_path_factory.mktemp("cal") / "calibrate.txt"
    path.write_text("\n".join(sents[:half]) + "\n")
    return path, sents[half:]


@pytest.fixture(scope="module")
def electra_run(tokenizer_dir, tmp_path_factory) -> Path:
    """A run-shaped directory with a random ELECTRA discriminator and a random masked-LM generator."""
    root = tmp_path_factory.mktemp("electra-run")
    save_random_electra("ElectraForPreTraining", tokenizer_dir, root / "discriminator")
    save_random_electra("ElectraForMaskedLM", tokenizer_dir, root / "generator")
    return root


def export(run: Path, out: Path, calibration_data: Path) -> dict:
    assert cli(["export", "--model", str(run / "discriminator"), "--out", str(out), "--threads", "1",
                "--calibration-data", str(calibration_data)]) == 0
    return json.loads((out / MANIFEST).read_text())


@pytest.fixture(scope="module")
def electric_export(trained_run, sst2_halves, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("electric-export") / "onnx"
    export(trained_run, out, sst2_halves[0])
    return out


@pytest.fixture(scope="module")
def electra_export(electra_run, sst2_halves, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("electra-export") / "onnx"
    export(electra_run, out, sst2_halves[0])
    return out


def held_out(export_dir: Path, run: Path, sentences: list[str]) -> tuple[float, float, float]:
    """(mean calibrated probability, replaced fraction, mean raw sigma(s)) over the candidate tokens of
    `sentences` corrupted by the run's generator with a seed the export never used."""
    from electric.tokenization import load_tokenizer  # the export's own tokenizer is the Rust one alone

    backend = load_backend(export_dir)
    settings = run_settings(run / "generator")
    batches = corrupted_batches(load_tokenizer(export_dir), load_generator(run / "generator"), sentences,
                                mask_prob=settings["mask_prob"], temperature=settings["temperature"],
                                max_length=128, seed=12345)
    s, y = collect(backend.run, batches)
    return float(replaced_probs(s, backend.calibration).mean()), float(y.mean()), float(sigmoid(s).mean())


# ---- the fit -------------------------------------------------------------------------------------

def test_platt_fit_recovers_the_generating_map_and_matches_the_base_rate():
    rng = np.random.default_rng(0)
    s = rng.normal(5.0, 3.0, 20000)  # energies far from 0, like Electric's
    y = rng.random(s.size) < sigmoid(0.8 * s - 5.0)
    c = fit_platt(s, y)
    assert c.scale == pytest.approx(0.8, abs=0.05) and c.bias == pytest.approx(-5.0, abs=0.3)
    assert replaced_probs(s, c).mean() == pytest.approx(y.mean(), abs=1e-6)  # the intercept's equation


def test_corruption_replaces_about_mask_prob_of_the_candidate_tokens_only(electra_run, tokenizer_dir):
    from electric.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    sents = ["the river flows past the old mill and into the sea", "a short sentence"]
    (ids, mask, cand, labels), = corrupted_batches(tok, load_generator(electra_run / "generator"), sents,
                                                   mask_prob=0.15, temperature=1.0, max_length=64, seed=0)
    clean = tok(sents, padding=True, return_tensors="np")["input_ids"]
    assert (labels == (ids != clean)).all() and not (labels & ~cand).any()
    n = cand.sum(axis=1)
    assert (labels.sum(axis=1) <= np.maximum(1, np.round(0.15 * n))).all() and labels.any()


@pytest.mark.parametrize("objective", ["electra", "electric"])
def test_calibration_corrupts_text_through_the_training_steps_generator_pass(objective, tokenizer_dir):
    """Export's calibration and a training step corrupt text through one generator pass: from the same draws (the
    same seed, the same draw order) the training step's discriminator sees exactly the text calibration scores."""
    import torch

    from electric.pretraining.config import resolve_config
    from electric.pretraining.modeling import PretrainingModel, SpecialIds
    from electric.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    torch.manual_seed(0)
    cfg = resolve_config("debug", objective, {"max_seq_length": 32, "temperature": 1.5, "hidden_dropout_prob": 0.0,
                                              "attention_probs_dropout_prob": 0.0})
    model = PretrainingModel(cfg, SpecialIds.from_tokenizer(tok)).eval()
    sents = ["the river flows past the old mill and into the sea", "a short sentence", "we went home early that day"]
    (noisy, mask, cand, labels), = corrupted_batches(tok, model.generator, sents, mask_prob=cfg.mask_prob,
                                                     temperature=cfg.temperature, max_length=cfg.max_seq_length,
                                                     seed=3)
    ids = tok(sents, padding=True, truncation=True, max_length=cfg.max_seq_length, split_special_tokens=True,
              return_tensors="pt")["input_ids"]  # (B, T) clean
    seen = []
    model.discriminator.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    with torch.no_grad():
        model(ids, torch.as_tensor(mask), model.draw_noise(ids, torch.Generator().manual_seed(3)))
    assert torch.equal(seen[0], torch.as_tensor(noisy))
    assert labels.any() and (labels == (noisy != ids.numpy())).all()


def test_a_generator_without_its_run_config_is_calibrated_at_pretrainings_defaults(electra_run, tmp_path):
    from electric.export.calibration import DEFAULT_SETTINGS
    from electric.pretraining.config import PretrainConfig

    assert run_settings(electra_run / "generator") == {**DEFAULT_SETTINGS, "settings_from": "defaults"}
    assert {"mask_prob": PretrainConfig.mask_prob, "temperature": PretrainConfig.temperature} == DEFAULT_SETTINGS
    (tmp_path / "generator").mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"mask_prob": 0.25, "temperature": 2.0, "lr": 1e-4}))
    assert run_settings(tmp_path / "generator") == {"mask_prob": 0.25, "temperature": 2.0,
                                                    "settings_from": str((tmp_path / "config.json").resolve())}


def test_a_calibration_fitted_on_too_few_tokens_is_flagged_loudly(electra_run, tokenizer_dir):
    """A handful of sentences (what the quick start used to calibrate on) is far below what a calibration needs:
    the export says so in capitals and the manifest records it; enough text is not flagged."""
    import torch
    from transformers import ElectraForPreTraining

    from electric.export.calibration import MIN_FIT_TOKENS, fit_calibration
    from electric.tokenization import load_tokenizer

    disc = ElectraForPreTraining.from_pretrained(electra_run / "discriminator").eval()

    def run(ids, mask):
        with torch.no_grad():
            return disc(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask)).logits.numpy()

    tok, logged = load_tokenizer(tokenizer_dir), []
    few = ["the river flows past the old mill", "a short sentence about a cat", "we went home early that day"]
    entry = fit_calibration(run, tok, electra_run / "generator", few, "three sentences", max_length=64,
                            log=logged.append)
    assert entry["fit"]["tokens"] < MIN_FIT_TOKENS and entry["fit"]["enough_tokens"] is False
    assert entry["fit"]["min_tokens"] == MIN_FIT_TOKENS
    assert any(m.startswith("WARNING: the calibration was fitted on only") and "--calibration-data" in m
               for m in logged)


# ---- export, held-out check ------------------------------------------------------------------------

@pytest.mark.integration
def test_electric_export_is_calibrated_on_held_out_text(electric_export, trained_run, sst2_halves):
    manifest = json.loads((electric_export / MANIFEST).read_text())
    cal = manifest["calibration"]
    assert cal["method"] == "platt" and cal["generator_architecture"] == "ElectricForClozeLM"
    assert cal["generator"] == str((trained_run / "generator").resolve()) and cal["mask_prob"] == 0.15
    assert abs(cal["check"]["mean_prob"] - cal["check"]["replaced_fraction"]) < TOLERANCE
    assert cal["fit"]["enough_tokens"] is True  # half of SST-2 dev is enough text
    mean_p, rate, raw = held_out(electric_export, trained_run, sst2_halves[1])
    assert 0.05 < rate < 0.25
    assert abs(mean_p - rate) < TOLERANCE, (mean_p, rate)
    assert raw > 0.5  # Electric's energies are no probabilities: sigma(s) says most tokens were replaced


@pytest.mark.integration
def test_electra_export_is_calibrated_on_held_out_text(electra_export, electra_run, sst2_halves):
    mean_p, rate, raw = held_out(electra_export, electra_run, sst2_halves[1])
    assert abs(mean_p - rate) < TOLERANCE, (mean_p, rate)
    assert abs(raw - rate) > 0.2  # an untrained ELECTRA head says ~0.5 everywhere


# ---- detect follows the manifest ---------------------------------------------------------------------

@pytest.mark.integration
def test_detect_returns_calibrated_probabilities_and_old_exports_keep_the_raw_sigmoid(electric_export, tmp_path):
    from electric.inference.scoring import Scorer

    texts = ["the film is a gripping and beautifully acted story", "it was bad"]
    cal = Calibration.from_manifest(ExportManifest.read(electric_export))
    got = Scorer(load_backend(electric_export)).detect(texts)
    for d in got:
        logits = np.array([t.logit for t in d.tokens])
        probs = np.array([t.prob for t in d.tokens])
        assert probs == pytest.approx(sigmoid(cal.scale * logits + cal.bias), abs=1e-6)
        assert d.score == pytest.approx(np.log1p(-probs).sum(), abs=1e-6)
        assert [w.max_prob for w in d.words] == pytest.approx(
            [max(t.prob for t in d.tokens if w.start <= t.start < w.end) for w in d.words])

    old = tmp_path / "old-export"  # as exported before calibration existed: no "calibration" key
    shutil.copytree(electric_export, old)
    manifest = json.loads((old / MANIFEST).read_text())
    del manifest["calibration"]
    (old / MANIFEST).write_text(json.dumps(manifest))
    for d, before in zip(Scorer(load_backend(old)).detect(texts), got, strict=True):
        assert [t.logit for t in d.tokens] == pytest.approx([t.logit for t in before.tokens], abs=1e-6)
        assert [t.prob for t in d.tokens] == pytest.approx(sigmoid([t.logit for t in d.tokens]), abs=1e-6)


@pytest.mark.integration
def test_server_detect_returns_the_calibrated_probability(electra_export):
    import httpx

    from server.app import BackgroundServer
    from server.settings import Settings

    cal = Calibration.from_manifest(ExportManifest.read(electra_export))
    settings = Settings(model=electra_export, http_port=0, grpc_port=0, threads=1, access_log=False, warmup=False)
    with BackgroundServer(settings) as srv:
        r = httpx.post(f"{srv.url}/v1/detect", json={"texts": ["flights from boston to denver on monday"]}, timeout=60)
    assert r.status_code == 200, r.text
    tokens = r.json()["results"][0]["tokens"]
    logits = np.array([t["logit"] for t in tokens])
    assert [t["prob"] for t in tokens] == pytest.approx(sigmoid(cal.scale * logits + cal.bias), abs=1e-5)
    assert np.mean([t["prob"] for t in tokens]) < 0.3  # not the raw ~0.5 of an untrained head


# ---- eval detect: the threshold comes from dev ----------------------------------------------------------

def test_eval_detect_chooses_the_threshold_on_dev_and_reports_test_at_it():
    from electric.cli.eval_detect import choose_threshold, evaluate_detection

    # dev: the incorrect words score 0.6 and above; test: they score 0.3-0.4, below every correct word but one
    dev_labels = [["correct", "incorrect", "correct", "incorrect", "correct"]]
    dev_scores = [[0.2, 0.7, 0.5, 0.6, 0.1]]
    test_labels = [["correct", "incorrect", "incorrect", "correct"], ["correct", "correct"]]
    test_scores = [[0.2, 0.4, 0.3, 0.9], [0.65, 0.1]]
    chosen = choose_threshold(dev_labels, dev_scores)
    assert chosen["threshold"] == 0.6 and chosen["f0.5"] == 1.0
    res = evaluate_detection(test_labels, test_scores, chosen["threshold"])
    assert res["threshold"] == 0.6  # not the test-optimal 0.3
    assert res["precision"] == 0.0 and res["f0.5"] == 0.0  # flags 0.9 and 0.65, both correct words
    assert res["at_0.5"]["threshold"] == 0.5 and res["roc_auc"] == pytest.approx(4 / 8)


@pytest.mark.integration
def test_eval_detect_cli_reports_dev_and_test_parts(electric_export, tmp_path, capsys):
    lines, n = [], 0
    for line in require_shared("tagging/fce/fce-public.test.original.tsv").read_text().splitlines(keepends=True):
        lines.append(line)
        n += not line.strip()
        if n == 60:
            break
    fce = tmp_path / "fce.tsv"
    fce.write_text("".join(lines))
    assert cli(["eval", "detect", "--model", str(electric_export), "--data", str(fce), "--quiet",
                "--json", str(tmp_path / "r.json")]) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["calibrated"] is True and res["dev"]["sentences"] == 30 and res["sentences"] == 30
    assert res["dev"]["threshold"] == res["threshold"] and "seed 0" in res["dev"]["data"]
    out = capsys.readouterr().out
    assert "calibrated at export" in out and "chosen on dev" in out and "at p >= 0.5" in out
