"""`electric export` of Electric's cloze model: a graph whose output is log q(x_t | x_not_t) of each INPUT token
(gathered in the graph: no (B, T, V) output), parity-gated against torch, a manifest that says what it is, and
cloze scores from the export (ONNX Runtime, no torch) equal to the torch path's."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from electric.checkpoint import MANIFEST  # noqa: E402
from electric.cli import main  # noqa: E402
from electric.export import exporter as ex  # noqa: E402
from electric.inference.backend import TorchBackend, load_backend  # noqa: E402
from electric.inference.scoring import load_scorer, only_method  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_thread")]

TEXTS = ["the cat sat on the mat .", "show me flights from boston to denver on monday", "a short one",
         "the committee will meet again next week to discuss the new budget proposal"]


def run(capsys, *argv) -> tuple[int, str]:
    rc = main(["export", *map(str, argv)])
    return rc, capsys.readouterr().err


@pytest.fixture(scope="module")
def exported(cloze_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("cloze-export") / "onnx"
    assert main(["export", "--model", str(cloze_run / "generator"), "--out", str(out), "--quantize", "int8"]) == 0
    return out, json.loads((out / MANIFEST).read_text())


def test_the_manifest_says_it_is_a_cloze_model(exported, cloze_run):
    out, m = exported
    assert m["kind"] == "cloze" and m["architecture"] == "ElectricForClozeLM" and m["labels"] is None
    assert m["inputs"] == ["input_ids", "attention_mask"] and m["output"] == "token_logprobs"
    assert m["scoring_methods"] == ["cloze"] and "log q(x_t | x_not_t)" in m["output_meaning"]
    assert "calibration" not in m  # only a discriminator's replaced probabilities are calibrated
    assert m["files"] == {"fp32": "model.onnx", "int8": "model.int8.onnx"}
    assert m["exporter"]["name"].startswith("torch.onnx torch.export") and m["opset"] >= 18
    assert m["parity"]["fp32"]["max_abs_diff"] <= m["parity"]["fp32"]["tolerance"] == ex.CLOZE_FP32_TOLERANCE
    p8 = m["parity"]["int8"]
    assert p8["spearman_of"] == "sentence cloze score" and p8["passed"] and p8["spearman"] >= ex.MIN_SPEARMAN
    assert m["source"]["path"] == str((cloze_run / "generator").resolve())


def test_the_graph_outputs_one_log_prob_per_position_and_keeps_the_head_fp32(exported):
    out, _ = exported
    graph = onnx.load(str(out / "model.onnx")).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in graph.output] == ["token_logprobs"]
    assert len(graph.output[0].type.tensor_type.shape.dim) == 2  # (B, T): the gather is inside the graph
    int8 = onnx.load(str(out / "model.int8.onnx")).graph
    from electric.export.graph import module_path

    made_by = {o: n.op_type for n in int8.node for o in n.output}
    quantised = [n for n in int8.node if n.op_type == "MatMulIntegerToFloat"
                 or (n.op_type == "MatMul" and made_by.get(n.input[1]) == "DequantizeLinear")]
    kept = [n for n in int8.node if n.op_type == "MatMul" and "/lm_head/" in module_path(n)]
    assert quantised and kept  # encoder int8 (static QDQ) ...
    assert all(made_by.get(i) != "DequantizeLinear" for n in kept for i in n.input)  # ... vocabulary layer fp32


def test_onnx_equals_torch_at_new_shapes(exported, cloze_run):
    out, _ = exported
    onnx_be, torch_be = load_backend(out, precision="fp32"), TorchBackend(cloze_run / "generator", device="cpu")
    assert onnx_be.kind == "cloze" and onnx_be.calibration is None
    rng = np.random.default_rng(0)
    for b, t in ((1, 5), (3, 37), (6, 90)):
        ids = rng.integers(5, len(torch_be.tokenizer), (b, t))
        mask = np.ones_like(ids)
        mask[0, t // 2:] = 0
        got, want = onnx_be.run(ids, mask), torch_be.run(ids, mask)
        assert got.shape == (b, t) and np.abs(got - want)[mask.astype(bool)].max() < 1e-4


def test_cloze_scores_from_the_export_equal_the_torch_path(exported, cloze_run, capsys, tmp_path, monkeypatch):
    out, _ = exported
    want = [s.score for s in load_scorer(cloze_run, "cloze", backend="torch", device="cpu").score(TEXTS)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    with monkeypatch.context() as m:
        m.setenv("ELECTRIC_ONNX_PRECISION", "fp32")
        rc = main(["score", "--model", str(out), "--method", "cloze", "--quiet", str(src)])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and [r["method"] for r in rows] == ["cloze"] * len(TEXTS)
    assert [r["score"] for r in rows] == pytest.approx(want, abs=1e-3)
    int8 = load_scorer(out, "cloze", backend="onnx")
    assert int8.backend.precision == "int8"  # the CPU default when exported
    assert np.corrcoef([s.score for s in int8.score(TEXTS)], want)[0, 1] > 0.99
    rc = main(["score", "--model", str(out), "--method", "electric", "--quiet", str(src)])
    assert rc == 2 and "not a discriminator" in capsys.readouterr().err


def test_scoring_commands_take_the_only_method_from_the_manifest(exported, cloze_run, capsys, tmp_path):
    """Issue 51, item 6: an export (or checkpoint) of Electric's cloze model has one method, which its manifest
    (config.json) names: `electric score`, `eval nbest` and `rerank` use it without --method. A discriminator has
    two and a run directory holds two models: electric stays their default."""
    out, m = exported
    assert m["scoring_methods"] == ["cloze"]
    assert [only_method(d) for d in (out, cloze_run / "generator", cloze_run / "discriminator", cloze_run)] == [
        "cloze", "cloze", None, None]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS[:2]) + "\n")
    rc = main(["score", "--model", str(out), "--quiet", str(src)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert [json.loads(line)["method"] for line in captured.out.splitlines()] == ["cloze", "cloze"]
    nbest = tmp_path / "lists.json"
    nbest.write_text(json.dumps([{"input": ["show me flights to boston", "show me flight to boston"],
                                  "output": "show me flights to boston", "am_score": [-1.0, -1.5], "id": f"u{i}"}
                                 for i in range(4)]))
    rc = main(["eval", "nbest", "--model", str(out), "--nbest", str(nbest), "--lm-weight", "1", "--length-weight",
               "0", "--json", "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert json.loads(captured.out)["method"] == "cloze"
    rc = main(["rerank", "--model", str(out), "--nbest", str(nbest), "--out", str(tmp_path / "r.json"),
               "--lm-weight", "1", "--length-weight", "0", "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0 and (tmp_path / "r.json").is_file(), captured.err
    rc = main(["score", "--model", str(cloze_run), "--quiet", str(src)])  # a run directory: its discriminator
    captured = capsys.readouterr()
    assert rc == 0 and json.loads(captured.out.splitlines()[0])["method"] == "electric", captured.err


def test_refusals_and_the_int8_gate(cloze_run, tmp_path, capsys, monkeypatch):
    gen = cloze_run / "generator"
    rc, err = run(capsys, "--model", gen, "--out", tmp_path / "f", "--quantize", "int8", "--int8-graph", "fused")
    assert rc == 1 and "--int8-graph plain" in err and not (tmp_path / "f").exists()
    rc, err = run(capsys, "--model", cloze_run, "--out", tmp_path / "r")
    assert rc == 1 and "pretraining run" in err and str(gen) in err  # names the cloze model's directory too
    with pytest.raises(ex.ExportError, match="torch.export-based exporter only"):
        ex.export_model(gen, tmp_path / "l", ex.ExportOptions(exporter="legacy"), log=lambda _: None)
    monkeypatch.setattr(ex, "MIN_SPEARMAN", 1.01)  # unreachable: the int8 graph "fails" its gate
    rc, err = run(capsys, "--model", gen, "--out", tmp_path / "o", "--quantize", "int8")
    assert rc == 1 and "Spearman" in err and "--force" in err and not (tmp_path / "o").exists()
    rc, err = run(capsys, "--model", gen, "--out", tmp_path / "o", "--quantize", "int8", "--force")
    assert rc == 0 and "warning" in err
    p8 = json.loads((tmp_path / "o" / MANIFEST).read_text())["parity"]["int8"]
    assert p8["passed"] is False and p8["forced"] is True and p8["spearman"] > 0.9
