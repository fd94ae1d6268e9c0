"""A text scores the same alone and inside any batch, for fp32 and for the default int8 (static QDQ: activation ranges
fixed at export), on real exports run by the server's runtime (OnnxBackend.run on padded, bucketed batches); dynamic
int8 (`--int8-method dynamic`) scales each batch by its own largest value, so there it moves."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from electric.batching import pad_rows  # noqa: E402
from electric.checkpoint import MANIFEST  # noqa: E402
from electric.cli.export import default_sentences  # noqa: E402
from electric.export.exporter import ExportError, ExportOptions, export_model  # noqa: E402
from electric.inference.backend import load_backend  # noqa: E402
from tests.conftest import require_shared, save_random_electra  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_thread")]

SAME = 1e-4  # alone vs in a batch, on every real token's output and on the sentence's sum


def export(model_dir, out, **options) -> dict:
    export_model(model_dir, out, ExportOptions(quantize="int8", default_sentences=default_sentences(),
                                               calibrate=False, **options), log=lambda _: None)
    return json.loads((out / MANIFEST).read_text())


@pytest.fixture(scope="module")
def disc_512(tokenizer_dir, tmp_path_factory):
    """A random discriminator with 512 positions, exported with the default (static) int8 and with dynamic int8."""
    root = tmp_path_factory.mktemp("int8-det")
    model = save_random_electra("ElectraForPreTraining", tokenizer_dir, root / "discriminator", positions=512)
    return {method: (root / method, export(model, root / method, int8_method=method))
            for method in ("static", "dynamic")}


def random_row(rng, vocab: int, length: int, cls: int, sep: int) -> list[int]:
    return [cls, *rng.integers(5, vocab, length).tolist(), sep]


def largest_batch_difference(backend, seed: int = 0, trials: int = 12) -> float:
    """The most a text's outputs (each real token's, and their sum) differ between the text alone and the text inside
    a batch of 1-40 random batch-mates (1-128 tokens; in the first trials one of 510 when the positions allow)."""
    rng = np.random.default_rng(seed)
    tok, vocab = backend.tokenizer, len(backend.tokenizer)
    longest = backend.runner.max_length - 2
    worst = 0.0
    for trial in range(trials):
        text = random_row(rng, vocab, int(rng.integers(1, min(128, longest) + 1)) if trial % 4 else
                          min(510, longest), tok.cls_token_id, tok.sep_token_id)
        mates = [random_row(rng, vocab, int(rng.integers(1, min(128, longest) + 1)), tok.cls_token_id,
                            tok.sep_token_id) for _ in range(int(rng.integers(1, 41)))]
        if trial in (1, 2) and longest > 128:
            mates.append(random_row(rng, vocab, min(510, longest), tok.cls_token_id, tok.sep_token_id))
        at = int(rng.integers(0, len(mates) + 1))
        rows = [*mates[:at], text, *mates[at:]]
        alone = backend.run(*pad_rows([text], tok.pad_token_id))[0]  # (T,)
        inside = backend.run(*pad_rows(rows, tok.pad_token_id))[at, : len(text)]  # (T,)
        worst = max(worst, float(np.abs(inside - alone).max()), abs(float(inside.sum() - alone.sum())))
    return worst


def test_fp32_and_static_int8_score_a_text_the_same_in_any_batch(disc_512):
    out, manifest = disc_512["static"]
    assert manifest["int8_method"] == "static" and manifest["parity"]["int8"]["method"] == "static"
    assert manifest["parity"]["int8"]["passed"] and "sentences" in manifest["parity"]["int8"]["ranges_from"]
    for precision in ("fp32", "int8"):
        backend = load_backend(out, precision=precision)
        assert backend.precision == precision and backend.runner.max_length == 512
        assert largest_batch_difference(backend) <= SAME, precision


def test_only_the_int8_matmuls_read_quantised_activations_and_carry_their_bias(disc_512):
    import onnx

    out, manifest = disc_512["static"]
    graph = onnx.load(str(out / manifest["files"]["int8"])).graph
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    readers = {n.op_type for n in graph.node for name in n.input if name in dequantized}
    assert readers <= {"MatMul"}  # the residual Adds and LayerNorms read the float tensor
    assert sum(n.op_type == "QuantizeLinear" for n in graph.node) > 0
    # each int8 MatMul and its bias are one node, as in dynamic int8's graph
    fused = [n for n in graph.node if n.op_type == "MatMulIntegerToFloat"]
    assert fused and all(n.domain == "com.microsoft" and n.input[6] for n in fused)


def test_dynamic_int8_stays_behind_its_flag_and_moves_with_the_batch(disc_512):
    out, manifest = disc_512["dynamic"]
    assert manifest["int8_method"] == "dynamic" and manifest["parity"]["int8"]["method"] == "dynamic"
    assert "ranges_from" not in manifest["parity"]["int8"]
    assert largest_batch_difference(load_backend(out, precision="int8")) > SAME  # what static int8 fixes


def test_the_cloze_model_exports_static_int8_that_ignores_its_batch(cloze_run, tmp_path):
    manifest = export(cloze_run / "generator", tmp_path / "cloze")
    assert manifest["kind"] == "cloze" and manifest["int8_method"] == "static"
    assert largest_batch_difference(load_backend(tmp_path / "cloze", precision="int8")) <= SAME


def test_too_little_calibration_text_names_the_dynamic_flag(disc_dir, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("the cat sat on the mat .\nshow me flights to denver\n")
    with pytest.raises(ExportError, match="too few for static int8.*--int8-method dynamic"):
        export(disc_dir, tmp_path / "o", calibration_data=short)
    assert not (tmp_path / "o").exists()
    export(disc_dir, tmp_path / "d", calibration_data=short, int8_method="dynamic")  # dynamic needs no ranges


def test_the_fused_graph_is_dynamic_only(disc_dir, tmp_path):
    assert ExportOptions(quantize="int8", int8_graph="fused").int8_method == "dynamic"
    with pytest.raises(ExportError, match="fused is dynamic int8 only"):
        ExportOptions(quantize="int8", int8_graph="fused", int8_method="static")
    with pytest.raises(ExportError, match="--int8-method 'magic'"):
        ExportOptions(quantize="int8", int8_method="magic")


@pytest.mark.parametrize("arch", ["ElectraForSequenceClassification", "ElectraForTokenClassification"])
def test_classifier_and_tagger_export_static_int8_that_ignores_its_batch(tokenizer_dir, tmp_path, arch):
    model = save_random_electra(arch, tokenizer_dir, tmp_path / arch)
    # force: a random head's logits differ by < 1e-3 between sentences, so their ranks are noise (dynamic int8 fails
    # the same gate on it); here the property under test is the batch, not the parity
    manifest = export(model, tmp_path / "onnx", force=True)
    assert manifest["int8_method"] == "static" and manifest["parity"]["int8"]["method"] == "static"
    assert largest_batch_difference(load_backend(tmp_path / "onnx", precision="int8")) <= SAME


def test_the_bench_adds_each_graphs_guarded_atis_rerank_and_merges_it_alone(disc_512, tmp_path):
    require_shared("nbest/atis_test.whisper5best.json")
    from script_loader import load_script

    bench = load_script("benchmarks/bench_int8_determinism.py")
    out = tmp_path / "int8.json"
    graphs = ["--static", str(disc_512["static"][0]), "--dynamic", str(disc_512["dynamic"][0])]
    tiny = ["--sentences", "8", "--trials", "2", "--seconds", "0.01", "--threads", "1", "--atis-utterances", "24"]
    assert bench.main([*graphs, *tiny, "--atis", "--out", str(out)]) == 0
    full = json.loads(out.read_text())
    wers = [r["atis_wer"] for r in full["rows"]]
    assert [(r["precision"], r["quantisation"]) for r in full["rows"]] == [("fp32", "none"), ("int8", "static"),
                                                                          ("int8", "dynamic")]
    for w in wers:
        assert w["test_utterances"] == 12 and isinstance(w["lm_applied"], bool)  # the other half tuned the weights
        assert w["reranked"] == w["with_lm"] if w["lm_applied"] else w["reranked"] in (w["no_lm"], w["first"])
    # the first hypothesis and the no-LM baseline (first pass + word and piece bonuses) do not depend on the graph
    assert len({w["first"] for w in wers}) == 1 and len({w["no_lm"] for w in wers}) == 1

    # --atis-only: the same WERs added to a report without them, its other figures untouched
    for r in full["rows"]:
        del r["atis_wer"]
        r["cpu_ms_c1"] = 123.0  # a measured figure that must survive
    out.write_text(json.dumps(full))
    assert bench.main([*graphs, "--threads", "1", "--atis-utterances", "24", "--atis-only", "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert [r["atis_wer"] for r in merged["rows"]] == wers
    assert all(r["cpu_ms_c1"] == 123.0 for r in merged["rows"]) and "--atis-only" in merged["atis_command"]
    assert merged["command"] == full["command"]
